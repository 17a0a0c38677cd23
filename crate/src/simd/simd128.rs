//! wasm32 kernels of the f32 primitives, using simd128 (built when it is enabled). simd128 has no fused
//! multiply-add: a product and a sum round apart, as in the references, and the relaxed-SIMD build does the same
//! (see [`madd`]): both wasm builds give the same bits.
//!
//! `kernels::f16`'s fused attention kernels (`scores`, `weighted_sums` over rows of a multiple of 8) repeat
//! `dot`'s and `axpy`'s operations in the same order, so that they give the same bits: change them together.

use core::arch::wasm32::*;

/// The sum of `v`'s 4 lanes: `(v0 + v1) + (v2 + v3)`.
#[inline]
pub(crate) fn hsum(v: v128) -> f32 {
    (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
        + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v))
}

/// `a * b + c`, the product rounded first, in the relaxed-SIMD build too: `f32x4.relaxed_madd` fuses on some
/// engines and not on others, and attention and LoRA adapters (these primitives' callers in the forward pass) would
/// then give other bits than the plain build, and another answer where the model is near a tie.
#[inline(always)]
pub(crate) fn madd(a: v128, b: v128, c: v128) -> v128 {
    f32x4_add(c, f32x4_mul(a, b))
}

/// Two accumulators over 8 elements a step (lanes 0-3 and 4-7), then 4 more into the first, then the lane
/// sum of the two, plus the scalar tail.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    // SAFETY (all loads): elements i..i + 4 are in bounds of both slices; no alignment requirement.
    let load = |p: *const f32, i: usize| unsafe { v128_load(p.add(i) as *const v128) };
    let (mut acc0, mut acc1) = (f32x4_splat(0.0), f32x4_splat(0.0));
    let mut i = 0;
    while i + 8 <= n {
        acc0 = madd(load(ap, i), load(bp, i), acc0);
        acc1 = madd(load(ap, i + 4), load(bp, i + 4), acc1);
        i += 8;
    }
    if i + 4 <= n {
        acc0 = madd(load(ap, i), load(bp, i), acc0);
        i += 4;
    }
    hsum(f32x4_add(acc0, acc1)) + super::dot_ref(&a[i..], &b[i..])
}

/// Four accumulators over 16 elements a step, then 4 a step into the first, then the lane sum of the four,
/// plus the scalar tail.
pub(crate) fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
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
            *acc = madd(d, d, *acc);
        }
        i += 16;
    }
    while i + 4 <= n {
        let d = diff(i);
        acc[0] = madd(d, d, acc[0]);
        i += 4;
    }
    hsum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]))) + super::l2_squared_ref(&a[i..], &b[i..])
}

/// 4 elements a step, each `y + a * x` ([`madd`]), then the scalar tail.
pub(crate) fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    let av = f32x4_splat(a);
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: elements i..i + 4 are in bounds of both slices; no alignment requirement.
        unsafe {
            let yv = v128_load(yp.add(i) as *const v128);
            v128_store(yp.add(i) as *mut v128, madd(av, v128_load(xp.add(i) as *const v128), yv));
        }
        i += 4;
    }
    super::axpy_ref(&mut y[i..], a, &x[i..]);
}
