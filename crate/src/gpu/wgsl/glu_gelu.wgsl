// Needs: nothing.
// Provides: glu, the gated feed-forward's activation for GeGLU (Gemma): gelu(gate) * up, GELU in its tanh
// approximation with the CPU's constants and order of operations (crate/src/kernels/gelu.rs). For glu.wgsl and
// matvec.wgsl (OUT_GEGLU); glu_silu.wgsl defines the same function for SwiGLU.

const SQRT_2_OVER_PI: f32 = 0.7978846;
const GELU_COEF_A: f32 = 0.044715;

fn glu(g: f32, u: f32) -> f32 {
    // tanh is +-1 in f32 past +-9.1: the clamp changes no result, and keeps a driver's exp-based tanh from
    // overflowing to NaN.
    let t = tanh(clamp(SQRT_2_OVER_PI * g * (1.0 + GELU_COEF_A * g * g), -10.0, 10.0));
    return 0.5 * g * (1.0 + t) * u;
}
