//! Distances between vectors: the index's metrics over the f32 kernels `dot` and `l2_squared` (of
//! [`crate::simd`], with their scalar references and tests), and the int8 kernel of its graph walk.
//!
//! Smaller is closer for every metric, as in hnswlib: L2 is the squared Euclidean distance, inner product
//! is `1 - a·b`, and cosine is `1 - a·b` over vectors the index normalized when it stored them (and a query
//! it normalizes before searching), so cosine costs one dot product and no norms.
//!
//! A search walks the graph on int8 copies of the vectors (`quantize`) against a query quantized to i16
//! (`quantize_query`), with one integer kernel, `dot_i8`: a scalar reference (`dot_i8_ref`) and a SIMD version
//! picked as `simd`'s kernels are, AVX2 on x86_64 when the CPU has it (`simd::cpu::has_avx2`, detected once),
//! simd128 on wasm32 and NEON on aarch64 at compile time. Integer sums do not depend on their order, so every
//! version must equal the reference exactly.

use crate::simd::{dot, l2_squared};

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

/// The largest magnitude a vector's int8 copy holds: symmetric, so that -128 never occurs.
pub const I8_MAX: f32 = 127.0;

/// Write `v / scale` rounded into `out` and return `scale`, chosen so that the largest `|v[i]|` maps to 127 (one
/// scale a vector: it needs no statistics of the whole index, so an insert never re-quantizes others). A zero
/// vector has scale 0.
pub fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    assert_eq!(v.len(), out.len());
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        out.fill(0);
        return 0.0;
    }
    let scale = max / I8_MAX;
    for (o, &x) in out.iter_mut().zip(v) {
        *o = (x / scale).round().clamp(-I8_MAX, I8_MAX) as i8;
    }
    scale
}

/// The finest i16 range a query of `dims` values can use so that no `dot_i8` sum (127 times the range, `dims`
/// times) leaves i32, in any order of additions: 1023 up to 16,000-odd dims, less above.
fn query_range(dims: usize) -> i32 {
    (i32::MAX as usize / (127 * dims.max(1))).clamp(1, 1023) as i32
}

/// As `quantize`, for a query: i16 values in `-query_range..=query_range` (finer than the stored int8 copies,
/// at no cost to the kernels, which widen int8 to i16 anyway).
pub fn quantize_query(q: &[f32], out: &mut [i16]) -> f32 {
    assert_eq!(q.len(), out.len());
    let max = q.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        out.fill(0);
        return 0.0;
    }
    let range = query_range(q.len()) as f32;
    let scale = max / range;
    for (o, &x) in out.iter_mut().zip(q) {
        *o = (x / scale).round().clamp(-range, range) as i16;
    }
    scale
}

/// The most `x_scale * q_scale * dot_i8(x, q)` can differ from the dot of the f32 vectors that `quantize` and
/// `quantize_query` made `x` and `q` of, given `x_l1` and `q_l1`, the sums of their values' magnitudes: each value
/// is within half a step of its f32 value, so `x·q` is off by at most `(q_l1 + x_l1 + dims / 2) / 2` steps of
/// both scales. (Real arithmetic: the f32 sums round on top of that.)
pub fn dot_i8_error(x_scale: f32, x_l1: f32, q_scale: f32, q_l1: f32, dims: usize) -> f32 {
    x_scale * q_scale * (q_l1 + x_l1 + dims as f32 / 2.0) / 2.0
}

