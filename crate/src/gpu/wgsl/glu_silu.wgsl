// Needs: nothing.
// Provides: glu, the gated feed-forward's activation for SwiGLU (llama, qwen, phi3): silu(gate) * up.
// For glu.wgsl and matvec.wgsl (OUT_SWIGLU); glu_gelu.wgsl defines the same function for GeGLU.

fn glu(g: f32, u: f32) -> f32 {
    return g / (1.0 + exp(-g)) * u;
}
