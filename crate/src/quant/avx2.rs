//! x86_64 kernels for the legacy quants and the float types, using AVX2, FMA and F16C.
//!
//! Every function here needs those three features: callers check [`crate::simd::cpu::has_avx2`] first.
//! The quantized dots follow ggml's AVX2 code: unpack a block's 32 weights to bytes, multiply byte
//! pairs and add them with `maddubs` (unsigned x signed -> i16), widen to i32 with `madd`, convert to
//! f32 and accumulate `block scale * sums` with FMA. Rows are walked two blocks at a time into two
//! accumulators, so one block's FMA does not wait on the previous one.
//!
//! Activation quants must lie in -127..=127 (as the Q8 quantizers produce): the signed x signed dots move
//! the weight's sign onto the activation, and -128 has no positive counterpart.

use std::arch::x86_64::*;

use super::act::{f16_to_f32, BlockQ8K, BlockQ8_0, Q8Block};
use super::float::{BlockBF16, BlockF16, BlockF32};
use super::iq4::{BlockIQ4NL, BlockIQ4XS, KVALUES};
use super::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, LegacyBlock};
use super::{check_rows, even_odd};
use crate::simd::avx2::hsum;

/// The two f16s a block starts with, to f32 in lanes 0 and 1 (one 4-byte load).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn leading_f16_pair<T>(block: &T) -> __m128 {
    debug_assert!(std::mem::size_of::<T>() >= 4);
    _mm_cvtph_ps(_mm_cvtsi32_si128((block as *const T as *const i32).read_unaligned()))
}

/// The product of two f16 values, broadcast to 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_product(x: [u8; 2], y: [u8; 2]) -> __m256 {
    let v = _mm_insert_epi16(_mm_cvtsi32_si128(u16::from_le_bytes(x) as i32), u16::from_le_bytes(y) as i16 as i32, 1);
    let v = _mm_cvtph_ps(v);
    _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// 16 bytes of packed nibbles -> 32 bytes in element order: low nibbles, then high nibbles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let b = _mm_loadu_si128(qs.as_ptr().cast());
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F))
}

/// The 32 bits of `qh` -> 32 bytes, 0xFF where the element's bit is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bit_bytes(qh: [u8; 4]) -> __m256i {
    // Byte i of the result gets byte i / 8 of qh; OR-ing every bit but bit i % 8 leaves all-ones iff it is set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(i32::from_le_bytes(qh)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
    );
    let others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load32(q: &[i8; 32]) -> __m256i {
    _mm256_loadu_si256(q.as_ptr().cast())
}

/// Sum of `u[i] * s[i]` for unsigned bytes `u` (at most 128) and signed `s`, as 8 f32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_us8(u: __m256i, s: __m256i) -> __m256 {
    // maddubs adds adjacent products into i16: at most 2 * 128 * 127, no saturation.
    let pairs = _mm256_maddubs_epi16(u, s);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Sum of `x[i] * y[i]` for signed bytes (`y` in -127..=127), as 8 f32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_ss8(x: __m256i, y: __m256i) -> __m256 {
    dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// How a legacy weight block unpacks for these kernels.
pub(crate) trait Unpack: LegacyBlock {
    /// The 32 quants as bytes in element order: `q` (unsigned) for the types with a min, else the signed
    /// `q - offset`.
    unsafe fn quants(&self) -> __m256i;
}

impl Unpack for BlockQ4_0 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        _mm256_sub_epi8(nibbles(&self.qs), _mm256_set1_epi8(8))
    }
}

impl Unpack for BlockQ4_1 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        nibbles(&self.qs)
    }
}

impl Unpack for BlockQ5_0 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        // q - 16 as a byte: the nibble when the fifth bit is set, else the nibble with 0xF0 on top.
        let high = _mm256_andnot_si256(bit_bytes(self.qh), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(nibbles(&self.qs), high)
    }
}

impl Unpack for BlockQ5_1 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        _mm256_or_si256(nibbles(&self.qs), _mm256_and_si256(bit_bytes(self.qh), _mm256_set1_epi8(0x10)))
    }
}

impl Unpack for BlockQ8_0 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        load32(&self.qs)
    }
}

impl Unpack for BlockIQ4NL {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quants(&self) -> __m256i {
        // Each nibble indexes the table in its own 128-bit lane.
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES.as_ptr().cast()));
        _mm256_shuffle_epi8(table, nibbles(&self.qs))
    }
}

/// Walks `w` and `a` two blocks at a time, `$block(w, a, acc) -> acc` alternating between two
/// accumulators, and returns the lane sum.
macro_rules! two_accumulators {
    ($w:expr, $a:expr, $block:expr) => {{
        let (w, a) = ($w, $a);
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (w2, a2) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
            acc0 = $block(&w2[0], &a2[0], acc0);
            acc1 = $block(&w2[1], &a2[1], acc1);
        }
        let n = w.len().min(a.len());
        if n % 2 == 1 {
            acc0 = $block(&w[n - 1], &a[n - 1], acc0);
        }
        hsum(_mm256_add_ps(acc0, acc1))
    }};
}

