//! Q4_0, Q4_1, Q5_0 and Q8_0 weight rows eight at a time (tiles), stamped for AVX2 and for AVX512-VNNI: the matrix
//! products of these types on x86_64, prefill and decode.
//!
//! As in `avx2_k_tiles`, each 32-bit lane of a tile's vectors holds one weight row: the eight rows' quant bytes are
//! transposed four at a time (lane r of vector c: row r's quants of elements 4c..4c+4), so one multiply against
//! four activation bytes broadcast to every lane adds 32 products, and eight of them make every row's block sum.
//! The weights' quants are made unsigned for the byte multiplies (`maddubs`, `dpbusd`: unsigned times signed):
//! Q4_0's and Q4_1's nibbles as they are (the value is `q - 8`; Q4_1's is `d * q + m`, whose `m` times the activation
//! block's `s` is a second FMA after the block's), Q5_0's nibbles with their fifth bits (`q - 16`), Q8_0's as
//! `q + 128` with VNNI, and the offset times the activation block's sum of quants (`Activations::row_sums`) is taken
//! off the exact integer sum. Without VNNI, Q8_0's `q + 128` would overflow `maddubs`' 16-bit pairs: there its signs
//! move onto the activations instead (which needs activation quants in -127..=127, as the quantizers write). The
//! nibble types' pairs stay far from overflow (at most 2 * 31 * 128 a pair), so without VNNI the products of a lane
//! add up in 16 bits (16 of them for Q4_0 and Q4_1, 8 for Q5_0) before a `madd` widens them.
//!
//! Every output is a sum over blocks of exact integers `s` (the block's dot of quants) times `D = d_w * d_a` (an
//! f32 product of two f16 values: exact), in one order: block i goes into partial sum `i % 8` with one FMA,
//! `R[i % 8] = fma(D, s, R[i % 8])` (Q4_1: then `R[i % 8] = fma(m_w, s_a, R[i % 8])`), and the eight partial sums
//! are added as `simd::avx2::hsum` adds lanes. Tiles
//! keep the eight partial sums per output in eight vectors; the per-row kernel (rows left over from the tiles)
//! makes eight blocks' sums at a time into the lanes of one vector and runs one vector FMA per eight blocks. So
//! every output has the same bits whichever kernel, number of activation rows or thread computed it.
//!
//! With AVX512-VNNI, sixteen rows go first into the lanes of 512-bit vectors (`wide_tile_vnni`): two eight-row
//! transpositions side by side, then each lane the eight-row tile's operations, at half the instructions per
//! product (the byte multiplies were not what bounded the eight-row tile: its other work per block and activation
//! row was).

use std::arch::x86_64::*;
use std::mem::{size_of, MaybeUninit};

use super::act::{BlockQ8_0, Q8Block};
use super::avx2::{bit_bytes, load32, nibbles, Unpack};
use super::check_rows;
use super::legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0};
use crate::simd::avx2::hsum;

/// Weight rows per tile: one per 32-bit lane of a 256-bit vector.
const ROWS: usize = 8;
/// Partial sums per output: block i goes into partial sum `i % LANES`.
const LANES: usize = 8;

/// The legacy types with tiles: Q4_0, Q4_1 and Q5_0 (nibbles; Q4_1 with a min `m` after `d`, Q5_0 with a fifth bit
/// each in `qh`) and Q8_0 (bytes), all a scale `d` first.
pub(crate) trait TileBlock: Unpack {
    /// Q8_0's signed bytes, rather than nibbles.
    const BYTES: bool;
    /// Where the quants start.
    const QS: usize;
    /// Where the 32 fifth bits start (Q5_0: bit j for element j), if any.
    const QH: Option<usize> = None;
}

impl TileBlock for BlockQ4_0 {
    const BYTES: bool = false;
    const QS: usize = std::mem::offset_of!(BlockQ4_0, qs);
}

impl TileBlock for BlockQ4_1 {
    const BYTES: bool = false;
    const QS: usize = std::mem::offset_of!(BlockQ4_1, qs);
}

impl TileBlock for BlockQ5_0 {
    const BYTES: bool = false;
    const QS: usize = std::mem::offset_of!(BlockQ5_0, qs);
    const QH: Option<usize> = Some(std::mem::offset_of!(BlockQ5_0, qh));
}

impl TileBlock for BlockQ8_0 {
    const BYTES: bool = true;
    const QS: usize = std::mem::offset_of!(BlockQ8_0, qs);
}

/// The shift of the activation block's sum of quants to take off a block's integer sum: the offset of the
/// unsigned weight quants (`q` for a value `q - 8` in Q4_0, `q - 16` in Q5_0; `q + 128` for Q8_0 with VNNI), if any.
/// Q4_1 has none: its values are `d * q + m`, and `m` times the activation block's `s` is a second FMA.
const fn offset_shift<B: TileBlock>(vnni: bool) -> Option<i32> {
    match (B::BYTES, B::QH.is_some(), B::WITH_MIN, vnni) {
        (false, _, true, _) => None,
        (false, false, false, _) => Some(3),
        (false, true, false, _) => Some(4),
        (true, _, _, true) => Some(7),
        (true, _, _, false) => None,
    }
}

/// The f16 at byte `at` of each of the eight blocks, to f32 (a gather is slower on some CPUs).
/// # Safety
/// Two bytes are readable at `at` of each of `rows`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_of_rows(rows: &[*const u8; ROWS], at: usize) -> __m256 {
    // SAFETY: the caller's promise; unaligned reads.
    let h = rows.map(|r| unsafe { r.add(at).cast::<i16>().read_unaligned() });
    _mm256_cvtph_ps(_mm_setr_epi16(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]))
}

