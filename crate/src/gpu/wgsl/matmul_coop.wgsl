// Needs: coop_tiles.wgsl (TK, TKP, X_PER, T_BLOCKS, xs, half, put_x, store_tiles) and what it needs, mat_params.wgsl
// (op), mat_common.wgsl (call), matmul_shared.wgsl (op_rows, load_x), matmul_blocks.wgsl (load_row, load_w); subgroups
// of exactly 32 invocations (device.rs chooses this kernel only where the adapter's subgroup size is fixed at 32).
// Prefill matrix-matrix product on cooperative matrices (tensor cores): matmul.wgsl's product,
// with the weights and token rows rounded to f16 in workgroup memory and 16x16x16 multiply-adds
// summing in f32.
//
// Per step, the TK columns of the tile's weights are dequantized from their blocks into workgroup memory
// (row-major, [row][column]: a column-major 16x16 block of W^T) next to the same columns of the token rows; the next
// step's values are loaded into registers meanwhile. (matmul_coop_f16.wgsl: the same with weights decoded to f16
// before the call, read by the cooperative loads themselves.)

// Loading role: an invocation dequantizes W_PER columns of one weight row (W_PER / 8 groups of 8) per step.
const W_PER: u32 = TM * TK / 256u;

var<workgroup> ws: array<f16, TM * TKP>;

// Eight consecutive values at `i` of ws.
fn put_w(i: u32, v: Deq8) {
    for (var e = 0u; e < 4u; e++) {
        ws[i + e] = half(v.lo[e]);
        ws[i + 4u + e] = half(v.hi[e]);
    }
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
        put_w(lw_i * TKP + lw_k, w0);
        if (W_PER == 16u) {
            put_w(lw_i * TKP + lw_k + 8u, w1);
        }
        put_x(lx_i * TKP + lx_k, x0);
        if (X_PER == 16u) {
            put_x(lx_i * TKP + lx_k + 8u, x1);
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
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[tb * TKP + k], TKP);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(tb + 16u) * TKP + k], TKP);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[rb * TKP + k], TKP);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[(rb + 16u) * TKP + k], TKP);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    store_tiles(sg, lane, t0 + tb, r0 + rb, n, n_rows, wg.z, c00, c01, c10, c11);
}
