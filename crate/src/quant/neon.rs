//! aarch64 NEON kernels for the legacy quants and the float types.
//!
//! The quantized dots unpack a block's 32 weights to signed bytes and sum the byte products into
//! i32x4: with `sdot` where the CPU has the dotprod extension (checked at run time), else with widening
//! multiplies. Each block's sums are converted to f32 and scaled into an f32x4 accumulator with FMA.
//! A block's f16 scales are converted together, in one vector. The row kernels (`*_rows`, for
//! `dot_rows`) unpack each weight block once for several activation rows, as the AVX2 and simd128 ones.
//! `sdot` and `fcvtl` are written as inline assembly: their intrinsics are not stable Rust yet.

use std::arch::aarch64::*;
use std::arch::asm;

use super::act::{f16_to_f32, BlockQ8K, BlockQ8_0, Q8Block};
use super::float::{BlockBF16, BlockF16, BlockF32};
use super::iq4::{BlockIQ4NL, BlockIQ4XS, KVALUES};
use super::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, LegacyBlock};
use super::{check_rows, even_odd};

/// How 16 signed byte products are added into 4 i32 lanes.
trait ByteDot {
    /// `acc + (sum of x[i] * y[i] over each group of 4 bytes)` (any grouping: callers only add lanes).
    unsafe fn dot(acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t;
}

/// `sdot` (needs the dotprod extension).
struct SDot;

impl ByteDot for SDot {
    #[inline(always)]
    unsafe fn dot(mut acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
        // The directive lets the assembler take `sdot` wherever this lands (a closure left out of line, say,
        // compiled without the caller's `dotprod` feature): it only runs where dotprod was detected.
        asm!(
            ".arch_extension dotprod",
            "sdot {acc:v}.4s, {x:v}.16b, {y:v}.16b",
            acc = inout(vreg) acc,
            x = in(vreg) x,
            y = in(vreg) y,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    }
}

/// Widening multiplies (base NEON).
struct Widen;

impl ByteDot for Widen {
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
        // Two products per i16 lane: |x| <= 128 and |y| <= 127 keep the sum within i16.
        let p = vmull_s8(vget_low_s8(x), vget_low_s8(y));
        vpadalq_s16(acc, vmlal_high_s8(p, x, y))
    }
}

/// A block's packed nibbles as (elements 0..16, elements 16..32).
#[inline(always)]
unsafe fn nibbles(qs: &[u8; 16]) -> (uint8x16_t, uint8x16_t) {
    let q = vld1q_u8(qs.as_ptr());
    (vandq_u8(q, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(q))
}

/// The 32 bits of `qh` as (elements 0..16, elements 16..32), each byte 0xFF where the bit is set.
#[inline(always)]
unsafe fn bit_bytes(qh: [u8; 4]) -> (uint8x16_t, uint8x16_t) {
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    const LOW: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const HIGH: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    let v = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(qh)));
    let bit = vld1q_u8(BIT.as_ptr());
    let spread = |index: &[u8; 16]| vtstq_u8(vqtbl1q_u8(v, vld1q_u8(index.as_ptr())), bit);
    (spread(&LOW), spread(&HIGH))
}

/// A block's integer dot, as f32x4 partial sums: weights `(x0, x1)` for elements 0..16 and 16..32.
#[inline(always)]
unsafe fn dot32<D: ByteDot>((x0, x1): (int8x16_t, int8x16_t), q: &[i8; 32]) -> float32x4_t {
    let (y0, y1) = (vld1q_s8(q.as_ptr()), vld1q_s8(q.as_ptr().add(16)));
    vcvtq_f32_s32(D::dot(D::dot(vdupq_n_s32(0), x0, y0), x1, y1))
}

#[inline(always)]
fn signed((lo, hi): (uint8x16_t, uint8x16_t)) -> (int8x16_t, int8x16_t) {
    // SAFETY: reinterpreting register bits.
    unsafe { (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)) }
}

/// Four f16 (raw bits) to f32 with `fcvtl` (base AdvSIMD; its intrinsic needs Rust's unstable f16).
#[inline(always)]
pub(super) unsafe fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    asm!(
        "fcvtl {out:v}.4s, {h:v}.4h",
        out = lateout(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags),
    );
    out
}

