//! GELU in its tanh approximation, as llama.cpp's `ggml_gelu` (which BERT's feed-forward uses there; ggml may also
//! round its input to f16 for a table lookup, which this does not).

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const COEF_A: f32 = 0.044_715;

/// `x = gelu(x)` in place.
pub fn gelu(x: &mut [f32]) {
    for v in x {
        let u = *v;
        *v = 0.5 * u * (1.0 + (SQRT_2_OVER_PI * u * (1.0 + COEF_A * u * u)).tanh());
    }
}

/// GeGLU gate of a feed-forward block (Gemma): `gate = gelu(gate) * up`, in place. llama.cpp's GeGLU computes GELU
/// in f32 too (its f16 table lands further from it on Gemma 3: tests/fixtures/README.md).
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    gelu(gate);
    gate.iter_mut().zip(up).for_each(|(g, &u)| *g *= u);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn matches_known_values() {
        let mut x = [0.0f32, 1.0, -1.0, 3.0, -6.0];
        gelu(&mut x);
        let want = [0.0f32, 0.841_192, -0.158_808, 2.996_363, -0.0];
        for (got, want) in x.iter().zip(want) {
            assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        }
    }
}
