// Needs: the header (CallParams, Q_DIM, N_HEADS, HEAD_DIM) and the kernel's `call`. Provides HD4,
// part_record, part_stats.
// The layout of split prefill attention's partials, written by attn_prefill.wgsl and merged by
// attn_merge.wgsl (ops/attn_prefill.rs `parts_len` sizes the buffer): vec4s, a record per split and
// token of the call, its heads' unnormalized outputs [N_HEADS][HEAD_DIM / 4], then each head's
// (max m, sum of exp l, -, -).

const HD4: u32 = HEAD_DIM / 4u; // four-dimension chunks of a head

// The first vec4 of the record of split z and token t: head h's output chunk c is at + h * HD4 + c.
fn part_record(z: u32, t: u32) -> u32 {
    return (z * call.n + t) * (Q_DIM / 4u + N_HEADS);
}

// Head h's (max, sum) in the record at rec.
fn part_stats(rec: u32, h: u32) -> u32 {
    return rec + Q_DIM / 4u + h;
}