/// An IQ4_XS weight row · its Q8_K activation row. Q8_K quants take all of i8 (-128 too), so the products
/// are of bytes widened to i16 (`madd`), not `maddubs` with the signs moved onto the activations. Each
/// sub-block's sums times its scale add up in i32 over the block (at most 8 * 32 * 4 * 127 * 128 a lane),
/// then one float FMA per block.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_iq4_xs(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
    assert_eq!(w.len(), a.len(), "weight and activation rows have different block counts");
    let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES.as_ptr().cast()));
    let wide_dot = |x: __m128i, y: __m128i| _mm256_madd_epi16(_mm256_cvtepi8_epi16(x), _mm256_cvtepi8_epi16(y));
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let mut sumi = _mm256_setzero_si256();
        for (ib, (qs, q8)) in x.qs.chunks_exact(16).zip(y.qs.chunks_exact(32)).enumerate() {
            let v = _mm256_shuffle_epi8(table, nibbles(qs.try_into().unwrap()));
            let q8 = load32(q8.try_into().unwrap());
            let lo = wide_dot(_mm256_castsi256_si128(v), _mm256_castsi256_si128(q8));
            let hi = wide_dot(_mm256_extracti128_si256::<1>(v), _mm256_extracti128_si256::<1>(q8));
            let scaled = _mm256_mullo_epi32(_mm256_add_epi32(lo, hi), _mm256_set1_epi32(x.scale(ib)));
            sumi = _mm256_add_epi32(sumi, scaled);
        }
        let d = f16_to_f32(x.d) * y.d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// A legacy weight row · its activation row (`vec_dot` of every legacy type).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn legacy_dot<B: Unpack>(w: &[B], a: &[B::Act]) -> f32 {
    if B::WITH_MIN {
        // Lane 1 of `mins` sums the blocks' `m * s` terms.
        let mut mins = _mm_setzero_ps();
        let mut block = |x: &B, y: &B::Act, acc| {
            let scales = _mm_mul_ps(leading_f16_pair(x), leading_f16_pair(y)); // [d * d, m * s]
            mins = _mm_add_ps(mins, scales);
            _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), dot_us8(x.quants(), load32(y.qs())), acc)
        };
        let sum = two_accumulators!(w, a, block);
        sum + _mm_cvtss_f32(_mm_movehdup_ps(mins))
    } else {
        let block = |x: &B, y: &B::Act, acc| {
            let q = x.quants();
            _mm256_fmadd_ps(f16_product(x.d(), y.d()), dot_ss8(q, load32(y.qs())), acc)
        };
        two_accumulators!(w, a, block)
    }
}

/// `(d, s)` of an activation block, as f32 in lanes 0 and 1 (one 8-byte load).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_pair(s: &[f32; 2]) -> __m128 {
    _mm_castpd_ps(_mm_load_sd((s as *const [f32; 2]).cast()))
}

/// `u[i] * s[i]` summed in groups of four bytes into 8 i32 lanes, with AVX512-VNNI's `vpdpbusd` (one
/// instruction for `maddubs` + `madd`; no i16 intermediate, the same sums).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn dot_us8_vnni(u: __m256i, s: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s))
}

/// The row kernel, stamped out for AVX2 and for AVX512-VNNI (`$dot_us8` sums the byte products). Both
/// compute the same integer sums and then the same float operations, so their results are identical.
///
/// It dots every weight row in `w` (rows of `row_blocks` blocks) with `A` activation rows, into
/// `out[row][j]`: each weight block is unpacked once for the `A` rows. Every output has its own two
/// accumulators, for even and odd blocks (as [`two_accumulators!`], so one block's FMA does not wait for
/// the previous one's), and sees the same float operations whatever `A`: results do not depend on it.
/// `a_scales[j][i]` is activation row `j`'s block `i` `(d, s)` as f32 (`s` is 0 for Q8_0).
macro_rules! row_kernel {
    ($features:literal, $dot_us8:ident, $name:ident) => {
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name<B: Unpack, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[B::Act]; A],
            a_scales: [&[[f32; 2]]; A],
            out: &mut [[f32; A]],
        ) {
            check_rows(w.len(), row_blocks, &a, &a_scales, out.len());
            for (w, out) in w.chunks_exact(row_blocks).zip(out) {
                let mut acc = [[_mm256_setzero_ps(); 2]; A];
                let mut mins = [_mm_setzero_ps(); A]; // lane 1 sums the blocks' `m * s` terms
                let block = |i: usize, p: usize| {
                    let x = w.get_unchecked(i);
                    let q = x.quants();
                    // Signed quants are dotted as `dot_ss8` does: |q| times the activations with q's sign.
                    let abs_q = if B::WITH_MIN { q } else { _mm256_sign_epi8(q, q) };
                    // `[d, m]`, or `d` in every lane: with one lane set, the compiler may insert 16 bits into
                    // whatever register it likes (an accumulator, say), chaining each block behind the previous FMA.
                    let dm = match B::WITH_MIN {
                        true => leading_f16_pair(x),
                        false => _mm_cvtph_ps(_mm_set1_epi16(u16::from_le_bytes(x.d()) as i16)),
                    };
                    for j in 0..A {
                        let scales = _mm_mul_ps(dm, scale_pair(a_scales[j].get_unchecked(i))); // [d * d, m * s]
                        let y = load32(a[j].get_unchecked(i).qs());
                        let sums = match B::WITH_MIN {
                            true => {
                                mins[j] = _mm_add_ps(mins[j], scales);
                                $dot_us8(q, y)
                            }
                            false => $dot_us8(abs_q, _mm256_sign_epi8(y, q)),
                        };
                        acc[j][p] = _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), sums, acc[j][p]);
                    }
                };
                even_odd(row_blocks, block);
                *out = std::array::from_fn(|j| {
                    let sum = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
                    if B::WITH_MIN {
                        sum + _mm_cvtss_f32(_mm_movehdup_ps(mins[j]))
                    } else {
                        sum
                    }
                });
            }
        }
    };
}

