//! Q4_K and Q5_K rows eight at a time (tiles), stamped for AVX2 and for AVX512-VNNI (256-bit vectors): prefill's
//! matrix products for the K-quant models, where the per-row kernels of `avx2_k` spend two multiplies (`maddubs`,
//! then `madd` with the sub-block scale) per 32 products. (Q6_K has no tile: one with 16 signed scales and the
//! offset of 32 was only ~6% faster than its per-row kernel with eight activation rows (VNNI), and its block-sum
//! order moved Gemma 3 270M's worst position past the llama.cpp bound of `tests/rust/gemma3.rs`.)
//!
//! Here each 32-bit lane holds one weight row. The eight rows' quant bytes are transposed four bytes at a time
//! (lane r of vector c: bytes 4c..4c+4 of row r), so one `dpbusd` against four activation bytes broadcast to
//! every lane adds 32 products, and a sub-block's eight of them make every row's exact integer sum for that
//! sub-block; its scale is then one 32-bit multiply per lane for all eight rows. Without VNNI each `dpbusd` is a
//! `maddubs` into 16-bit pairs, which add up in 16 bits over four of them (8 products of at most 31 * 128: no
//! overflow) before a `madd` with the sub-block scale widens them: the same integers. The transposition is paid
//! once per block for all the activation rows.
//!
//! Each output is a block-by-block sum of exact integers (the block's scaled quant sums; its mins times the
//! activation's sub-block sums, in four pairs of sub-blocks) times float scales, in the order the type's
//! `vec_dot` in `avx2_k` adds them: the same bits as `vec_dot`, whatever the number of rows or activation rows.
//!
//! With AVX512-VNNI, sixteen rows go first into the lanes of 512-bit vectors (`wide_k4_tile_vnni`): two eight-row
//! tiles' unpacking (`block_scales`, `block_quants`) side by side, then each lane the eight-row tile's operations.

use core::arch::x86_64::*;

use super::act::{BlockQ8K, QK_K};
use super::avx2_k::{fifth_bit, k4_rows, k4_rows_vnni, load256, K4Block};
use super::avx2_tiles::transpose_words;
use super::check_k_rows;

/// Rows per tile: one per 32-bit lane of a 256-bit vector.
const ROWS: usize = 8;

/// `shuffle_epi8` masks that widen bytes 0, 1 (first mask) or 2, 3 (second) of each 32-bit lane to its two i16
/// halves. (The shuffle indexes bytes within each 128-bit half, where lane p's bytes are 4p..4p+4; -1 gives 0.)
const MIN_PAIRS: [[i8; 32]; 2] = {
    let mut masks = [[-1i8; 32]; 2];
    let mut i = 0;
    while i < 32 {
        let p = (i % 16 / 4) as i8;
        masks[0][i] = [4 * p, -1, 4 * p + 1, -1][i % 4];
        masks[1][i] = [4 * p + 2, -1, 4 * p + 3, -1][i % 4];
        i += 1;
    }
    masks
};

// No vector-valued closures below (`array::from_fn(|c| ...)` and the like): such helpers were not inlined into
// these `target_feature` functions, and every vector then went through memory. Plain loops over arrays instead.

/// The top two bits of each byte of `u`, as bits 4 and 5 (how Q4_K packs the high bits of scales 4..8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn high2(u: __m256i) -> __m256i {
    _mm256_slli_epi32::<4>(_mm256_and_si256(_mm256_srli_epi32::<6>(u), _mm256_set1_epi32(0x0303_0303)))
}

/// Byte `k` (0..4) of each 32-bit lane, zero-extended.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn byte_of_lanes(v: __m256i, k: usize) -> __m256i {
    let ff = _mm256_set1_epi32(0xff);
    match k {
        0 => _mm256_and_si256(v, ff),
        1 => _mm256_and_si256(_mm256_srli_epi32::<8>(v), ff),
        2 => _mm256_and_si256(_mm256_srli_epi32::<16>(v), ff),
        _ => _mm256_srli_epi32::<24>(v),
    }
}

/// The four bytes from byte `at` of `s`, in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn broadcast_word<T: Copy>(s: &[T], at: usize) -> __m256i {
    assert!(at + 4 <= std::mem::size_of_val(s));
    // SAFETY: 4 bytes of `s` (checked above), read unaligned.
    _mm256_set1_epi32(unsafe { s.as_ptr().cast::<u8>().add(at).cast::<i32>().read_unaligned() })
}

