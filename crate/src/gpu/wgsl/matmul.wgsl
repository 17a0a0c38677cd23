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

// The slice's weights ([TK][TM / 4]), then its tokens from XT ([TK][TN / 4]).
var<workgroup> staged: array<vec4<f32>, 1024>;
const XT: u32 = 512u;

// Columns k .. k + 8 of the slice into `staged` from `at` (0 or XT), transposed: element `i` (a row
// or a token) of column k at [k][i / 4][i % 4], `q` vectors a column. The eight values by constant
// lanes: indexing a vector by a loop variable made the coop kernel's like stores most of its time
// (matmul_coop.wgsl).
fn put(at: u32, q: u32, k: u32, i: u32, v: Deq8) {
    let b = at + k * q + i / 4u;
    let l = i % 4u;
    staged[b][l] = v.lo.x;
    staged[b + q][l] = v.lo.y;
    staged[b + 2u * q][l] = v.lo.z;
    staged[b + 3u * q][l] = v.lo.w;
    staged[b + 4u * q][l] = v.hi.x;
    staged[b + 5u * q][l] = v.hi.y;
    staged[b + 6u * q][l] = v.hi.z;
    staged[b + 7u * q][l] = v.hi.w;
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
        put(0u, TM / 4u, l_k, l_i, d);
        put(XT, TN / 4u, l_k, l_i, xv);
        workgroupBarrier();
        if (k0 + TK < k_end) {
            d = load_w(lw.valid, lw.off, k0 + TK + l_k, k_end);
            xv = load_x(lx_valid, t0 + l_i, k0 + TK + l_k, k_end);
        }
        for (var k = 0u; k < TK; k++) {
            let w = staged[k * (TM / 4u) + tx];
            let x = staged[XT + k * (TN / 4u) + ty];
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