/// Word `c` (0..4) of the 16 bytes at `offset` in row r's block, in lane r of vector c.
/// # Safety
/// `offset + 16` bytes are readable at each of `rows`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn transpose_words(rows: &[*const u8; ROWS], offset: usize) -> [__m256i; 4] {
    // SAFETY: the caller's promise.
    let [r0, r1, r2, r3, r4, r5, r6, r7] = rows.map(|r| unsafe { r.add(offset) }.cast::<__m128i>());
    // SAFETY: as above; unaligned loads.
    let (v04, v15, v26, v37) = unsafe {
        (
            _mm256_loadu2_m128i(r4, r0),
            _mm256_loadu2_m128i(r5, r1),
            _mm256_loadu2_m128i(r6, r2),
            _mm256_loadu2_m128i(r7, r3),
        )
    };
    // [r0w0 r1w0 r0w1 r1w1 | r4w0 r5w0 r4w1 r5w1] and so on.
    let (t0, t1) = (_mm256_unpacklo_epi32(v04, v15), _mm256_unpackhi_epi32(v04, v15));
    let (t2, t3) = (_mm256_unpacklo_epi32(v26, v37), _mm256_unpackhi_epi32(v26, v37));
    [
        _mm256_unpacklo_epi64(t0, t2),
        _mm256_unpackhi_epi64(t0, t2),
        _mm256_unpacklo_epi64(t1, t3),
        _mm256_unpackhi_epi64(t1, t3),
    ]
}

/// The quants of block `rows[r]` for r = 0..8, transposed: lane r of vector c holds row r's quants of elements
/// 4c..4c+4 as bytes (Q4_0, Q4_1: the nibbles `q`, Q5_0: the nibbles with their fifth bits, unsigned; Q8_0: the
/// signed quants).
/// # Safety
/// Each of `rows` points to a whole block of `B`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_quants<B: TileBlock>(rows: &[*const u8; ROWS]) -> [__m256i; 8] {
    let mut q = [_mm256_setzero_si256(); 8];
    if B::BYTES {
        // SAFETY: a Q8_0 block has 32 quant bytes from QS.
        let (lo, hi) = unsafe { (transpose_words(rows, B::QS), transpose_words(rows, B::QS + 16)) };
        for c in 0..4 {
            (q[c], q[c + 4]) = (lo[c], hi[c]);
        }
    } else {
        // SAFETY: the block has 16 quant bytes from QS. Byte j holds element j (low nibble) and j + 16 (high).
        let packed = unsafe { transpose_words(rows, B::QS) };
        let m4 = _mm256_set1_epi8(0xF);
        for c in 0..4 {
            q[c] = _mm256_and_si256(packed[c], m4);
            q[c + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(packed[c]), m4);
        }
        if let Some(at) = B::QH {
            // SAFETY: the block's 4 bytes of fifth bits at `at`, read unaligned.
            let qh = rows.map(|r| unsafe { r.add(at).cast::<i32>().read_unaligned() });
            let qh = _mm256_setr_epi32(qh[0], qh[1], qh[2], qh[3], qh[4], qh[5], qh[6], qh[7]);
            for (c, q) in q.iter_mut().enumerate() {
                *q = _mm256_or_si256(*q, fifth_bits(qh, c));
            }
        }
    }
    q
}

/// Elements 4c..4c+4's fifth bits (bits 4c..4c+4 of each lane's `qh`) as 16 in those bytes of each lane: the
/// multiply by 1 + 2^7 + 2^14 + 2^21 moves bit k of the nibble to bit 8k (its other copies land on bits no other
/// copy sets, so nothing carries) and the mask keeps those.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: __m256i, c: usize) -> __m256i {
    let nibble = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_set1_epi32(4 * c as i32)), _mm256_set1_epi32(0xF));
    let spread =
        _mm256_and_si256(_mm256_mullo_epi32(nibble, _mm256_set1_epi32(0x0020_4081)), _mm256_set1_epi32(0x0101_0101));
    _mm256_slli_epi32::<4>(spread)
}

/// One block's quants in element order as bytes (Q4_0, Q4_1: the nibbles `q`, Q5_0: the nibbles with their fifth
/// bits, unsigned; Q8_0: the signed quants).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_quants<B: TileBlock>(x: &B) -> __m256i {
    let p = (x as *const B).cast::<u8>();
    // SAFETY: the block's quants: 32 bytes (Q8_0) or 16 (the nibble types) from QS, and Q5_0's 4 bytes of fifth bits.
    unsafe {
        if B::BYTES {
            _mm256_loadu_si256(p.add(B::QS).cast())
        } else {
            let q = nibbles(&*p.add(B::QS).cast::<[u8; 16]>());
            match B::QH {
                Some(at) => {
                    let high = _mm256_and_si256(bit_bytes(*p.add(at).cast::<[u8; 4]>()), _mm256_set1_epi8(16));
                    _mm256_or_si256(q, high)
                }
                None => q,
            }
        }
    }
}

/// The low 16 bits of each 32-bit lane, as f16, to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_lanes(v: __m256i) -> __m256 {
    let v = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    // [l0..l3 l0..l3 | l4..l7 l4..l7] as u16, then the first and third 64 bits side by side.
    let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi32(v, v));
    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
}