/// A sub-block's 32 products in each row (`q`: the tile's unsigned quants, `q8`: the activation's 32 bytes) times
/// its scale in each row (`scale`: in both 16-bit halves of each lane), with AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sub_block_avx2<B: K4Block>(q: &[__m256i; 8], q8: &[i8], scale: __m256i) -> __m256i {
    let mut acc = [_mm256_setzero_si256(); 2];
    for c in 0..8 {
        acc[c % 2] = _mm256_add_epi16(acc[c % 2], _mm256_maddubs_epi16(q[c], broadcast_word(q8, 4 * c)));
    }
    if B::QH.is_some() {
        // Quants up to 31: 8 products a 16-bit lane at most (31,744).
        _mm256_add_epi32(_mm256_madd_epi16(acc[0], scale), _mm256_madd_epi16(acc[1], scale))
    } else {
        // Up to 15: all 16 (30,720).
        _mm256_madd_epi16(_mm256_add_epi16(acc[0], acc[1]), scale)
    }
}

/// [`sub_block_avx2`] with AVX512-VNNI (`scale`: one i32 per lane).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn sub_block_vnni<B: K4Block>(q: &[__m256i; 8], q8: &[i8], scale: __m256i) -> __m256i {
    // Two accumulators: chains of four dependent `dpbusd`s, not eight.
    let mut acc = [_mm256_setzero_si256(); 2];
    for c in 0..8 {
        acc[c % 2] = _mm256_dpbusd_epi32(acc[c % 2], q[c], broadcast_word(q8, 4 * c));
    }
    _mm256_mullo_epi32(_mm256_add_epi32(acc[0], acc[1]), scale)
}

/// What a tile reads of a block besides its quants, for eight rows (lane r: row r).
struct BlockScales {
    /// The eight sub-block scales: one i32 per lane with VNNI, else in both 16-bit halves (for `madd`).
    scales: [__m256i; 8],
    /// The mins in i16 pairs (sub-blocks 2t, 2t + 1) per lane, for `madd` with the activation's sub-block sums.
    min_pairs: [__m256i; 4],
    /// `d` and `dmin` as f32.
    xd: __m256,
    xdmin: __m256,
    /// Q5_K's fifth bits, transposed as the quants (zero for Q4_K): bit 2j (and 2j + 1) of byte l is for value l of
    /// sub-block 2j (and 2j + 1).
    qh: [__m256i; 8],
}

/// The [`BlockScales`] of the eight blocks at `x`, for a tile with VNNI or without.
/// # Safety
/// Each of `x` points to a whole block of `B`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_scales<B: K4Block, const VNNI: bool>(x: &[*const u8; ROWS]) -> BlockScales {
    let kmask1 = _mm256_set1_epi32(0x3f3f_3f3f);
    let kmask2 = _mm256_set1_epi32(0x0f0f_0f0f);
    let min_masks = [load256(&MIN_PAIRS[0]), load256(&MIN_PAIRS[1])];
    // The first 16 bytes' words: d and dmin (f16 each), then the packed scales' words u0, u1, u2, unpacked as
    // `k_quants::scales_mins_k4` does, for all eight rows at once.
    // SAFETY: every block holds at least these 16 bytes, and Q5_K's 32 bytes of fifth bits (the caller's promise).
    let [dd, u0, u1, u2] = unsafe { transpose_words(x, 0) };
    let mut qh = [_mm256_setzero_si256(); 8];
    if let Some(at) = B::QH {
        // SAFETY: as above.
        let (lo, hi) = unsafe { (transpose_words(x, at), transpose_words(x, at + 16)) };
        for c in 0..4 {
            (qh[c], qh[c + 4]) = (lo[c], hi[c]);
        }
    }
    let scales_lo = _mm256_and_si256(u0, kmask1);
    let scales_hi = _mm256_or_si256(_mm256_and_si256(u2, kmask2), high2(u0));
    let mins_lo = _mm256_and_si256(u1, kmask1);
    let mins_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32::<4>(u2), kmask2), high2(u1));
    let mut scales = [_mm256_setzero_si256(); 8];
    for s in 0..4 {
        scales[s] = byte_of_lanes(scales_lo, s);
        scales[s + 4] = byte_of_lanes(scales_hi, s);
    }
    if !VNNI {
        for s in &mut scales {
            *s = _mm256_or_si256(*s, _mm256_slli_epi32::<16>(*s));
        }
    }
    let min_pairs = [
        _mm256_shuffle_epi8(mins_lo, min_masks[0]),
        _mm256_shuffle_epi8(mins_lo, min_masks[1]),
        _mm256_shuffle_epi8(mins_hi, min_masks[0]),
        _mm256_shuffle_epi8(mins_hi, min_masks[1]),
    ];
    // d and dmin of the eight rows as f32 (the lanes of `dd` hold d | dmin << 16).
    let packed = _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32::<16>(dd));
    // [d0..d3 dmin0..dmin3 | d4..d7 dmin4..dmin7] as u16, then the d's before the dmin's.
    let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(packed);
    let xd = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
    let xdmin = _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(packed));
    BlockScales { scales, min_pairs, xd, xdmin, qh }
}

