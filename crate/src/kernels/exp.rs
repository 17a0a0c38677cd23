//! `e^x` for the softmax of attention and the SiLU of SwiGLU, as ggml computes it on the CPU: a range
//! reduction and a degree-5 polynomial, in plain f32 arithmetic that the compiler vectorizes (simd128,
//! SSE/AVX, NEON). `f32::exp` is a call to libm per element: on wasm32 it was 4% of a decode step,
//! half of it in SwiGLU, which runs on one thread.

/// `e^x` to within 2 ulp for `x` in -87.3..=88.3 (inputs beyond saturate there: `e^-87.3` ~ 1e-38,
/// `e^88.3` ~ 2e38, never 0 or infinity; NaN gives NaN). `exp(0.0) == 1.0` exactly.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // x = n·ln2 + r with n an integer and |r| <= ln2/2, so e^x = 2^n · e^r.
    const SHIFT: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits
    const LN2_HI: f32 = 0.693_145_75; // ln2 split in two: n·LN2_HI is exact for |n| < 2^9
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.3, 88.3);
    let z = x * std::f32::consts::LOG2_E + SHIFT;
    let n = z - SHIFT;
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r - 1 on |r| <= ln2/2: minimax coefficients (ARM optimized-routines' expf, as ggml uses).
    let r2 = r * r;
    let p = 0.999_999_4 * r + (0.499_991_27 + 0.166_683_96 * r + (0.041_899_767 + 0.008_247_39 * r) * r2) * r2;
    // 2^n: n (two's complement in z's low bits) moved into the exponent field, plus the bias of 1.0.
    let scale = f32::from_bits((z.to_bits() << 23).wrapping_add(1f32.to_bits()));
    scale + p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn is_within_two_ulp_of_f64_exp() {
        let mut worst = 0f64;
        let n = 1_000_000;
        for i in 0..=n {
            let x = -87.3 + (88.3 + 87.3) * i as f32 / n as f32;
            let want = (x as f64).exp();
            let ulp = (want as f32).to_bits();
            let ulp = (f32::from_bits(ulp + 1) - f32::from_bits(ulp)) as f64;
            worst = worst.max((exp(x) as f64 - want).abs() / ulp);
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 2e-38 && exp(1000.0) > 1e38 && exp(f32::NAN).is_nan());
    }
}
