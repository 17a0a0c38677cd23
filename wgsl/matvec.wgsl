// Decode matrix-vector product: out[row] = dot(W[row], input) for one input vector (the last
// token's row), reading the weights in their GGUF blocks. Prepended: weights.wgsl, a quant/*.wgsl
// (dequant8), mat_common.wgsl, a bias function and an input stage (input_prepare, input_load4).
//
// A workgroup computes ROWS rows (set by the Rust side), a team of 256 / ROWS invocations each. The
// input is staged through workgroup memory TILE values at a time, so any row length works under the
// 16 KiB default.
// The output rows of up to 3 matrices ("segments", e.g. q, k, v) are concatenated in one dispatch.
// OUT_MODE: 0 store, 1 add to out (residual), 2 SwiGLU of segment 0 (gate) and 1 (up) row pairs,
// 4 store, and the workgroup's best row for argmax.wgsl (put_best: the output head of greedy
// decoding).

const TEAM: u32 = 256u / ROWS;
const TILE: u32 = 1024u;

var<workgroup> xs: array<vec4<f32>, 256>; // TILE / 4
var<workgroup> red: array<f32, 512>;
var<workgroup> team_v: array<f32, ROWS>;
var<workgroup> team_i: array<u32, ROWS>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    input_prepare(lid);
    let paired = OUT_MODE == 2u;
    let n_rows = select(op.seg_end[op.n_segs - 1u], op.seg_end.x, paired);
    let wg_index = wg.y * nwg.x + wg.x;
    let row = wg_index * ROWS + lid / TEAM;
    let lane = lid % TEAM;
    let valid = row < n_rows;
    let row_bytes = op.cols / QK * BLOCK_BYTES;
    var w0 = 0u;
    var w1 = 0u;
    if (valid) {
        if (paired) {
            w0 = op.seg_off.x + row * row_bytes;
            w1 = op.seg_off.y + row * row_bytes;
        } else {
            w0 = weight_row(row, row_bytes);
        }
    }
    var acc0 = 0.0;
    var acc1 = 0.0;
    for (var t0 = 0u; t0 < op.cols; t0 += TILE) {
        let n = min(TILE, op.cols - t0);
        workgroupBarrier();
        for (var i = lid; i < n / 4u; i += 256u) {
            xs[i] = input_load4(t0 + 4u * i);
        }
        workgroupBarrier();
        if (valid) {
            for (var g = lane * 8u; g < n; g += TEAM * 8u) {
                let xa = xs[g / 4u];
                let xb = xs[g / 4u + 1u];
                let a = dequant8(w0, t0 + g);
                acc0 += dot(a.lo, xa) + dot(a.hi, xb);
                if (paired) {
                    let u = dequant8(w1, t0 + g);
                    acc1 += dot(u.lo, xa) + dot(u.hi, xb);
                }
            }
        }
    }
    red[lid] = acc0;
    red[256u + lid] = acc1;
    workgroupBarrier();
    for (var s = TEAM / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
            red[256u + lid] += red[256u + lid + s];
        }
        workgroupBarrier();
    }
    if (valid && lane == 0u) {
        let o = op.out_col0 + row;
        let v = red[lid];
        if (OUT_MODE == 0u || OUT_MODE == 4u) {
            out[o] = v + bias(row);
        } else if (OUT_MODE == 1u) {
            out[o] += v + bias(row);
        } else {
            let u = red[256u + lid];
            out[o] = v / (1.0 + exp(-v)) * u;
        }
    }
    if (OUT_MODE == 4u) {
        if (lane == 0u) {
            team_v[lid / TEAM] = select(NEG_BIG, red[lid] + bias(row), valid);
            team_i[lid / TEAM] = select(0xFFFFFFFFu, op.out_col0 + row, valid);
        }
        workgroupBarrier();
        if (lid == 0u && wg_index * ROWS < n_rows) {
            var bv = NEG_BIG;
            var bi = 0xFFFFFFFFu;
            for (var t = 0u; t < ROWS; t++) {
                if (better(team_v[t], team_i[t], bv, bi)) {
                    bv = team_v[t];
                    bi = team_i[t];
                }
            }
            put_best(wg_index, bv, bi);
        }
    }
}