/// Lane b: the sum of `p[b]`'s eight lanes (exact: the block sums are far from i32's limits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum_lanes8(p: &[__m256i; LANES]) -> __m256i {
    let (h01, h23) = (_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    let (h45, h67) = (_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    // Lane b of the low half: p[b]'s lanes 0..4; of the high half: its lanes 4..8 (b = 0..4, then 4..8 below).
    let (g0, g1) = (_mm256_hadd_epi32(h01, h23), _mm256_hadd_epi32(h45, h67));
    _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(g0, g1), _mm256_permute2x128_si256::<0x31>(g0, g1))
}

/// The bytes at `4c..4c + 4` of `y` in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn broadcast_word(y: &[i8; 32], c: usize) -> __m256i {
    assert!(c < 8);
    // SAFETY: 4 bytes of `y` (checked above), read unaligned.
    _mm256_set1_epi32(unsafe { y.as_ptr().add(4 * c).cast::<i32>().read_unaligned() })
}

/// A tile's block sums with AVX2: lane r is row r's products with `y`, where `u` are the tile's quants made
/// unsigned (Q4_0: as they are; Q8_0: their absolute values, with their signs `s` moved onto `y`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_dot_avx2<B: TileBlock, const A: usize>(u: &[__m256i; 8], s: &[__m256i; 8], y: &[i8; 32]) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); 2];
    if B::BYTES {
        for c in 0..8 {
            // With one activation row, the absolute values are taken here (as many as before the rows' loop, and 8
            // registers fewer: AVX2 has 16).
            let u = if A == 1 { _mm256_sign_epi8(s[c], s[c]) } else { u[c] };
            let p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(broadcast_word(y, c), s[c]));
            acc[c % 2] = _mm256_add_epi32(acc[c % 2], _mm256_madd_epi16(p, ones));
        }
        _mm256_add_epi32(acc[0], acc[1])
    } else {
        // Each 16-bit lane of `acc[c % 2]` adds 8 products of at most 31 * 128 (31,744): no overflow. Q4_0's and Q4_1's
        // (at most 15 * 128) add up 16 to a lane (30,720) before one `madd`.
        for c in 0..8 {
            acc[c % 2] = _mm256_add_epi16(acc[c % 2], _mm256_maddubs_epi16(u[c], broadcast_word(y, c)));
        }
        match B::QH {
            Some(_) => _mm256_add_epi32(_mm256_madd_epi16(acc[0], ones), _mm256_madd_epi16(acc[1], ones)),
            None => _mm256_madd_epi16(_mm256_add_epi16(acc[0], acc[1]), ones),
        }
    }
}

/// [`tile_dot_avx2`] with AVX512-VNNI: `u` are the unsigned quants (Q4_0's nibbles, Q8_0's `q + 128`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn tile_dot_vnni<B: TileBlock, const A: usize>(u: &[__m256i; 8], _s: &[__m256i; 8], y: &[i8; 32]) -> __m256i {
    let mut acc = [_mm256_setzero_si256(); 2];
    for c in 0..8 {
        acc[c % 2] = _mm256_dpbusd_epi32(acc[c % 2], u[c], broadcast_word(y, c));
    }
    _mm256_add_epi32(acc[0], acc[1])
}

/// One block's products with one activation block with AVX2, as 8 i32 partial sums (`u`, `s` as in
/// [`tile_dot_avx2`], in element order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_dot_avx2<B: TileBlock>(u: __m256i, s: __m256i, y: &[i8; 32]) -> __m256i {
    // SAFETY: 32 bytes.
    let y = unsafe { load32(y) };
    let y = if B::BYTES { _mm256_sign_epi8(y, s) } else { y };
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1))
}

/// [`row_dot_avx2`] with AVX512-VNNI (`u` as in [`tile_dot_vnni`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn row_dot_vnni<B: TileBlock>(u: __m256i, _s: __m256i, y: &[i8; 32]) -> __m256i {
    // SAFETY: 32 bytes.
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, unsafe { load32(y) })
}

