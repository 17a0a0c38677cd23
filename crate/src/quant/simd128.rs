//! wasm32 SIMD128 kernels for the legacy quants and the float types (built when simd128 is enabled).
//!
//! The quantized dots unpack a block's 32 weights to signed bytes, widen weights and activations to
//! i16 and multiply-add pairs with `i32x4_dot_i16x8`. The block's integer sums are converted to f32
//! and scaled into an f32x4 accumulator (simd128 has no fused multiply-add).
//!
//! The relaxed-SIMD build (`target_feature = "relaxed-simd"`) dots the types whose quants fit in seven
//! bits (Q4_0, Q4_1, Q5_0, Q5_1: [`Unpack::quants_u7`]) byte by byte instead, against the activations' own bytes
//! (no widening): with the weights in 0..=127 and at most 2 * 31 * 127 in a pair, every engine gives the same exact
//! sums. An offset type's values are `q - offset`: the offset's products come off in i16 in `vec_dot`, and in the
//! row kernels as the offset times the activation block's sum of quants. Q8_0 and IQ4_NL, whose quants take all
//! of i8, keep the widening kernels.
//!
//! The row kernels (`legacy_rows`, matmul's path) take a block's dot as an exact integer sum, then four blocks'
//! sums side by side in one vector, scaled by their four `d_w * d_a` at once (`Activations::row_quads`): one
//! block's float work for four. Their integer sums are the same in both builds, so the builds give the same bits.
//! `vec_dot` (`legacy_dot`) scales each block's lanes as it goes.

use core::arch::wasm32::*;

use super::act::{f16_to_f32, Activations, BlockQ8K, BlockQ8_0, Q8Block};
use super::float::{BlockBF16, BlockF16, BlockF32};
use super::iq4::{BlockIQ4NL, BlockIQ4XS, KVALUES};
use super::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, LegacyBlock};

/// The vector constants of these kernels (and of `kernels::f16`'s), as values that a kernel makes once per
/// call and passes down, not as `v128.const`s at their uses. V8 (13.6 in Node 24, 15.6 in Chromium 156)
/// keeps no constant in a register across a loop: it rebuilds it at every use, three instructions each (a
/// 64-bit load from its constant pool, a move, a broadcast), nine times per two Q4_1 blocks in the decode
/// kernel. A value computed before the loop stays in a register. `black_box` keeps LLVM from folding the
/// values back into constants (measurements in the commit that made them values).
#[derive(Clone, Copy)]
pub(crate) struct Consts {
    /// f16 to f32 ([`f16x4_to_f32`]): exponent and mantissa bits, the 2^112 rescale, 2^16 (where f16's
    /// infinities and NaNs land after it), f32's exponent bits, the sign bit.
    f16_magnitude: v128,
    f16_rescale: v128,
    f16_inf: v128,
    f32_exponent: v128,
    f16_sign: v128,
    /// 0x0F in every byte and in every u16: the low nibble.
    low_nibble: v128,
    low_nibble16: v128,
    /// Q4_0's offset, 8 in every byte.
    eight: v128,
    /// [`bit_bytes`]: the bit each byte tests, and which byte of `qh` each byte of either half reads.
    bit: v128,
    spread_lo: v128,
    spread_hi: v128,
    /// The fifth-bit values of Q5_0 (`0xF0` where unset, as `q - 16`) and Q5_1 (`0x10` where set).
    q5_0_high: v128,
    q5_1_high: v128,
    /// IQ4_NL's table of values, indexed by its nibbles.
    iq4: v128,
}

impl Consts {
    #[inline(always)]
    pub(crate) fn new() -> Consts {
        std::hint::black_box(Consts {
            f16_magnitude: u32x4_splat(0x7FFF),
            f16_rescale: f32x4_splat(f32::from_bits(0x7780_0000)), // 2^112
            f16_inf: f32x4_splat(65536.0),
            f32_exponent: u32x4_splat(0x7F80_0000),
            f16_sign: u32x4_splat(0x8000),
            low_nibble: u8x16_splat(0x0F),
            low_nibble16: u16x8_splat(0x0F),
            eight: i8x16_splat(8),
            bit: u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128),
            spread_lo: u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
            spread_hi: u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
            q5_0_high: u8x16_splat(0xF0),
            q5_1_high: u8x16_splat(0x10),
            iq4: load16(&KVALUES),
        })
    }
}

