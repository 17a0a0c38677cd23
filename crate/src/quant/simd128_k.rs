//! WebAssembly SIMD128 dot products of the K-quants with Q8_K activations.
//!
//! One shape for every type: unpack 16 quants into signed bytes, multiply with 16 Q8 bytes into
//! i16 (`extmul`), fold the two halves together (|q| <= 32 keeps sums of up to four products
//! within i16), then `i32x4.dot_i16x8` against the sub-block scale splatted to i16. The integer
//! sum of a super-block is exact; it is scaled by `d` once, like ggml's reference. The masks each
//! kernel makes before its loop pass through `black_box` so that V8 keeps them in registers instead of
//! rebuilding each at every use (see `simd128::Consts`).

use core::arch::wasm32::*;
use std::hint::black_box;

use super::act::{f16_to_f32, BlockQ8K, QK_K};
use super::check_k_rows;
use super::k_quants::{scales_mins_k4, scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};

#[inline]
fn load<T: Copy>(s: &[T]) -> v128 {
    assert!(std::mem::size_of_val(s) >= 16);
    // SAFETY: at least 16 readable bytes (checked above); v128_load has no alignment requirement.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// Eight i16 sums of two products `w[l] * q[l]` each.
#[inline]
fn mul16(w: v128, q: v128) -> v128 {
    i16x8_add(i16x8_extmul_low_i8x16(w, q), i16x8_extmul_high_i8x16(w, q))
}

/// `acc + scale * Σ lanes of p` as four i32 lanes.
#[inline]
fn add_scaled(acc: v128, p: v128, scale: i16) -> v128 {
    i32x4_add(acc, i32x4_dot_i16x8(p, i16x8_splat(scale)))
}

#[inline]
fn hsum_i32(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v) + i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v)
}

/// Σ bsums[j] * mins[j] for 16 bsums and 16 mins given as two i16x8 each.
#[inline]
fn bsums_dot(y: &BlockQ8K, mins_lo: v128, mins_hi: v128) -> i32 {
    hsum_i32(i32x4_add(i32x4_dot_i16x8(load(&y.bsums[..8]), mins_lo), i32x4_dot_i16x8(load(&y.bsums[8..]), mins_hi)))
}

pub(crate) fn vec_dot_q2k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let m3 = black_box(u8x16_splat(3));
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let sc = load(&x.scales);
        let mins = u8x16_shr(sc, 4);
        let summs = bsums_dot(y, u16x8_extend_low_u8x16(mins), u16x8_extend_high_u8x16(mins));

        let mut isum = i32x4_splat(0);
        for j in 0..QK_K / 128 {
            let q2 = [load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..])];
            for k in 0..4 {
                for (h, &bits) in q2.iter().enumerate() {
                    let q = v128_and(u8x16_shr(bits, 2 * k as u32), m3);
                    let q8 = load(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(q, q8), (x.scales[is] & 0xF) as i16);
                }
            }
        }
        let dall = y.d * f16_to_f32(x.d);
        let dmin = y.d * f16_to_f32(x.dmin);
        sumf += dall * hsum_i32(isum) as f32 - dmin * summs as f32;
    }
    sumf
}

pub(crate) fn vec_dot_q3k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let [m3, m4] = black_box([u8x16_splat(3), u8x16_splat(4)]);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let scales = scales_q3k(&x.scales);
        let hm = [load(&x.hmask[..16]), load(&x.hmask[16..])];
        let mut isum = i32x4_splat(0);
        for j in 0..QK_K / 128 {
            let q3 = [load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..])];
            for k in 0..4 {
                let bit = u8x16_splat(1 << (4 * j + k));
                for h in 0..2 {
                    let low = v128_and(u8x16_shr(q3[h], 2 * k as u32), m3);
                    // 4 where the high bit is clear.
                    let high = v128_and(i8x16_eq(v128_and(hm[h], bit), i8x16_splat(0)), m4);
                    let q8 = load(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(i8x16_sub(low, high), q8), scales[is] as i16);
                }
            }
        }
        sumf += f16_to_f32(x.d) * y.d * hsum_i32(isum) as f32;
    }
    sumf
}

