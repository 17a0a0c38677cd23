// Needs: the header, weights.wgsl and a quant/*.wgsl (Deq8), mat_common.wgsl (op, call),
// matmul_shared.wgsl (op_rows, load_row, load_w, load_x, store).
// Prefill matrix-matrix product in f32: out[t][out_col0 + r] (+)= dot(W[r], X[t]) for a batch of
// token rows X, reading the weights in their GGUF blocks. (matmul_coop.wgsl is the same product on
// cooperative matrices, where the device has them.)
//
// A workgroup computes a 64-row x 64-token tile; each invocation 4 rows x 4 tokens, held in four
// vec4 registers (not an array: a dynamically indexed local array can end up in slow local memory).
// Weights are dequantized into workgroup memory 32 columns at a time, next to the matching slice
// of X (8 KiB each: the 16 KiB default).

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;

var<workgroup> ws: array<vec4<f32>, 512>; // [TK][TM / 4]
var<workgroup> xt: array<vec4<f32>, 512>; // [TK][TN / 4]

// Columns k .. k + 8 of the slice into workgroup memory, transposed: element `i` (a row or a
// token) of column k at [k][i / 4][i % 4]. The eight values by constant lanes: indexing a vector
// by a loop variable made the coop kernel's like stores most of its time (matmul_coop.wgsl).
fn put_w(k: u32, i: u32, v: Deq8) {
    const Q = TM / 4u;
    let b = k * Q + i / 4u;
    let l = i % 4u;
    ws[b][l] = v.lo.x;
    ws[b + Q][l] = v.lo.y;
    ws[b + 2u * Q][l] = v.lo.z;
    ws[b + 3u * Q][l] = v.lo.w;
    ws[b + 4u * Q][l] = v.hi.x;
    ws[b + 5u * Q][l] = v.hi.y;
    ws[b + 6u * Q][l] = v.hi.z;
    ws[b + 7u * Q][l] = v.hi.w;
}

fn put_x(k: u32, i: u32, v: Deq8) {
    const Q = TN / 4u;
    let b = k * Q + i / 4u;
    let l = i % 4u;
    xt[b][l] = v.lo.x;
    xt[b + Q][l] = v.lo.y;
    xt[b + 2u * Q][l] = v.lo.z;
    xt[b + 3u * Q][l] = v.lo.w;
    xt[b + 4u * Q][l] = v.hi.x;
    xt[b + 5u * Q][l] = v.hi.y;
    xt[b + 6u * Q][l] = v.hi.z;
    xt[b + 7u * Q][l] = v.hi.w;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_rows = op_rows();
    let n = call.n;
    let r0 = wg.x * TM;
    let t0 = wg.y * TN;

    // Loading roles: each invocation dequantizes 8 columns of one weight row and loads 8 columns
    // of one token row.
    let l_i = lid / 4u;
    let l_k = (lid % 4u) * 8u;
    let lw = load_row(r0 + l_i);
    let lx_valid = t0 + l_i < n;

    // Compute role: rows r0 + 4 * tx .. +4, tokens t0 + 4 * ty .. +4.
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);

    // The next slice of W and X is loaded into registers while the current one, in workgroup
    // memory, is multiplied: global loads overlap the arithmetic.
    let k_begin = wg.z * op.k_len;
    let k_end = min(k_begin + op.k_len, op.cols);
    var d = load_w(lw.valid, lw.off, k_begin + l_k, k_end);
    var xv = load_x(lx_valid, t0 + l_i, k_begin + l_k, k_end);
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        put_w(l_k, l_i, d);
        put_x(l_k, l_i, xv);
        workgroupBarrier();
        if (k0 + TK < k_end) {
            d = load_w(lw.valid, lw.off, k0 + TK + l_k, k_end);
            xv = load_x(lx_valid, t0 + l_i, k0 + TK + l_k, k_end);
        }
        for (var k = 0u; k < TK; k++) {
            let w = ws[k * (TM / 4u) + tx];
            let x = xt[k * (TN / 4u) + ty];
            acc0 += w * x.x;
            acc1 += w * x.y;
            acc2 += w * x.z;
            acc3 += w * x.w;
        }
        workgroupBarrier();
    }

    let t = t0 + 4u * ty;
    let r = r0 + 4u * tx;
    store(t, r, n, n_rows, wg.z, acc0);
    store(t + 1u, r, n, n_rows, wg.z, acc1);
    store(t + 2u, r, n, n_rows, wg.z, acc2);
    store(t + 3u, r, n, n_rows, wg.z, acc3);
}