#[inline]
fn load16<T>(bytes: &[T; 16]) -> v128 {
    debug_assert_eq!(std::mem::size_of::<T>(), 1);
    // SAFETY: 16 bytes in bounds; v128_load has no alignment requirement.
    unsafe { v128_load(bytes.as_ptr() as *const v128) }
}

/// The two halves of a 32-byte activation block.
#[inline]
fn load32(q: &[i8; 32]) -> (v128, v128) {
    // SAFETY: both 16-byte loads are in bounds; v128_load has no alignment requirement.
    unsafe { (v128_load(q.as_ptr() as *const v128), v128_load(q.as_ptr().add(16) as *const v128)) }
}

/// Sum of `x[i] * y[i]` over 16 signed bytes, as 4 i32 partial sums.
#[inline]
fn dot16(x: v128, y: v128) -> v128 {
    let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(x), i16x8_extend_low_i8x16(y));
    let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(x), i16x8_extend_high_i8x16(y));
    i32x4_add(lo, hi)
}

/// A block's dot: weights `(x0, x1)` for elements 0..16 and 16..32 as signed bytes, times activations `q`.
#[inline]
fn dot32((x0, x1): (v128, v128), q: &[i8; 32]) -> v128 {
    let (y0, y1) = load32(q);
    f32x4_convert_i32x4(i32x4_add(dot16(x0, y0), dot16(x1, y1)))
}

/// A block's packed nibbles as (elements 0..16, elements 16..32).
#[inline]
fn nibbles(qs: &[u8; 16], c: &Consts) -> (v128, v128) {
    let q = load16(qs);
    (v128_and(q, c.low_nibble), high_nibbles(q, c.low_nibble))
}

/// The high nibble of each byte of `b`, `low_nibble` being 0x0F in every byte: shifted as u16 lanes and masked
/// (V8 emits `u8x16_shr` as that shift plus a mask it rebuilds at each use, five instructions instead of two).
#[inline(always)]
pub(super) fn high_nibbles(b: v128, low_nibble: v128) -> v128 {
    v128_and(u16x8_shr(b, 4), low_nibble)
}

/// The 32 bits of `qh` as (elements 0..16, elements 16..32), each byte 0xFF where the bit is set.
#[inline]
fn bit_bytes(qh: [u8; 4], c: &Consts) -> (v128, v128) {
    let v = u32x4_splat(u32::from_le_bytes(qh));
    let spread = |bytes_of: v128| u8x16_eq(v128_and(u8x16_swizzle(v, bytes_of), c.bit), c.bit);
    (spread(c.spread_lo), spread(c.spread_hi))
}

/// The sum of `v`'s lanes in lane order (not `simd::simd128::hsum`'s pairs: these kernels' results depend on it).
#[inline]
fn hsum(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v)
}

/// The products of two pairs of f16 (raw bits), `[x0 * y0, x1 * y1, x0 * y0, x1 * y1]`: a block's
/// `d_w * d_a` and `m_w * s_a`, converted together.
#[inline]
fn f16_products(x0: [u8; 2], x1: [u8; 2], y0: [u8; 2], y1: [u8; 2], c: &Consts) -> v128 {
    let bits = |b: [u8; 2]| u16::from_le_bytes(b) as u32;
    let v = f16x4_to_f32(u32x4(bits(x0), bits(x1), bits(y0), bits(y1)), c);
    f32x4_mul(v, i32x4_shuffle::<2, 3, 0, 1>(v, v))
}

/// The four i16x8 quarters of a block's 32 signed bytes `(x0, x1)`, widened once for a tile's rows.
#[inline]
fn widen((x0, x1): (v128, v128)) -> [v128; 4] {
    [i16x8_extend_low_i8x16(x0), i16x8_extend_high_i8x16(x0), i16x8_extend_low_i8x16(x1), i16x8_extend_high_i8x16(x1)]
}

/// A block's 16 bytes of nibbles as four i16x8 in element order (0..8, 8..16, 16..24, 24..32): the
/// bytes are zero-extended to u16 first, so the high nibbles come from a 16-bit shift (wasm has no
/// 8-bit one).
#[inline]
fn nibbles_wide(qs: &[u8; 16], c: &Consts) -> [v128; 4] {
    let q = load16(qs);
    let (lo, hi) = (u16x8_extend_low_u8x16(q), u16x8_extend_high_u8x16(q));
    [v128_and(lo, c.low_nibble16), v128_and(hi, c.low_nibble16), u16x8_shr(lo, 4), u16x8_shr(hi, 4)]
}

