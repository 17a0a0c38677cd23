// Needs: the header (N_HEADS, HEAD_DIM, MAX_CHUNKS).
// The layout of decode attention's partials, written by attn_decode.wgsl and merged by
// in_attn.wgsl (ops/attn_decode.rs `partials_len` sizes the buffer): vec4s, the unnormalized
// outputs [N_HEADS][n_chunks][HEAD_DIM / 4], then from ATTN_STATS each chunk's (max m, sum of
// exp l, -, -) in [N_HEADS][n_chunks].

const HD4: u32 = HEAD_DIM / 4u;
const ATTN_STATS: u32 = N_HEADS * MAX_CHUNKS * HD4;
