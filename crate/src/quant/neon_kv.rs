//! aarch64 NEON kernels of the KV cache's cold tier (`kv.rs`). A block's 32 quants are unpacked to
//! signed bytes as the legacy dots do ((`Unpack`)), widened to i32, converted to f32 and multiplied by
//! the block's scale: its values, exactly. Scores accumulate `q * x` with FMA in two accumulators per
//! head and sum them once per row; weighted sums add `w * x` with FMA into the output.
//!
//! Callers check the shapes first (`kv::check_scores`, `kv::check_sums`).

use std::arch::aarch64::*;

use super::kv::{KvBlock, KV_BLOCK};
use super::neon::f16x4_to_f32;

/// A block's 32 values, exactly, as eight f32x4 in element order.
#[inline(always)]
unsafe fn values<B: KvBlock>(b: &B) -> [float32x4_t; 8] {
    let (lo, hi) = b.quants();
    let d = vgetq_lane_f32::<0>(f16x4_to_f32(vcreate_u16(u16::from_le_bytes(b.d()) as u64)));
    let (q0, q1, q2, q3) = (vmovl_s8(vget_low_s8(lo)), vmovl_high_s8(lo), vmovl_s8(vget_low_s8(hi)), vmovl_high_s8(hi));
    let f = |x: int32x4_t| vmulq_n_f32(vcvtq_f32_s32(x), d);
    [
        f(vmovl_s16(vget_low_s16(q0))),
        f(vmovl_high_s16(q0)),
        f(vmovl_s16(vget_low_s16(q1))),
        f(vmovl_high_s16(q1)),
        f(vmovl_s16(vget_low_s16(q2))),
        f(vmovl_high_s16(q2)),
        f(vmovl_s16(vget_low_s16(q3))),
        f(vmovl_high_s16(q3)),
    ]
}

/// `kv::scores` (`d` the rows' width): up to four heads at a time share each unpacked block.
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

#[inline(always)]
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
        let mut acc = [[vdupq_n_f32(0.0); 2]; G];
        for (b, block) in row.iter().enumerate() {
            let x = values(block);
            for (g, acc) in acc.iter_mut().enumerate() {
                // Head g's elements b * 32.. + 32 are in bounds: q holds G rows of d = row.len() * 32.
                let p = qp.add(g * d + b * KV_BLOCK);
                for (c, &x) in x.iter().enumerate() {
                    acc[c % 2] = vfmaq_f32(acc[c % 2], vld1q_f32(p.add(4 * c)), x);
                }
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            out[g * stride + i] = vaddvq_f32(vaddq_f32(acc[0], acc[1])) * scale;
        }
    }
}

/// `kv::weighted_sums` (`d` the rows' width, `heads` rows of `o`): each unpacked block is added to every head.
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
                let wv = vdupq_n_f32(*w.get_unchecked(g * w_stride + i));
                // Head g's columns b * 32.. + 32 are in bounds of `o` (checked by the caller).
                let p = op.add(g * o_stride + b * KV_BLOCK);
                for (c, &x) in x.iter().enumerate() {
                    let p = p.add(4 * c);
                    vst1q_f32(p, vfmaq_f32(vld1q_f32(p), wv, x));
                }
            }
        }
    }
}
