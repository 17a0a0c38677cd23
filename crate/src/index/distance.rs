//! Distances between f32 vectors: the index's metrics over its two kernels, `dot` and `l2_squared`.
//!
//! Smaller is closer for every metric, as in hnswlib: L2 is the squared Euclidean distance, inner product
//! is `1 - a·b`, and cosine is `1 - a·b` over vectors the index normalized when it stored them (and a query
//! it normalizes before searching), so cosine costs one dot product and no norms.
//!
//! Each kernel has a scalar reference (`*_ref`) and a SIMD version picked as the quantized kernels are:
//! AVX2+FMA on x86_64 when the CPU has it (`quant::has_avx2`, detected once), simd128 on wasm32 and NEON on
//! aarch64 at compile time; elsewhere the reference runs. They differ from the reference only in the order
//! of the float additions (and fused multiply-adds); the tests below bound that.

/// How the index measures distance. The discriminant is the metric's id in persisted records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Metric {
    /// `1 - cos(a, b)`: vectors are stored normalized, so this is `1 - a·b`.
    Cosine = 0,
    /// `1 - a·b` (hnswlib's "ip"): for vectors whose length carries meaning.
    Dot = 1,
    /// `|a - b|²`, squared as hnswlib reports it (the root changes no ranking).
    L2 = 2,
}

impl Metric {
    pub fn from_id(id: u8) -> Option<Metric> {
        [Metric::Cosine, Metric::Dot, Metric::L2].into_iter().find(|m| *m as u8 == id)
    }

    /// The distance between `a` and `b` (of one length; for cosine both normalized).
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Metric::Cosine | Metric::Dot => 1.0 - dot(a, b),
            Metric::L2 => l2_squared(a, b),
        }
    }
}

/// Scale `v` to length 1 in place (a zero vector stays zero: its cosine distance to anything is 1).
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 {
        for x in v {
            *x /= norm;
        }
    }
}

/// `sum(a[i] * b[i])`.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if crate::quant::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::dot(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot(a, b);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::dot(a, b) };
    #[allow(unreachable_code)]
    dot_ref(a, b)
}

/// `sum((a[i] - b[i])²)`.
#[inline]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if crate::quant::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::l2_squared(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::l2_squared(a, b);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::l2_squared(a, b) };
    #[allow(unreachable_code)]
    l2_squared_ref(a, b)
}

pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(&a, &b)| a * b).sum()
}

