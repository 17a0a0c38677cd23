//! WebAssembly SIMD128 dot products of the K-quants with Q8_K activations.
//!
//! One shape for every type: unpack 16 quants into bytes, multiply with 16 Q8 bytes into i16 sums of
//! two products ([`mul16_u7`]), then `i32x4.dot_i16x8` against the sub-block scale splatted to i16.
//! Quants are kept unsigned where a type allows (Q2_K, Q4_K, Q5_K, Q6_K: Q6_K's offset of 32 comes
//! off as 32 times the scaled activation sums, from Q8_K's `bsums`), so that in the relaxed-SIMD build
//! the multiply is one `i16x8.relaxed_dot_i8x16_i7x16_s`: with weights in 0..=127 it gives the same
//! exact sums on every engine (no pair of products reaches i16's limits). The integer sum of a
//! super-block is exact; it is scaled by `d` once, like ggml's reference, so both builds give the same
//! bits. The masks each kernel makes before its loop pass through `black_box` so that V8 keeps them in
//! registers instead of rebuilding each at every use (see `simd128::Consts`); bytes shift as u16 lanes
//! with a mask after ([`high_nibbles`]: V8 emits an 8-bit shift as a 16-bit one plus a mask it rebuilds
//! each time, five instructions where two do).

use core::arch::wasm32::*;
use std::hint::black_box;

use super::act::{f16_to_f32, BlockQ8K, QK_K};
use super::check_k_rows;
use super::k_quants::{scales_mins_k4, scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::simd128::high_nibbles;

#[inline]
fn load<T: Copy>(s: &[T]) -> v128 {
    assert!(std::mem::size_of_val(s) >= 16);
    // SAFETY: at least 16 readable bytes (checked above); v128_load has no alignment requirement.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// Eight i16 sums of two products `w[l] * q[l]` each (signed `w`, |w| small enough for i16).
#[inline]
fn mul16(w: v128, q: v128) -> v128 {
    i16x8_add(i16x8_extmul_low_i8x16(w, q), i16x8_extmul_high_i8x16(w, q))
}

/// [`mul16`] for weights `w` in 0..=127 (as unsigned quants are): in the relaxed-SIMD build one
/// relaxed dot, exact there since neither a weight's top bit nor a pair's sum (at most 2 * 127 * 128)
/// leaves the range every engine agrees on. Which products share a lane differs; callers sum all
/// eight lanes of a sub-block under one scale, so the sums are the same.
#[inline]
fn mul16_u7(w: v128, q: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    return i16x8_relaxed_dot_i8x16_i7x16(q, w);
    #[cfg(not(target_feature = "relaxed-simd"))]
    mul16(w, q)
}

/// `acc + scale * Σ lanes of p` as four i32 lanes.
#[inline]
fn add_scaled(acc: v128, p: v128, scale: i16) -> v128 {
    i32x4_add(acc, i32x4_dot_i16x8(p, i16x8_splat(scale)))
}

/// Eight i16 scales as pairs `[s0, s0, s1, s1, ..]` in two vectors (scales 0-3, 4-7), so that one i32 shuffle
/// spreads a scale over a vector (an i16 shuffle does it in two instructions in V8).
#[inline(always)]
fn scale_pairs(scales: v128) -> [v128; 2] {
    [i16x8_shuffle::<0, 0, 1, 1, 2, 2, 3, 3>(scales, scales), i16x8_shuffle::<4, 4, 5, 5, 6, 6, 7, 7>(scales, scales)]
}

/// Scale `k` of the eight in [`scale_pairs`] form, spread over a vector (one shuffle once `k` is known).
#[inline(always)]
fn spread_scale(pairs: [v128; 2], k: usize) -> v128 {
    let p = pairs[k / 4];
    match k % 4 {
        0 => i32x4_shuffle::<0, 0, 0, 0>(p, p),
        1 => i32x4_shuffle::<1, 1, 1, 1>(p, p),
        2 => i32x4_shuffle::<2, 2, 2, 2>(p, p),
        _ => i32x4_shuffle::<3, 3, 3, 3>(p, p),
    }
}

#[inline]
fn hsum_i32(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v) + i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v)
}

