// Matvec input stage: the attention output, merged from the per-chunk partial results of
// attn_decode (online-softmax merge). Partials: [N_HEADS][n_chunks][HEAD_DIM + 2] as
// (unnormalized output, running max m, sum of exp l). Each chunk's weight exp(m_c - m) / l is
// computed once per workgroup: the (m, l) pairs are loaded in parallel, then merged per head from
// workgroup memory.
@group(0) @binding(5) var<storage, read> part: array<f32>;

var<workgroup> chunk_w: array<f32, N_HEADS * MAX_CHUNKS>;
var<workgroup> chunk_l: array<f32, N_HEADS * MAX_CHUNKS>;

fn input_prepare(lid: u32) {
    let nc = step.n_chunks;
    for (var i = lid; i < N_HEADS * nc; i += 256u) {
        let b = i * (HEAD_DIM + 2u) + HEAD_DIM;
        chunk_w[i] = part[b];
        chunk_l[i] = part[b + 1u];
    }
    workgroupBarrier();
    for (var h = lid; h < N_HEADS; h += 256u) {
        var m = NEG_BIG;
        for (var c = 0u; c < nc; c++) {
            m = max(m, chunk_w[h * nc + c]);
        }
        var l = 0.0;
        for (var c = 0u; c < nc; c++) {
            let w = exp(chunk_w[h * nc + c] - m);
            chunk_w[h * nc + c] = w;
            l += chunk_l[h * nc + c] * w;
        }
        for (var c = 0u; c < nc; c++) {
            chunk_w[h * nc + c] /= l;
        }
    }
    workgroupBarrier();
}

fn input_load4(i: u32) -> vec4<f32> {
    let nc = step.n_chunks;
    let h = i / HEAD_DIM;
    let d = i % HEAD_DIM;
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < nc; c++) {
        let b = (h * nc + c) * (HEAD_DIM + 2u) + d;
        acc += vec4<f32>(part[b], part[b + 1u], part[b + 2u], part[b + 3u]) * chunk_w[h * nc + c];
    }
    return acc;
}