/// The tiles and the per-row kernel, stamped out for AVX2 and for AVX512-VNNI (`$vnni`: how the quants are made
/// unsigned; `$tile_dot`, `$row_dot`: the byte products). See the module's comment.
macro_rules! tile_kernels {
    ($features:literal, $vnni:literal, $tile_dot:ident, $row_dot:ident, $rows:ident, $tile:ident, $per_row:ident) => {
        /// Q4_0, Q4_1, Q5_0 or Q8_0 rows (`w`, rows of `row_blocks` blocks) · `A` activation rows of the type's own
        /// (Q8_0; Q8_1 for Q4_1) into `out[row][j]`: whole tiles of eight rows, the rest through the per-row kernel
        /// (the same bits). `a_scales[j]` are activation row j's block scales `(d, s)` (`Activations::row_scales`);
        /// `a_sums[j]` its blocks' sums of quants (`row_sums`), read only for the types with an offset (empty for
        /// Q4_1).
        /// # Safety
        /// The CPU must have the features this is compiled for.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $rows<B: TileBlock, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[B::Act]; A],
            a_scales: [&[[f32; 2]]; A],
            a_sums: [&[i32]; A],
            out: &mut [[f32; A]],
        ) {
            check_rows(w.len(), row_blocks, &a, &a_scales, out.len());
            let offset = offset_shift::<B>($vnni).is_some();
            assert!(!offset || a_sums.iter().all(|s| s.len() >= row_blocks), "activation sums too short");
            let (mut w, mut out) = (w, out);
            if $vnni {
                // Sixteen rows at a time in 512-bit vectors first.
                let wide = out.len() / WIDE_ROWS * WIDE_ROWS;
                let (w_wide, w_rest) = w.split_at(wide * row_blocks);
                let (out_wide, out_rest) = out.split_at_mut(wide);
                for (w, out) in w_wide.chunks_exact(WIDE_ROWS * row_blocks).zip(out_wide.chunks_exact_mut(WIDE_ROWS)) {
                    // SAFETY: sixteen whole rows, activation rows checked above; the CPU has AVX512-VNNI (the
                    // caller's promise for this stamping).
                    unsafe { wide_tile_vnni(w, row_blocks, a, a_scales, a_sums, out) };
                }
                (w, out) = (w_rest, out_rest);
            }
            let tiled = out.len() / ROWS * ROWS;
            let (w_tiles, w_rest) = w.split_at(tiled * row_blocks);
            let (out_tiles, out_rest) = out.split_at_mut(tiled);
            for (w, out) in w_tiles.chunks_exact(ROWS * row_blocks).zip(out_tiles.chunks_exact_mut(ROWS)) {
                // SAFETY: eight whole rows, activation rows checked above.
                unsafe { $tile(w, row_blocks, a, a_scales, a_sums, out) };
            }
            // SAFETY: as above.
            unsafe { $per_row(w_rest, row_blocks, a, a_scales, a_sums, out_rest) };
        }

        /// Eight rows (`w`) · `A` activation rows, into `out` (eight outputs).
        /// # Safety
        /// `w` is eight rows of `row_blocks` blocks; each activation row has `row_blocks` blocks, scales, sums.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $tile<B: TileBlock, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[B::Act]; A],
            a_scales: [&[[f32; 2]]; A],
            a_sums: [&[i32]; A],
            out: &mut [[f32; A]],
        ) {
            let stride = row_blocks * size_of::<B>();
            let shift = offset_shift::<B>($vnni);
            // Partial sum `i % LANES` starts at block i < LANES (from zero, as a zeroed array would): no clearing of
            // the whole array per call, which cost more than a few blocks' work.
            let mut acc = [[MaybeUninit::<__m256>::uninit(); LANES]; A];
            let base = w.as_ptr().cast::<u8>();
            // The next eight rows lie right after these: fetched a block's share at a time (8 blocks' bytes), so that
            // they are in cache when their tile starts. The eight rows' short interleaved streams (a row of 576 values
            // is 10 lines of Q8_0) end before the hardware prefetchers get ahead of them: decode, which reads the
            // weights from memory once, ran slower than the per-row kernels without this.
            let next = base.wrapping_add(ROWS * stride);
            let share = ROWS * size_of::<B>();
            for i in 0..row_blocks {
                let ahead = next.wrapping_add(i * share);
                for l in (0..share).step_by(64) {
                    // A hint: never faults, whatever the address (past the matrix's end for its last tile).
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
                }
                // SAFETY: block i of each of the eight rows (the caller's promise).
                let x0 = unsafe { base.add(i * size_of::<B>()) };
                let mut x = [x0; ROWS];
                for r in 1..ROWS {
                    // SAFETY: as above.
                    x[r] = unsafe { x0.add(r * stride) };
                }
                // SAFETY: as above.
                let q = unsafe { tile_quants::<B>(&x) };
                let mut u = q;
                if B::BYTES && ($vnni || A > 1) {
                    for c in 0..8 {
                        u[c] = if $vnni {
                            _mm256_xor_si256(q[c], _mm256_set1_epi8(-128))
                        } else {
                            _mm256_sign_epi8(q[c], q[c])
                        };
                    }
                }
                // The eight rows' `d` and (Q4_1) `m`.
                // SAFETY: as above: every block starts with `d`, Q4_1's with `d` and `m`.
                let dw = unsafe { f16_of_rows(&x, 0) };
                let mw = if B::WITH_MIN { unsafe { f16_of_rows(&x, 2) } } else { _mm256_setzero_ps() };
                for k in 0..A {
                    // SAFETY: the caller's promise on the activation rows (and their sums where there is an offset).
                    let (y, [scale, s_a]) = unsafe { (a[k].get_unchecked(i), *a_scales[k].get_unchecked(i)) };
                    let mut s = $tile_dot::<B, A>(&u, &q, y.qs());
                    if let Some(shift) = shift {
                        let sum = unsafe { *a_sums[k].get_unchecked(i) };
                        s = _mm256_sub_epi32(s, _mm256_set1_epi32(sum << shift));
                    }
                    let d = _mm256_mul_ps(dw, _mm256_set1_ps(scale));
                    let p = &mut acc[k][i % LANES];
                    // SAFETY: written at block i - LANES.
                    let mut v = if i < LANES { _mm256_setzero_ps() } else { unsafe { p.assume_init() } };
                    v = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), v);
                    if B::WITH_MIN {
                        v = _mm256_fmadd_ps(mw, _mm256_set1_ps(s_a), v);
                    }
                    p.write(v);
                }
            }
            for k in 0..A {
                let mut r = [_mm256_setzero_ps(); LANES];
                // A fixed count, each partial sum taken where it was written: a copy of `row_blocks.min(LANES)`
                // of them was a call to `memcpy` per activation row.
                for j in 0..LANES {
                    if j < row_blocks {
                        // SAFETY: written above (partial sum j at block j).
                        r[j] = unsafe { acc[k][j].assume_init() };
                    }
                }
                // As `hsum` adds a vector's lanes: ((r0 + r4) + (r2 + r6)) + ((r1 + r5) + (r3 + r7)).
                let sum = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(r[0], r[4]), _mm256_add_ps(r[2], r[6])),
                    _mm256_add_ps(_mm256_add_ps(r[1], r[5]), _mm256_add_ps(r[3], r[7])),
                );
                let mut lanes = [0f32; ROWS];
                // SAFETY: room for 8 floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
                for r in 0..ROWS {
                    out[r][k] = lanes[r];
                }
            }
        }

        /// Rows one at a time (`w`, whole rows) · `A` activation rows, in the tiles' order: eight blocks' sums
        /// in the lanes of one vector, one FMA per eight blocks.
        /// # Safety
        /// As the tile.
        #[target_feature(enable = $features)]
        unsafe fn $per_row<B: TileBlock, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[B::Act]; A],
            a_scales: [&[[f32; 2]]; A],
            a_sums: [&[i32]; A],
            out: &mut [[f32; A]],
        ) {
            let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let block_offsets = _mm256_mullo_epi32(lane, _mm256_set1_epi32(size_of::<B>() as i32));
            let scale_index = _mm256_slli_epi32::<1>(lane); // (d, s) pairs
            let shift = offset_shift::<B>($vnni);
            for (w, out) in w.chunks_exact(row_blocks).zip(out) {
                let mut acc = [_mm256_setzero_ps(); A];
                for g in (0..row_blocks).step_by(LANES) {
                    let n = (row_blocks - g).min(LANES);
                    let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lane);
                    let zero = _mm256_setzero_si256();
                    // The blocks' `d` and (Q4_1) `m`, the f16 after it. (No closure for the two: a vector-valued one
                    // may not be inlined into these `target_feature` functions.)
                    // SAFETY: g < row_blocks: block g of the row.
                    let base = unsafe { w.as_ptr().add(g) }.cast::<u8>();
                    // SAFETY: the lanes of blocks g..g + n, the rest masked off (not read).
                    let dw =
                        f16_lanes(unsafe { _mm256_mask_i32gather_epi32::<1>(zero, base.cast(), block_offsets, mask) });
                    let mw = match B::WITH_MIN {
                        // SAFETY: as for `dw`.
                        true => f16_lanes(unsafe {
                            _mm256_mask_i32gather_epi32::<1>(zero, base.add(2).cast(), block_offsets, mask)
                        }),
                        false => _mm256_setzero_ps(),
                    };
                    let mut p = [[zero; LANES]; A];
                    // Block g + b's products into `p[k][b]` (a macro: a closure returning vectors may not inline).
                    macro_rules! block {
                        ($b:expr) => {{
                            let b = $b;
                            // SAFETY: b < n, so g + b < row_blocks.
                            let x = unsafe { w.get_unchecked(g + b) };
                            let q = row_quants(x);
                            let u = match (B::BYTES, $vnni) {
                                (true, true) => _mm256_xor_si256(q, _mm256_set1_epi8(-128)),
                                (true, false) => _mm256_sign_epi8(q, q),
                                _ => q,
                            };
                            for k in 0..A {
                                // SAFETY: the caller's promise on the activation rows.
                                p[k][b] = $row_dot::<B>(u, q, unsafe { a[k].get_unchecked(g + b).qs() });
                            }
                        }};
                    }
                    if n == LANES {
                        for b in 0..LANES {
                            block!(b);
                        }
                    } else {
                        for b in 0..n {
                            block!(b);
                        }
                    }
                    for k in 0..A {
                        let mut s = sum_lanes8(&p[k]);
                        if let Some(shift) = shift {
                            // SAFETY: as for `dw`.
                            let sums = unsafe { _mm256_maskload_epi32(a_sums[k].as_ptr().add(g), mask) };
                            s = _mm256_sub_epi32(s, _mm256_sll_epi32(sums, _mm_cvtsi32_si128(shift)));
                        }
                        // SAFETY: as for `dw`.
                        let da = unsafe {
                            let at = a_scales[k].as_ptr().add(g).cast::<f32>();
                            _mm256_mask_i32gather_ps::<4>(
                                _mm256_setzero_ps(),
                                at,
                                scale_index,
                                _mm256_castsi256_ps(mask),
                            )
                        };
                        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(s), acc[k]);
                        if B::WITH_MIN {
                            // SAFETY: as for `da` (each block's `s` after its `d`).
                            let sa = unsafe {
                                let at = a_scales[k].as_ptr().add(g).cast::<f32>().add(1);
                                _mm256_mask_i32gather_ps::<4>(
                                    _mm256_setzero_ps(),
                                    at,
                                    scale_index,
                                    _mm256_castsi256_ps(mask),
                                )
                            };
                            acc[k] = _mm256_fmadd_ps(mw, sa, acc[k]);
                        }
                    }
                }
                *out = std::array::from_fn(|k| hsum(acc[k]));
            }
        }
    };
}

