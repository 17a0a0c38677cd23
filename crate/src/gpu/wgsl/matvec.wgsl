// Needs: weights.wgsl and a quant/*.wgsl (dequant8, QK, BLOCK_BYTES), matvec_shared.wgsl and what it
// needs (TEAM, PAIRED, team_row, finish_rows), an input stage (input_prepare, input_load4:
// in_norm.wgsl, in_plain.wgsl or in_attn.wgsl), the variant's ROUNDS and LOADS.
// Decode matrix-vector product: out[row] = dot(W[row], input) for one input vector (the last
// token's row), reading the weights in their GGUF blocks.
//
// A workgroup computes ROWS rows, a team of 256 / ROWS invocations each. The input is staged
// through workgroup memory SPAN columns at a time (all COLS of them, up to 2048 and 32 per lane),
// so any row length works under the 16 KiB default. In each pass a lane takes ROUNDS (at most 4)
// groups of 8 columns, TEAM * 8 apart, in straight-line code: their weight loads are issued
// together (no local arrays: they would live in slow memory).
// The output rows of up to 3 matrices ("segments", e.g. q, k, v) are concatenated in one dispatch.
// The Rust side sets COLS, ROWS, SPAN (a multiple of 8), ROUNDS (8-column groups per lane and
// pass) and LOADS (input vec4s per invocation and pass).

var<workgroup> xs: array<vec4<f32>, SPAN / 4u>;

// The dot products with the staged input of the 8 weights at column group g of this pass, of the
// row at w0 and (paired) the row at w1; zero past the pass's n columns (the loads clamped to stay
// in the row).
fn group_dot(w0: u32, w1: u32, t0: u32, g: u32, n: u32) -> vec2<f32> {
    let gc = min(g, n - 8u);
    let xa = xs[gc / 4u];
    let xb = xs[gc / 4u + 1u];
    let a = dequant8(w0, t0 + gc);
    var d = vec2<f32>(dot(a.lo, xa) + dot(a.hi, xb), 0.0);
    if (PAIRED) {
        let b = dequant8(w1, t0 + gc);
        d.y = dot(b.lo, xa) + dot(b.hi, xb);
    }
    return select(vec2<f32>(0.0), d, g < n);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    input_prepare(lid);
    let t = team_row(lid, wg, nwg);
    let w0 = t.w.x;
    let w1 = t.w.y;
    var acc = vec2<f32>(0.0); // (row, paired row)
    for (var t0 = 0u; t0 < COLS; t0 += SPAN) {
        let n = min(SPAN, COLS - t0);
        if (t0 > 0u) {
            workgroupBarrier(); // the last pass is done with xs
        }
        for (var k = 0u; k < LOADS; k++) {
            let i = lid + 256u * k;
            if (i < n / 4u) {
                xs[i] = input_load4(t0 + 4u * i);
            }
        }
        workgroupBarrier();
        // Up to four rounds in straight-line code (ROUNDS is a constant): their loads are in
        // flight together.
        let g = t.lane * 8u;
        let s = 8u * TEAM;
        var d = group_dot(w0, w1, t0, g, n);
        if (ROUNDS > 1u) {
            d += group_dot(w0, w1, t0, g + s, n);
        }
        if (ROUNDS > 2u) {
            d += group_dot(w0, w1, t0, g + 2u * s, n);
        }
        if (ROUNDS > 3u) {
            d += group_dot(w0, w1, t0, g + 3u * s, n);
        }
        acc += d;
    }
    finish_rows(lid, t, acc);
}
