//! x86_64 kernels of attention's vector ops, using AVX2, FMA and F16C: callers check
//! [`crate::simd::cpu::has_avx2`] first, and `scores`/`weighted_sums` need `d` a multiple of 8.

use std::arch::x86_64::*;

use super::Rows;

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

/// Columns `c..c + 8` of row `i` of f16 rows, converted. SAFETY: AVX2, FMA and F16C; `i` and `c + 8` in bounds.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load8_f16(row: &[[u8; 2]], c: usize) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(row.as_ptr().add(c).cast()))
}

/// [`super::scores`]: two query rows against two keys at a time, the four sums in registers, each summed as
/// `simd::avx2::dot` sums (two accumulators over alternate 8 columns with FMA, their lane sum `hsum`, plus the empty
/// tail's sum), so the same bits as the ops one by one, whatever the number of rows and keys; the four lane sums are
/// reduced together. SAFETY: AVX2, FMA and F16C; `q` holds whole rows of `d = k.width()`, a multiple of 8; `out`
/// holds `(rows - 1) * stride + k.count()` scores (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<R: Rows + ?Sized>(q: &[f32], k: &R, scale: f32, out: &mut [f32], stride: usize) {
    let (d, n) = (k.width(), k.count());
    if n == 0 || d == 0 {
        return;
    }
    let rows = q.len() / d;
    // `dot` adds its (empty) tail's sum.
    let tail = _mm256_set1_ps(crate::simd::dot_ref(&[], &[]));
    let scale = _mm256_set1_ps(scale);
    let mut sums = [0f32; 8];
    for r0 in (0..rows).step_by(2) {
        // A last odd row is computed twice (as the tile's second row too) and stored once.
        let r1 = (r0 + 1).min(rows - 1);
        let (qa, qb) = (q.as_ptr().add(r0 * d), q.as_ptr().add(r1 * d));
        for i0 in (0..n).step_by(2) {
            // Likewise a last odd key.
            let i1 = (i0 + 1).min(n - 1);
            // Scores (r0, i0), (r0, i1), (r1, i0), (r1, i1); `dot`'s two accumulators: columns 16j..16j + 8 into
            // `lo`, 16j + 8..16j + 16 into `hi`, a last 8 into `lo`.
            let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
            let step = |acc: &mut [__m256; 4], c: usize| {
                let (xa, xb) = (_mm256_loadu_ps(qa.add(c)), _mm256_loadu_ps(qb.add(c)));
                let (k0, k1) = (k.load8(i0, c), k.load8(i1, c));
                acc[0] = _mm256_fmadd_ps(xa, k0, acc[0]);
                acc[1] = _mm256_fmadd_ps(xa, k1, acc[1]);
                acc[2] = _mm256_fmadd_ps(xb, k0, acc[2]);
                acc[3] = _mm256_fmadd_ps(xb, k1, acc[3]);
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
            let v = [0, 1, 2, 3].map(|j| _mm256_add_ps(lo[j], hi[j]));
            let s = _mm256_mul_ps(_mm256_add_ps(hsum4(v), tail), scale);
            _mm256_storeu_ps(sums.as_mut_ptr(), s);
            let stored = (n - i0).min(2);
            store_scores(&mut out[r0 * stride + i0..], [sums[0], sums[1]], stored);
            store_scores(&mut out[r1 * stride + i0..], [sums[4], sums[5]], stored);
        }
    }
}

/// `out[..n] = s[..n]` for `n` 1 or 2 (a row's scores of a key pair, the last pair maybe one key), element by element:
/// a slice copy of a length known only at run time was a call to `memcpy` per row and pair.
#[inline(always)]
pub(super) fn store_scores(out: &mut [f32], s: [f32; 2], n: usize) {
    out[0] = s[0];
    if n == 2 {
        out[1] = s[1];
    }
}

/// `simd::avx2::hsum` of four vectors at once: lanes 0 and 1 of the result are those of `v[0]` and `v[1]`, lanes 4
/// and 5 those of `v[2]` and `v[3]`, each `((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum4(v: [__m256; 4]) -> __m256 {
    // u = [x0 + x4, x1 + x5, x2 + x6, x3 + x7] of v[0] and v[2] side by side, and of v[1] and v[3].
    let fold = |a: __m256, b: __m256| {
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
    };
    let (u02, u13) = (fold(v[0], v[2]), fold(v[1], v[3]));
    // Per half: [a0 + a2, b0 + b2, a1 + a3, b1 + b3] for (a, b) = (u0, u1), then (a0 + a2) + (a1 + a3) in lane 0.
    let p = _mm256_add_ps(_mm256_unpacklo_ps(u02, u13), _mm256_unpackhi_ps(u02, u13));
    _mm256_add_ps(p, _mm256_shuffle_ps::<0xEE>(p, p))
}

/// [`super::weighted_sums`]: for each 8 columns, up to eight heads' sums stay in registers over all the rows (each
/// row's piece converted once for them), adding `w * v` with FMA as `simd::avx2::axpy` does.
/// SAFETY: AVX2, FMA and F16C; `d = v.width()` a multiple of 8; `w` and `o` hold `heads` rows (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
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
#[target_feature(enable = "avx2,fma,f16c")]
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
    for c in (0..d).step_by(8) {
        let mut acc = [_mm256_setzero_ps(); G];
        for (g, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_loadu_ps(op.add(g * o_stride + c));
        }
        for i in 0..n {
            let x = v.load8(i, c);
            for (g, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&*wp.add(g * w_stride + i)), x, *acc);
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(op.add(g * o_stride + c), *acc);
        }
    }
}
