// Matvec input stage: the attention output, merged (attn_merge.wgsl) from the per-chunk records of
// attn_decode with attn_part.wgsl: [N_HEADS][n_chunks][HEAD_DIM + 2].
@group(0) @binding(5) var<storage, read> part: array<f32>;

const REC: u32 = HEAD_DIM + 2u;

fn input_prepare(lid: u32) {
    merge_prepare(lid);
}

fn input_load4(i: u32) -> vec4<f32> {
    let nc = step.n_chunks;
    let h = i / HEAD_DIM;
    let d = i % HEAD_DIM;
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < nc; c++) {
        let b = (h * nc + c) * REC + d;
        acc += vec4<f32>(part[b], part[b + 1u], part[b + 2u], part[b + 3u]) * chunk_w[h * nc + c];
    }
    return acc;
}