/// How a legacy weight block unpacks for these kernels.
pub(crate) trait Unpack: LegacyBlock {
    /// The 32 quants as signed bytes (elements 0..16, elements 16..32): `q` for the types with a min,
    /// else `q - offset`.
    fn quants(&self, c: &Consts) -> (v128, v128);
    /// The same widened to i16, as [`widen`] (for the row kernels, which reuse them for several rows).
    #[inline(always)]
    fn quants_wide(&self, c: &Consts) -> [v128; 4] {
        widen(self.quants(c))
    }
    /// For the types whose quants fit in seven bits (the relaxed-SIMD kernels' byte dots), the offset their values
    /// are less (`value = q - offset`, `q` as [`Unpack::quants_u7`] gives it); `None` for the others. (The plain
    /// build reads neither.)
    #[cfg_attr(not(target_feature = "relaxed-simd"), allow(dead_code))]
    const U7_OFFSET: Option<i8> = None;
    /// The quants as bytes in 0..=127, where `U7_OFFSET` is some.
    #[cfg_attr(not(target_feature = "relaxed-simd"), allow(dead_code))]
    #[inline(always)]
    fn quants_u7(&self, c: &Consts) -> (v128, v128) {
        self.quants(c)
    }
}

impl Unpack for BlockQ4_0 {
    #[inline(always)]
    fn quants(&self, c: &Consts) -> (v128, v128) {
        let (lo, hi) = nibbles(&self.qs, c);
        (i8x16_sub(lo, c.eight), i8x16_sub(hi, c.eight))
    }
    const U7_OFFSET: Option<i8> = Some(8);
    #[inline(always)]
    fn quants_u7(&self, c: &Consts) -> (v128, v128) {
        nibbles(&self.qs, c)
    }
}

impl Unpack for BlockQ4_1 {
    #[inline(always)]
    fn quants(&self, c: &Consts) -> (v128, v128) {
        nibbles(&self.qs, c)
    }
    #[inline(always)]
    fn quants_wide(&self, c: &Consts) -> [v128; 4] {
        nibbles_wide(&self.qs, c)
    }
    const U7_OFFSET: Option<i8> = Some(0);
}

/// A Q5 block's quants: each nibble OR `high(mask)`, `mask` 0xFF where the element's fifth bit is set.
#[inline(always)]
fn q5_quants(qs: &[u8; 16], qh: [u8; 4], c: &Consts, high: impl Fn(v128) -> v128) -> (v128, v128) {
    let ((lo, hi), (blo, bhi)) = (nibbles(qs, c), bit_bytes(qh, c));
    (v128_or(lo, high(blo)), v128_or(hi, high(bhi)))
}

impl Unpack for BlockQ5_0 {
    #[inline(always)]
    fn quants(&self, c: &Consts) -> (v128, v128) {
        // q - 16 as a byte: the nibble when the fifth bit is set, else the nibble with 0xF0 on top.
        q5_quants(&self.qs, self.qh, c, |set| v128_andnot(c.q5_0_high, set))
    }
    const U7_OFFSET: Option<i8> = Some(16);
    #[inline(always)]
    fn quants_u7(&self, c: &Consts) -> (v128, v128) {
        q5_quants(&self.qs, self.qh, c, |set| v128_and(set, c.q5_1_high))
    }
}

impl Unpack for BlockQ5_1 {
    #[inline(always)]
    fn quants(&self, c: &Consts) -> (v128, v128) {
        q5_quants(&self.qs, self.qh, c, |set| v128_and(set, c.q5_1_high))
    }
    const U7_OFFSET: Option<i8> = Some(0);
}

impl Unpack for BlockQ8_0 {
    #[inline(always)]
    fn quants(&self, _: &Consts) -> (v128, v128) {
        load32(&self.qs)
    }
}

impl Unpack for BlockIQ4NL {
    #[inline(always)]
    fn quants(&self, c: &Consts) -> (v128, v128) {
        let (lo, hi) = nibbles(&self.qs, c);
        (i8x16_swizzle(c.iq4, lo), i8x16_swizzle(c.iq4, hi))
    }
}

