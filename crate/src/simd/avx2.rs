//! x86_64 kernels of the f32 primitives, using AVX2 and FMA. Every function here is compiled for AVX2, FMA
//! and F16C, the features of all x86_64 kernels (so that they inline into one another): callers check
//! [`super::cpu::has_avx2`] first.

use std::arch::x86_64::*;

/// The sum of `v`'s 8 lanes: `((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Two accumulators over 16 elements a step (lanes 0-7 and 8-15), then 8 more into the first, then the lane
/// sum of the two, plus the scalar tail. SAFETY: AVX2, FMA and F16C, `a.len() == b.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), _mm256_loadu_ps(bp.add(i)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i + 8)), _mm256_loadu_ps(bp.add(i + 8)), acc1);
        i += 16;
    }
    if i + 8 <= n {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), _mm256_loadu_ps(bp.add(i)), acc0);
        i += 8;
    }
    hsum(_mm256_add_ps(acc0, acc1)) + super::dot_ref(&a[i..], &b[i..])
}

/// Four accumulators over 32 elements a step, then 8 a step into the first, then the lane sum of the four,
/// plus the scalar tail. SAFETY: AVX2, FMA and F16C, `a.len() == b.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
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
    hsum(v) + super::l2_squared_ref(&a[i..], &b[i..])
}

/// 8 elements a step, each `y + a * x` one FMA, then the scalar tail. SAFETY: AVX2, FMA and F16C,
/// `y.len() == x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len();
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(yp.add(i), _mm256_fmadd_ps(av, _mm256_loadu_ps(xp.add(i)), _mm256_loadu_ps(yp.add(i))));
        i += 8;
    }
    super::axpy_ref(&mut y[i..], a, &x[i..]);
}