/// `sum(x[i] * q[i])` of an int8 copy and a quantized query (of `quantize` and `quantize_query`, whose ranges keep
/// it inside i32).
#[inline]
pub fn dot_i8(x: &[i8], q: &[i16]) -> i32 {
    assert_eq!(x.len(), q.len());
    #[cfg(target_arch = "x86_64")]
    if crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are equal.
        return unsafe { avx2::dot_i8(x, q) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::dot_i8(x, q);
    // SAFETY: NEON is part of the aarch64 baseline; the lengths are equal.
    #[cfg(target_arch = "aarch64")]
    return unsafe { neon::dot_i8(x, q) };
    #[allow(unreachable_code)]
    dot_i8_ref(x, q)
}

pub fn dot_i8_ref(x: &[i8], q: &[i16]) -> i32 {
    x.iter().zip(q).map(|(&x, &q)| x as i32 * q as i32).sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// 16 values a step: int8 widened to i16, `madd` with the query's i16 (pairs of products summed to i32), four
    /// accumulators, then a scalar tail. SAFETY: AVX2, FMA and F16C, `x.len() == q.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_i8(x: &[i8], q: &[i16]) -> i32 {
        let n = x.len();
        let (xp, qp) = (x.as_ptr(), q.as_ptr());
        let step = |k: usize| {
            let xv = _mm256_cvtepi8_epi16(_mm_loadu_si128(xp.add(k) as *const __m128i));
            _mm256_madd_epi16(xv, _mm256_loadu_si256(qp.add(k) as *const __m256i))
        };
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut i = 0;
        while i + 64 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_add_epi32(*acc, step(i + 16 * j));
            }
            i += 64;
        }
        while i + 16 <= n {
            acc[0] = _mm256_add_epi32(acc[0], step(i));
            i += 16;
        }
        let v = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
        let v = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01_00_11_10));
        let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b10_11_00_01));
        _mm_cvtsi128_si32(v) + super::dot_i8_ref(&x[i..], &q[i..])
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::*;

    /// 8 values a step (int8 loaded widened to i16, `i32x4.dot_i16x8` with the query's i16), four accumulators,
    /// then a scalar tail.
    pub fn dot_i8(x: &[i8], q: &[i16]) -> i32 {
        let n = x.len().min(q.len());
        let (xp, qp) = (x.as_ptr(), q.as_ptr());
        // SAFETY: values k..k + 8 are in bounds of both slices; no alignment requirement.
        let step = |k: usize| unsafe {
            i32x4_dot_i16x8(i16x8_load_extend_i8x8(xp.add(k)), v128_load(qp.add(k) as *const v128))
        };
        let mut acc = [i32x4_splat(0); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = i32x4_add(*acc, step(i + 8 * j));
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = i32x4_add(acc[0], step(i));
            i += 8;
        }
        let v = i32x4_add(i32x4_add(acc[0], acc[1]), i32x4_add(acc[2], acc[3]));
        (i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v))
            + (i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v))
            + super::dot_i8_ref(&x[i..], &q[i..])
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use core::arch::aarch64::*;

    /// 16 values a step: int8 widened to i16, multiplied by the query's i16 and added into four i32
    /// accumulators (`vmlal`), then a scalar tail. SAFETY: NEON, `x.len() == q.len()`.
    #[target_feature(enable = "neon")]
    pub unsafe fn dot_i8(x: &[i8], q: &[i16]) -> i32 {
        let n = x.len();
        let (xp, qp) = (x.as_ptr(), q.as_ptr());
        let mut acc = [vdupq_n_s32(0); 4];
        let mut i = 0;
        while i + 16 <= n {
            let xv = vld1q_s8(xp.add(i));
            let (lo, hi) = (vmovl_s8(vget_low_s8(xv)), vmovl_high_s8(xv));
            let (q0, q1) = (vld1q_s16(qp.add(i)), vld1q_s16(qp.add(i + 8)));
            acc[0] = vmlal_s16(acc[0], vget_low_s16(lo), vget_low_s16(q0));
            acc[1] = vmlal_high_s16(acc[1], lo, q0);
            acc[2] = vmlal_s16(acc[2], vget_low_s16(hi), vget_low_s16(q1));
            acc[3] = vmlal_high_s16(acc[3], hi, q1);
            i += 16;
        }
        vaddvq_s32(vaddq_s32(vaddq_s32(acc[0], acc[1]), vaddq_s32(acc[2], acc[3])))
            + super::dot_i8_ref(&x[i..], &q[i..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::{dot_ref, l2_squared_ref};
    use crate::test_support::{test, Rng};

    /// Values in -2..2 with a few larger ones; lengths cover every tail of every kernel.
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|i| rng.uniform(-2.0, 2.0) * if i % 11 == 0 { 30.0 } else { 1.0 }).collect()
    }

    /// The integer kernel this machine runs equals the reference exactly, at the extremes of both ranges too.
    #[test]
    fn int8_kernel_matches_the_reference() {
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 384, 385, 1031] {
            let (a, b) = (data(n, n as u64 + 1), data(n, n as u64 + 100));
            let (mut x, mut q) = (vec![0i8; n], vec![0i16; n]);
            quantize(&a, &mut x);
            quantize_query(&b, &mut q);
            assert_eq!(dot_i8(&x, &q), dot_i8_ref(&x, &q), "n = {n}");
            let range = query_range(n) as i16;
            let (x, q) = (vec![-127i8; n], vec![-range; n]);
            assert_eq!(dot_i8(&x, &q), 127 * range as i32 * n as i32, "n = {n}");
        }
        // The largest index dims at full range stay inside i32.
        let n = super::super::hnsw::MAX_DIMS;
        let range = query_range(n);
        assert!(127 * range as i64 * n as i64 <= i32::MAX as i64 && range >= 1);
        let (x, q) = (vec![127i8; n], vec![range as i16; n]);
        assert_eq!(dot_i8(&x, &q) as i64, 127 * range as i64 * n as i64);
    }

    /// A quantized dot is the f32 dot to within `dot_i8_error`.
    #[test]
    fn quantized_dots_approximate_the_f32_dot() {
        for n in [1, 5, 64, 384, 1000] {
            let (a, b) = (data(n, n as u64 + 7), data(n, n as u64 + 8));
            let (mut x, mut q) = (vec![0i8; n], vec![0i16; n]);
            let (sx, sq) = (quantize(&a, &mut x), quantize_query(&b, &mut q));
            let approx = sx * sq * dot_i8_ref(&x, &q) as f32;
            let exact = dot_ref(&a, &b);
            let l1_x: f32 = x.iter().map(|v| v.unsigned_abs() as f32).sum();
            let l1_q: f32 = q.iter().map(|v| v.unsigned_abs() as f32).sum();
            let bound = dot_i8_error(sx, l1_x, sq, l1_q, n);
            // The slack is f32 rounding, far below the bound (which is about a step times the vectors' size).
            let slack = 1e-5 * a.iter().zip(&b).map(|(a, b)| (a * b).abs()).sum::<f32>();
            assert!((approx - exact).abs() <= bound + slack, "n = {n}: {approx} vs {exact} (bound {bound})");
            assert!(x.iter().all(|&v| v != -128) && x.iter().any(|&v| v.abs() == 127), "n = {n}");
        }
        let mut zero = vec![1i8; 3];
        assert_eq!(quantize(&[0.0; 3], &mut zero), 0.0);
        assert_eq!(zero, vec![0; 3]);
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