/// An IQ4_XS weight row · its Q8_K activation row: per sub-block the table values and the activations widened
/// to i16 and dotted into i32 lanes, times the sub-block's scale, summed over the block (at most
/// 8 * 32 * 8 * 127 * 128 a lane), then one float multiply-add per block.
pub(crate) fn vec_dot_iq4_xs(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "weight and activation rows have different block counts");
    let c = Consts::new();
    let mut acc = f32x4_splat(0.0);
    for (x, y) in w.iter().zip(a) {
        let mut sumi = i32x4_splat(0);
        for (ib, (qs, q8)) in x.qs.chunks_exact(16).zip(y.qs.chunks_exact(32)).enumerate() {
            let (lo, hi) = nibbles(qs.try_into().unwrap(), &c);
            let v = (i8x16_swizzle(c.iq4, lo), i8x16_swizzle(c.iq4, hi));
            let (v, a) = (widen(v), widen(load32(q8.try_into().unwrap())));
            let lo = i32x4_add(i32x4_dot_i16x8(v[0], a[0]), i32x4_dot_i16x8(v[1], a[1]));
            let sums = i32x4_add(lo, i32x4_add(i32x4_dot_i16x8(v[2], a[2]), i32x4_dot_i16x8(v[3], a[3])));
            sumi = i32x4_add(sumi, i32x4_mul(sums, i32x4_splat(x.scale(ib))));
        }
        let d = f16_to_f32(x.d) * y.d;
        acc = f32x4_add(acc, f32x4_mul(f32x4_splat(d), f32x4_convert_i32x4(sumi)));
    }
    hsum(acc)
}

/// The relaxed-SIMD build's byte dots of the seven-bit types ([`Unpack::U7_OFFSET`]): how a kernel call dots them.
/// (The plain build never makes one.)
#[derive(Clone, Copy)]
#[cfg_attr(not(target_feature = "relaxed-simd"), allow(dead_code))]
struct U7 {
    /// Where the type has an offset: it in every byte (for [`legacy_dot`], which dots it against the activations),
    /// and its log2 (for the row kernels, which shift the activations' pair sums by it: the offsets are 8 and 16).
    offset: Option<(v128, u32)>,
}

/// The byte dots for `B`, in the relaxed-SIMD build where its quants fit in seven bits; else `None` (widening).
#[inline(always)]
fn u7<B: Unpack>() -> Option<U7> {
    #[cfg(target_feature = "relaxed-simd")]
    if let Some(offset) = B::U7_OFFSET {
        const { assert!(matches!(B::U7_OFFSET, None | Some(0 | 8 | 16)), "an offset the pair sums shift to") };
        let splat = std::hint::black_box(i8x16_splat(offset));
        return Some(U7 { offset: (offset != 0).then(|| (splat, offset.trailing_zeros())) });
    }
    None
}

/// The byte dots of a block's quants `q` in 0..=127 with activations `a` (the relaxed-SIMD build), in i16 lanes:
/// lane `k` sums elements `2k`, `2k + 1`, `16 + 2k` and `17 + 2k` (four products, at most 4 * 31 * 127, and the
/// offset's four stay within i16 too).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn byte_dots((q0, q1): (v128, v128), (a0, a1): (v128, v128)) -> v128 {
    i16x8_add(i16x8_relaxed_dot_i8x16_i7x16(a0, q0), i16x8_relaxed_dot_i8x16_i7x16(a1, q1))
}

/// [`byte_dots`]' i16 lanes `k` and `k + 4` added into i32 lane `k`: the same elements as the widening kernels'
/// lane `k` ([`dot32`]: `2k`, `2k + 1` of each eight), not two neighbours, so the blocks' float sums see the same
/// values in both builds, and the relaxed build gives the plain build's bits.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn i16_lanes_to_i32(sums: v128) -> v128 {
    i32x4_add(i32x4_extend_low_i16x8(sums), i32x4_extend_high_i16x8(sums))
}

/// A block's four i32 sums of `(q - offset) * y` (the relaxed-SIMD build): quants `q` in 0..=127 as bytes,
/// activations `y` as bytes, the offset's products dotted here (the row kernels take them from the activations'
/// sums instead).
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn dot32_u7(q: (v128, v128), u7: U7, y: &[i8; 32]) -> v128 {
    let a = load32(y);
    let sums = match u7.offset {
        Some((o, _)) => i16x8_sub(byte_dots(q, a), byte_dots((o, o), a)),
        None => byte_dots(q, a),
    };
    i16_lanes_to_i32(sums)
}