/// Values 64j..64j+64 of the eight blocks at `x`, transposed: bytes 4c..4c+4 of each row's 32 quant bytes (c = 0..8),
/// the low nibbles (sub-block 2j) and the high (2j + 1), with Q5_K's fifth bits (`qh` of [`BlockScales`]).
/// # Safety
/// Each of `x` points to a whole block of `B`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_quants<B: K4Block>(x: &[*const u8; ROWS], j: usize, qh: &[__m256i; 8]) -> ([__m256i; 8], [__m256i; 8]) {
    let m4 = _mm256_set1_epi8(0xF);
    // SAFETY: the caller's promise.
    let (lo_half, hi_half) = unsafe { (transpose_words(x, B::QS + 32 * j), transpose_words(x, B::QS + 32 * j + 16)) };
    let (mut q4l, mut q4h) = ([_mm256_setzero_si256(); 8], [_mm256_setzero_si256(); 8]);
    for c in 0..4 {
        q4l[c] = _mm256_and_si256(lo_half[c], m4);
        q4l[c + 4] = _mm256_and_si256(hi_half[c], m4);
        q4h[c] = _mm256_and_si256(_mm256_srli_epi16::<4>(lo_half[c]), m4);
        q4h[c + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(hi_half[c]), m4);
    }
    if B::QH.is_some() {
        for c in 0..8 {
            q4l[c] = _mm256_or_si256(q4l[c], fifth_bit(qh[c], 2 * j as i32));
            q4h[c] = _mm256_or_si256(q4h[c], fifth_bit(qh[c], 2 * j as i32 + 1));
        }
    }
    (q4l, q4h)
}

