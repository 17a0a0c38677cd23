// Needs: `enable f16; enable wgpu_cooperative_matrix;` (ops/shader.rs puts them first), the header, common.wgsl
// (Deq8), matmul_shared.wgsl (store), the variant's TM and TN. Provides TK, TKP, X_PER, T_BLOCKS, xs, half, put_x
// and store_tiles to the prefill kernels on cooperative matrices (matmul_coop.wgsl, matmul_coop_f16.wgsl).
// Their layout: a workgroup of 256 invocations computes a tile of TM rows x TN tokens (128 x 64, or 64 x 128 for
// batches of many tokens: ops/mat.rs `Tiles`), as C[token][row] = X W^T; each of its eight subgroups holds 32 tokens
// x 32 rows in four 16x16 f32 accumulators. Per step of TK columns the token rows' columns are rounded to f16 in
// workgroup memory ([token][column]); rows are TKP halves apart (16-byte aligned, as cooperative loads want; the 8
// spare halves put consecutive rows in other memory banks). The results go out through workgroup memory, one
// accumulator at a time, to `store`, which applies OUT_MODE and the bias to whole rows of four.

const TK: u32 = 32u;
const TKP: u32 = 40u;
// Loading role: an invocation loads X_PER columns of one token row per step.
const X_PER: u32 = TN * TK / 256u;
// Token blocks of 32 across the tile: subgroup sg holds block sg % T_BLOCKS of rows block sg / T_BLOCKS.
const T_BLOCKS: u32 = TN / 32u;

var<workgroup> xs: array<f16, TN * TKP>;
var<workgroup> cs: array<f32, 2048>; // [8 subgroups][16 tokens][16 rows]

// A value as f16, saturated at f16's largest: a value beyond it (an activation outlier, an f32
// weight) then counts as 65504 instead of turning the row's sums into infinities and NaN.
fn half(v: f32) -> f16 {
    return f16(clamp(v, -65504.0, 65504.0));
}

// Eight consecutive values at `i` of xs.
fn put_x(i: u32, v: Deq8) {
    for (var e = 0u; e < 4u; e++) {
        xs[i + e] = half(v.lo[e]);
        xs[i + 4u + e] = half(v.hi[e]);
    }
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

// Subgroup sg's four accumulators (tokens t .. t + 32 by rows r .. r + 32) to `store`, one at a time through cs.
fn store_tiles(sg: u32, lane: u32, t: u32, r: u32, n: u32, n_rows: u32, wg_z: u32,
               c00: coop_mat16x16<f32, C>, c01: coop_mat16x16<f32, C>,
               c10: coop_mat16x16<f32, C>, c11: coop_mat16x16<f32, C>) {
    coopStoreT(c00, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t, r, n, n_rows, wg_z);
    workgroupBarrier();
    coopStoreT(c01, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t, r + 16u, n, n_rows, wg_z);
    workgroupBarrier();
    coopStoreT(c10, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t + 16u, r, n, n_rows, wg_z);
    workgroupBarrier();
    coopStoreT(c11, &cs[sg * 256u], 16u);
    workgroupBarrier();
    store_staged(sg, lane, t + 16u, r + 16u, n, n_rows, wg_z);
}