row_kernel!("avx2,fma,f16c", dot_us8, legacy_rows);
row_kernel!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", dot_us8_vnni, legacy_rows_vnni);

/// Dot of `n` weights read 8 at a time by `$load8(ptr to element i)` (and one at a time by `$get`)
/// with `a`: four accumulators over 32 elements per step, then 8 at a time, then a scalar tail.
macro_rules! float_dot {
    ($w:expr, $a:expr, $load8:expr, $get:expr) => {{
        let (w, a) = ($w, $a);
        let n = w.len().min(a.len());
        let (wp, ap) = (w.as_ptr(), a.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let j = i + 8 * k;
                *acc = _mm256_fmadd_ps($load8(wp.add(j)), _mm256_loadu_ps(ap.add(j)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps($load8(wp.add(i)), _mm256_loadu_ps(ap.add(i)), acc[0]);
            i += 8;
        }
        let mut sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        for j in i..n {
            sum += $get(w[j]) * a[j];
        }
        sum
    }};
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32_f32(w: &[BlockF32], a: &[f32]) -> f32 {
    // BlockF32 is the f32's 4 little-endian bytes: the same layout as f32 on x86_64.
    float_dot!(w, a, |p: *const BlockF32| _mm256_loadu_ps(p.cast()), BlockF32::get)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_f32(w: &[BlockF16], a: &[f32]) -> f32 {
    float_dot!(w, a, |p: *const BlockF16| _mm256_cvtph_ps(_mm_loadu_si128(p.cast())), BlockF16::get)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn bf16_f32(w: &[BlockBF16], a: &[f32]) -> f32 {
    // bf16 is the top half of an f32.
    let load8 = |p: *const BlockBF16| {
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())), 16))
    };
    float_dot!(w, a, load8, BlockBF16::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{ActKind, Activations, QuantBlock};

    #[test]
    fn vnni_kernels_equal_avx2_kernels() {
        if !(crate::simd::cpu::has_avx2() && crate::simd::cpu::has_vnni()) {
            return; // nothing to compare on this CPU
        }
        let x: Vec<f32> = (0..4 * 320).map(|i| ((i * 7919 % 1013) as f32 / 506.0 - 1.0) * (1 + i % 5) as f32).collect();
        let (w, a) = x.split_at(2 * 320);
        let mut w41 = vec![BlockQ4_1::default(); 20];
        let mut w80 = vec![BlockQ8_0::default(); 20];
        BlockQ4_1::quantize(w, &mut w41);
        BlockQ8_0::quantize(w, &mut w80);
        let mut q81 = Activations::new();
        let mut q80 = Activations::new();
        q81.quantize(ActKind::Q8_1, a, 2);
        q80.quantize(ActKind::Q8_0, a, 2);
        let (mut plain, mut vnni) = ([[0f32; 2]; 2], [[0f32; 2]; 2]);
        let bits = |o: [[f32; 2]; 2]| o.map(|r| r.map(f32::to_bits));
        unsafe {
            let rows = [q81.row(0).blocks(), q81.row(1).blocks()];
            let scales = [q81.row_scales(0), q81.row_scales(1)];
            legacy_rows(&w41, 10, rows, scales, &mut plain);
            legacy_rows_vnni(&w41, 10, rows, scales, &mut vnni);
            assert_eq!(bits(plain), bits(vnni), "Q4_1");
            let rows = [q80.row(0).blocks(), q80.row(1).blocks()];
            let scales = [q80.row_scales(0), q80.row_scales(1)];
            legacy_rows(&w80, 10, rows, scales, &mut plain);
            legacy_rows_vnni(&w80, 10, rows, scales, &mut vnni);
            assert_eq!(bits(plain), bits(vnni), "Q8_0");
        }
    }
}