/// The tiles, stamped out for AVX2 and for AVX512-VNNI (`$sub_block`: a sub-block's scaled sums; `$vnni`: the
/// form of the scales it takes; `$per_row`: the per-row kernel for the rows left over).
macro_rules! k4_tiles {
    ($features:literal, $vnni:literal, $sub_block:ident, $per_row:path, $rows:ident, $tile:ident) => {
        /// Q4_K or Q5_K rows (`w`, rows of `row_blocks` blocks) · `A` Q8_K activation rows into `out[row][j]`: whole
        /// tiles of eight rows here, the rest through the type's per-row kernel (which gives the same bits). With one
        /// activation row the transposition costs more than the multiplies save: tiles only where four or more
        /// activation rows share it (prefill), the per-row kernel for decode.
        /// # Safety
        /// The CPU must have the features this is compiled for.
        #[target_feature(enable = $features)]
        pub(crate) fn $rows<B: K4Block, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[BlockQ8K]; A],
            out: &mut [[f32; A]],
        ) {
            check_k_rows(w, row_blocks, &a, out.len());
            let (mut w, mut out) = (w, out);
            if $vnni && A >= 4 {
                // Sixteen rows at a time in 512-bit vectors first.
                let wide = out.len() / WIDE_ROWS * WIDE_ROWS;
                let (w_wide, w_rest) = w.split_at(wide * row_blocks);
                let (out_wide, out_rest) = out.split_at_mut(wide);
                for (w, out) in w_wide.chunks_exact(WIDE_ROWS * row_blocks).zip(out_wide.chunks_exact_mut(WIDE_ROWS)) {
                    let mut rows = [&w[..0]; WIDE_ROWS];
                    for (r, row) in w.chunks_exact(row_blocks).enumerate() {
                        rows[r] = row;
                    }
                    // SAFETY: the CPU has AVX512-VNNI (the caller's promise for this stamping).
                    unsafe { wide_k4_tile_vnni(rows, a, out) };
                }
                (w, out) = (w_rest, out_rest);
            }
            let tiled = if A >= 4 { out.len() / ROWS * ROWS } else { 0 };
            let (w_tiles, w_rest) = w.split_at(tiled * row_blocks);
            let (out_tiles, out_rest) = out.split_at_mut(tiled);
            for (w, out) in w_tiles.chunks_exact(ROWS * row_blocks).zip(out_tiles.chunks_exact_mut(ROWS)) {
                let mut rows = [&w[..0]; ROWS];
                for (r, row) in w.chunks_exact(row_blocks).enumerate() {
                    rows[r] = row;
                }
                $tile(rows, a, out);
            }
            $per_row(w_rest, row_blocks, a, out_rest);
        }

        /// Eight Q4_K or Q5_K rows · `A` activation rows (see the module's comment).
        #[inline]
        #[target_feature(enable = $features)]
        fn $tile<B: K4Block, const A: usize>(w: [&[B]; ROWS], a: [&[BlockQ8K]; A], out: &mut [[f32; A]]) {
            let blocks = w[0].len();
            assert!(w.iter().all(|w| w.len() == blocks) && a.iter().all(|a| a.len() >= blocks) && out.len() == ROWS);
            let mut acc = [_mm256_setzero_ps(); A];
            // The mins' sums per pair of sub-blocks (as the lanes of `avx2_k::k4_dot`'s `acc_m`).
            let mut acc_m = [[_mm256_setzero_ps(); 4]; A];
            for i in 0..blocks {
                let mut x = [std::ptr::null::<u8>(); ROWS];
                for r in 0..ROWS {
                    x[r] = (&w[r][i] as *const B).cast::<u8>();
                }
                // SAFETY: each of `x` is a whole block.
                let BlockScales { scales, min_pairs, xd, xdmin, qh } = unsafe { block_scales::<B, $vnni>(&x) };
                let mut sumi = [_mm256_setzero_si256(); A];
                for j in 0..QK_K / 64 {
                    // SAFETY: as above.
                    let (q4l, q4h) = unsafe { block_quants::<B>(&x, j, &qh) };
                    for k in 0..A {
                        let q8 = &a[k][i].qs[64 * j..64 * j + 64];
                        let scaled = _mm256_add_epi32(
                            $sub_block::<B>(&q4l, &q8[..32], scales[2 * j]),
                            $sub_block::<B>(&q4h, &q8[32..], scales[2 * j + 1]),
                        );
                        sumi[k] = _mm256_add_epi32(sumi[k], scaled);
                    }
                }
                for k in 0..A {
                    let y = &a[k][i];
                    // The activation's eight sub-block sums as i16; pairs of them (one 32-bit word) in every lane.
                    let bsums = load256(&y.bsums);
                    let sums = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256::<1>(bsums));
                    let d = _mm256_mul_ps(_mm256_set1_ps(y.d), xd);
                    let dmin = _mm256_mul_ps(_mm256_set1_ps(-y.d), xdmin);
                    acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[k]), acc[k]);
                    for t in 0..4 {
                        let mins = _mm256_madd_epi16(min_pairs[t], _mm256_set1_epi32(word_of(sums, t)));
                        acc_m[k][t] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mins), acc_m[k][t]);
                    }
                }
            }
            for k in 0..A {
                let mut lanes = [0f32; ROWS];
                let [m0, m1, m2, m3] = acc_m[k];
                let mins = _mm256_add_ps(_mm256_add_ps(m0, m2), _mm256_add_ps(m1, m3));
                // SAFETY: `lanes` has room for the 8 floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(acc[k], mins)) };
                for r in 0..ROWS {
                    out[r][k] = lanes[r];
                }
            }
        }
    };
}

/// Rows per wide tile: one per 32-bit lane of a 512-bit vector (the AVX512-VNNI stamping).
const WIDE_ROWS: usize = 16;

/// Two eight-row vectors side by side: rows 0..8, then 8..16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn wide(low: __m256i, high: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
}

/// [`wide`] of f32 vectors.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn wide_ps(low: __m256, high: __m256) -> __m512 {
    _mm512_castsi512_ps(wide(_mm256_castps_si256(low), _mm256_castps_si256(high)))
}

/// [`sub_block_vnni`] for sixteen rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn wide_sub_block(q: &[__m512i; 8], q8: &[i8], scale: __m512i) -> __m512i {
    assert!(q8.len() >= 32);
    let mut acc = [_mm512_setzero_si512(); 2];
    for c in 0..8 {
        // SAFETY: bytes 4c..4c + 4 of the 32 (checked above), read unaligned.
        let word = unsafe { q8.as_ptr().add(4 * c).cast::<i32>().read_unaligned() };
        acc[c % 2] = _mm512_dpbusd_epi32(acc[c % 2], q[c], _mm512_set1_epi32(word));
    }
    _mm512_mullo_epi32(_mm512_add_epi32(acc[0], acc[1]), scale)
}