/// Σ bsums[j] * w[j] for a block's 16 bsums and 16 i16 weights given as two i16x8 (`lo`: 0..8, `hi`: 8..16), as
/// four i32 lanes whose sum it is.
#[inline(always)]
fn bsums_lanes(y: &BlockQ8K, lo: v128, hi: v128) -> v128 {
    i32x4_add(i32x4_dot_i16x8(load(&y.bsums[..8]), lo), i32x4_dot_i16x8(load(&y.bsums[8..]), hi))
}

pub(crate) fn vec_dot_q2k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let m3 = black_box(u8x16_splat(3));
    let mut sumf = 0f32;
    for (x, y) in w.iter().zip(a) {
        let sc = load(&x.scales);
        let mins = u8x16_shr(sc, 4);
        let summs = hsum_i32(bsums_lanes(y, u16x8_extend_low_u8x16(mins), u16x8_extend_high_u8x16(mins)));

        let mut isum = i32x4_splat(0);
        for j in 0..QK_K / 128 {
            let q2 = [load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..])];
            for k in 0..4 {
                for (h, &bits) in q2.iter().enumerate() {
                    let q = v128_and(u16x8_shr(bits, 2 * k as u32), m3);
                    let q8 = load(&y.qs[128 * j + 32 * k + 16 * h..]);
                    let is = 8 * j + 2 * k + h;
                    isum = add_scaled(isum, mul16_u7(q, q8), (x.scales[is] & 0xF) as i16);
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
                    let low = v128_and(u16x8_shr(q3[h], 2 * k as u32), m3);
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

/// A Q4_K/Q5_K block's scales: its eight sub-block scales as [`scale_pairs`], its mins likewise (a min covers
/// two bsums, as a pair of lanes covers two), and `[d, d, dmin, dmin]`.
struct K4Scales {
    pairs: [v128; 2],
    mins: [v128; 2],
    dd: v128,
}

#[inline(always)]
fn k4_scales(scales: &[u8; 12], d: [u8; 2], dmin: [u8; 2]) -> K4Scales {
    let sm = load(&scales_mins_k4(scales)); // 8 scales, then 8 mins, as bytes
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    K4Scales {
        pairs: scale_pairs(u16x8_extend_low_u8x16(sm)),
        mins: scale_pairs(u16x8_extend_high_u8x16(sm)),
        dd: f32x4(d, d, dmin, dmin),
    }
}

/// A Q4_K/Q5_K block · its Q8_K block `y` from the block's scaled integer sums `isum` (as lanes): the mins' sum
/// taken beside it, then the scalar `y.d * d * isum - y.d * dmin * summs` on both at once.
#[inline(always)]
fn k4_finish(s: &K4Scales, y: &BlockQ8K, isum: v128) -> f32 {
    let summs = bsums_lanes(y, s.mins[0], s.mins[1]);
    // [isum lanes 0+2, 1+3, summs lanes 0+2, 1+3], then [I, I, S, S]: each a whole sum.
    let t = i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(isum, summs), i32x4_shuffle::<2, 3, 6, 7>(isum, summs));
    let sums = f32x4_convert_i32x4(i32x4_add(t, i32x4_shuffle::<1, 0, 3, 2>(t, t)));
    let v = f32x4_mul(f32x4_mul(f32x4_splat(y.d), s.dd), sums);
    f32x4_extract_lane::<0>(v) - f32x4_extract_lane::<2>(v)
}

/// A Q4_K block's quants of sub-blocks `2j` and `2j + 1`, as [`k4_rows`] takes them.
#[inline(always)]
fn q4k_quants(x: &BlockQ4K, j: usize, m4: v128) -> [v128; 4] {
    let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
    [v128_and(b0, m4), v128_and(b1, m4), high_nibbles(b0, m4), high_nibbles(b1, m4)]
}

/// A Q5_K block's quants of sub-blocks `2j` and `2j + 1`, as [`k4_rows`] takes them: each nibble OR 16
/// where its fifth bit (bit `2j` or `2j + 1` of its byte of `qh`) is set, that bit shifted to bit 4 (as u16 lanes:
/// no bit of the other byte reaches bit 4 in a shift of at most four).
#[inline(always)]
fn q5k_quants(x: &BlockQ5K, j: usize, [m4, m16]: [v128; 2]) -> [v128; 4] {
    let (b0, b1) = (load(&x.qs[32 * j..]), load(&x.qs[32 * j + 16..]));
    let qh = [load(&x.qh[..16]), load(&x.qh[16..])];
    let high = |h: usize, bit: u32| {
        let at4 = if bit <= 4 { i16x8_shl(qh[h], 4 - bit) } else { u16x8_shr(qh[h], bit - 4) };
        v128_and(at4, m16)
    };
    let bit = 2 * j as u32;
    [
        v128_or(v128_and(b0, m4), high(0, bit)),
        v128_or(v128_and(b1, m4), high(1, bit)),
        v128_or(high_nibbles(b0, m4), high(0, bit + 1)),
        v128_or(high_nibbles(b1, m4), high(1, bit + 1)),
    ]
}

pub(crate) fn vec_dot_q4k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    one_row(w, a, q4k_rows::<1>)
}

