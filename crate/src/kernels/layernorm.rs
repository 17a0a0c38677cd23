//! LayerNorm: `y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias`, as llama.cpp (`ggml_norm`, then `ggml_mul`
//! and `ggml_add`): BERT's norms.

/// Normalize each row of `x` (rows of `weight.len()`) into `out`.
pub fn layernorm(out: &mut [f32], x: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
    let d = weight.len();
    debug_assert_eq!(bias.len(), d);
    for (o, xr) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
        // ggml sums in f64 (ggml_float) for this op: first the mean, then the squares of the centred values.
        let mean = (xr.iter().map(|&v| v as f64).sum::<f64>() / d as f64) as f32;
        let var: f64 = xr.iter().map(|&v| ((v - mean) as f64).powi(2)).sum::<f64>() / d as f64;
        let scale = 1.0 / (var as f32 + eps).sqrt();
        for (((o, &v), &w), &b) in o.iter_mut().zip(xr).zip(weight).zip(bias) {
            *o = (v - mean) * scale * w + b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn centres_and_scales_each_row() {
        let x = [1.0f32, 3.0, 1.0, 3.0, 5.0, 5.0, 5.0, 5.0];
        let (w, b) = ([1.0f32, 2.0, 1.0, 1.0], [0.0f32, 0.0, 0.5, 0.0]);
        let mut y = [0f32; 8];
        layernorm(&mut y, &x, &w, &b, 1e-12);
        assert_eq!(&y[..4], &[-1.0, 2.0, -0.5, 1.0]); // mean 2, variance 1
        assert_eq!(&y[4..], &[0.0, 0.0, 0.5, 0.0]); // a constant row is its bias (eps keeps it finite)
    }
}