/// A block's integer sums against activation quants `y`, as f32: byte dots where `u7` says so, else widened.
#[inline(always)]
fn block_dot<B: Unpack>(x: &B, y: &[i8; 32], c: &Consts, u7: Option<U7>) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    if let Some(u7) = u7 {
        return f32x4_convert_i32x4(dot32_u7(x.quants_u7(c), u7, y));
    }
    let _ = u7;
    dot32(x.quants(c), y)
}

/// A legacy weight row · its activation row (`vec_dot` of every legacy type): per block, `d * sums`
/// into `acc` and `m * s` into lane 1 of `mins` (0 for the types without a min).
pub(crate) fn legacy_dot<B: Unpack>(w: &[B], a: &[B::Act]) -> f32 {
    legacy_dot_by(w, a, u7::<B>())
}

/// [`legacy_dot`] with the block dots `u7` says (the tests compare the relaxed build's byte dots with widening).
#[inline(always)]
fn legacy_dot_by<B: Unpack>(w: &[B], a: &[B::Act], u7: Option<U7>) -> f32 {
    let c = Consts::new();
    let mut acc = f32x4_splat(0.0);
    let mut mins = f32x4_splat(0.0);
    for (x, y) in w.iter().zip(a) {
        let scales = f16_products(x.d(), x.m(), y.d(), y.s(), &c); // [d * d, m * s, ..]
        let sums = block_dot(x, y.qs(), &c, u7);
        acc = f32x4_add(acc, f32x4_mul(i32x4_shuffle::<0, 0, 0, 0>(scales, scales), sums));
        mins = f32x4_add(mins, scales);
    }
    hsum(acc) + f32x4_extract_lane::<1>(mins)
}

/// The i32 sums of `x[i] * y[i]` for widened weights `x` (see [`widen`]) and widened activations `y`.
#[inline]
fn dot_wide(x: &[v128; 4], y: &[v128; 4]) -> v128 {
    let lo = i32x4_add(i32x4_dot_i16x8(x[0], y[0]), i32x4_dot_i16x8(x[1], y[1]));
    let hi = i32x4_add(i32x4_dot_i16x8(x[2], y[2]), i32x4_dot_i16x8(x[3], y[3]));
    i32x4_add(lo, hi)
}

/// An activation block's quants, already widened to i16 (see `Activations::row_wide`), as four i16x8.
#[inline]
fn load_wide(q: &[i16; 32]) -> [v128; 4] {
    // SAFETY: 64 bytes in bounds; v128_load has no alignment requirement.
    std::array::from_fn(|k| unsafe { v128_load(q.as_ptr().add(8 * k) as *const v128) })
}

/// The lane sums of `a` and `b` in pairs, `[a0 + a1, a2 + a3, b0 + b1, b2 + b3]`: twice over, four vectors' lane
/// sums side by side (each shuffle one `shufps` in V8).
#[inline(always)]
fn pair_sums(a: v128, b: v128) -> v128 {
    i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(a, b), i32x4_shuffle::<1, 3, 5, 7>(a, b))
}

/// The two f16s each of up to four blocks starts with (`d, m`; for the types without a min, `d` and junk) as f32
/// `([d; 4], [m; 4])`, zeros in the lanes past `x`'s blocks.
#[inline(always)]
fn leading_f16s<B>(x: &[B], c: &Consts) -> (v128, v128) {
    debug_assert!(std::mem::size_of::<B>() >= 4 && x.len() <= 4);
    // SAFETY: every block is at least 4 bytes; read_unaligned has no alignment requirement.
    let word = |k: usize| if k < x.len() { unsafe { (&x[k] as *const B as *const u32).read_unaligned() } } else { 0 };
    let words = u32x4(word(0), word(1), word(2), word(3));
    // f16x4_to_f32 reads a lane's low 16 bits only.
    (f16x4_to_f32(words, c), f16x4_to_f32(u32x4_shr(words, 16), c))
}

/// Legacy weight rows (each `row_blocks` blocks) · activation rows `a_rows` of `acts`, into `out[row][j]`.
///
/// A block's dot is an exact integer sum (as i32 lanes): its quants in bytes against the activations' bytes in the
/// relaxed-SIMD build where they fit in seven bits (`i16x8.relaxed_dot_i8x16_i7x16_s`, lanes added in pairs to
/// i32), the offset's products taken off as the offset times the activation block's sum of quants; else
/// both widened to i16. Four blocks' sums go side by side into the lanes of one vector ([`pair_sums`]), which is
/// converted to f32 and scaled by the four blocks' `d_w * d_a` in one multiply ([`Quad`]: the activation rows' scales
/// four blocks at a time): the float work of one block, not four, per four blocks. Each weight block is unpacked
/// once for the `A` rows, every output has its own accumulators and sees the same float operations whatever `A`,
/// and the integer sums are the same in both builds, so the result depends on neither.
///
/// [`Quad`]: super::act::Quad
pub(crate) fn legacy_rows<B: Unpack, const A: usize>(
    w: &[B],
    row_blocks: usize,
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
) {
    legacy_rows_by(w, row_blocks, acts, a_rows, out, u7::<B>())
}