pub(crate) fn vec_dot_q5k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    one_row(w, a, q5k_rows::<1>)
}

/// A `vec_dot` as its type's row kernel on one row (so the two agree bit for bit).
#[inline(always)]
fn one_row<X>(w: &[X], a: &[BlockQ8K], rows: impl Fn(&[X], usize, [&[BlockQ8K]; 1], &mut [[f32; 1]])) -> f32 {
    if w.is_empty() {
        return 0.0;
    }
    let mut out = [[0f32]];
    rows(w, w.len(), [a], &mut out);
    out[0][0]
}

/// A Q6_K block's quants for elements `128j + 32k + 16h + (0..16)` as `[k]` (for half `h` of the 128
/// values `j`): unsigned, 0..=63 (the offset is taken off by [`q6k_offset`]).
#[inline(always)]
fn q6k_quants(x: &BlockQ6K, j: usize, h: usize, [m4, m30]: [v128; 2]) -> [v128; 4] {
    let l0 = load(&x.ql[64 * j + 16 * h..]);
    let l1 = load(&x.ql[64 * j + 32 + 16 * h..]);
    let qh = load(&x.qh[32 * j + 16 * h..]);
    [
        v128_or(v128_and(l0, m4), v128_and(i16x8_shl(qh, 4), m30)),
        v128_or(v128_and(l1, m4), v128_and(i16x8_shl(qh, 2), m30)),
        v128_or(high_nibbles(l0, m4), v128_and(qh, m30)),
        v128_or(high_nibbles(l1, m4), v128_and(u16x8_shr(qh, 2), m30)),
    ]
}

/// `-32 * Σ scale * bsum` as lanes, where a Q6_K block's integer sum starts (`sc`: its scales as two i16x8): the
/// quants are dotted unsigned, and this takes their offset of 32 off.
#[inline(always)]
fn q6k_offset(y: &BlockQ8K, sc: [v128; 2]) -> v128 {
    i32x4_sub(i32x4_splat(0), i32x4_shl(bsums_lanes(y, sc[0], sc[1]), 5))
}

pub(crate) fn vec_dot_q6k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    one_row(w, a, q6k_rows::<1>)
}