pub fn l2_squared_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(&a, &b)| (a - b) * (a - b)).sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    // The quantized kernels' sum of a vector's 8 lanes; these kernels are compiled for the same features (`has_avx2`
    // checks all three), so it inlines.
    use crate::quant::avx2::hsum as sum;

    /// Four accumulators over 32 elements a step (an FMA's latency is four of its issue slots), then 8 a step,
    /// then a scalar tail. SAFETY: AVX2, FMA and F16C, `a.len() == b.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                let k = i + 8 * j;
                *acc = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(k)), _mm256_loadu_ps(bp.add(k)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), _mm256_loadu_ps(bp.add(i)), acc[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        sum(v) + super::dot_ref(&a[i..], &b[i..])
    }

    /// As `dot`, on the differences. SAFETY: AVX2, FMA and F16C, `a.len() == b.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                let k = i + 8 * j;
                let d = _mm256_sub_ps(_mm256_loadu_ps(ap.add(k)), _mm256_loadu_ps(bp.add(k)));
                *acc = _mm256_fmadd_ps(d, d, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            let d = _mm256_sub_ps(_mm256_loadu_ps(ap.add(i)), _mm256_loadu_ps(bp.add(i)));
            acc[0] = _mm256_fmadd_ps(d, d, acc[0]);
            i += 8;
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        sum(v) + super::l2_squared_ref(&a[i..], &b[i..])
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::*;

    fn sum(v: v128) -> f32 {
        (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
    }

    /// Four accumulators over 16 elements a step, then 4 a step, then a scalar tail (simd128 has no FMA).
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        // SAFETY (all loads): elements i..i + 4 are in bounds of both slices; no alignment requirement.
        let load = |p: *const f32, i: usize| unsafe { v128_load(p.add(i) as *const v128) };
        let mut acc = [f32x4_splat(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = f32x4_add(*acc, f32x4_mul(load(ap, i + 4 * j), load(bp, i + 4 * j)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = f32x4_add(acc[0], f32x4_mul(load(ap, i), load(bp, i)));
            i += 4;
        }
        sum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]))) + super::dot_ref(&a[i..], &b[i..])
    }

    pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        // SAFETY (all loads): elements i..i + 4 are in bounds of both slices; no alignment requirement.
        let diff =
            |i: usize| unsafe { f32x4_sub(v128_load(ap.add(i) as *const v128), v128_load(bp.add(i) as *const v128)) };
        let mut acc = [f32x4_splat(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                let d = diff(i + 4 * j);
                *acc = f32x4_add(*acc, f32x4_mul(d, d));
            }
            i += 16;
        }
        while i + 4 <= n {
            let d = diff(i);
            acc[0] = f32x4_add(acc[0], f32x4_mul(d, d));
            i += 4;
        }
        sum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]))) + super::l2_squared_ref(&a[i..], &b[i..])
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use core::arch::aarch64::*;

    /// Four accumulators over 16 elements a step, then 4 a step, then a scalar tail. SAFETY: NEON,
    /// `a.len() == b.len()`.
    #[target_feature(enable = "neon")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, vld1q_f32(ap.add(i + 4 * j)), vld1q_f32(bp.add(i + 4 * j)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(ap.add(i)), vld1q_f32(bp.add(i)));
            i += 4;
        }
        vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]))) + super::dot_ref(&a[i..], &b[i..])
    }

    /// As `dot`, on the differences. SAFETY: NEON, `a.len() == b.len()`.
    #[target_feature(enable = "neon")]
    pub unsafe fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (ap, bp) = (a.as_ptr(), b.as_ptr());
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                let d = vsubq_f32(vld1q_f32(ap.add(i + 4 * j)), vld1q_f32(bp.add(i + 4 * j)));
                *acc = vfmaq_f32(*acc, d, d);
            }
            i += 16;
        }
        while i + 4 <= n {
            let d = vsubq_f32(vld1q_f32(ap.add(i)), vld1q_f32(bp.add(i)));
            acc[0] = vfmaq_f32(acc[0], d, d);
            i += 4;
        }
        vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])))
            + super::l2_squared_ref(&a[i..], &b[i..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    /// Values in -2..2 with a few larger ones; lengths cover every tail of every kernel.
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|i| rng.uniform(-2.0, 2.0) * if i % 11 == 0 { 30.0 } else { 1.0 }).collect()
    }

    /// The SIMD kernel this machine runs against the scalar reference: the same sum up to the order of the
    /// additions, bounded by the sum of the terms' magnitudes.
    #[test]
    fn simd_kernels_match_the_reference() {
        for n in [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 128, 131, 384, 385, 768, 1031] {
            let (a, b) = (data(n, n as u64 + 1), data(n, n as u64 + 100));
            let scale: f32 = a.iter().zip(&b).map(|(&a, &b)| (a * b).abs()).sum();
            let (fast, reference) = (dot(&a, &b), dot_ref(&a, &b));
            assert!((fast - reference).abs() <= 1e-6 * scale + 1e-30, "dot, n = {n}: {fast} != {reference}");
            let (fast, reference) = (l2_squared(&a, &b), l2_squared_ref(&a, &b));
            assert!((fast - reference).abs() <= 1e-6 * reference + 1e-30, "l2, n = {n}: {fast} != {reference}");
            assert_eq!(l2_squared(&a, &a), 0.0, "n = {n}");
        }
    }

    #[test]
    fn metrics_are_distances_where_smaller_is_closer() {
        let (mut a, mut b) = (data(67, 1), data(67, 2));
        normalize(&mut a);
        normalize(&mut b);
        assert!((dot_ref(&a, &a) - 1.0).abs() < 1e-5);
        assert!(Metric::Cosine.distance(&a, &a).abs() < 1e-5);
        let minus_a: Vec<f32> = a.iter().map(|x| -x).collect();
        assert!((Metric::Cosine.distance(&a, &minus_a) - 2.0).abs() < 1e-5);
        assert!((Metric::Dot.distance(&a, &b) - (1.0 - dot_ref(&a, &b))).abs() < 1e-5);
        assert!((Metric::L2.distance(&a, &b) - l2_squared_ref(&a, &b)).abs() < 1e-5);
        let mut zero = vec![0.0; 5];
        normalize(&mut zero);
        assert_eq!(zero, vec![0.0; 5]);
        for m in [Metric::Cosine, Metric::Dot, Metric::L2] {
            assert_eq!(Metric::from_id(m as u8), Some(m));
        }
        assert_eq!(Metric::from_id(3), None);
    }
}