/// The Q4_K/Q5_K block sum once the 64 quants of each pair of sub-blocks are in four vectors.
#[inline]
fn k4_block(x_scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2], y: &BlockQ8K, quants: impl Fn(usize) -> [v128; 4]) -> f32 {
    let sm = scales_mins_k4(x_scales);
    let m = |j: usize| sm[8 + j] as i16;
    let mins_lo = i16x8(m(0), m(0), m(1), m(1), m(2), m(2), m(3), m(3));
    let mins_hi = i16x8(m(4), m(4), m(5), m(5), m(6), m(6), m(7), m(7));
    let summs = bsums_dot(y, mins_lo, mins_hi);

    let mut isum = i32x4_splat(0);
    for j in 0..QK_K / 64 {
        let q = quants(j);
        let q8 = &y.qs[64 * j..];
        let lo = i16x8_add(mul16(q[0], load(q8)), mul16(q[1], load(&q8[16..])));
        let hi = i16x8_add(mul16(q[2], load(&q8[32..])), mul16(q[3], load(&q8[48..])));
        isum = add_scaled(isum, lo, sm[2 * j] as i16);
        isum = add_scaled(isum, hi, sm[2 * j + 1] as i16);
    }
    y.d * f16_to_f32(d) * hsum_i32(isum) as f32 - y.d * f16_to_f32(dmin) * summs as f32
}

pub(crate) fn vec_dot_q4k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let m4 = black_box(u8x16_splat(0xF));
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        sumf += k4_block(&x.scales, x.d, x.dmin, y, |j| {
            let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
            [v128_and(b0, m4), v128_and(b1, m4), u8x16_shr(b0, 4), u8x16_shr(b1, 4)]
        });
    }
    sumf
}

pub(crate) fn vec_dot_q5k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let [m4, m16] = black_box([u8x16_splat(0xF), u8x16_splat(16)]);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let qh = [load(&x.qh[..16]), load(&x.qh[16..])];
        // 16 where bit `bit` of the high-bit bytes is set.
        let high = |h: usize, bit: usize| {
            let m = u8x16_splat(1 << bit);
            v128_and(i8x16_eq(v128_and(qh[h], m), m), m16)
        };
        sumf += k4_block(&x.scales, x.d, x.dmin, y, |j| {
            let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
            [
                v128_or(v128_and(b0, m4), high(0, 2 * j)),
                v128_or(v128_and(b1, m4), high(1, 2 * j)),
                v128_or(u8x16_shr(b0, 4), high(0, 2 * j + 1)),
                v128_or(u8x16_shr(b1, 4), high(1, 2 * j + 1)),
            ]
        });
    }
    sumf
}

pub(crate) fn vec_dot_q6k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let [m4, m30, m32] = black_box([u8x16_splat(0xF), u8x16_splat(0x30), i8x16_splat(32)]);
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let mut isum = i32x4_splat(0);
        for j in 0..QK_K / 128 {
            for h in 0..2 {
                let l0 = load(&x.ql[64 * j + 16 * h..]);
                let l1 = load(&x.ql[64 * j + 32 + 16 * h..]);
                let qh = load(&x.qh[32 * j + 16 * h..]);
                // Elements 32k + 16h + (0..16) of this 128-value half, as q - 32.
                let q = [
                    v128_or(v128_and(l0, m4), v128_and(i8x16_shl(qh, 4), m30)),
                    v128_or(v128_and(l1, m4), v128_and(i8x16_shl(qh, 2), m30)),
                    v128_or(u8x16_shr(l0, 4), v128_and(qh, m30)),
                    v128_or(u8x16_shr(l1, 4), v128_and(u8x16_shr(qh, 2), m30)),
                ];
                for (k, &q) in q.iter().enumerate() {
                    let q8 = load(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16(i8x16_sub(q, m32), q8), x.scales[is] as i16);
                }
            }
        }
        sumf += f16_to_f32(x.d) * y.d * hsum_i32(isum) as f32;
    }
    sumf
}

/// The Q4_K/Q5_K row kernel once a block's 256 quants are unpacked (`quants(x)`: four vectors per pair of
/// sub-blocks, as [`k4_block`] takes them): every weight row of `w` (rows of `row_blocks` blocks) · `A`
/// activation rows, into `out[row][j]`, each block unpacked once for the `A` rows. Per output the same
/// integer sums and float operations as `vec_dot`, so the results equal its bits, whatever `A`.
#[inline]
fn k4_rows<X, const A: usize>(
    w: &[X],
    row_blocks: usize,
    a: [&[BlockQ8K]; A],
    out: &mut [[f32; A]],
    fields: impl Fn(&X) -> (&[u8; 12], [u8; 2], [u8; 2]),
    quants: impl Fn(&X) -> [[v128; 4]; QK_K / 64],
) {
    check_k_rows(w, row_blocks, &a, out.len());
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        let mut sumf = [0f32; A];
        for (i, x) in w.iter().enumerate() {
            let (scales, d, dmin) = fields(x);
            let sm = scales_mins_k4(scales);
            let m = |j: usize| sm[8 + j] as i16;
            let mins_lo = i16x8(m(0), m(0), m(1), m(1), m(2), m(2), m(3), m(3));
            let mins_hi = i16x8(m(4), m(4), m(5), m(5), m(6), m(6), m(7), m(7));
            let q = quants(x);
            let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
            for (sumf, a) in sumf.iter_mut().zip(&a) {
                let y = &a[i];
                let summs = bsums_dot(y, mins_lo, mins_hi);
                let mut isum = i32x4_splat(0);
                for (j, q) in q.iter().enumerate() {
                    let q8 = &y.qs[64 * j..];
                    let lo = i16x8_add(mul16(q[0], load(q8)), mul16(q[1], load(&q8[16..])));
                    let hi = i16x8_add(mul16(q[2], load(&q8[32..])), mul16(q[3], load(&q8[48..])));
                    isum = add_scaled(isum, lo, sm[2 * j] as i16);
                    isum = add_scaled(isum, hi, sm[2 * j + 1] as i16);
                }
                *sumf += y.d * d * hsum_i32(isum) as f32 - y.d * dmin * summs as f32;
            }
        }
        *out = sumf;
    }
}

