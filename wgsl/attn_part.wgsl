// Decode attention output stage: the chunk's unnormalized output, max and sum, as record `rec` of
// [N_HEADS][n_chunks][HEAD_DIM + 2], for in_attn.wgsl to merge.
@group(0) @binding(3) var<storage, read_write> part: array<f32>;

fn put_output(lid: u32, h: u32, rec: u32, m: f32, l: f32) {
    let b = rec * (HEAD_DIM + 2u);
    if (lid < HEAD_DIM) {
        part[b + lid] = o_head[lid / 4u][lid % 4u];
    }
    if (lid == 0u) {
        part[b + HEAD_DIM] = m;
        part[b + HEAD_DIM + 1u] = l;
    }
}
