// Needs: nothing beyond the generated header.
// Declarations every kernel shares, right after the generated header (ops/shader.rs
// `model_header`: the model's shape, the binding slots BIND_*, the output modes OUT_* and the
// per-call `CallParams` uniform, declared from its Rust struct).

// Stands for -infinity in softmax maxima (WGSL has no infinity literal); exp(NEG_BIG - m) is 0.
const NEG_BIG: f32 = -3.0e38;

// Greedy sampling's order: whether logit v of id i beats bv of id bi (the lower id wins ties; NaN
// never wins).
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return v > bv || (v == bv && i < bi);
}
