//! `e^x` for the softmax of attention and the SiLU of SwiGLU, as ggml computes it on the CPU: a range
//! reduction and a degree-5 polynomial, in plain f32 arithmetic that the compiler vectorizes (simd128,
//! SSE/AVX, NEON). `f32::exp` is a call to libm per element, which does not vectorize; on wasm32 it
//! showed in decode profiles, mostly in SwiGLU.

/// `e^x` to within 2 ulp for `x` in -87.3..=88.3 (inputs beyond saturate there: `e^-87.3` ~ 1e-38,
/// `e^88.3` ~ 2e38, never 0 or infinity; NaN gives NaN). `exp(0.0) == 1.0` exactly.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    Exp::CONSTANTS.at(x)
}

/// [`exp`]'s constants, for a loop that takes `e^x` of every element (SwiGLU, softmax): it makes them once
/// with [`Exp::new`] and calls [`Exp::at`], so that the vectorized loop keeps them in registers on wasm32
/// (V8 rebuilds a vector constant at every use: see `quant::simd128::Consts`).
#[derive(Clone, Copy)]
pub(crate) struct Exp {
    min: f32,
    max: f32,
    log2_e: f32,
    /// 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    shift: f32,
    /// ln2 split in two: n·ln2_hi is exact for |n| < 2^9.
    ln2_hi: f32,
    ln2_lo: f32,
    /// e^r - 1 on |r| <= ln2/2: minimax coefficients (ARM optimized-routines' expf, as ggml uses).
    c: [f32; 5],
    one_bits: u32,
}

impl Exp {
    const CONSTANTS: Exp = Exp {
        min: -87.3,
        max: 88.3,
        log2_e: std::f32::consts::LOG2_E,
        shift: 12_582_912.0,
        ln2_hi: 0.693_145_75,
        ln2_lo: 1.428_606_8e-6,
        c: [0.999_999_4, 0.499_991_27, 0.166_683_96, 0.041_899_767, 0.008_247_39],
        one_bits: 0x3F80_0000, // 1.0
    };

    /// The constants as values the compiler cannot fold back into constants.
    pub(crate) fn new() -> Exp {
        std::hint::black_box(Exp::CONSTANTS)
    }

    /// [`exp`] of `x`.
    #[inline(always)]
    pub(crate) fn at(&self, x: f32) -> f32 {
        // x = n·ln2 + r with n an integer and |r| <= ln2/2, so e^x = 2^n · e^r.
        let x = x.clamp(self.min, self.max);
        let z = x * self.log2_e + self.shift;
        let n = z - self.shift;
        let r = x - n * self.ln2_hi - n * self.ln2_lo;
        let [c1, c2, c3, c4, c5] = self.c;
        let r2 = r * r;
        let p = c1 * r + (c2 + c3 * r + (c4 + c5 * r) * r2) * r2;
        // 2^n: n (two's complement in z's low bits) moved into the exponent field, plus the bias of 1.0.
        let scale = f32::from_bits((z.to_bits() << 23).wrapping_add(self.one_bits));
        scale + p * scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
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
        let e = Exp::new();
        assert!((0..=n).step_by(997).all(|i| {
            let x = -100.0 + 200.0 * i as f32 / n as f32;
            e.at(x).to_bits() == exp(x).to_bits()
        }));
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 2e-38 && exp(1000.0) > 1e38 && exp(f32::NAN).is_nan());
    }
}
