//! The vector ops of attention over the f16 KV cache: convert a cached row (raw little-endian f16 bits)
//! to f32 ([`to_f32`]), then the scores `q · k` ([`scores`]) and the weighted sums `out += w * v`
//! ([`weighted_sums`]) in f32, for a group of query rows at once (the heads that share a KV head, and in a
//! prefill the tokens of a group) so that each cached row is read and converted once for all of them.
//!
//! # Design
//!
//! Each op has one order of float operations per instruction set, the same for any number of rows and keys and
//! whether the rows are f16 (converted as read) or f32 (converted before, `F32Rows`): a row's scores and sums never
//! depend on the rows beside it, so a batch and a decode row agree bit for bit (`attention`'s invariant).
//! - x86_64 with AVX2 (`avx2.rs`, picked at run time) and wasm32 (`simd128.rs`), for `d` a multiple of 8: fused
//!   kernels that keep a tile of sums in registers (AVX2: two rows by two keys for scores, eight rows for sums;
//!   wasm32: four rows), with the float operations of `simd`'s `dot` and `axpy` for that instruction set in the same
//!   order, so the same bits as the ops one by one. With AVX-512 (`avx512.rs`) the same operations two 8-lane
//!   vectors to a 512-bit one: scores of two query rows side by side against a key in both halves (four rows by
//!   two keys), sums sixteen columns at a time; the bits are the AVX2 kernels'. (A score summed in eight lanes as a tree, cheaper to reduce,
//!   moved Gemma 3 270M's llama.cpp comparison past its bound: `tests/rust/gemma3.rs`, max |dp1| 0.146 -> 0.27.)
//! - Elsewhere (NEON, or `d` not a multiple of 8): [`crate::simd`]'s `dot` and `axpy`, one row at a time.
//!
//! The conversion has a scalar reference (`to_f32_ref`) and a SIMD version picked as the quantized kernels are.

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
    /// Columns `c..c + 8` of row `i` as f32x8. SAFETY: AVX2, FMA and F16C; `i < count()` and `c + 8 <= width()`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(&self, i: usize, c: usize) -> core::arch::x86_64::__m256;
    /// Columns `c..c + 8` of row `i` in both halves of an f32x16. SAFETY: AVX-512 F/VL; as `load8`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8_twice(&self, i: usize, c: usize) -> core::arch::x86_64::__m512;
    /// Columns `c..c + 16` of row `i` as f32x16. SAFETY: AVX-512 F/VL; `i < count()` and `c + 16 <= width()`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(&self, i: usize, c: usize) -> core::arch::x86_64::__m512;
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
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, i: usize, c: usize) -> core::arch::x86_64::__m256 {
        avx2::load8_f16(self.get_unchecked(i), c)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn load8_twice(&self, i: usize, c: usize) -> core::arch::x86_64::__m512 {
        use core::arch::x86_64::*;
        _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(self.get_unchecked(i).as_ptr().add(c).cast())))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn load16(&self, i: usize, c: usize) -> core::arch::x86_64::__m512 {
        use core::arch::x86_64::*;
        _mm512_cvtph_ps(_mm256_loadu_si256(self.get_unchecked(i).as_ptr().add(c).cast()))
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
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(&self, i: usize, c: usize) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_loadu_ps(self.data.as_ptr().add(i * self.d + c))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn load8_twice(&self, i: usize, c: usize) -> core::arch::x86_64::__m512 {
        use core::arch::x86_64::*;
        let p = self.data.as_ptr().add(i * self.d + c);
        _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
    unsafe fn load16(&self, i: usize, c: usize) -> core::arch::x86_64::__m512 {
        core::arch::x86_64::_mm512_loadu_ps(self.data.as_ptr().add(i * self.d + c))
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
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8) && d <= avx512::MAX_D && crate::simd::cpu::has_avx512() {
        // SAFETY: the CPU has AVX-512 F/VL, AVX2, FMA and F16C; the shapes are checked above.
        return unsafe { avx512::scores(q, k, scale, out, stride) };
    }
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8) && crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the shapes are checked above.
        return unsafe { avx2::scores(q, k, scale, out, stride) };
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
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(16) && crate::simd::cpu::has_avx512() {
        // SAFETY: the CPU has AVX-512 F/VL, AVX2, FMA and F16C; the shapes are checked above.
        return unsafe { avx512::weighted_sums(v, w, w_stride, o, o_stride, heads) };
    }
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(8) && crate::simd::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the shapes are checked above.
        return unsafe { avx2::weighted_sums(v, w, w_stride, o, o_stride, heads) };
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
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;

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

    /// `scores` and `weighted_sums` (fused kernels on x86_64 and wasm32) give the bits of the ops one by one, from
    /// f16 rows and from the same rows converted to f32 first; on x86_64 both the AVX2 and the AVX-512 kernels where
    /// the CPU has them (rows, heads and keys around their tiles; widths of 8, 16 and more, odd multiples of 8).
    #[test]
    fn group_ops_equal_the_ops_one_by_one() {
        let half = |v: &[f32]| v.iter().map(|&x| f32_to_f16(x)).collect::<Vec<_>>();
        for (d, heads, n) in [
            (8, 1, 1),
            (64, 3, 32),
            (64, 5, 7),
            (16, 8, 33),
            (20, 3, 5),
            (128, 2, 17),
            (64, 24, 32),
            (32, 9, 6),
            (24, 6, 3),
            (40, 7, 9),
        ] {
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
            // The x86_64 kernel `scores` did not pick (the AVX2 one on an AVX-512 CPU), the same bits.
            #[cfg(target_arch = "x86_64")]
            if d % 8 == 0 && crate::simd::cpu::has_avx512() {
                let mut avx2_got = vec![0f32; heads * stride];
                // SAFETY: the CPU has AVX-512, so AVX2, FMA and F16C; the shapes are as `scores` checks them.
                unsafe { avx2::scores(&q, &rows[..], 0.125, &mut avx2_got, stride) };
                assert!(avx2_got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "AVX2 scores, d {d}");
            }
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
            #[cfg(target_arch = "x86_64")]
            if d % 8 == 0 && crate::simd::cpu::has_avx512() {
                let mut avx2_got = o0_copy.clone();
                // SAFETY: as for the scores above.
                unsafe { avx2::weighted_sums(&rows[..], &w, stride, &mut avx2_got[2..], o_stride, heads) };
                assert!(avx2_got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "AVX2 sums, d {d}");
            }
            let mut from_f32 = o0_copy;
            weighted_sums(&f32_rows, &w, stride, &mut from_f32[2..], o_stride, &mut row);
            assert!(got.iter().zip(&from_f32).all(|(a, b)| a.to_bits() == b.to_bits()), "f32 rows' sums, d {d}");
        }
    }
}
