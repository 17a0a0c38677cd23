//! NEON (aarch64) dot products of the K-quants with Q8_K activations.
//!
//! Same shape as the simd128 kernels: unpack 16 quants into signed bytes, widening multiplies
//! with 16 Q8 bytes into i16 (`vmull_s8`), fold the halves (|q| <= 32 keeps sums of up to four
//! products within i16), then widening multiply-accumulate with the sub-block scale into i32.
//! The integer sum of a super-block is exact; it is scaled by `d` once, like ggml's reference.
//!
//! NEON is part of the aarch64 baseline, so these need no run-time check; they carry
//! `#[target_feature(enable = "neon")]` only so that the intrinsics are safe to call inside.

use core::arch::aarch64::*;

use super::act::{f16_to_f32, BlockQ8K, QK_K};
use super::k_quants::{scales_mins_k4, scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};

#[inline]
#[target_feature(enable = "neon")]
fn load_u8(s: &[u8]) -> uint8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable bytes (checked above); vld1q has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn load_i8(s: &[i8]) -> int8x16_t {
    assert!(s.len() >= 16);
    // SAFETY: as in `load_u8`.
    unsafe { vld1q_s8(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn load_i16(s: &[i16]) -> int16x8_t {
    assert!(s.len() >= 8);
    // SAFETY: at least 8 readable i16 (checked above).
    unsafe { vld1q_s16(s.as_ptr()) }
}

/// Eight i16 sums of two products `w[l] * q[l]` each.
#[inline]
#[target_feature(enable = "neon")]
fn mul16(w: int8x16_t, q: int8x16_t) -> int16x8_t {
    vaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(q)), vmull_high_s8(w, q))
}

/// `acc + scale * p`, widened to four i32 lanes.
#[inline]
#[target_feature(enable = "neon")]
fn add_scaled(acc: int32x4_t, p: int16x8_t, scale: i16) -> int32x4_t {
    vmlal_high_n_s16(vmlal_n_s16(acc, vget_low_s16(p), scale), p, scale)
}

/// Σ bsums[j] * mins[j] for 16 bsums and 16 mins given as two i16x8.
#[inline]
#[target_feature(enable = "neon")]
fn bsums_dot(y: &BlockQ8K, mins_lo: int16x8_t, mins_hi: int16x8_t) -> i32 {
    let (b_lo, b_hi) = (load_i16(&y.bsums[..8]), load_i16(&y.bsums[8..]));
    let mut acc = vmull_s16(vget_low_s16(b_lo), vget_low_s16(mins_lo));
    acc = vmlal_high_s16(acc, b_lo, mins_lo);
    acc = vmlal_s16(acc, vget_low_s16(b_hi), vget_low_s16(mins_hi));
    acc = vmlal_high_s16(acc, b_hi, mins_hi);
    vaddvq_s32(acc)
}

/// `(v >> n) & mask` for a run-time shift count.
#[inline]
#[target_feature(enable = "neon")]
fn shr_and(v: uint8x16_t, n: usize, mask: uint8x16_t) -> uint8x16_t {
    vandq_u8(vshlq_u8(v, vdupq_n_s8(-(n as i8))), mask)
}

#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_q2k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let m3 = vdupq_n_u8(3);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mins = vshrq_n_u8::<4>(load_u8(&x.scales));
        let mins_lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
        let mins_hi = vreinterpretq_s16_u16(vmovl_high_u8(mins));
        let summs = bsums_dot(y, mins_lo, mins_hi);

        let mut isum = vdupq_n_s32(0);
        for j in 0..QK_K / 128 {
            let q2 = [load_u8(&x.qs[32 * j..]), load_u8(&x.qs[32 * j + 16..])];
            for k in 0..4 {
                for (h, &bits) in q2.iter().enumerate() {
                    let q = vreinterpretq_s8_u8(shr_and(bits, 2 * k, m3));
                    let q8 = load_i8(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(q, q8), (x.scales[is] & 0xF) as i16);
                }
            }
        }
        let dall = y.d * f16_to_f32(x.d);
        let dmin = y.d * f16_to_f32(x.dmin);
        sumf += dall * vaddvq_s32(isum) as f32 - dmin * summs as f32;
    }
    sumf
}

#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_q3k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let m3 = vdupq_n_u8(3);
    let m4 = vdupq_n_u8(4);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let scales = scales_q3k(&x.scales);
        let hm = [load_u8(&x.hmask[..16]), load_u8(&x.hmask[16..])];
        let mut isum = vdupq_n_s32(0);
        for j in 0..QK_K / 128 {
            let q3 = [load_u8(&x.qs[32 * j..]), load_u8(&x.qs[32 * j + 16..])];
            for k in 0..4 {
                let bit = vdupq_n_u8(1 << (4 * j + k));
                for h in 0..2 {
                    let low = shr_and(q3[h], 2 * k, m3);
                    // 4 where the high bit is clear.
                    let high = vbicq_u8(m4, vtstq_u8(hm[h], bit));
                    let q = vreinterpretq_s8_u8(vsubq_u8(low, high));
                    let q8 = load_i8(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(q, q8), scales[is] as i16);
                }
            }
        }
        sumf += f16_to_f32(x.d) * y.d * vaddvq_s32(isum) as f32;
    }
    sumf
}