/// [`legacy_rows`] with the block dots `u7` says (the tests compare the relaxed build's byte dots with widening).
#[inline(always)]
fn legacy_rows_by<B: Unpack, const A: usize>(
    w: &[B],
    row_blocks: usize,
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
    u7: Option<U7>,
) {
    let c = Consts::new();
    assert!(row_blocks > 0 && w.len() == out.len() * row_blocks, "weights must be whole rows");
    let quads = a_rows.map(|r| acts.row_quads(r));
    assert!(quads.iter().all(|q| q.len() == row_blocks.div_ceil(4)), "activation rows of another length");
    match u7 {
        #[cfg(target_feature = "relaxed-simd")]
        Some(u7) => {
            let a = a_rows.map(|r| acts.row(r).blocks::<B::Act>());
            assert!(a.iter().all(|a| a.len() == row_blocks), "activation rows of another length");
            // The i16 byte dots ([`byte_dots`]: each lane at most 4 * 31 * 128), their lanes added in pairs into i32.
            // Not `i32x4.relaxed_dot_i8x16_i7x16_add_s`: V8 11.3 (Node 20 with --experimental-wasm-relaxed-simd)
            // computes it wrongly, which these kernels' tests caught.
            // SAFETY: i < row_blocks == every row's length (checked above).
            let dot = move |q: &(v128, v128), j: usize, i: usize| {
                i32x4_extadd_pairwise_i16x8(byte_dots(*q, load32(unsafe { a[j].get_unchecked(i) }.qs())))
            };
            let offset = u7.offset.map(|(_, shift)| shift);
            quad_rows(w, row_blocks, out, &c, quads, |x| x.quants_u7(&c), dot, offset);
        }
        _ => {
            let _ = u7;
            let a = a_rows.map(|r| acts.row_wide(r));
            assert!(a.iter().all(|a| a.len() == row_blocks), "activation rows of another length");
            // SAFETY: i < row_blocks == every row's length (checked above).
            let dot =
                move |q: &[v128; 4], j: usize, i: usize| dot_wide(q, &load_wide(unsafe { a[j].get_unchecked(i) }));
            quad_rows(w, row_blocks, out, &c, quads, |x| x.quants_wide(&c), dot, None);
        }
    }
}

/// [`legacy_rows`] once a block's quants are unpacked by `unpack` and dotted with activation row `j`'s block `i` by
/// `dot` (i32 lanes), the offset's products (where `offset_shift` is its log2) still in them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn quad_rows<B: Unpack, Q, const A: usize>(
    w: &[B],
    row_blocks: usize,
    out: &mut [[f32; A]],
    c: &Consts,
    quads: [&[super::act::Quad]; A],
    unpack: impl Fn(&B) -> Q,
    dot: impl Fn(&Q, usize, usize) -> v128,
    offset_shift: Option<u32>,
) {
    let zero = i32x4_splat(0);
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        // Even and odd quads go to two accumulators (swapped after each quad), added at the end: one order of the
        // float additions among equally exact ones, which moves a model's agreement with llama.cpp at its most
        // sensitive positions (benches/README.md, "the legacy types' row kernels four blocks at a time").
        let (mut acc, mut other) = ([f32x4_splat(0.0); A], [f32x4_splat(0.0); A]);
        let mut mins = [f32x4_splat(0.0); A];
        for (g, group) in w.chunks(4).enumerate() {
            let i = 4 * g;
            // Blocks i and i + 1, then i + 2 and i + 3 (zeros where the row has no such block): each activation
            // row's four block sums side by side.
            let two = |k: usize| (k < group.len()).then(|| unpack(&group[k]));
            let (q0, q1) = (two(0), two(1));
            let block = |q: &Option<Q>, j: usize, k: usize| q.as_ref().map_or(zero, |q| dot(q, j, i + k));
            let halves: [v128; A] = std::array::from_fn(|j| pair_sums(block(&q0, j, 0), block(&q1, j, 1)));
            let (q2, q3) = (two(2), two(3));
            let (d, m) = leading_f16s(group, c);
            for j in 0..A {
                let mut sums = pair_sums(halves[j], pair_sums(block(&q2, j, 2), block(&q3, j, 3)));
                // SAFETY: g < row_blocks.div_ceil(4) == every row's quad count (checked by the caller).
                let quad = unsafe { quads[j].get_unchecked(g) };
                if let Some(shift) = offset_shift {
                    sums = i32x4_sub(sums, i32x4_shl(load_i32x4(&quad.sums), shift));
                }
                let scale = f32x4_mul(d, load_f32x4(&quad.d));
                acc[j] = f32x4_add(acc[j], f32x4_mul(scale, f32x4_convert_i32x4(sums)));
                if B::WITH_MIN {
                    mins[j] = f32x4_add(mins[j], f32x4_mul(m, load_f32x4(&quad.s)));
                }
            }
            std::mem::swap(&mut acc, &mut other);
        }
        *out = std::array::from_fn(|j| {
            let sum = hsum(f32x4_add(acc[j], other[j]));
            if B::WITH_MIN {
                sum + hsum(mins[j])
            } else {
                sum
            }
        });
    }
}

