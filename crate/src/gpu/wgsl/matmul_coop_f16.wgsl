// Needs: coop_tiles.wgsl (TK, TKP, X_PER, T_BLOCKS, xs, put_x, store_tiles) and what it needs, mat_params.wgsl (op),
// mat_common.wgsl (call), matmul_shared.wgsl (op_rows, load_x); subgroups of exactly 32 invocations; the weights as
// f16 rows from offset 0, `op.cols` apart, with whole tiles of rows behind them (the session's dequant buffer:
// dequant_f16.wgsl wrote them, ops/mat.rs sized it), and whole steps of TK columns.
// matmul_coop.wgsl's product where the weights were decoded to f16 before the call: each subgroup's cooperative
// loads read its 16x16 blocks of W^T straight from the rows (the rows of one tile, read by the T_BLOCKS subgroups
// that share them, stay in the L1 cache), so only the token rows go through workgroup memory. The last tile's rows
// past the op's read what lies behind them in the buffer; their products are never stored.

@group(0) @binding(BIND_WEIGHTS) var<storage, read> wh: array<f16>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_rows = op_rows();
    let n = call.n;
    let r0 = wg.x * TM;
    let t0 = wg.y * TN;

    let lx_i = lid / (TK / X_PER);
    let lx_k = (lid % (TK / X_PER)) * X_PER;
    let lx_valid = t0 + lx_i < n;

    // Compute role: subgroup sg holds tokens tb .. tb + 32 by rows rb .. rb + 32 of the tile.
    let sg = lid / 32u;
    let lane = lid % 32u;
    let tb = (sg % T_BLOCKS) * 32u;
    let rb = (sg / T_BLOCKS) * 32u;
    let w_rows = (r0 + rb) * op.cols;
    let w_next = 16u * op.cols;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();

    let k_begin = wg.z * op.k_len;
    let k_end = min(k_begin + op.k_len, op.cols);
    let zero = Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
    var x0 = load_x(lx_valid, t0 + lx_i, k_begin + lx_k, k_end);
    var x1 = zero;
    if (X_PER == 16u) {
        x1 = load_x(lx_valid, t0 + lx_i, k_begin + lx_k + 8u, k_end);
    }
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        put_x(lx_i * TKP + lx_k, x0);
        if (X_PER == 16u) {
            put_x(lx_i * TKP + lx_k + 8u, x1);
        }
        workgroupBarrier();
        if (k0 + TK < k_end) {
            x0 = load_x(lx_valid, t0 + lx_i, k0 + TK + lx_k, k_end);
            if (X_PER == 16u) {
                x1 = load_x(lx_valid, t0 + lx_i, k0 + TK + lx_k + 8u, k_end);
            }
        }
        for (var k = 0u; k < TK; k += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[tb * TKP + k], TKP);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(tb + 16u) * TKP + k], TKP);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&wh[w_rows + k0 + k], op.cols);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&wh[w_rows + w_next + k0 + k], op.cols);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier();
    }
    store_tiles(sg, lane, t0 + tb, r0 + rb, n, n_rows, wg.z, c00, c01, c10, c11);
}
