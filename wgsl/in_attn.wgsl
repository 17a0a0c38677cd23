// Matvec input stage: the attention output, merged from the per-chunk partial results of
// attn_decode (online-softmax merge). Partials: [N_HEADS][n_chunks][HEAD_DIM + 2] as
// (unnormalized output, running max m, sum of exp l).
@group(0) @binding(5) var<storage, read> part: array<f32>;

var<workgroup> head_max: array<f32, N_HEADS>;
var<workgroup> head_inv_sum: array<f32, N_HEADS>;

fn input_prepare(lid: u32) {
    let nc = step.n_chunks;
    for (var h = lid; h < N_HEADS; h += 256u) {
        var m = NEG_BIG;
        for (var c = 0u; c < nc; c++) {
            m = max(m, part[(h * nc + c) * (HEAD_DIM + 2u) + HEAD_DIM]);
        }
        var l = 0.0;
        for (var c = 0u; c < nc; c++) {
            let b = (h * nc + c) * (HEAD_DIM + 2u) + HEAD_DIM;
            l += part[b + 1u] * exp(part[b] - m);
        }
        head_max[h] = m;
        head_inv_sum[h] = 1.0 / l;
    }
    workgroupBarrier();
}

fn input_load4(i: u32) -> vec4<f32> {
    let nc = step.n_chunks;
    let h = i / HEAD_DIM;
    let d = i % HEAD_DIM;
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < nc; c++) {
        let b = (h * nc + c) * (HEAD_DIM + 2u);
        let o = vec4<f32>(part[b + d], part[b + d + 1u], part[b + d + 2u], part[b + d + 3u]);
        acc += o * exp(part[b + HEAD_DIM] - head_max[h]);
    }
    return acc * head_inv_sum[h];
}