/// The products of two pairs of f16 (raw bits), `[x0 * y0, x1 * y1, x0 * y0, x1 * y1]`: a block's
/// `d_w * d_a` and `m_w * s_a`, converted together.
#[inline(always)]
unsafe fn f16_products(x0: [u8; 2], x1: [u8; 2], y0: [u8; 2], y1: [u8; 2]) -> float32x4_t {
    let v = f16x4_to_f32(vcreate_u16(u64::from_le_bytes([x0[0], x0[1], x1[0], x1[1], y0[0], y0[1], y1[0], y1[1]])));
    vmulq_f32(v, vextq_f32::<2>(v, v))
}

/// How a legacy weight block unpacks for these kernels.
pub(crate) trait Unpack: LegacyBlock {
    /// The 32 quants as signed bytes (elements 0..16, elements 16..32): `q` for the types with a min,
    /// else `q - offset`.
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t);
}

impl Unpack for BlockQ4_0 {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        let (lo, hi) = signed(nibbles(&self.qs));
        let eight = vdupq_n_s8(8);
        (vsubq_s8(lo, eight), vsubq_s8(hi, eight))
    }
}

impl Unpack for BlockQ4_1 {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        signed(nibbles(&self.qs))
    }
}

/// A Q5 block's quants: each nibble OR `high(mask)`, `mask` 0xFF where the element's fifth bit is set.
#[inline(always)]
unsafe fn q5_quants(qs: &[u8; 16], qh: [u8; 4], high: impl Fn(uint8x16_t) -> uint8x16_t) -> (int8x16_t, int8x16_t) {
    let ((lo, hi), (blo, bhi)) = (nibbles(qs), bit_bytes(qh));
    signed((vorrq_u8(lo, high(blo)), vorrq_u8(hi, high(bhi))))
}

impl Unpack for BlockQ5_0 {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        // q - 16 as a byte: the nibble when the fifth bit is set, else the nibble with 0xF0 on top.
        q5_quants(&self.qs, self.qh, |set| vbicq_u8(vdupq_n_u8(0xF0), set))
    }
}

impl Unpack for BlockQ5_1 {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        q5_quants(&self.qs, self.qh, |set| vandq_u8(set, vdupq_n_u8(0x10)))
    }
}

impl Unpack for BlockQ8_0 {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        (vld1q_s8(self.qs.as_ptr()), vld1q_s8(self.qs.as_ptr().add(16)))
    }
}

impl Unpack for BlockIQ4NL {
    #[inline(always)]
    unsafe fn quants(&self) -> (int8x16_t, int8x16_t) {
        let (table, (lo, hi)) = (vld1q_s8(KVALUES.as_ptr()), nibbles(&self.qs));
        (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi))
    }
}

/// An IQ4_XS weight row · its Q8_K activation row: per sub-block the products of the table values and the
/// activations (exact in i16: `vmull_s8`), pairwise into i32 lanes, times the sub-block's scale, summed over
/// the block (at most 8 * 32 * 8 * 127 * 128 a lane), then one float FMA per block.
pub(crate) unsafe fn vec_dot_iq4_xs(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "weight and activation rows have different block counts");
    let table = vld1q_s8(KVALUES.as_ptr());
    let mut acc = vdupq_n_f32(0.0);
    for (x, y) in w.iter().zip(a) {
        let mut sumi = vdupq_n_s32(0);
        for (ib, (qs, q8)) in x.qs.chunks_exact(16).zip(y.qs.chunks_exact(32)).enumerate() {
            let (lo, hi) = nibbles(qs.try_into().unwrap());
            let (v0, v1) = (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi));
            let (y0, y1) = (vld1q_s8(q8.as_ptr()), vld1q_s8(q8.as_ptr().add(16)));
            let mut sums = vpaddlq_s16(vmull_s8(vget_low_s8(v0), vget_low_s8(y0)));
            sums = vpadalq_s16(sums, vmull_high_s8(v0, y0));
            sums = vpadalq_s16(sums, vmull_s8(vget_low_s8(v1), vget_low_s8(y1)));
            sums = vpadalq_s16(sums, vmull_high_s8(v1, y1));
            sumi = vmlaq_s32(sumi, sums, vdupq_n_s32(x.scale(ib)));
        }
        let d = f16_to_f32(x.d) * y.d;
        acc = vfmaq_f32(acc, vcvtq_f32_s32(sumi), vdupq_n_f32(d));
    }
    vaddvq_f32(acc)
}

