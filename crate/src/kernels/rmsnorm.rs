//! RMSNorm: `y = x / sqrt(mean(x²) + eps) * weight`, as llama.cpp (`ggml_rms_norm` then `ggml_mul`).

/// Normalize each row of `x` (rows of `weight.len()`) into `out`.
pub fn rmsnorm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    for (o, xr) in out.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
        let scale = inv_rms(xr, eps);
        for ((o, &v), &w) in o.iter_mut().zip(xr).zip(weight) {
            *o = (v * scale) * w;
        }
    }
}

/// [`rmsnorm`] of each row of `x` in place (Qwen3's norm of each query and key head).
pub fn rmsnorm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(weight.len()) {
        let scale = inv_rms(row, eps);
        row.iter_mut().zip(weight).for_each(|(v, &w)| *v = (*v * scale) * w);
    }
}

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares in f64 as ggml's `ggml_float`.
pub(crate) fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn normalizes_to_unit_rms() {
        let x = [3.0f32, -4.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let w = [1.0f32, 2.0, 1.0, 1.0];
        let mut y = [0f32; 8];
        rmsnorm(&mut y, &x, &w, 0.0);
        // row 0: rms = sqrt(25/4) = 2.5
        assert_eq!(&y[..4], &[1.2, -3.2, 0.0, 0.0]);
        assert_eq!(&y[4..], &[1.0, 2.0, 1.0, 1.0]);
        let mut x = x;
        rmsnorm_in_place(&mut x, &w, 0.0);
        assert_eq!(x, y);
    }
}
