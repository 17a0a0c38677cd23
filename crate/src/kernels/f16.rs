//! The two vector ops of attention over the f16 KV cache: `q · k` and `out += w * v`, with f32
//! queries/outputs and f16 keys/values (raw little-endian bits, as the cache stores them).
//!
//! Each has a scalar reference (`*_ref`) and a SIMD version picked as the quantized kernels are: AVX2+F16C
//! on x86_64 at run time, simd128 on wasm32 at compile time; elsewhere the reference.

use crate::quant::act::f16_to_f32;

/// `sum(a[i] * b[i])` over `a.len() == b.len()` elements.
#[inline]
pub fn dot(a: &[f32], b: &[[u8; 2]]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if crate::quant::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C.
        return unsafe { avx2::dot(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot(a, b);
    #[allow(unreachable_code)]
    dot_ref(a, b)
}

/// `out[i] += w * v[i]` over `out.len() == v.len()` elements.
#[inline]
pub fn axpy(out: &mut [f32], w: f32, v: &[[u8; 2]]) {
    assert_eq!(out.len(), v.len());
    #[cfg(target_arch = "x86_64")]
    if crate::quant::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C.
        return unsafe { avx2::axpy(out, w, v) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::axpy(out, w, v);
    #[allow(unreachable_code)]
    axpy_ref(out, w, v)
}

pub fn dot_ref(a: &[f32], b: &[[u8; 2]]) -> f32 {
    a.iter().zip(b).map(|(&a, &b)| a * f16_to_f32(b)).sum()
}

pub fn axpy_ref(out: &mut [f32], w: f32, v: &[[u8; 2]]) {
    for (o, &v) in out.iter_mut().zip(v) {
        *o += w * f16_to_f32(v);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const [u8; 2]) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }

    /// Two accumulators over 16 elements per step, then 8, then a scalar tail.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot(a: &[f32], b: &[[u8; 2]]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), load8(bp.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i + 8)), load8(bp.add(i + 8)), acc1);
            i += 16;
        }
        if i + 8 <= n {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), load8(bp.add(i)), acc0);
            i += 8;
        }
        let v = _mm256_add_ps(acc0, acc1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let mut sum = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
        for j in i..n {
            sum += a[j] * super::f16_to_f32(b[j]);
        }
        sum
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy(out: &mut [f32], w: f32, v: &[[u8; 2]]) {
        let n = out.len();
        let (op, vp) = (out.as_mut_ptr(), v.as_ptr());
        let wv = _mm256_set1_ps(w);
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(op.add(i), _mm256_fmadd_ps(wv, load8(vp.add(i)), _mm256_loadu_ps(op.add(i))));
            i += 8;
        }
        for j in i..n {
            out[j] += w * super::f16_to_f32(v[j]);
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::*;

    /// Four f16 to f32, exactly (as `quant::simd128::f16x4_to_f32`): shift exponent and mantissa into
    /// f32 position, rescale by 2^112, then give infinities and NaNs f32's top exponent.
    #[inline]
    fn load4(p: *const [u8; 2]) -> v128 {
        // SAFETY: callers pass a pointer with 4 elements in bounds; the load has no alignment requirement.
        let h = unsafe { u32x4_load_extend_u16x4(p as *const u16) };
        let magnitude = u32x4_shl(v128_and(h, u32x4_splat(0x7FFF)), 13);
        let scaled = f32x4_mul(magnitude, f32x4_splat(f32::from_bits(0x7780_0000)));
        let inf_nan = f32x4_ge(scaled, f32x4_splat(65536.0));
        let value = v128_or(scaled, v128_and(inf_nan, u32x4_splat(0x7F80_0000)));
        v128_or(value, u32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16))
    }

    pub fn dot(a: &[f32], b: &[[u8; 2]]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        // SAFETY (all loads): element i + 8 <= n (or i + 4 <= n) is in bounds of both slices.
        let load_a = |i: usize| unsafe { v128_load(ap.add(i) as *const v128) };
        let (mut acc0, mut acc1) = (f32x4_splat(0.0), f32x4_splat(0.0));
        let mut i = 0;
        while i + 8 <= n {
            acc0 = f32x4_add(acc0, f32x4_mul(load_a(i), load4(unsafe { bp.add(i) })));
            acc1 = f32x4_add(acc1, f32x4_mul(load_a(i + 4), load4(unsafe { bp.add(i + 4) })));
            i += 8;
        }
        if i + 4 <= n {
            acc0 = f32x4_add(acc0, f32x4_mul(load_a(i), load4(unsafe { bp.add(i) })));
            i += 4;
        }
        let v = f32x4_add(acc0, acc1);
        let mut sum = (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v));
        for j in i..n {
            sum += a[j] * super::f16_to_f32(b[j]);
        }
        sum
    }

    pub fn axpy(out: &mut [f32], w: f32, v: &[[u8; 2]]) {
        let n = out.len();
        let (op, vp) = (out.as_mut_ptr(), v.as_ptr());
        let wv = f32x4_splat(w);
        let mut i = 0;
        while i + 4 <= n {
            // SAFETY: elements i..i + 4 are in bounds of both slices.
            unsafe {
                let o = v128_load(op.add(i) as *const v128);
                v128_store(op.add(i) as *mut v128, f32x4_add(o, f32x4_mul(wv, load4(vp.add(i)))));
            }
            i += 4;
        }
        for j in i..n {
            out[j] += w * super::f16_to_f32(v[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::act::f32_to_f16;

    /// Values in -2..2 with a few larger ones, as f32 and as f16 bits; lengths cover every tail.
    fn data(n: usize, seed: u32) -> (Vec<f32>, Vec<[u8; 2]>) {
        let mut s = seed.wrapping_mul(2654435761) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        };
        let a: Vec<f32> = (0..n).map(|i| next() * if i % 11 == 0 { 30.0 } else { 1.0 }).collect();
        let b = (0..n).map(|_| f32_to_f16(next())).collect();
        (a, b)
    }

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn simd_ops_match_the_reference() {
        for n in [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 80, 128, 131] {
            let (a, b) = data(n, n as u32 + 1);
            let scale: f32 = a.iter().zip(&b).map(|(&a, &b)| (a * f16_to_f32(b)).abs()).sum();
            let (fast, reference) = (dot(&a, &b), dot_ref(&a, &b));
            assert!((fast - reference).abs() <= 1e-6 * scale + 1e-30, "dot, n = {n}: {fast} != {reference}");

            let (mut fast, mut reference) = (a.clone(), a.clone());
            axpy(&mut fast, -0.37, &b);
            axpy_ref(&mut reference, -0.37, &b);
            for (i, (f, r)) in fast.iter().zip(&reference).enumerate() {
                // An FMA rounds once where the reference rounds twice.
                assert!((f - r).abs() <= 1e-6 * (r.abs() + 1.0), "axpy, n = {n} [{i}]: {f} != {r}");
            }
        }
    }
}