/// A legacy weight row · its activation row: per block, `d * sums` into `acc` and `m * s` into lane 1 of
/// `mins` (0 for the types without a min).
#[inline(always)]
unsafe fn dot<D: ByteDot, B: Unpack>(w: &[B], a: &[B::Act]) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let mut mins = vdupq_n_f32(0.0);
    for (x, y) in w.iter().zip(a) {
        let scales = f16_products(x.d(), x.m(), y.d(), y.s()); // [d * d, m * s, ..]
        let sums = dot32::<D>(x.quants(), y.qs());
        acc = vfmaq_laneq_f32::<0>(acc, sums, scales);
        mins = vaddq_f32(mins, scales);
    }
    vaddvq_f32(acc) + vgetq_lane_f32::<1>(mins)
}

/// `vec_dot` of every legacy type: `sdot` when the CPU has dotprod, widening multiplies otherwise.
pub(crate) fn legacy_dot<B: Unpack>(w: &[B], a: &[B::Act]) -> f32 {
    #[target_feature(enable = "dotprod")]
    unsafe fn with_sdot<B: Unpack>(w: &[B], a: &[B::Act]) -> f32 {
        dot::<SDot, B>(w, a)
    }
    if crate::simd::cpu::has_dotprod() {
        // SAFETY: the CPU has dotprod.
        unsafe { with_sdot(w, a) }
    } else {
        // SAFETY: NEON is part of every aarch64 CPU.
        unsafe { dot::<Widen, B>(w, a) }
    }
}

/// A block's leading f16s (`d`, and `m` where `with_m`) as f32 `[d, m]` (`m` 0 otherwise).
#[inline(always)]
unsafe fn leading_f16s<T>(block: &T, with_m: bool) -> float32x2_t {
    debug_assert!(std::mem::size_of::<T>() >= 4);
    let word = (block as *const T as *const u32).read_unaligned();
    let bits = if with_m { word } else { word & 0xFFFF };
    vget_low_f32(f16x4_to_f32(vcreate_u16(bits as u64)))
}

/// The row kernel: every weight row in `w` (rows of `row_blocks` blocks) dotted with `A` activation rows,
/// into `out[row][j]`, each weight block unpacked once for the `A` rows. `a_scales[j][i]` is activation
/// row `j`'s block `i` `(d, s)` as f32 (`s` is 0 for Q8_0). Every output has its own two accumulators,
/// for even and odd blocks (so one block's FMA does not wait for the previous one's), and sees the same
/// float operations whatever `A`: results do not depend on it. As the AVX2 and simd128 row kernels.
#[inline(always)]
unsafe fn rows<D: ByteDot, B: Unpack, const A: usize>(
    w: &[B],
    row_blocks: usize,
    a: [&[B::Act]; A],
    a_scales: [&[[f32; 2]]; A],
    out: &mut [[f32; A]],
) {
    check_rows(w.len(), row_blocks, &a, &a_scales, out.len());
    for (w, out) in w.chunks_exact(row_blocks).zip(out) {
        let mut acc = [[vdupq_n_f32(0.0); 2]; A];
        let mut mins = [vdup_n_f32(0.0); A]; // lane 1 sums the blocks' m * s terms
        let block = |i: usize, p: usize| {
            let x = w.get_unchecked(i);
            let (q, dm) = (x.quants(), leading_f16s(x, B::WITH_MIN));
            for j in 0..A {
                let scales = vmul_f32(dm, vld1_f32(a_scales[j].get_unchecked(i).as_ptr())); // [d * d, m * s]
                mins[j] = vadd_f32(mins[j], scales);
                let sums = dot32::<D>(q, a[j].get_unchecked(i).qs());
                acc[j][p] = vfmaq_lane_f32::<0>(acc[j][p], sums, scales);
            }
        };
        even_odd(row_blocks, block);
        *out = std::array::from_fn(|j| vaddvq_f32(vaddq_f32(acc[j][0], acc[j][1])) + vget_lane_f32::<1>(mins[j]));
    }
}