/// The VNNI tile for sixteen Q4_K or Q5_K rows · `A` activation rows: two eight-row tiles' unpacking side by side,
/// then in each row's lane of 512-bit vectors the eight-row tile's operations (the same bits; `madd`'s pairs as
/// `dpwssd` into zero), at half the instructions per product.
/// # Safety
/// The CPU must have AVX512-VNNI.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn wide_k4_tile_vnni<B: K4Block, const A: usize>(
    w: [&[B]; WIDE_ROWS],
    a: [&[BlockQ8K]; A],
    out: &mut [[f32; A]],
) {
    let blocks = w[0].len();
    assert!(w.iter().all(|w| w.len() == blocks) && a.iter().all(|a| a.len() >= blocks) && out.len() == WIDE_ROWS);
    let mut acc = [_mm512_setzero_ps(); A];
    let mut acc_m = [[_mm512_setzero_ps(); 4]; A];
    for i in 0..blocks {
        let (mut low, mut high) = ([std::ptr::null::<u8>(); ROWS], [std::ptr::null::<u8>(); ROWS]);
        for r in 0..ROWS {
            low[r] = (&w[r][i] as *const B).cast::<u8>();
            high[r] = (&w[ROWS + r][i] as *const B).cast::<u8>();
        }
        // SAFETY: each of `low` and `high` is a whole block.
        let (l, h) = unsafe { (block_scales::<B, true>(&low), block_scales::<B, true>(&high)) };
        let mut scales = [_mm512_setzero_si512(); 8];
        for (s, (l, h)) in scales.iter_mut().zip(l.scales.iter().zip(&h.scales)) {
            *s = wide(*l, *h);
        }
        let mut min_pairs = [_mm512_setzero_si512(); 4];
        for (m, (l, h)) in min_pairs.iter_mut().zip(l.min_pairs.iter().zip(&h.min_pairs)) {
            *m = wide(*l, *h);
        }
        let (xd, xdmin) = (wide_ps(l.xd, h.xd), wide_ps(l.xdmin, h.xdmin));
        let mut sumi = [_mm512_setzero_si512(); A];
        for j in 0..QK_K / 64 {
            // SAFETY: as above.
            let ((l4l, l4h), (h4l, h4h)) =
                unsafe { (block_quants::<B>(&low, j, &l.qh), block_quants::<B>(&high, j, &h.qh)) };
            let (mut q4l, mut q4h) = ([_mm512_setzero_si512(); 8], [_mm512_setzero_si512(); 8]);
            for c in 0..8 {
                (q4l[c], q4h[c]) = (wide(l4l[c], h4l[c]), wide(l4h[c], h4h[c]));
            }
            for k in 0..A {
                let q8 = &a[k][i].qs[64 * j..64 * j + 64];
                let scaled = _mm512_add_epi32(
                    wide_sub_block(&q4l, &q8[..32], scales[2 * j]),
                    wide_sub_block(&q4h, &q8[32..], scales[2 * j + 1]),
                );
                sumi[k] = _mm512_add_epi32(sumi[k], scaled);
            }
        }
        for k in 0..A {
            let y = &a[k][i];
            let bsums = load256(&y.bsums);
            let sums = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256::<1>(bsums));
            let d = _mm512_mul_ps(_mm512_set1_ps(y.d), xd);
            let dmin = _mm512_mul_ps(_mm512_set1_ps(-y.d), xdmin);
            acc[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sumi[k]), acc[k]);
            for t in 0..4 {
                let pairs = _mm512_set1_epi32(word_of(sums, t));
                let mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), min_pairs[t], pairs);
                acc_m[k][t] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(mins), acc_m[k][t]);
            }
        }
    }
    for k in 0..A {
        let mut lanes = [0f32; WIDE_ROWS];
        let [m0, m1, m2, m3] = acc_m[k];
        let mins = _mm512_add_ps(_mm512_add_ps(m0, m2), _mm512_add_ps(m1, m3));
        // SAFETY: `lanes` has room for the 16 floats.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_add_ps(acc[k], mins)) };
        for r in 0..WIDE_ROWS {
            out[r][k] = lanes[r];
        }
    }
}

k4_tiles!("avx2,fma,f16c", false, sub_block_avx2, k4_rows, k4_rows_tiled, k4_tile);
k4_tiles!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    true,
    sub_block_vnni,
    k4_rows_vnni,
    k4_rows_tiled_vnni,
    k4_tile_vnni
);

/// 32-bit word `t` (0..4) of `v`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn word_of(v: __m128i, t: usize) -> i32 {
    match t {
        0 => _mm_cvtsi128_si32(v),
        1 => _mm_extract_epi32::<1>(v),
        2 => _mm_extract_epi32::<2>(v),
        _ => _mm_extract_epi32::<3>(v),
    }
}
