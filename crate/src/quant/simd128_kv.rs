//! wasm32 SIMD128 kernels of the KV cache's cold tier (`kv.rs`). A block's 32 quants are unpacked to
//! signed bytes as the legacy dots do ((`Unpack`)), widened to i32, converted to f32 and multiplied by
//! the block's scale: its values, exactly. Scores accumulate `q * x` in two accumulators per head and sum
//! them once per row; weighted sums add `w * x` into the output, multiply then add as the reference does
//! (simd128 has no fused multiply-add), so they give the reference's bits.
//!
//! Callers check the shapes first (`kv::check_scores`, `kv::check_sums`).

use core::arch::wasm32::*;

use super::kv::{KvBlock, KV_BLOCK};
use super::simd128::{f16x4_to_f32, Consts};

/// A block's 32 values, exactly, as eight f32x4 in element order.
#[inline(always)]
fn values<B: KvBlock>(b: &B, c: &Consts) -> [v128; 8] {
    let (lo, hi) = b.quants(c);
    let d = f16x4_to_f32(u32x4_splat(u16::from_le_bytes(b.d()) as u32), c);
    let f = |x: v128| f32x4_mul(f32x4_convert_i32x4(x), d);
    let wide = [lo, hi].map(|h| [i16x8_extend_low_i8x16(h), i16x8_extend_high_i8x16(h)]);
    let [[q0, q1], [q2, q3]] = wide;
    [
        f(i32x4_extend_low_i16x8(q0)),
        f(i32x4_extend_high_i16x8(q0)),
        f(i32x4_extend_low_i16x8(q1)),
        f(i32x4_extend_high_i16x8(q1)),
        f(i32x4_extend_low_i16x8(q2)),
        f(i32x4_extend_high_i16x8(q2)),
        f(i32x4_extend_low_i16x8(q3)),
        f(i32x4_extend_high_i16x8(q3)),
    ]
}

/// `kv::scores` (`d` the rows' width): up to four heads at a time share each unpacked block.
pub fn scores<B: KvBlock>(q: &[f32], k: &[&[B]], d: usize, scale: f32, out: &mut [f32], stride: usize) {
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
fn scores_of<B: KvBlock, const G: usize>(q: &[f32], k: &[&[B]], d: usize, scale: f32, out: &mut [f32], stride: usize) {
    assert!(q.len() >= G * d && k.iter().all(|r| r.len() * KV_BLOCK == d));
    let qp = q.as_ptr();
    let consts = Consts::new();
    for (i, row) in k.iter().enumerate() {
        let mut acc = [[f32x4_splat(0.0); 2]; G];
        for (b, block) in row.iter().enumerate() {
            let x = values(block, &consts);
            for (g, acc) in acc.iter_mut().enumerate() {
                for (c, &x) in x.iter().enumerate() {
                    // SAFETY: head g's elements b * 32 + 4c.. + 4 are in bounds (asserted above).
                    let qv = unsafe { v128_load(qp.add(g * d + b * KV_BLOCK + 4 * c) as *const v128) };
                    acc[c % 2] = f32x4_add(acc[c % 2], f32x4_mul(qv, x));
                }
            }
        }
        for (g, acc) in acc.iter().enumerate() {
            let v = f32x4_add(acc[0], acc[1]);
            let sum = (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
                + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v));
            out[g * stride + i] = sum * scale;
        }
    }
}

/// `kv::weighted_sums` (`d` the rows' width, `heads` rows of `o`): each unpacked block is added to every head.
pub fn weighted_sums<B: KvBlock>(
    v: &[&[B]],
    d: usize,
    heads: usize,
    w: &[f32],
    w_stride: usize,
    o: &mut [f32],
    o_stride: usize,
) {
    assert!(o.len() >= (heads - 1) * o_stride + d && w.len() >= (heads - 1) * w_stride + v.len());
    assert!(v.iter().all(|r| r.len() * KV_BLOCK == d));
    let op = o.as_mut_ptr();
    let consts = Consts::new();
    for (i, row) in v.iter().enumerate() {
        for (b, block) in row.iter().enumerate() {
            let x = values(block, &consts);
            for g in 0..heads {
                let wv = f32x4_splat(w[g * w_stride + i]);
                for (c, &x) in x.iter().enumerate() {
                    // SAFETY: head g's columns b * 32 + 4c.. + 4 are in bounds of `o` (asserted above).
                    unsafe {
                        let p = op.add(g * o_stride + b * KV_BLOCK + 4 * c) as *mut v128;
                        v128_store(p, f32x4_add(v128_load(p), f32x4_mul(wv, x)));
                    }
                }
            }
        }
    }
}
