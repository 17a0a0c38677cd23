//! The vector ops of attention over the f16 KV cache: convert a cached row (raw little-endian f16 bits)
//! to f32 once ([`to_f32`]), then `q · k` and `out += w * v` in f32 ([`crate::simd`]'s `dot` and `axpy`)
//! for every query head that shares it.
//!
//! The conversion has a scalar reference (`to_f32_ref`) and a SIMD version picked as the quantized kernels
//! are: AVX2+F16C on x86_64 at run time, simd128 on wasm32 at compile time; elsewhere the reference. Attention
//! calls the ops through [`scores`] and [`weighted_sums`], which take a group of heads at once: on wasm32 these
//! are fused kernels that convert each cached row in registers and keep the heads' sums there (the float
//! operations of `simd::simd128::dot` and `axpy` in the same order, so the same bits as the ops one by one,
//! which run elsewhere).

use crate::quant::act::f16_to_f32;
use crate::simd::{axpy, dot};

/// Cached keys or values as [`scores`] and [`weighted_sums`] read them: rows of `d` values, either f16 rows of
/// the KV cache (each converted as it is read) or rows converted to f32 before (`F32Rows`, for a batch of queries
/// that read the same rows). Conversion is exact, so both give the same bits.
pub(crate) trait Rows {
    /// How many rows.
    fn count(&self) -> usize;
    /// The width of a row.
    fn width(&self) -> usize;
    /// Row `i` as f32: converted into `scratch`, or in place.
    fn row<'a>(&'a self, i: usize, scratch: &'a mut [f32]) -> &'a [f32];
    /// Columns `c..c + 8` of row `i` as two f32x4. SAFETY: `i < count()` and `c + 8 <= width()`.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    unsafe fn load8(&self, i: usize, c: usize, consts: &crate::quant::simd128::Consts)
        -> [core::arch::wasm32::v128; 2];
}

impl Rows for [&[[u8; 2]]] {
    fn count(&self) -> usize {
        self.len()
    }
    fn width(&self) -> usize {
        self.first().map_or(0, |r| r.len())
    }
    #[inline]
    fn row<'a>(&'a self, i: usize, scratch: &'a mut [f32]) -> &'a [f32] {
        to_f32(self[i], scratch);
        scratch
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    unsafe fn load8(
        &self,
        i: usize,
        c: usize,
        consts: &crate::quant::simd128::Consts,
    ) -> [core::arch::wasm32::v128; 2] {
        simd128::load8(self.get_unchecked(i).as_ptr().add(c), consts)
    }
}

/// Rows of `d` f32 values back to back.
pub(crate) struct F32Rows<'a> {
    pub data: &'a [f32],
    pub d: usize,
}

impl Rows for F32Rows<'_> {
    fn count(&self) -> usize {
        self.data.len() / self.d.max(1)
    }
    fn width(&self) -> usize {
        self.d
    }
    #[inline]
    fn row<'a>(&'a self, i: usize, _: &'a mut [f32]) -> &'a [f32] {
        &self.data[i * self.d..][..self.d]
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline(always)]
    unsafe fn load8(&self, i: usize, c: usize, _: &crate::quant::simd128::Consts) -> [core::arch::wasm32::v128; 2] {
        use core::arch::wasm32::{v128, v128_load};
        let p = self.data.as_ptr().add(i * self.d + c);
        [v128_load(p as *const v128), v128_load(p.add(4) as *const v128)]
    }
}

/// Rows `rows` (f16, each of `d` values) as f32, back to back into `out`.
pub(crate) fn rows_to_f32(rows: &[&[[u8; 2]]], out: &mut [f32]) {
    let d = rows.width();
    for (r, o) in rows.iter().zip(out.chunks_exact_mut(d.max(1))) {
        to_f32(r, o);
    }
}

/// The scores of `heads` query heads (`q`: rows of `d`) against cached keys `k` (rows of `d`):
/// `out[g * stride + i] = dot(q[g], k[i]) * scale`. `row` is scratch of `d` floats.
#[inline]
pub(crate) fn scores<R: Rows + ?Sized>(q: &[f32], k: &R, scale: f32, out: &mut [f32], stride: usize, row: &mut [f32]) {
    let (d, n) = (row.len(), k.count());
    let heads = q.len() / d.max(1);
    assert!(q.len() == heads * d && (n == 0 || k.width() == d));
    assert!(heads == 0 || n == 0 || out.len() >= (heads - 1) * stride + n);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if d.is_multiple_of(8) {
        return simd128::scores(q, k, scale, out, stride);
    }
    for i in 0..n {
        let ki = k.row(i, row);
        for (g, qh) in q.chunks_exact(d).enumerate() {
            out[g * stride + i] = dot(qh, ki) * scale;
        }
    }
}

/// The weighted sums of cached values `v` (rows of `d`) for a group of heads: for each head `g`,
/// `o[g * o_stride..][..d] += w[g * w_stride + i] * v[i]` for `i` in order, `o` ending with the last
/// head's row. `row` is scratch of `d` floats.
#[inline]
pub(crate) fn weighted_sums<R: Rows + ?Sized>(
    v: &R,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
    row: &mut [f32],
) {
    let (d, n) = (row.len(), v.count());
    // `o` holds exactly the heads' rows: (heads - 1) * o_stride + d floats.
    assert!(o.len() >= d && (o.len() - d).is_multiple_of(o_stride) && (n == 0 || v.width() == d));
    let heads = (o.len() - d) / o_stride + 1;
    assert!(w.len() >= (heads - 1) * w_stride + n);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if d.is_multiple_of(8) {
        return simd128::weighted_sums(v, w, w_stride, o, o_stride, heads);
    }
    for i in 0..n {
        let vi = v.row(i, row);
        for g in 0..heads {
            axpy(&mut o[g * o_stride..][..d], w[g * w_stride + i], vi);
        }
    }
}

