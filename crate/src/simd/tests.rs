//! The kernels this machine runs against their scalar references: equal where every order of the additions
//! gives the same sum, within rounding elsewhere (huge, tiny and subnormal values too), and the same
//! infinities and NaNs; each `hsum` in the order its file states.

use super::*;
use crate::test_support::{test, Rng};

/// Lengths that end in every tail of every kernel (steps of 32, 16, 8 and 4 elements), and a long one.
const LENGTHS: [usize; 17] = [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 1000];

/// The smallest positive f32 (subnormal): a product that underflows is off by at most half of it.
const TINY: f64 = 1.401298464324817e-45;

/// `n` values `scale * k`, `k` a random integer in -8..=8.
fn integers(n: usize, scale: f32, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| scale * (rng.next_u64() % 17) as f32 - 8.0 * scale).collect()
}

/// `n` random values in -1..1 times `scale`, every 11th also times 30 (so the sums have terms of two sizes).
fn random(n: usize, scale: f32, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|i| rng.uniform(-1.0, 1.0) * scale * if i % 11 == 0 { 30.0 } else { 1.0 }).collect()
}

/// Small integers times a power of two: every product and partial sum is exact in f32 (below 2^24 steps of the
/// scale, above the subnormals' step 2^-149), so every order of additions, fused or not, gives the same value.
#[test]
fn kernels_equal_the_reference_where_sums_are_exact() {
    let mut rng = Rng::new(1);
    // Products of scale 2^0, 2^100 and 2^-140 (subnormal); axpy's of the scale itself.
    for scale in [1.0, 2f32.powi(50), 2f32.powi(-70)] {
        for n in LENGTHS {
            let (a, b) = (integers(n, scale, &mut rng), integers(n, scale, &mut rng));
            assert_eq!(dot(&a, &b), dot_ref(&a, &b), "dot, n = {n}, scale {scale:e}");
            assert_eq!(l2_squared(&a, &b), l2_squared_ref(&a, &b), "l2_squared, n = {n}, scale {scale:e}");
            assert_eq!(l2_squared(&a, &a), 0.0, "l2_squared of itself, n = {n}");
            let (mut fast, mut reference) = (a.clone(), a.clone());
            axpy(&mut fast, -3.0, &b);
            axpy_ref(&mut reference, -3.0, &b);
            assert_eq!(fast, reference, "axpy, n = {n}, scale {scale:e}");
        }
    }
}

/// Random values of ordinary, huge, tiny (products subnormal) and mixed magnitudes: a kernel's sum is within
/// rounding of the reference's, bounded by the sum of the terms' magnitudes `s`: either side's sum makes at
/// most `n + 4` roundings of a partial sum no larger than `s`, each off by at most half an epsilon of it (or
/// half a subnormal step).
#[test]
fn kernels_are_within_rounding_of_the_reference() {
    let mut rng = Rng::new(2);
    let bound = |n: usize, s: f64| (n as f64 + 4.0) * (f32::EPSILON as f64 * s + TINY);
    // Scales that keep every sum of 1000 terms below f32::MAX.
    type Data = fn(usize, &mut Rng) -> Vec<f32>;
    let kinds: [(&str, Data); 4] = [
        ("ordinary", |n, rng| random(n, 2.0, rng)),
        ("huge", |n, rng| random(n, 1e16, rng)),
        ("tiny", |n, rng| random(n, 1e-21, rng)),
        ("mixed", |n, rng| {
            (0..n).map(|_| rng.uniform(-1.0, 1.0) * 10f32.powi((rng.next_u64() % 31) as i32 - 15)).collect()
        }),
    ];
    for (kind, data) in kinds {
        for n in LENGTHS {
            let (a, b) = (data(n, &mut rng), data(n, &mut rng));
            let at = format!("{kind}, n = {n}");

            let s: f64 = a.iter().zip(&b).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
            let (fast, reference) = (dot(&a, &b), dot_ref(&a, &b));
            assert!((fast as f64 - reference as f64).abs() <= bound(n, s), "dot, {at}: {fast:e} != {reference:e}");

            // Both sides subtract alike; only the sums of squares differ.
            let s: f64 = a.iter().zip(&b).map(|(&a, &b)| ((a - b) as f64).powi(2)).sum();
            let (fast, reference) = (l2_squared(&a, &b), l2_squared_ref(&a, &b));
            assert!((fast as f64 - reference as f64).abs() <= bound(n, s), "l2, {at}: {fast:e} != {reference:e}");

            // An FMA rounds once where the reference rounds the product, then the sum.
            let (mut fast, mut reference) = (a.clone(), a.clone());
            axpy(&mut fast, -0.37, &b);
            axpy_ref(&mut reference, -0.37, &b);
            for (i, (f, r)) in fast.iter().zip(&reference).enumerate() {
                let limit = 2.0 * f32::EPSILON as f64 * (a[i].abs() as f64 + (0.37 * b[i] as f64).abs()) + TINY;
                assert!((f - r).abs() as f64 <= limit, "axpy, {at} [{i}]: {f:e} != {r:e}");
            }
        }
    }
}

