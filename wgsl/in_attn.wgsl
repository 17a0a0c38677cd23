// Matvec input stage: the attention output, merged from the per-chunk partial results of
// attn_decode (online-softmax merge). Partials: [N_HEADS][n_chunks][HEAD_DIM + 2] as
// (unnormalized output, running max m, sum of exp l). Each chunk's weight exp(m_c - m) / l is
// computed once per workgroup: the (m, l) pairs are loaded in parallel, then merged per head from
// workgroup memory.
@group(0) @binding(5) var<storage, read> part: array<f32>;

const TILE: u32 = 1024u;

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

// Four output values of chunk c of head h at dimension d, with the chunk's merge weight
// (zeros past the last chunk).
fn chunk4(h: u32, c: u32, d: u32) -> vec4<f32> {
    let nc = step.n_chunks;
    if (c >= nc) {
        return vec4<f32>(0.0);
    }
    let b = (h * nc + c) * (HEAD_DIM + 2u) + d;
    return vec4<f32>(part[b], part[b + 1u], part[b + 2u], part[b + 3u]) * chunk_w[h * nc + c];
}

fn input_load4(i: u32) -> vec4<f32> {
    let h = i / HEAD_DIM;
    let d = i % HEAD_DIM;
    var acc = vec4<f32>(0.0);
    // Four chunks per round: their loads are independent and in flight together.
    for (var c = 0u; c < step.n_chunks; c += 4u) {
        let a = chunk4(h, c, d);
        let b = chunk4(h, c + 1u, d);
        let e = chunk4(h, c + 2u, d);
        let f = chunk4(h, c + 3u, d);
        acc += (a + b) + (e + f);
    }
    return acc;
}
