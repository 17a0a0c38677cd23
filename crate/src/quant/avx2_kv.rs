//! x86_64 kernels of the KV cache's cold tier (`kv.rs`), using AVX2, FMA and F16C. A block's 32 quants
//! are unpacked to signed bytes as the legacy dots do ((`Unpack`)), widened to i32, converted to f32 and
//! multiplied by the block's scale: its values, exactly. Scores accumulate `q * x` with FMA in two
//! accumulators per head and sum them once per row; weighted sums add `w * x` with FMA into the output.
//!
//! Every function here needs AVX2, FMA and F16C: callers check [`crate::simd::cpu::has_avx2`] first, and the shapes
//! (`kv::check_scores`, `kv::check_sums`).

use std::arch::x86_64::*;

use super::kv::{KvBlock, KV_BLOCK};
use crate::simd::avx2::hsum;

/// A block's 32 values, exactly, as four f32x8 in element order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values<B: KvBlock>(b: &B) -> [__m256; 4] {
    let q = b.quants();
    let d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(b.d()) as i32)));
    let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
    [widen(lo, d), widen(_mm_srli_si128::<8>(lo), d), widen(hi, d), widen(_mm_srli_si128::<8>(hi), d)]
}

/// The low 8 signed bytes of `x` as f32, times `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen(x: __m128i, d: __m256) -> __m256 {
    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), d)
}

/// `kv::scores` (`d` the rows' width): up to four heads at a time share each unpacked block.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scores<B: KvBlock>(q: &[f32], k: &[&[B]], d: usize, scale: f32, out: &mut [f32], stride: usize) {
    let heads = q.len() / d;
    for g0 in (0..heads).step_by(4) {
        let (q, out) = (&q[g0 * d..], &mut out[g0 * stride..]);
        match heads - g0 {
            1 => scores_of::<B, 1>(q, k, d, scale, out, stride),
            2 => scores_of::<B, 2>(q, k, d, scale, out, stride),
            3 => scores_of::<B, 3>(q, k, d, scale, out, stride),
            _ => scores_of::<B, 4>(q, k, d, scale, out, stride),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_of<B: KvBlock, const G: usize>(
    q: &[f32],
    k: &[&[B]],
    d: usize,
    scale: f32,
    out: &mut [f32],
    stride: usize,
) {
    debug_assert!(q.len() >= G * d);
    let qp = q.as_ptr();
    for (i, row) in k.iter().enumerate() {
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        for (b, block) in row.iter().enumerate() {
            let x = values(block);
            for (g, acc) in acc.iter_mut().enumerate() {
                // Head g's elements b * 32.. + 32 are in bounds: q holds G rows of d = row.len() * 32.
                let p = qp.add(g * d + b * KV_BLOCK);
                acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(p), x[0], acc[0]);
                acc[1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), x[1], acc[1]);
                acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(16)), x[2], acc[0]);
                acc[1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(24)), x[3], acc[1]);
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            out[g * stride + i] = hsum(_mm256_add_ps(acc[0], acc[1])) * scale;
        }
    }
}

/// `kv::weighted_sums` (`d` the rows' width, `heads` rows of `o`): each unpacked block is added to every head.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn weighted_sums<B: KvBlock>(
    v: &[&[B]],
    d: usize,
    heads: usize,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
) {
    debug_assert!(o.len() >= (heads - 1) * o_stride + d && w.len() >= (heads - 1) * w_stride + v.len());
    let op = o.as_mut_ptr();
    for (i, row) in v.iter().enumerate() {
        for (b, block) in row.iter().enumerate() {
            let x = values(block);
            for g in 0..heads {
                let wv = _mm256_set1_ps(*w.get_unchecked(g * w_stride + i));
                // Head g's columns b * 32.. + 32 are in bounds of `o` (checked by the caller).
                let p = op.add(g * o_stride + b * KV_BLOCK);
                for (c, &x) in x.iter().enumerate() {
                    let p = p.add(8 * c);
                    _mm256_storeu_ps(p, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(p)));
                }
            }
        }
    }
}
