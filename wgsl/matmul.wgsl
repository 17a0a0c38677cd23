// Needs: the header (BIND_IN0, OUT_*), weights.wgsl and a quant/*.wgsl (dequant8, Deq8, QK,
// BLOCK_BYTES), mat_common.wgsl (op, call, out, weight_row), bias.wgsl or no_bias.wgsl, the
// variant's OUT_MODE.
// Prefill matrix-matrix product: out[t][out_col0 + r] (+)= dot(W[r], X[t]) for a batch of token
// rows X, reading the weights in their GGUF blocks.
//
// A workgroup computes a 64-row x 64-token tile; each invocation 4 rows x 4 tokens, held in four
// vec4 registers (not an array: a dynamically indexed local array can end up in slow local memory).
// Weights are dequantized into workgroup memory 32 columns at a time, next to the matching slice
// of X (8 KiB each: the 16 KiB default). OUT_MODE: OUT_STORE, OUT_ADD (residual), OUT_PARTIAL: the
// workgroup's columns are split z of op.k_len each, and it stores its partial product at
// [z][token][row] (rows packed) for split_reduce.wgsl to sum. A short prompt has few tiles, each
// a long serial walk over the columns: splitting the columns puts more workgroups to work.

@group(0) @binding(BIND_IN0) var<storage, read> x_in: array<f32>;

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 32u;

var<workgroup> ws: array<vec4<f32>, 512>; // [TK][TM / 4]
var<workgroup> xt: array<vec4<f32>, 512>; // [TK][TN / 4]

// Eight weights of a row (zeros past the last row and the split's last column: float matrices
// may have a multiple of 16 columns).
fn load_w(valid: bool, row_off: u32, k: u32, k_end: u32) -> Deq8 {
    if (valid && k < k_end) {
        return dequant8(row_off, k);
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// Eight values of a token row (zeros past the last token and the split's last column).
fn load_x(valid: bool, t: u32, k: u32, k_end: u32) -> Deq8 {
    if (valid && k < k_end) {
        let b = t * op.cols + k;
        return Deq8(vec4<f32>(x_in[b], x_in[b + 1u], x_in[b + 2u], x_in[b + 3u]),
                    vec4<f32>(x_in[b + 4u], x_in[b + 5u], x_in[b + 6u], x_in[b + 7u]));
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// Columns k .. k + 8 of the slice into workgroup memory, transposed: element `i` (a row or a
// token) of column k at [k][i / 4][i % 4].
fn put_w(k: u32, i: u32, v: Deq8) {
    for (var e = 0u; e < 4u; e++) {
        ws[((k + e) * TM + i) / 4u][i % 4u] = v.lo[e];
        ws[((k + 4u + e) * TM + i) / 4u][i % 4u] = v.hi[e];
    }
}

fn put_x(k: u32, i: u32, v: Deq8) {
    for (var e = 0u; e < 4u; e++) {
        xt[((k + e) * TN + i) / 4u][i % 4u] = v.lo[e];
        xt[((k + 4u + e) * TN + i) / 4u][i % 4u] = v.hi[e];
    }
}

fn store(t: u32, r0: u32, n: u32, n_rows: u32, wg_z: u32, acc: vec4<f32>) {
    if (t >= n) {
        return;
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        if (r < n_rows) {
            let o = t * op.out_stride + op.out_col0 + r;
            if (OUT_MODE == OUT_PARTIAL) {
                out[(wg_z * n + t) * n_rows + r] = acc[i];
            } else if (OUT_MODE == OUT_STORE) {
                out[o] = acc[i] + bias(r);
            } else {
                out[o] += acc[i] + bias(r);
            }
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_rows = op.seg_end[op.n_segs - 1u];
    let n = call.n;
    let r0 = wg.x * TM;
    let t0 = wg.y * TN;
    let row_bytes = op.cols / QK * BLOCK_BYTES;

    // Loading roles: each invocation dequantizes 8 columns of one weight row and loads 8 columns
    // of one token row.
    let l_i = lid / 4u;
    let l_k = (lid % 4u) * 8u;
    let lw_valid = r0 + l_i < n_rows;
    var lw_off = 0u;
    if (lw_valid) {
        lw_off = weight_row(r0 + l_i, row_bytes);
    }
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
    var d = load_w(lw_valid, lw_off, k_begin + l_k, k_end);
    var xv = load_x(lx_valid, t0 + l_i, k_begin + l_k, k_end);
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        put_w(l_k, l_i, d);
        put_x(l_k, l_i, xv);
        workgroupBarrier();
        if (k0 + TK < k_end) {
            d = load_w(lw_valid, lw_off, k0 + TK + l_k, k_end);
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