/// Q4_K rows · `A` activation rows (see [`k4_rows`]).
pub(crate) fn q4k_rows<const A: usize>(w: &[BlockQ4K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let m4 = black_box(u8x16_splat(0xF));
    let quants = |x: &BlockQ4K| {
        std::array::from_fn(|j| {
            let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
            [v128_and(b0, m4), v128_and(b1, m4), u8x16_shr(b0, 4), u8x16_shr(b1, 4)]
        })
    };
    k4_rows(w, row_blocks, a, out, |x| (&x.scales, x.d, x.dmin), quants);
}

/// Q5_K rows · `A` activation rows (see [`k4_rows`]).
pub(crate) fn q5k_rows<const A: usize>(w: &[BlockQ5K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let [m4, m16] = black_box([u8x16_splat(0xF), u8x16_splat(16)]);
    let quants = |x: &BlockQ5K| {
        let qh = [load(&x.qh[..16]), load(&x.qh[16..])];
        // 16 where bit `bit` of the high-bit bytes is set.
        let high = |h: usize, bit: usize| {
            let m = u8x16_splat(1 << bit);
            v128_and(i8x16_eq(v128_and(qh[h], m), m), m16)
        };
        std::array::from_fn(|j| {
            let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
            [
                v128_or(v128_and(b0, m4), high(0, 2 * j)),
                v128_or(v128_and(b1, m4), high(1, 2 * j)),
                v128_or(u8x16_shr(b0, 4), high(0, 2 * j + 1)),
                v128_or(u8x16_shr(b1, 4), high(1, 2 * j + 1)),
            ]
        })
    };
    k4_rows(w, row_blocks, a, out, |x| (&x.scales, x.d, x.dmin), quants);
}

/// Q6_K rows · `A` activation rows: each block's quants (as `q - 32`) unpacked once for the `A` rows, then
/// per output `vec_dot_q6k`'s integer sums and float operations, so the results equal its bits, whatever `A`.
pub(crate) fn q6k_rows<const A: usize>(w: &[BlockQ6K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let [m4, m30, m32] = black_box([u8x16_splat(0xF), u8x16_splat(0x30), i8x16_splat(32)]);
    check_k_rows(w, row_blocks, &a, out.len());
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        let mut sumf = [0f32; A];
        for (i, x) in w.iter().enumerate() {
            // q[j][h][k]: elements 128j + 32k + 16h + (0..16), as q - 32.
            let q: [[[v128; 4]; 2]; QK_K / 128] = std::array::from_fn(|j| {
                std::array::from_fn(|h| {
                    let l0 = load(&x.ql[64 * j + 16 * h..]);
                    let l1 = load(&x.ql[64 * j + 32 + 16 * h..]);
                    let qh = load(&x.qh[32 * j + 16 * h..]);
                    [
                        v128_or(v128_and(l0, m4), v128_and(i8x16_shl(qh, 4), m30)),
                        v128_or(v128_and(l1, m4), v128_and(i8x16_shl(qh, 2), m30)),
                        v128_or(u8x16_shr(l0, 4), v128_and(qh, m30)),
                        v128_or(u8x16_shr(l1, 4), v128_and(u8x16_shr(qh, 2), m30)),
                    ]
                    .map(|q| i8x16_sub(q, m32))
                })
            });
            let d = f16_to_f32(x.d);
            for (sumf, a) in sumf.iter_mut().zip(&a) {
                let y = &a[i];
                let mut isum = i32x4_splat(0);
                for (j, q) in q.iter().enumerate() {
                    for (h, q) in q.iter().enumerate() {
                        for (l, &q) in q.iter().enumerate() {
                            let q8 = load(&y.qs[128 * j + 32 * l + 16 * h..]);
                            isum = add_scaled(isum, mul16(q, q8), x.scales[8 * j + 2 * l + h] as i16);
                        }
                    }
                }
                *sumf += d * y.d * hsum_i32(isum) as f32;
            }
        }
        *out = sumf;
    }
}