/// The Q4_K/Q5_K block sum once the 64 quants of each pair of sub-blocks are in four vectors.
#[inline]
#[target_feature(enable = "neon")]
fn k4_block(
    x_scales: &[u8; 12],
    d: [u8; 2],
    dmin: [u8; 2],
    y: &BlockQ8K,
    quants: impl Fn(usize) -> [uint8x16_t; 4],
) -> f32 {
    let sm = scales_mins_k4(x_scales);
    // Each min covers two 16-value bsums: duplicate it.
    let mins = vmovl_u8(vget_high_u8(load_u8(&sm)));
    let mins_lo = vreinterpretq_s16_u16(vzip1q_u16(mins, mins));
    let mins_hi = vreinterpretq_s16_u16(vzip2q_u16(mins, mins));
    let summs = bsums_dot(y, mins_lo, mins_hi);

    let mut isum = vdupq_n_s32(0);
    for j in 0..QK_K / 64 {
        let q = quants(j).map(|v| vreinterpretq_s8_u8(v));
        let q8 = &y.qs[64 * j..];
        let lo = vaddq_s16(mul16(q[0], load_i8(q8)), mul16(q[1], load_i8(&q8[16..])));
        let hi = vaddq_s16(mul16(q[2], load_i8(&q8[32..])), mul16(q[3], load_i8(&q8[48..])));
        isum = add_scaled(isum, lo, sm[2 * j] as i16);
        isum = add_scaled(isum, hi, sm[2 * j + 1] as i16);
    }
    y.d * f16_to_f32(d) * vaddvq_s32(isum) as f32 - y.d * f16_to_f32(dmin) * summs as f32
}

#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_q4k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += k4_block(&x.scales, x.d, x.dmin, y, |j| {
            let (b0, b1) = (load_u8(&x.qs[32 * j..]), load_u8(&x.qs[32 * j + 16..]));
            [vandq_u8(b0, m4), vandq_u8(b1, m4), vshrq_n_u8::<4>(b0), vshrq_n_u8::<4>(b1)]
        });
    }
    sumf
}

#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_q5k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let m16 = vdupq_n_u8(16);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let qh = [load_u8(&x.qh[..16]), load_u8(&x.qh[16..])];
        // 16 where bit `bit` of the high-bit bytes is set.
        let high = |h: usize, bit: usize| vandq_u8(vtstq_u8(qh[h], vdupq_n_u8(1 << bit)), m16);
        sumf += k4_block(&x.scales, x.d, x.dmin, y, |j| {
            let (b0, b1) = (load_u8(&x.qs[32 * j..]), load_u8(&x.qs[32 * j + 16..]));
            [
                vorrq_u8(vandq_u8(b0, m4), high(0, 2 * j)),
                vorrq_u8(vandq_u8(b1, m4), high(1, 2 * j)),
                vorrq_u8(vshrq_n_u8::<4>(b0), high(0, 2 * j + 1)),
                vorrq_u8(vshrq_n_u8::<4>(b1), high(1, 2 * j + 1)),
            ]
        });
    }
    sumf
}

#[target_feature(enable = "neon")]
pub(crate) fn vec_dot_q6k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let m30 = vdupq_n_u8(0x30);
    let m32 = vdupq_n_s8(32);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut isum = vdupq_n_s32(0);
        for j in 0..QK_K / 128 {
            for h in 0..2 {
                let l0 = load_u8(&x.ql[64 * j + 16 * h..]);
                let l1 = load_u8(&x.ql[64 * j + 32 + 16 * h..]);
                let qh = load_u8(&x.qh[32 * j + 16 * h..]);
                // Elements 32k + 16h + (0..16) of this 128-value half, as unsigned q + 32.
                let q = [
                    vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8::<4>(qh), m30)),
                    vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8::<2>(qh), m30)),
                    vorrq_u8(vshrq_n_u8::<4>(l0), vandq_u8(qh, m30)),
                    vorrq_u8(vshrq_n_u8::<4>(l1), vandq_u8(vshrq_n_u8::<2>(qh), m30)),
                ];
                for (k, &q) in q.iter().enumerate() {
                    let q = vsubq_s8(vreinterpretq_s8_u8(q), m32);
                    let q8 = load_i8(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(q, q8), x.scales[is] as i16);
                }
            }
        }
        sumf += f16_to_f32(x.d) * y.d * vaddvq_s32(isum) as f32;
    }
    sumf
}