/// Weight rows per wide tile: one per 32-bit lane of a 512-bit vector (the AVX512-VNNI stamping).
const WIDE_ROWS: usize = 16;

/// [`tile_quants`] of sixteen blocks in the lanes of 512-bit vectors: lane r of vector c holds row r's quants of
/// elements 4c..4c+4.
/// # Safety
/// Each of `rows` points to a whole block of `B`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn wide_tile_quants<B: TileBlock>(rows: &[*const u8; WIDE_ROWS]) -> [__m512i; 8] {
    let (low, high): (&[_; ROWS], &[_; ROWS]) = (rows[..ROWS].try_into().unwrap(), rows[ROWS..].try_into().unwrap());
    // SAFETY: the caller's promise.
    let (low, high) = unsafe { (tile_quants::<B>(low), tile_quants::<B>(high)) };
    std::array::from_fn(|c| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low[c]), high[c]))
}

/// The VNNI tile for sixteen rows (`w`) · `A` activation rows, into `out` (sixteen outputs): each row's lane of
/// 512-bit vectors sees exactly the operations of its lane in the eight-row tile (the same integer block sums, then
/// the same float multiply and FMA into partial sum `i % 8`, added in the same order), so the bits are the same,
/// for half the instructions per product.
/// # Safety
/// `w` is sixteen rows of `row_blocks` blocks; each activation row has `row_blocks` blocks, scales, sums; the CPU has
/// AVX512-VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn wide_tile_vnni<B: TileBlock, const A: usize>(
    w: &[B],
    row_blocks: usize,
    a: [&[B::Act]; A],
    a_scales: [&[[f32; 2]]; A],
    a_sums: [&[i32]; A],
    out: &mut [[f32; A]],
) {
    let stride = row_blocks * size_of::<B>();
    let shift = offset_shift::<B>(true);
    // Partial sums started at their first block, as in the eight-row tile.
    let mut acc = [[MaybeUninit::<__m512>::uninit(); LANES]; A];
    let base = w.as_ptr().cast::<u8>();
    // The next rows fetched ahead a block's share at a time, as in the eight-row tile.
    let next = base.wrapping_add(WIDE_ROWS * stride);
    let share = WIDE_ROWS * size_of::<B>();
    // Row r's block 0 at `row_offsets[r]` bytes from `base`: the blocks' scales are gathered (sixteen inserts cost more).
    assert!(i32::try_from(WIDE_ROWS * stride).is_ok(), "rows too long for 32-bit offsets");
    let row_offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(stride as i32),
    );
    for i in 0..row_blocks {
        let ahead = next.wrapping_add(i * share);
        for l in (0..share).step_by(64) {
            // A hint: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
        }
        // SAFETY: block i of each of the sixteen rows (the caller's promise).
        let x: [*const u8; WIDE_ROWS] = std::array::from_fn(|r| unsafe { base.add(r * stride + i * size_of::<B>()) });
        // SAFETY: as above.
        let mut u = unsafe { wide_tile_quants::<B>(&x) };
        if B::BYTES {
            // Q8_0's quants as `q + 128`, unsigned (the offset taken off below).
            u = u.map(|q| _mm512_xor_si512(q, _mm512_set1_epi8(-128)));
        }
        // SAFETY: as above: every block starts with `d`, Q4_1's with `d` and `m` (4 bytes; Q4_0's, Q5_0's and Q8_0's
        // `d` and their next two bytes).
        let dm = unsafe { _mm512_i32gather_epi32::<1>(row_offsets, base.add(i * size_of::<B>()).cast()) };
        let dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        let mw = if B::WITH_MIN {
            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dm)))
        } else {
            _mm512_setzero_ps()
        };
        for k in 0..A {
            // SAFETY: the caller's promise on the activation rows (and their sums where there is an offset).
            let (y, [scale, s_a]) = unsafe { (a[k].get_unchecked(i), *a_scales[k].get_unchecked(i)) };
            let y = y.qs();
            let mut sums = [_mm512_setzero_si512(); 2];
            for c in 0..8 {
                // SAFETY: bytes 4c..4c + 4 of the 32, read unaligned.
                let word = unsafe { y.as_ptr().add(4 * c).cast::<i32>().read_unaligned() };
                sums[c % 2] = _mm512_dpbusd_epi32(sums[c % 2], u[c], _mm512_set1_epi32(word));
            }
            let mut s = _mm512_add_epi32(sums[0], sums[1]);
            if let Some(shift) = shift {
                // SAFETY: as above.
                let sum = unsafe { *a_sums[k].get_unchecked(i) };
                s = _mm512_sub_epi32(s, _mm512_set1_epi32(sum << shift));
            }
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(scale));
            let p = &mut acc[k][i % LANES];
            // SAFETY: written at block i - LANES.
            let mut v = if i < LANES { _mm512_setzero_ps() } else { unsafe { p.assume_init() } };
            v = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), v);
            if B::WITH_MIN {
                v = _mm512_fmadd_ps(mw, _mm512_set1_ps(s_a), v);
            }
            p.write(v);
        }
    }
    for k in 0..A {
        let mut r = [_mm512_setzero_ps(); LANES];
        // A fixed count, as in the eight-row tile.
        for j in 0..LANES {
            if j < row_blocks {
                // SAFETY: written above (partial sum j at block j).
                r[j] = unsafe { acc[k][j].assume_init() };
            }
        }
        // As the eight-row tile adds them.
        let sum = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(r[0], r[4]), _mm512_add_ps(r[2], r[6])),
            _mm512_add_ps(_mm512_add_ps(r[1], r[5]), _mm512_add_ps(r[3], r[7])),
        );
        let mut lanes = [0f32; WIDE_ROWS];
        // SAFETY: room for 16 floats.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sum) };
        for r in 0..WIDE_ROWS {
            out[r][k] = lanes[r];
        }
    }
}

