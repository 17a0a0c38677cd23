// Needs: `enable f16; enable wgpu_cooperative_matrix;` (ops/shader.rs puts them first), the
// header, weights.wgsl and a quant/*.wgsl (Deq8), mat_common.wgsl (op, call), matmul_shared.wgsl
// (op_rows, load_row, load_w, load_x, store), the variant's TM and TN; subgroups of exactly 32
// invocations (device.rs chooses this kernel only where the adapter's subgroup size is fixed at 32).
// Prefill matrix-matrix product on cooperative matrices (tensor cores): matmul.wgsl's product,
// with the weights and token rows rounded to f16 in workgroup memory and 16x16x16 multiply-adds
// summing in f32.
//
// A workgroup computes a tile of TM rows x TN tokens (128 x 64, or 64 x 128 for batches of many
// tokens: ops/mat.rs `Tiles`), as C[token][row] = X W^T: each of its eight subgroups holds
// 32 tokens x 32 rows in four 16x16 f32 accumulators. Per step, the 32 columns of the tile's
// weights are dequantized into workgroup memory (row-major, [row][column]: a column-major 16x16
// block of W^T) next to the same columns of the token rows ([token][column]); the next step's
// values are loaded into registers meanwhile. Rows are TKP halves apart (16-byte aligned, as
// cooperative loads want; the 8 spare halves put consecutive rows in other memory banks). The
// results go out through workgroup memory, one accumulator at a time, to `store`, which applies
// OUT_MODE and the bias to whole rows of four.

const TK: u32 = 32u;
const TKP: u32 = 40u;
// Loading roles: an invocation dequantizes W_PER columns of one weight row (W_PER / 8 groups of 8)
// and loads X_PER columns of one token row, per step.
const W_PER: u32 = TM * TK / 256u;
const X_PER: u32 = TN * TK / 256u;
// Token blocks of 32 across the tile: subgroup sg holds block sg % T_BLOCKS of rows block sg / T_BLOCKS.
const T_BLOCKS: u32 = TN / 32u;

// The step's weights ([row][column], TM rows), then from XS its tokens ([token][column], TN rows).
var<workgroup> staged: array<f16, (TM + TN) * TKP>;
const XS: u32 = TM * TKP;
var<workgroup> cs: array<f32, 2048>; // [8 subgroups][16 tokens][16 rows]

// Four values as f16, saturated at f16's largest: a value beyond it (an activation outlier, an f32
// weight) then counts as 65504 instead of turning the row's sums into infinities and NaN. Whole
// vectors with constant lanes below: indexing a vector by a loop variable made these stores most
// of the tile's time on an H200 (benches/README.md).
fn halves(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(clamp(v, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
}

// Eight consecutive values at `i` of `staged`.
fn put(i: u32, v: Deq8) {
    let lo = halves(v.lo);
    let hi = halves(v.hi);
    staged[i] = lo.x;
    staged[i + 1u] = lo.y;
    staged[i + 2u] = lo.z;
    staged[i + 3u] = lo.w;
    staged[i + 4u] = hi.x;
    staged[i + 5u] = hi.y;
    staged[i + 6u] = hi.z;
    staged[i + 7u] = hi.w;
}

// After subgroup `sg` stored an accumulator (tokens t .. t + 16, rows r .. r + 16) at its part of
// cs: each lane takes one token and eight rows of it to `store`.
fn store_staged(sg: u32, lane: u32, t: u32, r: u32, n: u32, n_rows: u32, wg_z: u32) {
    let i = sg * 256u + (lane / 2u) * 16u + (lane % 2u) * 8u;
    let tt = t + lane / 2u;
    let rr = r + (lane % 2u) * 8u;
    store(tt, rr, n, n_rows, wg_z, vec4<f32>(cs[i], cs[i + 1u], cs[i + 2u], cs[i + 3u]));
    store(tt, rr + 4u, n, n_rows, wg_z, vec4<f32>(cs[i + 4u], cs[i + 5u], cs[i + 6u], cs[i + 7u]));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_rows = op_rows();
    let n = call.n;
    let r0 = wg.x * TM;
    let t0 = wg.y * TN;

    let lw_i = lid / (TK / W_PER);
    let lw_k = (lid % (TK / W_PER)) * W_PER;
    let lw = load_row(r0 + lw_i);
    let lx_i = lid / (TK / X_PER);
    let lx_k = (lid % (TK / X_PER)) * X_PER;
    let lx_valid = t0 + lx_i < n;

    // Compute role: subgroup sg holds tokens tb .. tb + 32 by rows rb .. rb + 32 of the tile.
    let sg = lid / 32u;
    let lane = lid % 32u;
    let tb = (sg % T_BLOCKS) * 32u;
    let rb = (sg / T_BLOCKS) * 32u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();

    let k_begin = wg.z * op.k_len;
    let k_end = min(k_begin + op.k_len, op.cols);
    // The second group of each role exists where its role takes 16 columns (the compiler drops the rest).
    let zero = Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
    var w0 = load_w(lw.valid, lw.off, k_begin + lw_k, k_end);
    var w1 = zero;
    if (W_PER == 16u) {
        w1 = load_w(lw.valid, lw.off, k_begin + lw_k + 8u, k_end);
    }
    var x0 = load_x(lx_valid, t0 + lx_i, k_begin + lx_k, k_end);
    var x1 = zero;
    if (X_PER == 16u) {
        x1 = load_x(lx_valid, t0 + lx_i, k_begin + lx_k + 8u, k_end);
    }
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        put(lw_i * TKP + lw_k, w0);
        if (W_PER == 16u) {
            put(lw_i * TKP + lw_k + 8u, w1);
        }
        put(XS + lx_i * TKP + lx_k, x0);
        if (X_PER == 16u) {
            put(XS + lx_i * TKP + lx_k + 8u, x1);
        }
        workgroupBarrier();
        if (k0 + TK < k_end) {
            w0 = load_w(lw.valid, lw.off, k0 + TK + lw_k, k_end);
            if (W_PER == 16u) {
                w1 = load_w(lw.valid, lw.off, k0 + TK + lw_k + 8u, k_end);
            }
            x0 = load_x(lx_valid, t0 + lx_i, k0 + TK + lx_k, k_end);
            if (X_PER == 16u) {
                x1 = load_x(lx_valid, t0 + lx_i, k0 + TK + lx_k + 8u, k_end);
            }
        }
        for (var k = 0u; k < TK; k += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&staged[XS + tb * TKP + k], TKP);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&staged[XS + (tb + 16u) * TKP + k], TKP);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&staged[rb * TKP + k], TKP);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&staged[(rb + 16u) * TKP + k], TKP);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }

    let t = t0 + tb;
    let r = r0 + rb;
    coopStoreT(c00, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t, r, n, n_rows, wg.z);
    workgroupBarrier();
    coopStoreT(c01, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t, r + 16u, n, n_rows, wg.z);
    workgroupBarrier();
    coopStoreT(c10, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t + 16u, r, n, n_rows, wg.z);
    workgroupBarrier();
    coopStoreT(c11, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t + 16u, r + 16u, n, n_rows, wg.z);
}
