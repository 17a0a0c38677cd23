// Decode matrix-vector product: out[row] = dot(W[row], input) for one input vector (the last
// token's row), reading the weights in their GGUF blocks. Prepended: weights.wgsl, a quant/*.wgsl
// (dequant8), mat_common.wgsl, a bias function and an input stage (input_prepare, input_load4).
//
// A team of 32 invocations shares a row; a workgroup has 8 teams. The input is staged through
// workgroup memory TILE values at a time, so any row length works under the 16 KiB default.
// Each tile's weights are loaded into registers before the input is prepared and staged: the
// weight loads do not depend on it, so their latency overlaps the input stage's.
// The output rows of up to 3 matrices ("segments", e.g. q, k, v) are concatenated in one dispatch.
// OUT_MODE: 0 store, 1 add to out (residual), 2 SwiGLU of segment 0 (gate) and 1 (up) row pairs.

const TEAM: u32 = 32u;
const ROWS: u32 = 8u;
const TILE: u32 = 1024u; // 4 groups of 8 values per lane

var<workgroup> xs: array<vec4<f32>, 256>; // TILE / 4
var<workgroup> red: array<f32, 512>;

// Eight weights at column k of the row at byte `row` (zeros where `valid` is false).
fn load8(valid: bool, row: u32, k: u32) -> Deq8 {
    if (valid) {
        return dequant8(row, k);
    }
    return Deq8(vec4<f32>(0.0), vec4<f32>(0.0));
}

// Dot product of eight weights with the staged input at tile column g.
fn dot8(a: Deq8, g: u32) -> f32 {
    return dot(a.lo, xs[g / 4u]) + dot(a.hi, xs[g / 4u + 1u]);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let paired = OUT_MODE == 2u;
    let n_rows = select(op.seg_end[op.n_segs - 1u], op.seg_end.x, paired);
    let row = (wg.y * nwg.x + wg.x) * ROWS + lid / TEAM;
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
    let g = lane * 8u;
    for (var t0 = 0u; t0 < op.cols; t0 += TILE) {
        let n = min(TILE, op.cols - t0);
        let in0 = valid && g < n;
        let in1 = valid && g + 256u < n;
        let in2 = valid && g + 512u < n;
        let in3 = valid && g + 768u < n;
        let a0 = load8(in0, w0, t0 + g);
        let a1 = load8(in1, w0, t0 + g + 256u);
        let a2 = load8(in2, w0, t0 + g + 512u);
        let a3 = load8(in3, w0, t0 + g + 768u);
        let u0 = load8(in0 && paired, w1, t0 + g);
        let u1 = load8(in1 && paired, w1, t0 + g + 256u);
        let u2 = load8(in2 && paired, w1, t0 + g + 512u);
        let u3 = load8(in3 && paired, w1, t0 + g + 768u);
        if (t0 == 0u) {
            input_prepare(lid);
        }
        workgroupBarrier();
        for (var i = lid; i < n / 4u; i += 256u) {
            xs[i] = input_load4(t0 + 4u * i);
        }
        workgroupBarrier();
        if (in0) {
            acc0 += dot8(a0, g);
            acc1 += dot8(u0, g);
        }
        if (in1) {
            acc0 += dot8(a1, g + 256u);
            acc1 += dot8(u1, g + 256u);
        }
        if (in2) {
            acc0 += dot8(a2, g + 512u);
            acc1 += dot8(u2, g + 512u);
        }
        if (in3) {
            acc0 += dot8(a3, g + 768u);
            acc1 += dot8(u3, g + 768u);
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
        if (OUT_MODE == 0u) {
            out[o] = v + bias(row);
        } else if (OUT_MODE == 1u) {
            out[o] += v + bias(row);
        } else {
            let u = red[256u + lid];
            out[o] = v / (1.0 + exp(-v)) * u;
        }
    }
}
