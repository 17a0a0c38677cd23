//! aarch64 kernels of the f32 primitives, using NEON (part of the aarch64 baseline: no detection).

use core::arch::aarch64::*;

/// The sum of `v`'s 4 lanes: `(v0 + v1) + (v2 + v3)` (`faddp` twice).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) unsafe fn hsum(v: float32x4_t) -> f32 {
    vaddvq_f32(v)
}

/// Four accumulators over 16 elements a step, then 4 a step into the first, then the lane sum of the four,
/// plus the scalar tail. SAFETY: NEON, `a.len() == b.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
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
    hsum(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]))) + super::dot_ref(&a[i..], &b[i..])
}

/// As `dot`, on the differences. SAFETY: NEON, `a.len() == b.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
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
    hsum(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]))) + super::l2_squared_ref(&a[i..], &b[i..])
}

/// 4 elements a step, each `y + a * x` one FMA, then the scalar tail. SAFETY: NEON, `y.len() == x.len()`.
#[target_feature(enable = "neon")]
pub(crate) unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len();
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    let av = vdupq_n_f32(a);
    let mut i = 0;
    while i + 4 <= n {
        vst1q_f32(yp.add(i), vfmaq_f32(vld1q_f32(yp.add(i)), av, vld1q_f32(xp.add(i))));
        i += 4;
    }
    super::axpy_ref(&mut y[i..], a, &x[i..]);
}