#[inline(always)]
fn load_f32x4(x: &[f32; 4]) -> v128 {
    // SAFETY: 16 bytes in bounds; v128_load has no alignment requirement.
    unsafe { v128_load(x.as_ptr() as *const v128) }
}

#[inline(always)]
fn load_i32x4(x: &[i32; 4]) -> v128 {
    // SAFETY: 16 bytes in bounds; v128_load has no alignment requirement.
    unsafe { v128_load(x.as_ptr() as *const v128) }
}

/// Dot of the weights, read 4 at a time as f32x4 by `load4(ptr to element i)` (one at a time by
/// `get`), with `a`: four accumulators over 16 elements per step, then 4 at a time, then a scalar tail.
#[inline]
fn float_dot<B: Copy>(w: &[B], a: &[f32], load4: impl Fn(*const B) -> v128, get: impl Fn(B) -> f32) -> f32 {
    let n = w.len().min(a.len());
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    // SAFETY (all loads below): element i + 4 <= n is in bounds of both slices.
    let load_a = |i: usize| unsafe { v128_load(ap.add(i) as *const v128) };
    let load_w = |i: usize| load4(unsafe { wp.add(i) });
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 4 * k;
            *acc = f32x4_add(*acc, f32x4_mul(load_w(j), load_a(j)));
        }
        i += 16;
    }
    while i + 4 <= n {
        acc[0] = f32x4_add(acc[0], f32x4_mul(load_w(i), load_a(i)));
        i += 4;
    }
    let mut sum = hsum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3])));
    for j in i..n {
        sum += get(w[j]) * a[j];
    }
    sum
}

/// Four f16 (bit patterns in the low 16 bits of u32 lanes) to f32, exactly, including subnormals,
/// infinities and NaN: move exponent and mantissa into f32 position, then rescale the exponent by 2^112.
#[inline]
pub(crate) fn f16x4_to_f32(h: v128, c: &Consts) -> v128 {
    let magnitude = u32x4_shl(v128_and(h, c.f16_magnitude), 13);
    let scaled = f32x4_mul(magnitude, c.f16_rescale);
    // Inputs with the largest f16 exponent (inf, NaN) land at 2^16 or above: give them f32's.
    let inf_nan = f32x4_ge(scaled, c.f16_inf);
    let value = v128_or(scaled, v128_and(inf_nan, c.f32_exponent));
    v128_or(value, u32x4_shl(v128_and(h, c.f16_sign), 16))
}

pub fn f32_f32(w: &[BlockF32], a: &[f32]) -> f32 {
    // SAFETY: 4 elements of 4 bytes from p are in bounds (float_dot's loop condition).
    float_dot(w, a, |p| unsafe { v128_load(p as *const v128) }, BlockF32::get)
}

pub fn f16_f32(w: &[BlockF16], a: &[f32]) -> f32 {
    // SAFETY: 4 elements of 2 bytes from p are in bounds (float_dot's loop condition).
    let c = Consts::new();
    float_dot(w, a, |p| f16x4_to_f32(unsafe { u32x4_load_extend_u16x4(p as *const u16) }, &c), BlockF16::get)
}