/// The Q4_K/Q5_K row kernel: every weight row of `w` (rows of `row_blocks` blocks) · `A` activation rows,
/// into `out[row][j]`. Sub-blocks go two at a time: their quants are unpacked once and dotted into each row's
/// lanes, so that few vectors are live at once (all sixteen of a block's would spill). The integer sums are exact,
/// whatever the order of their additions, and each output goes through the same float operations, so the results
/// do not depend on `A` (one row is `vec_dot`).
#[inline(always)]
fn k4_rows<X, const A: usize>(
    w: &[X],
    row_blocks: usize,
    a: [&[BlockQ8K]; A],
    out: &mut [[f32; A]],
    scales: impl Fn(&X) -> K4Scales,
    quants: impl Fn(&X, usize) -> [v128; 4],
) {
    check_k_rows(w, row_blocks, &a, out.len());
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        let mut sumf = [0f32; A];
        for (i, x) in w.iter().enumerate() {
            let s = scales(x);
            let mut isum = [i32x4_splat(0); A];
            for j in 0..QK_K / 64 {
                let q = quants(x, j);
                let (s0, s1) = (spread_scale(s.pairs, 2 * j), spread_scale(s.pairs, 2 * j + 1));
                for (isum, a) in isum.iter_mut().zip(&a) {
                    let q8 = &a[i].qs[64 * j..];
                    // Sub-blocks 2j and 2j + 1, each 32 products in i16 pairs.
                    let p0 = i16x8_add(mul16_u7(q[0], load(q8)), mul16_u7(q[1], load(&q8[16..])));
                    let p1 = i16x8_add(mul16_u7(q[2], load(&q8[32..])), mul16_u7(q[3], load(&q8[48..])));
                    *isum = i32x4_add(*isum, i32x4_add(i32x4_dot_i16x8(p0, s0), i32x4_dot_i16x8(p1, s1)));
                }
            }
            for ((sumf, a), isum) in sumf.iter_mut().zip(&a).zip(isum) {
                *sumf += k4_finish(&s, &a[i], isum);
            }
        }
        *out = sumf;
    }
}

/// Q4_K rows · `A` activation rows (see [`k4_rows`]).
// Each row kernel is a function of its own (here and below): inlined into `matmul`'s task with every other type's
// kernel, V8 gave one-row Q6_K half again the time (`matmul_timing`), its registers allocated over the whole.
#[inline(never)]
pub(crate) fn q4k_rows<const A: usize>(w: &[BlockQ4K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let m4 = black_box(u8x16_splat(0xF));
    k4_rows(w, row_blocks, a, out, |x| k4_scales(&x.scales, x.d, x.dmin), |x, j| q4k_quants(x, j, m4));
}

/// Q5_K rows · `A` activation rows (see [`k4_rows`]).
#[inline(never)]
pub(crate) fn q5k_rows<const A: usize>(w: &[BlockQ5K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let masks = black_box([u8x16_splat(0xF), u8x16_splat(16)]);
    k4_rows(w, row_blocks, a, out, |x| k4_scales(&x.scales, x.d, x.dmin), |x, j| q5k_quants(x, j, masks));
}

/// Q6_K rows · `A` activation rows, as [`k4_rows`]: four sub-blocks at a time (a quarter of the block's quants),
/// unpacked once and dotted into each row's lanes; exact integer sums, then per output the same float operations,
/// so the results do not depend on `A` (one row is `vec_dot`).
#[inline(never)]
pub(crate) fn q6k_rows<const A: usize>(w: &[BlockQ6K], row_blocks: usize, a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
    let masks = black_box([u8x16_splat(0xF), u8x16_splat(0x30)]);
    check_k_rows(w, row_blocks, &a, out.len());
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        let mut sumf = [0f32; A];
        for (i, x) in w.iter().enumerate() {
            let sc = load(&x.scales);
            let sc = [i16x8_extend_low_i8x16(sc), i16x8_extend_high_i8x16(sc)];
            let mut isum = a.map(|a| q6k_offset(&a[i], sc));
            for (j, &sc) in sc.iter().enumerate() {
                let pairs = scale_pairs(sc);
                for h in 0..2 {
                    let q = q6k_quants(x, j, h, masks);
                    // q[k] is sub-block 8j + 2k + h: scale 2k + h of this half's eight.
                    let s: [v128; 4] = std::array::from_fn(|k| spread_scale(pairs, 2 * k + h));
                    for (isum, a) in isum.iter_mut().zip(&a) {
                        let qs = &a[i].qs[16 * (8 * j + h)..];
                        let dot = |k: usize| i32x4_dot_i16x8(mul16_u7(q[k], load(&qs[32 * k..])), s[k]);
                        *isum = i32x4_add(*isum, i32x4_add(i32x4_add(dot(0), dot(1)), i32x4_add(dot(2), dot(3))));
                    }
                }
            }
            let d = f16_to_f32(x.d);
            for ((sumf, a), isum) in sumf.iter_mut().zip(&a).zip(isum) {
                *sumf += d * a[i].d * hsum_i32(isum) as f32;
            }
        }
        *out = sumf;
    }
}