tile_kernels!("avx2,fma,f16c", false, tile_dot_avx2, row_dot_avx2, tile_rows, tile, per_row);
tile_kernels!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    true,
    tile_dot_vnni,
    row_dot_vnni,
    tile_rows_vnni,
    tile_vnni,
    per_row_vnni
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::act::BlockQ8_1;
    use crate::quant::act::QK8;
    use crate::quant::{as_blocks_mut, ActKind, ActRow, Activations, QuantBlock};
    use crate::simd::cpu::{has_avx2, has_vnni};
    use crate::test_support::Rng;

    /// Both stampings, tiles and per-row kernel, with 1, 4, 8 and 16 activation rows, give the same bits: on quantized
    /// rows whose quants are then made random, and on rows and activations at their extremes (every weight byte
    /// 0x00, 0xFF, 0x80 or 0x7F; activations all -127, all 127, or alternating). `quant::tests` checks the stamping
    /// `dot_rows` runs against the scalar reference.
    #[test]
    fn tiles_and_rows_agree_on_both_isas() {
        if !has_avx2() {
            return; // nothing to run on this CPU
        }
        let mut rng = Rng::new(11);
        // A wide tile (AVX512-VNNI), a tile and three rows left over (two tiles with AVX2); block counts with and
        // without a partial group of eight.
        for (row_blocks, extreme) in
            [(5, None), (8, None), (19, None), (9, Some(0x00)), (9, Some(0xFF)), (9, Some(0x80))]
                .into_iter()
                .chain([(9, Some(0x7F))])
        {
            let rows = 27;
            let x: Vec<f32> = (0..rows * row_blocks * QK8).map(|_| rng.uniform(-1.0, 1.0)).collect();
            // The same activations as Q8_0 (for Q4_0, Q5_0, Q8_0) and Q8_1 (for Q4_1).
            let (mut acts, mut acts1) = (Activations::new(), Activations::new());
            match extreme {
                None => {
                    let a: Vec<f32> = (0..A_ROWS * row_blocks * QK8).map(|_| rng.uniform(-1.0, 1.0)).collect();
                    acts.quantize(ActKind::Q8_0, &a, A_ROWS);
                    acts1.quantize(ActKind::Q8_1, &a, A_ROWS);
                }
                Some(fill) => {
                    let d = crate::quant::act::f32_to_f16(0.01);
                    let blocks: Vec<BlockQ8_0> = (0..A_ROWS * row_blocks)
                        .map(|b| BlockQ8_0 {
                            d,
                            qs: std::array::from_fn(|i| match (fill as usize + b) % 3 {
                                0 => -127,
                                1 => 127,
                                _ => [-127, 127][i % 2],
                            }),
                        })
                        .collect();
                    let blocks1: Vec<BlockQ8_1> = blocks
                        .iter()
                        .map(|b| BlockQ8_1 {
                            d,
                            s: crate::quant::act::f32_to_f16(0.01 * b.qs.iter().map(|&q| q as f32).sum::<f32>()),
                            qs: b.qs,
                        })
                        .collect();
                    acts = Activations::from_blocks(ActRow::Q8_0(&blocks), A_ROWS);
                    acts1 = Activations::from_blocks(ActRow::Q8_1(&blocks1), A_ROWS);
                }
            }
            macro_rules! check {
                ($B:ty, $acts:expr) => {{
                    let acts = &$acts;
                    let mut stored = vec![0u8; rows * row_blocks * size_of::<$B>()];
                    let w = as_blocks_mut::<$B>(&mut stored);
                    <$B>::quantize(&x, w);
                    for b in w.iter_mut() {
                        let bytes = unsafe {
                            let qh = <$B as TileBlock>::QH.unwrap_or(<$B as TileBlock>::QS);
                            std::slice::from_raw_parts_mut((b as *mut $B).cast::<u8>().add(qh), size_of::<$B>() - qh)
                        };
                        match extreme {
                            None => rng.fill(bytes),
                            Some(fill) => bytes.fill(fill),
                        }
                    }
                    let w = &*w;
                    let want = run::<$B, 1>(w, row_blocks, acts, false, false);
                    assert!(want.iter().all(|o| o.iter().all(|v| v.is_finite())));
                    for vnni in [false, true] {
                        if vnni && !has_vnni() {
                            continue;
                        }
                        for per_row in [false, true] {
                            let at = format!(
                                "{} {row_blocks} blocks {extreme:?} vnni {vnni} per-row {per_row}",
                                stringify!($B)
                            );
                            assert_eq!(bits(&run::<$B, 1>(w, row_blocks, acts, vnni, per_row)), bits(&want), "{at}, 1");
                            assert_eq!(bits(&run::<$B, 4>(w, row_blocks, acts, vnni, per_row)), bits(&want), "{at}, 4");
                            assert_eq!(bits(&run::<$B, 8>(w, row_blocks, acts, vnni, per_row)), bits(&want), "{at}, 8");
                            assert_eq!(
                                bits(&run::<$B, 16>(w, row_blocks, acts, vnni, per_row)),
                                bits(&want),
                                "{at}, 16"
                            );
                        }
                    }
                }};
            }
            check!(BlockQ4_0, acts);
            check!(BlockQ4_1, acts1);
            check!(BlockQ5_0, acts);
            check!(BlockQ8_0, acts);
        }
    }

    fn bits(out: &[Vec<f32>]) -> Vec<Vec<u32>> {
        out.iter().map(|r| r.iter().map(|v| v.to_bits()).collect()).collect()
    }

    /// Activation rows of the checks: the most any caller gives at once (`dot_rows_batch`).
    const A_ROWS: usize = 16;

    /// `out[row][t]` for the activation rows of `acts`, `A` at a time, by one stamping's tiles or per-row kernel.
    fn run<B: TileBlock, const A: usize>(
        w: &[B],
        row_blocks: usize,
        acts: &Activations,
        vnni: bool,
        per_row_only: bool,
    ) -> Vec<Vec<f32>> {
        let rows = w.len() / row_blocks;
        let mut all = vec![vec![0f32; A_ROWS]; rows];
        for t0 in (0..A_ROWS).step_by(A) {
            let ids: [usize; A] = std::array::from_fn(|j| t0 + j);
            let a = ids.map(|r| acts.row(r).blocks());
            let scales = ids.map(|r| acts.row_scales(r));
            let sums = ids.map(|r| if B::WITH_MIN { &[][..] } else { acts.row_sums(r) });
            let mut out = vec![[0f32; A]; rows];
            // SAFETY: the CPU has AVX2, FMA and F16C (checked by the caller), and VNNI where `vnni`.
            unsafe {
                match (vnni, per_row_only) {
                    (false, false) => tile_rows(w, row_blocks, a, scales, sums, &mut out),
                    (false, true) => per_row(w, row_blocks, a, scales, sums, &mut out),
                    (true, false) => tile_rows_vnni(w, row_blocks, a, scales, sums, &mut out),
                    (true, true) => per_row_vnni(w, row_blocks, a, scales, sums, &mut out),
                }
            }
            for (all, o) in all.iter_mut().zip(&out) {
                all[t0..t0 + A].copy_from_slice(o);
            }
        }
        all
    }

    /// Rough speed of the kernels: 64 rows of 2048 columns (in L2), one thread, multiply-adds per ns, best of 200.
    /// `cargo test --release -p ruvllm --lib timing_tiles -- --ignored --nocapture` (`RUVLLM_CPU=avx2` for AVX2).
    #[test]
    #[ignore = "timing, not a check"]
    fn timing_tiles() {
        use std::time::Instant;
        let (cols, rows) = (2048, 64);
        let row_blocks = cols / QK8;
        let mut rng = Rng::new(3);
        let x: Vec<f32> = (0..rows * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let a: Vec<f32> = (0..8 * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let mut acts = Activations::new();
        acts.quantize(ActKind::Q8_0, &a, 8);
        fn speed<const A: usize>(rows: usize, cols: usize, mut f: impl FnMut(&mut [[f32; A]])) -> f64 {
            let mut best = f64::MAX;
            let mut out = vec![[0f32; A]; rows];
            for _ in 0..200 {
                let t = Instant::now();
                f(&mut out);
                std::hint::black_box(&out);
                best = best.min(t.elapsed().as_secs_f64() * 1e9);
            }
            (rows * cols * A) as f64 / best
        }
        let vnni = has_vnni();
        macro_rules! time {
            ($B:ty) => {{
                let mut stored = vec![0u8; rows * row_blocks * size_of::<$B>()];
                <$B>::quantize(&x, as_blocks_mut::<$B>(&mut stored));
                let w = crate::quant::as_blocks::<$B>(&stored);
                macro_rules! args {
                    ($A:literal) => {{
                        let ids: [usize; $A] = std::array::from_fn(|j| j);
                        (
                            ids.map(|r| acts.row(r).blocks()),
                            ids.map(|r| acts.row_scales(r)),
                            ids.map(|r| acts.row_sums(r)),
                        )
                    }};
                }
                let (a8, s8, u8_) = args!(8);
                let (a4, s4, _) = args!(4);
                let (a1, s1, u1) = args!(1);
                // SAFETY: the CPU has AVX2 (and VNNI where `vnni`).
                let (t8, t1, r1, old4, old1) = unsafe {
                    if vnni {
                        (
                            speed::<8>(rows, cols, |o| tile_rows_vnni(w, row_blocks, a8, s8, u8_, o)),
                            speed::<1>(rows, cols, |o| tile_rows_vnni(w, row_blocks, a1, s1, u1, o)),
                            speed::<1>(rows, cols, |o| per_row_vnni(w, row_blocks, a1, s1, u1, o)),
                            speed::<4>(rows, cols, |o| super::super::avx2::legacy_rows_vnni(w, row_blocks, a4, s4, o)),
                            speed::<1>(rows, cols, |o| super::super::avx2::legacy_rows_vnni(w, row_blocks, a1, s1, o)),
                        )
                    } else {
                        (
                            speed::<8>(rows, cols, |o| tile_rows(w, row_blocks, a8, s8, u8_, o)),
                            speed::<1>(rows, cols, |o| tile_rows(w, row_blocks, a1, s1, u1, o)),
                            speed::<1>(rows, cols, |o| per_row(w, row_blocks, a1, s1, u1, o)),
                            speed::<4>(rows, cols, |o| super::super::avx2::legacy_rows(w, row_blocks, a4, s4, o)),
                            speed::<1>(rows, cols, |o| super::super::avx2::legacy_rows(w, row_blocks, a1, s1, o)),
                        )
                    }
                };
                println!(
                    "{} (vnni {vnni}): tiles 8 rows {t8:.1}, tiles 1 row {t1:.1}, per-row 1 row {r1:.1}; \
                     legacy_rows 4 rows {old4:.1}, 1 row {old1:.1} MAC/ns",
                    stringify!($B)
                );
            }};
        }
        time!(BlockQ4_0);
        time!(BlockQ5_0);
        time!(BlockQ8_0);
    }
}
