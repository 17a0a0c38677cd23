// Declarations every kernel shares. The Rust side prepends a generated header with the model's
// shape (D_MODEL, HEAD_DIM, ...) and the kernel variant's constants before this file.

// Per forward call: written once per submission.
struct Step {
    n: u32,          // tokens in this call
    pos0: u32,       // position of the first of them
    kv_len: u32,     // cached positions after this call (pos0 + n)
    chunk: u32,      // keys per workgroup of decode attention
    n_chunks: u32,   // decode attention workgroups per head
    logit_row: u32,  // the logits row argmax reads
    slot: u32,       // where argmax stores the id in the ids buffer
    pad: u32,
}

// Stands for -infinity in softmax maxima (WGSL has no infinity literal); exp(NEG_BIG - m) is 0.
const NEG_BIG: f32 = -3.0e38;

// Greedy sampling's order: whether logit v of id i beats bv of id bi (the lower id wins ties; NaN
// never wins).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}
