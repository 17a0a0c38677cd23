//! x86_64 kernels of attention's vector ops in 512-bit vectors (AVX-512 F and VL, with AVX2, FMA and F16C):
//! callers check [`crate::simd::cpu::has_avx512`] first. Each output sees exactly the float operations of the AVX2
//! kernels (`avx2.rs`), so the bits are the same; the wider vectors carry two of their 8-lane vectors side by side.

use std::arch::x86_64::*;

use super::avx2::{hsum4, store_scores};
use super::Rows;

/// Rows of queries per tile of [`scores`]: two pairs, each pair's two rows in the halves of one vector.
const SCORE_ROWS: usize = 4;
/// The widest rows [`scores`] takes (attention's widest head).
pub(super) const MAX_D: usize = super::super::attention::MAX_HEAD_DIM;

/// [`super::scores`], four query rows against two keys at a time: each 512-bit accumulator holds two rows' 8-lane
/// `dot` accumulators (the AVX2 kernel's, row 2p in the low half, row 2p + 1 in the high), against a key's 8 columns
/// in both halves; the halves then reduce as the AVX2 kernel reduces its four sums. SAFETY: AVX-512 F/VL, AVX2, FMA
/// and F16C; `q` holds whole rows of `d = k.width()`, a multiple of 8; `out` holds `(rows - 1) * stride + k.count()`
/// scores (checked by the caller); `d <= MAX_D`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub unsafe fn scores<R: Rows + ?Sized>(q: &[f32], k: &R, scale: f32, out: &mut [f32], stride: usize) {
    let (d, n) = (k.width(), k.count());
    if n == 0 || d == 0 {
        return;
    }
    assert!(d <= MAX_D);
    // The tile's two pairs of query rows side by side, 8 columns each at a time, made once for all the keys:
    // `paired[p * d * 2 + 16m..][..16]` holds columns 8m..8m + 8 of rows 2p and 2p + 1.
    // (Not cleared: only what is written is read; clearing 8 KB a call cost more than the pairing.)
    let mut paired = [std::mem::MaybeUninit::<f32>::uninit(); 2 * 2 * MAX_D];
    let rows = q.len() / d;
    // `dot` adds its (empty) tail's sum.
    let tail = _mm256_set1_ps(crate::simd::dot_ref(&[], &[]));
    let scale = _mm256_set1_ps(scale);
    let mut sums = [0f32; 8];
    for r0 in (0..rows).step_by(SCORE_ROWS) {
        // Rows past the last are the last again (computed, not stored).
        let r = [0, 1, 2, 3].map(|j| (r0 + j).min(rows - 1));
        for (j, &r) in r.iter().enumerate() {
            let (row, to) = (q.as_ptr().add(r * d), paired.as_mut_ptr().cast::<f32>().add(j / 2 * 2 * d + j % 2 * 8));
            for m in 0..d / 8 {
                _mm256_storeu_ps(to.add(16 * m), _mm256_loadu_ps(row.add(8 * m)));
            }
        }
        let qp = paired.as_ptr().cast::<f32>();
        for i0 in (0..n).step_by(2) {
            // Likewise a last odd key.
            let i1 = (i0 + 1).min(n - 1);
            // acc[2p + j]: rows (r[2p], r[2p + 1]) against key [i0, i1][j]; `dot`'s two accumulators: columns
            // 16m..16m + 8 into `lo`, 16m + 8..16m + 16 into `hi`, a last 8 into `lo`.
            let (mut lo, mut hi) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
            let step = |acc: &mut [__m512; 4], c: usize| {
                let (x01, x23) = (_mm512_loadu_ps(qp.add(2 * c)), _mm512_loadu_ps(qp.add(2 * d + 2 * c)));
                let (k0, k1) = (k.load8_twice(i0, c), k.load8_twice(i1, c));
                acc[0] = _mm512_fmadd_ps(x01, k0, acc[0]);
                acc[1] = _mm512_fmadd_ps(x01, k1, acc[1]);
                acc[2] = _mm512_fmadd_ps(x23, k0, acc[2]);
                acc[3] = _mm512_fmadd_ps(x23, k1, acc[3]);
            };
            let mut c = 0;
            while c + 16 <= d {
                step(&mut lo, c);
                step(&mut hi, c + 8);
                c += 16;
            }
            if c < d {
                step(&mut lo, c);
            }
            let stored = (n - i0).min(2);
            for p in 0..2 {
                let (v0, v1) = (_mm512_add_ps(lo[2 * p], hi[2 * p]), _mm512_add_ps(lo[2 * p + 1], hi[2 * p + 1]));
                let low = |v: __m512| _mm512_castps512_ps256(v);
                let high = |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                // As the AVX2 kernel's four: (row a, i0), (row a, i1), (row b, i0), (row b, i1).
                let s = _mm256_mul_ps(_mm256_add_ps(hsum4([low(v0), low(v1), high(v0), high(v1)]), tail), scale);
                _mm256_storeu_ps(sums.as_mut_ptr(), s);
                let (ra, rb) = (r0 + 2 * p, r0 + 2 * p + 1);
                if ra < rows {
                    store_scores(&mut out[ra * stride + i0..], [sums[0], sums[1]], stored);
                }
                if rb < rows {
                    store_scores(&mut out[rb * stride + i0..], [sums[4], sums[5]], stored);
                }
            }
        }
    }
}

/// [`super::weighted_sums`] for `d` a multiple of 16: for each 16 columns, up to eight heads' sums stay in registers
/// over all the rows (each row's piece converted once for them), adding `w * v` with FMA element by element as
/// `simd::avx2::axpy` does. SAFETY: AVX-512 F/VL, AVX2, FMA and F16C; `d = v.width()` a multiple of 16; `w` and `o`
/// hold `heads` rows (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub unsafe fn weighted_sums<R: Rows + ?Sized>(
    v: &R,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
    heads: usize,
) {
    for g0 in (0..heads).step_by(8) {
        let (w, o) = (&w[g0 * w_stride..], &mut o[g0 * o_stride..]);
        match heads - g0 {
            1 => weighted_sums_of::<1, R>(v, w, w_stride, o, o_stride),
            2 => weighted_sums_of::<2, R>(v, w, w_stride, o, o_stride),
            3 => weighted_sums_of::<3, R>(v, w, w_stride, o, o_stride),
            4 => weighted_sums_of::<4, R>(v, w, w_stride, o, o_stride),
            5 => weighted_sums_of::<5, R>(v, w, w_stride, o, o_stride),
            6 => weighted_sums_of::<6, R>(v, w, w_stride, o, o_stride),
            7 => weighted_sums_of::<7, R>(v, w, w_stride, o, o_stride),
            _ => weighted_sums_of::<8, R>(v, w, w_stride, o, o_stride),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
unsafe fn weighted_sums_of<const G: usize, R: Rows + ?Sized>(
    v: &R,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
) {
    let (d, n) = (v.width(), v.count());
    debug_assert!(w.len() >= (G - 1) * w_stride + n && o.len() >= (G - 1) * o_stride + d);
    let (op, wp) = (o.as_mut_ptr(), w.as_ptr());
    for c in (0..d).step_by(16) {
        let mut acc = [_mm512_setzero_ps(); G];
        for (g, acc) in acc.iter_mut().enumerate() {
            *acc = _mm512_loadu_ps(op.add(g * o_stride + c));
        }
        for i in 0..n {
            let x = v.load16(i, c);
            for (g, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(_mm512_set1_ps(*wp.add(g * w_stride + i)), x, *acc);
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(op.add(g * o_stride + c), *acc);
        }
    }
}