pub fn bf16_f32(w: &[BlockBF16], a: &[f32]) -> f32 {
    // bf16 is the top half of an f32.
    // SAFETY: 4 elements of 2 bytes from p are in bounds (float_dot's loop condition).
    float_dot(w, a, |p| u32x4_shl(unsafe { u32x4_load_extend_u16x4(p as *const u16) }, 16), BlockBF16::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn f16_conversion_is_exact_for_every_f16() {
        let c = Consts::new();
        for bits in 0..=u16::MAX {
            let h = u32x4_splat(bits as u32);
            let got = f32x4_extract_lane::<0>(f16x4_to_f32(h, &c));
            let want = half::f16::from_bits(bits).to_f32();
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#06x}: {got} != {want}");
        }
    }

    /// The relaxed-SIMD build's byte dots give the widening kernels' bits, in `vec_dot` and in the row kernels: the
    /// two builds compute the same model.
    #[cfg(target_feature = "relaxed-simd")]
    #[test]
    fn byte_dots_give_the_widening_dots_bits() {
        use super::super::act::ActKind;
        use crate::quant::{as_blocks, tests::data::random_row, GgmlType};
        use crate::test_support::Rng;

        fn check<B: Unpack + crate::quant::QuantBlock>(ty: GgmlType, kind: ActKind, rng: &mut Rng) {
            assert!(u7::<B>().is_some(), "{ty:?} has byte dots");
            for blocks in [1, 2, 7, 24] {
                let w = random_row(ty, blocks, rng);
                let x: Vec<f32> =
                    (0..32 * blocks).map(|i| rng.normal() * if i % 16 == 0 { 8.0 } else { 1.0 }).collect();
                let mut acts = Activations::new();
                acts.quantize(kind, &x, 1);
                let (w, a) = (as_blocks::<B>(&w), acts.row(0).blocks::<B::Act>());
                let (bytes, wide) = (legacy_dot(w, a), legacy_dot_by(w, a, None));
                assert_eq!(bytes.to_bits(), wide.to_bits(), "{ty:?}, {blocks} blocks: {bytes} != {wide}");
            }
        }
        /// The row kernels too, four activation rows and one, for the offset types (their activations, Q8_0, are
        /// widened in both builds for Q8_0's weights; Q8_1's are not in this one).
        fn check_rows<B: Unpack + crate::quant::QuantBlock>(ty: GgmlType, rng: &mut Rng) {
            for blocks in [1, 2, 7, 24] {
                let w = random_row(ty, 3 * blocks, rng);
                let x: Vec<f32> =
                    (0..4 * 32 * blocks).map(|i| rng.normal() * if i % 16 == 0 { 8.0 } else { 1.0 }).collect();
                let mut acts = Activations::new();
                acts.quantize(ActKind::Q8_0, &x, 4);
                let w = as_blocks::<B>(&w);
                let (mut bytes, mut wide) = ([[0f32; 4]; 3], [[0f32; 4]; 3]);
                legacy_rows_by(w, blocks, &acts, [0, 1, 2, 3], &mut bytes, u7::<B>());
                legacy_rows_by(w, blocks, &acts, [0, 1, 2, 3], &mut wide, None);
                let bits = |o: &[[f32; 4]; 3]| o.map(|r| r.map(f32::to_bits));
                assert_eq!(bits(&bytes), bits(&wide), "{ty:?}, {blocks} blocks: {bytes:?} != {wide:?}");
                let mut one = [[0f32; 1]; 3];
                legacy_rows_by(w, blocks, &acts, [2], &mut one, u7::<B>());
                assert_eq!(one.map(|r| r[0].to_bits()), bits(&wide).map(|r| r[2]), "{ty:?}, {blocks} blocks, one row");
            }
        }
        let mut rng = Rng::new(41);
        for _ in 0..20 {
            check_rows::<BlockQ4_0>(GgmlType::Q4_0, &mut rng);
            check_rows::<BlockQ5_0>(GgmlType::Q5_0, &mut rng);
        }
        for _ in 0..50 {
            check::<BlockQ4_0>(GgmlType::Q4_0, ActKind::Q8_0, &mut rng);
            check::<BlockQ4_1>(GgmlType::Q4_1, ActKind::Q8_1, &mut rng);
            check::<BlockQ5_0>(GgmlType::Q5_0, ActKind::Q8_0, &mut rng);
            check::<BlockQ5_1>(GgmlType::Q5_1, ActKind::Q8_1, &mut rng);
        }
    }
}