/// The row kernel for `dot_rows`: `sdot` when the CPU has dotprod, widening multiplies otherwise.
pub(crate) fn legacy_rows<B: Unpack, const A: usize>(
    w: &[B],
    row_blocks: usize,
    a: [&[B::Act]; A],
    a_scales: [&[[f32; 2]]; A],
    out: &mut [[f32; A]],
) {
    #[target_feature(enable = "dotprod")]
    unsafe fn with_sdot<B: Unpack, const A: usize>(
        w: &[B],
        row_blocks: usize,
        a: [&[B::Act]; A],
        a_scales: [&[[f32; 2]]; A],
        out: &mut [[f32; A]],
    ) {
        rows::<SDot, B, A>(w, row_blocks, a, a_scales, out)
    }
    if crate::simd::cpu::has_dotprod() {
        // SAFETY: the CPU has dotprod; the kernel checks its arguments before reading unchecked.
        unsafe { with_sdot(w, row_blocks, a, a_scales, out) }
    } else {
        // SAFETY: NEON is part of every aarch64 CPU; as above for the arguments.
        unsafe { rows::<Widen, B, A>(w, row_blocks, a, a_scales, out) }
    }
}

/// Dot of the weights, read 4 at a time by `load4(ptr to element i)` (one at a time by `get`), with
/// `a`: four accumulators over 16 elements per step, then 4 at a time, then a scalar tail.
#[inline(always)]
unsafe fn float_dot<B: Copy>(
    w: &[B],
    a: &[f32],
    load4: impl Fn(*const B) -> float32x4_t,
    get: impl Fn(B) -> f32,
) -> f32 {
    let n = w.len().min(a.len());
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 4 * k;
            *acc = vfmaq_f32(*acc, load4(wp.add(j)), vld1q_f32(ap.add(j)));
        }
        i += 16;
    }
    while i + 4 <= n {
        acc[0] = vfmaq_f32(acc[0], load4(wp.add(i)), vld1q_f32(ap.add(i)));
        i += 4;
    }
    let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for j in i..n {
        sum += get(w[j]) * a[j];
    }
    sum
}

pub fn f32_f32(w: &[BlockF32], a: &[f32]) -> f32 {
    // SAFETY: float_dot loads 4 elements from p only when they are in bounds; BlockF32 holds the f32's
    // little-endian bytes, aarch64's layout.
    unsafe { float_dot(w, a, |p| vld1q_f32(p as *const f32), BlockF32::get) }
}

pub fn f16_f32(w: &[BlockF16], a: &[f32]) -> f32 {
    // SAFETY: as in f32_f32.
    unsafe { float_dot(w, a, |p| f16x4_to_f32(vld1_u16(p as *const u16)), BlockF16::get) }
}

pub fn bf16_f32(w: &[BlockBF16], a: &[f32]) -> f32 {
    // bf16 is the top half of an f32. SAFETY: as in f32_f32.
    unsafe { float_dot(w, a, |p| vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p as *const u16))), BlockBF16::get) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_is_exact_for_every_f16() {
        for bits in 0..=u16::MAX {
            // SAFETY: NEON is part of every aarch64 CPU.
            let got = unsafe { vgetq_lane_f32::<0>(f16x4_to_f32(vdup_n_u16(bits))) };
            let want = half::f16::from_bits(bits).to_f32();
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#06x}: {got} != {want}");
        }
    }

    /// Both byte dots sum the same products (the public kernels only run the one this CPU has).
    #[test]
    fn byte_dots_agree_with_scalar() {
        #[target_feature(enable = "dotprod")]
        unsafe fn sdot(x: int8x16_t, y: int8x16_t) -> i32 {
            vaddvq_s32(SDot::dot(vdupq_n_s32(0), x, y))
        }
        let mut rng = crate::test_support::Rng::new(3);
        for _ in 0..1000 {
            let mut x = [0u8; 16];
            rng.fill(&mut x);
            let x = x.map(|b| b as i8); // weights: any byte
            let y: [i8; 16] = std::array::from_fn(|_| ((rng.next_u64() % 255) as i32 - 127) as i8); // activations: -127..=127
            let want: i32 = x.iter().zip(&y).map(|(&a, &b)| a as i32 * b as i32).sum();
            // SAFETY: NEON is part of every aarch64 CPU; sdot runs only where dotprod is detected.
            unsafe {
                let (xv, yv) = (vld1q_s8(x.as_ptr()), vld1q_s8(y.as_ptr()));
                assert_eq!(vaddvq_s32(Widen::dot(vdupq_n_s32(0), xv, yv)), want, "{x:?} . {y:?}");
                if crate::simd::cpu::has_dotprod() {
                    assert_eq!(sdot(xv, yv), want, "{x:?} . {y:?}");
                }
            }
        }
    }
}