/// `dst[i] = src[i]` as f32, exactly.
#[inline]
pub(crate) fn to_f32(src: &[[u8; 2]], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C.
        return unsafe { avx2::to_f32(src, dst) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return simd128::to_f32(src, dst);
    #[allow(unreachable_code)]
    to_f32_ref(src, dst)
}

pub fn to_f32_ref(src: &[[u8; 2]], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16_to_f32(s);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn to_f32(src: &[[u8; 2]], dst: &mut [f32]) {
        let n = dst.len();
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(i).cast())));
            i += 8;
        }
        super::to_f32_ref(&src[i..], &mut dst[i..]);
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::act::f32_to_f16;
    use crate::test_support::{test, Rng};

    /// Values in -2..2 with a few larger ones; lengths cover every tail.
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|i| rng.uniform(-2.0, 2.0) * if i % 11 == 0 { 30.0 } else { 1.0 }).collect()
    }

    /// The conversion this machine runs gives the reference's bits (`simd`'s tests check `dot` and `axpy`).
    #[test]
    fn to_f32_matches_the_reference() {
        for n in [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 80, 128, 131] {
            let b = data(n, n as u64 + 100);
            // Every f16 bit pattern class: normals, subnormals, zeros, infinities, NaNs (compared as bits).
            let halves: Vec<[u8; 2]> = (0..n as u32)
                .map(|i| match i % 4 {
                    0 => f32_to_f16(b[i as usize]),
                    1 => ((i * 40503) as u16 & 0x83FF).to_le_bytes(),
                    _ => ((i * 40503) as u16).to_le_bytes(),
                })
                .collect();
            let (mut fast, mut reference) = (vec![0f32; n], vec![0f32; n]);
            to_f32(&halves, &mut fast);
            to_f32_ref(&halves, &mut reference);
            let bits =
                |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&reference), "to_f32, n = {n}");
        }
    }

    /// `scores` and `weighted_sums` (fused kernels on wasm32) give the bits of the ops one by one, from f16 rows and
    /// from the same rows converted to f32 first.
    #[test]
    fn group_ops_equal_the_ops_one_by_one() {
        let half = |v: &[f32]| v.iter().map(|&x| f32_to_f16(x)).collect::<Vec<_>>();
        for (d, heads, n) in [(8, 1, 1), (64, 3, 32), (64, 5, 7), (16, 8, 33), (20, 3, 5), (128, 2, 17)] {
            let stride = n + 3; // scores of head g at g * stride, as attention lays them out
            let q = data(heads * d, d as u64);
            let keys: Vec<Vec<[u8; 2]>> = (0..n).map(|i| half(&data(d, 1000 + i as u64))).collect();
            let (mut got, mut want) = (vec![0f32; heads * stride], vec![0f32; heads * stride]);
            let mut row = vec![0f32; d];
            let rows: Vec<&[[u8; 2]]> = keys.iter().map(|k| &k[..]).collect();
            scores(&q, &rows[..], 0.125, &mut got, stride, &mut row);
            for (i, k) in keys.iter().enumerate() {
                to_f32(k, &mut row);
                for g in 0..heads {
                    want[g * stride + i] = dot(&q[g * d..][..d], &row) * 0.125;
                }
            }
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "scores, d {d}, {heads} heads");
            // The same rows converted to f32 first (a batch's shared block) give the same bits.
            let mut converted = vec![0f32; n * d];
            rows_to_f32(&rows, &mut converted);
            let f32_rows = F32Rows { data: &converted, d };
            let mut from_f32 = vec![0f32; heads * stride];
            scores(&q, &f32_rows, 0.125, &mut from_f32, stride, &mut row);
            assert!(got.iter().zip(&from_f32).all(|(a, b)| a.to_bits() == b.to_bits()), "f32 rows' scores, d {d}");

            let o_stride = d + 2; // attention's parts: [m, l, o[d]] per head
            let o0 = data(heads * o_stride, 7);
            let o0_copy = o0.clone();
            let (mut got, mut want) = (o0.clone(), o0);
            let w = data(heads * stride, 9);
            weighted_sums(&rows[..], &w, stride, &mut got[2..], o_stride, &mut row);
            for (i, k) in keys.iter().enumerate() {
                to_f32(k, &mut row);
                for g in 0..heads {
                    axpy(&mut want[2 + g * o_stride..][..d], w[g * stride + i], &row);
                }
            }
            assert!(
                got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "weighted sums, d {d}, {heads} heads"
            );
            let mut from_f32 = o0_copy;
            weighted_sums(&f32_rows, &w, stride, &mut from_f32[2..], o_stride, &mut row);
            assert!(got.iter().zip(&from_f32).all(|(a, b)| a.to_bits() == b.to_bits()), "f32 rows' sums, d {d}");
        }
    }
}
