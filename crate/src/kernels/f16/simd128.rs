use core::arch::wasm32::*;

use super::Rows;
// The quantized kernels' exact f16 conversion, with their vector constants made once per call (why: `Consts`).
use crate::quant::simd128::{f16x4_to_f32, Consts};
use crate::simd::simd128::{hsum, madd};

pub fn to_f32(src: &[[u8; 2]], dst: &mut [f32]) {
    let n = dst.len();
    let c = Consts::new();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: elements i..i + 8 are in bounds of both slices; no alignment requirement.
        unsafe {
            let [lo, hi] = load8(src.as_ptr().add(i), &c);
            let d = dst.as_mut_ptr().add(i);
            v128_store(d as *mut v128, lo);
            v128_store(d.add(4) as *mut v128, hi);
        }
        i += 8;
    }
    super::to_f32_ref(&src[i..], &mut dst[i..]);
}

/// Eight f16 at `p` (unaligned) as two f32x4.
#[inline(always)]
pub(super) unsafe fn load8(p: *const [u8; 2], c: &Consts) -> [v128; 2] {
    let h = v128_load(p as *const v128);
    [f16x4_to_f32(u32x4_extend_low_u16x8(h), c), f16x4_to_f32(u32x4_extend_high_u16x8(h), c)]
}

/// [`super::scores`] for `d` a multiple of 8: up to four heads at a time share each converted piece
/// of a key, each head summing as `simd::simd128::dot` does (two accumulators, lanes 0-3 and 4-7 of each 8).
pub fn scores<R: Rows + ?Sized>(q: &[f32], k: &R, scale: f32, out: &mut [f32], stride: usize) {
    if k.count() == 0 {
        return;
    }
    let d = k.width();
    for (c, qs) in q.chunks(4 * d).enumerate() {
        let out = &mut out[4 * c * stride..];
        match qs.len() / d {
            1 => scores_of::<1, R>(qs, k, scale, out, stride),
            2 => scores_of::<2, R>(qs, k, scale, out, stride),
            3 => scores_of::<3, R>(qs, k, scale, out, stride),
            _ => scores_of::<4, R>(qs, k, scale, out, stride),
        }
    }
}

fn scores_of<const G: usize, R: Rows + ?Sized>(q: &[f32], k: &R, scale: f32, out: &mut [f32], stride: usize) {
    let (d, n) = (q.len() / G, k.count());
    assert!(d.is_multiple_of(8) && k.width() == d && out.len() >= (G - 1) * stride + n);
    let consts = Consts::new();
    for i in 0..n {
        let mut acc = [[f32x4_splat(0.0); 2]; G];
        for c in (0..d).step_by(8) {
            // SAFETY: i < n and c + 8 <= d: in bounds of `k` and of each head's row of `q` (asserted above).
            unsafe {
                let kv = k.load8(i, c, &consts);
                for (g, acc) in acc.iter_mut().enumerate() {
                    let qp = q.as_ptr().add(g * d + c);
                    acc[0] = madd(v128_load(qp as *const v128), kv[0], acc[0]);
                    acc[1] = madd(v128_load(qp.add(4) as *const v128), kv[1], acc[1]);
                }
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            // `dot` adds its (empty) tail's sum.
            let sum = hsum(f32x4_add(acc[0], acc[1])) + crate::simd::dot_ref(&[], &[]);
            out[g * stride + i] = sum * scale;
        }
    }
}

/// [`super::weighted_sums`] for `d` a multiple of 8: for each 8 columns, up to four heads' sums stay in
/// registers over all the rows (each row's piece converted once for them), adding `w * v` as
/// `simd::simd128::axpy` does.
pub fn weighted_sums<R: Rows + ?Sized>(
    v: &R,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
    heads: usize,
) {
    for g0 in (0..heads).step_by(4) {
        let (w, o) = (&w[g0 * w_stride..], &mut o[g0 * o_stride..]);
        match heads - g0 {
            1 => weighted_sums_of::<1, R>(v, w, w_stride, o, o_stride),
            2 => weighted_sums_of::<2, R>(v, w, w_stride, o, o_stride),
            3 => weighted_sums_of::<3, R>(v, w, w_stride, o, o_stride),
            _ => weighted_sums_of::<4, R>(v, w, w_stride, o, o_stride),
        }
    }
}

fn weighted_sums_of<const G: usize, R: Rows + ?Sized>(
    v: &R,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
) {
    let n = v.count();
    if n == 0 {
        return;
    }
    let d = v.width();
    assert!(d.is_multiple_of(8));
    assert!(w.len() >= (G - 1) * w_stride + n && o.len() >= (G - 1) * o_stride + d);
    let op = o.as_mut_ptr();
    let consts = Consts::new();
    for c in (0..d).step_by(8) {
        // SAFETY: head g's columns c..c + 8 of `o` and weights 0..n of `w` are in bounds (asserted above),
        // and so are columns c..c + 8 of every row of `v`.
        unsafe {
            let mut acc: [[v128; 2]; G] = std::array::from_fn(|g| {
                let p = op.add(g * o_stride + c);
                [v128_load(p as *const v128), v128_load(p.add(4) as *const v128)]
            });
            for i in 0..n {
                let x = v.load8(i, c, &consts);
                for (g, acc) in acc.iter_mut().enumerate() {
                    let wv = f32x4_splat(*w.get_unchecked(g * w_stride + i));
                    acc[0] = madd(wv, x[0], acc[0]);
                    acc[1] = madd(wv, x[1], acc[1]);
                }
            }
            for (g, acc) in acc.iter().enumerate() {
                let p = op.add(g * o_stride + c);
                v128_store(p as *mut v128, acc[0]);
                v128_store(p.add(4) as *mut v128, acc[1]);
            }
        }
    }
}
