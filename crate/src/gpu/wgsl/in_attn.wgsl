// Needs: the header (BIND_IN0, N_HEADS, MAX_CHUNKS), common.wgsl (NEG_BIG), mat_common.wgsl or
// lora.wgsl (call), attn_partials.wgsl (HD4, ATTN_STATS), attn_ungated.wgsl or attn_gated.wgsl (output_gate4).
// in_norm.wgsl, in_plain.wgsl and in_rows.wgsl define the same functions (all but in_rows.wgsl the *_q8 ones too).
// Matvec and LoRA input stage: the attention output, merged from the per-chunk partial results of
// attn_decode (online-softmax merge; attn_partials.wgsl has their layout). The (m, l) pairs are
// loaded in parallel, then each chunk's weight exp(m_c - m) / l is computed by its own invocation
// from workgroup memory.
@group(0) @binding(BIND_IN0) var<storage, read> part: array<vec4<f32>>;

var<workgroup> chunk_ml: array<vec2<f32>, N_HEADS * MAX_CHUNKS>;
var<workgroup> chunk_w: array<f32, N_HEADS * MAX_CHUNKS>;

fn input_prepare(lid: u32) {
    let nc = call.n_chunks;
    for (var i = lid; i < N_HEADS * nc; i += 256u) {
        chunk_ml[i] = part[ATTN_STATS + i].xy;
    }
    workgroupBarrier();
    for (var i = lid; i < N_HEADS * nc; i += 256u) {
        let first = i / nc * nc; // the head's first chunk
        var m = NEG_BIG;
        for (var c = 0u; c < nc; c++) {
            m = max(m, chunk_ml[first + c].x);
        }
        var l = 0.0;
        for (var c = 0u; c < nc; c++) {
            l += chunk_ml[first + c].y * exp(chunk_ml[first + c].x - m);
        }
        chunk_w[i] = exp(chunk_ml[i].x - m) / l;
    }
    workgroupBarrier();
}

// The chunks two at a time: both loads in flight together (an odd last one pairs with itself,
// weighted 0).
fn input_load4(i: u32) -> vec4<f32> {
    let nc = call.n_chunks;
    let first = i / HEAD_DIM * nc;
    let d4 = (i % HEAD_DIM) / 4u;
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < nc; c += 2u) {
        let c1 = min(c + 1u, nc - 1u);
        let a = part[(first + c) * HD4 + d4];
        let b = part[(first + c1) * HD4 + d4];
        acc += a * chunk_w[first + c] + b * select(0.0, chunk_w[first + c1], c + 1u < nc);
    }
    return output_gate4(i, acc);
}

// For matvec_q8.wgsl (see in_norm.wgsl): the input as it is, a factor of 1.
fn input_prepare_q8(lid: u32) {
    input_prepare(lid);
}

fn input_load4_q8(i: u32, ss: ptr<function, f32>) -> vec4<f32> {
    return input_load4(i);
}

fn input_factor_q8(lid: u32, ss: f32) -> f32 {
    return 1.0;
}