/// Infinities, NaNs and overflow come out as the reference's, wherever in the vector they are.
#[test]
fn kernels_give_the_references_infinities_and_nans() {
    let mut rng = Rng::new(3);
    let same = |fast: f32, reference: f32| {
        assert!(!reference.is_finite(), "each case gives inf or NaN");
        fast.to_bits() == reference.to_bits() || (fast.is_nan() && reference.is_nan())
    };
    for n in LENGTHS.into_iter().filter(|&n| n > 0) {
        for p in [0, n / 2, n - 1] {
            let at = format!("n = {n}, at {p}");
            let (a, b) = (random(n, 2.0, &mut rng), random(n, 2.0, &mut rng));
            // (a[p], b[p]): a NaN; inf by a positive value (dot and l2 inf); -inf by 0 (dot NaN); inf and inf (l2 NaN).
            for (x, y) in
                [(f32::NAN, 1.5), (f32::INFINITY, 1.5), (f32::NEG_INFINITY, 0.0), (f32::INFINITY, f32::INFINITY)]
            {
                let (mut a, mut b) = (a.clone(), b.clone());
                (a[p], b[p]) = (x, y);
                assert!(same(dot(&a, &b), dot_ref(&a, &b)), "dot of {x} and {y}, {at}");
                assert!(same(l2_squared(&a, &b), l2_squared_ref(&a, &b)), "l2 of {x} and {y}, {at}");
            }
            // axpy of x[p] into y[p]: 1 + 0 * x is NaN, 1 + 2 * x is x, -inf + x is NaN unless x is -inf.
            for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                for (w, y) in [(0.0, 1.0), (2.0, 1.0), (1.0, f32::NEG_INFINITY)] {
                    let (mut xs, mut fast) = (b.clone(), a.clone());
                    (xs[p], fast[p]) = (x, y);
                    let mut reference = fast.clone();
                    axpy(&mut fast, w, &xs);
                    axpy_ref(&mut reference, w, &xs);
                    assert!(same(fast[p], reference[p]), "axpy of {w} * {x} into {y}, {at}");
                }
            }
        }
        // Products and differences beyond f32's range.
        let (big, max) = (vec![1e20f32; n], vec![f32::MAX; n]);
        let minus_max: Vec<f32> = max.iter().map(|x| -x).collect();
        assert!(same(dot(&big, &big), dot_ref(&big, &big)), "dot overflow, n = {n}");
        assert!(same(dot(&big, &minus_max), dot_ref(&big, &minus_max)), "dot overflow, n = {n}");
        assert!(same(l2_squared(&max, &minus_max), l2_squared_ref(&max, &minus_max)), "l2 overflow, n = {n}");
        let (mut fast, mut reference) = (max.clone(), max.clone());
        axpy(&mut fast, 2.0, &max);
        axpy_ref(&mut reference, 2.0, &max);
        assert!(fast.iter().zip(&reference).all(|(&f, &r)| same(f, r)), "axpy overflow, n = {n}");
    }
}

/// Lanes whose sum depends on the order of the additions.
const LANES: [f32; 8] = [1e8, 3.0, -1e8, 5.0, 1.0, -7e7, 0.5, 7e7];

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_hsum_adds_in_its_order() {
    if !cpu::has_avx2() {
        return;
    }
    let l = LANES;
    let want = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    // SAFETY: the CPU has AVX2, FMA and F16C; the load reads the 8 lanes.
    let got = unsafe { avx2::hsum(std::arch::x86_64::_mm256_loadu_ps(l.as_ptr())) };
    assert_eq!(got.to_bits(), want.to_bits(), "{got} != {want}");
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd128_hsum_adds_in_its_order() {
    use core::arch::wasm32::f32x4;
    for l in LANES.chunks_exact(4) {
        let want = (l[0] + l[1]) + (l[2] + l[3]);
        let got = simd128::hsum(f32x4(l[0], l[1], l[2], l[3]));
        assert_eq!(got.to_bits(), want.to_bits(), "{got} != {want}");
    }
}

#[cfg(target_arch = "aarch64")]
#[test]
fn neon_hsum_adds_in_its_order() {
    for l in LANES.chunks_exact(4) {
        let want = (l[0] + l[1]) + (l[2] + l[3]);
        // SAFETY: NEON is part of the aarch64 baseline; the load reads 4 lanes.
        let got = unsafe { neon::hsum(core::arch::aarch64::vld1q_f32(l.as_ptr())) };
        assert_eq!(got.to_bits(), want.to_bits(), "{got} != {want}");
    }
}
