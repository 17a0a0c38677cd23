// Prefill matrix-matrix product: out[t][out_col0 + r] (+)= dot(W[r], X[t]) for a batch of token
// rows X, reading the weights in their GGUF blocks. Prepended: weights.wgsl, a quant/*.wgsl
// (dequant8), mat_common.wgsl and a bias function.
//
// A workgroup computes a 64-row x 64-token tile; each invocation 4 rows x 4 tokens. Weights are
// dequantized into workgroup memory 16 columns at a time, next to the matching slice of X.
// OUT_MODE: 0 store, 1 add (residual).

@group(0) @binding(5) var<storage, read> x_in: array<f32>;

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> ws: array<vec4<f32>, 256>; // [TK][TM / 4]
var<workgroup> xt: array<vec4<f32>, 256>; // [TK][TN / 4]

// Eight weights of a row (zeros past the last row; only invocations 0..128 load weights).
fn load_w(valid: bool, row_off: u32, k: u32) -> Deq8 {
    if (valid) {
        return dequant8(row_off, k);
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// Four values of a token row (zeros past the last token).
fn load_x(valid: bool, t: u32, k: u32) -> vec4<f32> {
    if (valid) {
        let b = t * op.cols + k;
        return vec4<f32>(x_in[b], x_in[b + 1u], x_in[b + 2u], x_in[b + 3u]);
    }
    return vec4<f32>(0.0);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n_rows = op.seg_end[op.n_segs - 1u];
    let n = step.n;
    let r0 = wg.x * TM;
    let t0 = wg.y * TN;
    let row_bytes = op.cols / QK * BLOCK_BYTES;

    // Loading roles: invocations 0..128 dequantize 8 columns of one weight row each; all 256
    // load 4 columns of one token row.
    let lw_row = lid / 2u;
    let lw_k = (lid % 2u) * 8u;
    let lw_valid = lid < 128u && r0 + lw_row < n_rows;
    var lw_off = 0u;
    if (lw_valid) {
        lw_off = weight_row(r0 + lw_row, row_bytes);
    }
    let lx_tok = lid / 4u;
    let lx_k = (lid % 4u) * 4u;
    let lx_valid = t0 + lx_tok < n;

    // Compute role: rows r0 + 4 * tx .. +4, tokens t0 + 4 * ty .. +4.
    let tx = lid % 16u;
    let ty = lid / 16u;
    var acc: array<vec4<f32>, 4>;
    for (var j = 0u; j < 4u; j++) {
        acc[j] = vec4<f32>(0.0);
    }

    // The next slice of W and X is loaded into registers while the current one, in workgroup
    // memory, is multiplied: global loads overlap the arithmetic.
    var d = load_w(lw_valid, lw_off, lw_k);
    var xv = load_x(lx_valid, t0 + lx_tok, lx_k);
    for (var k0 = 0u; k0 < op.cols; k0 += TK) {
        if (lid < 128u) {
            for (var e = 0u; e < 4u; e++) {
                ws[((lw_k + e) * TM + lw_row) / 4u][lw_row % 4u] = d.lo[e];
                ws[((lw_k + 4u + e) * TM + lw_row) / 4u][lw_row % 4u] = d.hi[e];
            }
        }
        for (var e = 0u; e < 4u; e++) {
            xt[((lx_k + e) * TN + lx_tok) / 4u][lx_tok % 4u] = xv[e];
        }
        workgroupBarrier();
        if (k0 + TK < op.cols) {
            d = load_w(lw_valid, lw_off, k0 + TK + lw_k);
            xv = load_x(lx_valid, t0 + lx_tok, k0 + TK + lx_k);
        }
        for (var k = 0u; k < TK; k++) {
            let w = ws[k * (TM / 4u) + tx];
            let x = xt[k * (TN / 4u) + ty];
            acc[0] += w * x.x;
            acc[1] += w * x.y;
            acc[2] += w * x.z;
            acc[3] += w * x.w;
        }
        workgroupBarrier();
    }

    for (var j = 0u; j < 4u; j++) {
        let t = t0 + 4u * ty + j;
        for (var i = 0u; i < 4u; i++) {
            let r = r0 + 4u * tx + i;
            if (t < n && r < n_rows) {
                let o = t * op.out_stride + op.out_col0 + r;
                if (OUT_MODE == 0u) {
                    out[o] = acc[j][i] + bias(r);
                } else {
                    out[o] += acc[j][i] + bias(r);
                }
            }
        }
    }
}
