// Needs: weights.wgsl and the type's quant/*.wgsl (QK, BLOCK_BYTES), its quant/*_q8.wgsl (unit_dot),
// matvec_shared.wgsl and what it needs (TEAM, PAIRED, team_row, finish_rows), an input stage
// (input_prepare_q8, input_load4_q8, input_factor_q8: in_norm.wgsl, in_plain.wgsl or in_attn.wgsl),
// the variant's QLOADS.
// Decode matrix-vector product for the K-quants with 8-bit integer dot products (dot4I8Packed, which
// GPUs run as one instruction): the input is quantized to int8, so four products of a weight's
// quants with it cost one operation instead of unpacking each quant to a float. As llama.cpp's
// matrix-vector kernels do, at a similar precision (its CPU and CUDA backends quantize the input
// too; ours takes blocks of 32 values, each with its own scale).
//
// The input stage gives the input up to a factor common to all its columns (RMSNorm's scale, taken
// from the same loads), which int8 blocks with their own scales do not need: the rows' sums are
// multiplied by it at the end. So the norm costs no pass over the input of its own.
// Each pass stages SPAN input columns (a multiple of 256: K-quant rows are whole blocks) in
// workgroup memory, each 32 of them as int8 with the scale max|x| / 127 (pack4x8snorm rounds to
// nearest) and the integer sums of each 16 (the K-quants' mins and Q6_K's offset of 32 multiply
// them): one byte per column, so a pass takes up to 8192 columns. A lane then takes whole units of
// 64 columns of its row, TEAM units apart; unit_dot of the weight type reads the unit's quants and
// scales once.

var<workgroup> xq: array<vec4<u32>, SPAN / 16u>; // 16 int8 per element
var<workgroup> xd: array<f32, SPAN / 32u>; // scale of each 32
var<workgroup> xsum: array<i32, SPAN / 16u>; // sum of each xq element's 16 integers

// The 8-bit dot products of four words of quants with four of the input, summed.
fn dot4(q: vec4<u32>, x: vec4<u32>) -> i32 {
    return dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y) + dot4I8Packed(q.z, x.z) + dot4I8Packed(q.w, x.w);
}

// The 16 integers of four input vectors at scale 1 / inv, and their sum.
fn pack16(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, inv: f32, j: u32) {
    let q = vec4<u32>(pack4x8snorm(a * inv), pack4x8snorm(b * inv), pack4x8snorm(c * inv), pack4x8snorm(d * inv));
    xq[j] = q;
    xsum[j] = dot4(q, vec4<u32>(0x01010101u));
}

// Stage block j (32 columns) of the pass at column t0, adding what the input stage's factor needs
// to `ss`. Eight named values, not an array: a local array may live in slow memory.
fn quantize_block(t0: u32, j: u32, ss: ptr<function, f32>) {
    let c = t0 + 32u * j;
    let v0 = input_load4_q8(c, ss);
    let v1 = input_load4_q8(c + 4u, ss);
    let v2 = input_load4_q8(c + 8u, ss);
    let v3 = input_load4_q8(c + 12u, ss);
    let v4 = input_load4_q8(c + 16u, ss);
    let v5 = input_load4_q8(c + 20u, ss);
    let v6 = input_load4_q8(c + 24u, ss);
    let v7 = input_load4_q8(c + 28u, ss);
    let m = max(max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3))), max(max(abs(v4), abs(v5)), max(abs(v6), abs(v7))));
    let amax = max(max(m.x, m.y), max(m.z, m.w));
    let inv = select(0.0, 1.0 / amax, amax > 0.0);
    pack16(v0, v1, v2, v3, inv, 2u * j);
    pack16(v4, v5, v6, v7, inv, 2u * j + 1u);
    xd[j] = amax / 127.0;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32,
        @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    input_prepare_q8(lid);
    let t = team_row(lid, wg, nwg);
    var acc = vec2<f32>(0.0); // (row, paired row), up to the input's factor
    var ss = 0.0;
    for (var t0 = 0u; t0 < COLS; t0 += SPAN) {
        let n = min(SPAN, COLS - t0);
        if (t0 > 0u) {
            workgroupBarrier(); // the last pass is done with xq
        }
        for (var k = 0u; k < QLOADS; k++) {
            let j = lid + 256u * k;
            if (j < n / 32u) {
                quantize_block(t0, j, &ss);
            }
        }
        workgroupBarrier();
        for (var u = t.lane; u < n / 64u; u += TEAM) {
            acc.x += unit_dot(t.w.x, t0, u);
            if (PAIRED) {
                acc.y += unit_dot(t.w.y, t0, u);
            }
        }
    }
    let factor = input_factor_q8(lid, ss);
    workgroupBarrier(); // between two team sums
    finish_rows(lid, t, acc * factor);
}
