// The online-softmax merge of decode attention's per-chunk records ([N_HEADS][n_chunks][REC],
// each ending in the chunk's max m and sum l), for in_attn.wgsl. The includer declares the
// records as `part` and their size REC. merge_prepare (256 invocations, uniform control flow)
// computes each chunk's weight exp(m_c - m) / l once per workgroup: the (m, l) pairs are loaded
// in parallel, then merged per head from workgroup memory.

var<workgroup> chunk_w: array<f32, N_HEADS * MAX_CHUNKS>;
var<workgroup> chunk_l: array<f32, N_HEADS * MAX_CHUNKS>;

fn merge_prepare(lid: u32) {
    let nc = step.n_chunks;
    for (var i = lid; i < N_HEADS * nc; i += 256u) {
        let b = i * REC + REC - 2u;
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

