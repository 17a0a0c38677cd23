//! GeGLU gate of the feed-forward block (Gemma): `gate = gelu(gate) * up`, in place, with GELU's tanh approximation
//! in f32 (llama.cpp's GeGLU; rounding its input to f16 for ggml's table, as `ggml_gelu` may, lands further from
//! llama.cpp on Gemma 3: tests/rust/gemma3.rs).

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const COEF_A: f32 = 0.044_715;

/// GELU's tanh approximation (ggml's `ggml_gelu_f32`).
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

pub fn geglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu(*g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn gelu_of_known_values() {
        for (x, want) in [(0.0f32, 0.0f32), (1.0, 0.841_192), (-1.0, -0.158_808), (3.0, 2.996_363), (-12.0, 0.0)] {
            assert!((gelu(x) - want).abs() < 1e-5, "gelu({x}) = {}, want {want}", gelu(x));
        }
        let mut g = [1.0f32, 2.0];
        geglu(&mut g, &[2.0, 0.5]);
        assert_eq!(g, [gelu(1.0) * 2.0, gelu(2.0) * 0.5]);
    }
}
