//! AVX2 (+ FMA, F16C) dot products of the K-quants with Q8_K activations: ports of ggml's x86 kernels
//! (ggml-cpu/arch/x86/quants.c, `ggml_vec_dot_qX_K_q8_K`, AVX2 branch), chosen at run time.
//!
//! The pattern throughout: unsigned quants times signed Q8 bytes with `maddubs` (pairs summed to
//! i16; all K-quant ranges keep those sums far from saturation), then `madd` with the 16-bit
//! sub-block scales (to i32), integer accumulation over the super-block, and one float FMA per block.

use core::arch::x86_64::*;
use std::mem::offset_of;

use super::act::{BlockQ8K, QK_K};
use super::check_k_rows;
use super::k_quants::{scales_mins_k4, scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use crate::simd::avx2::hsum;

/// f16 to f32 with the F16C instruction (as ggml's `GGML_CPU_FP16_TO_FP32` on x86).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_to_f32(h: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(h) as i32)))
}

// Unaligned loads from slices (bounds-checked; the compiler drops the checks for fixed offsets).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn load256<T: Copy>(s: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(s) >= 32);
    // SAFETY: at least 32 readable bytes (checked above); loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load128<T: Copy>(s: &[T]) -> __m128i {
    assert!(std::mem::size_of_val(s) >= 16);
    // SAFETY: as in `load256`, with 16 bytes.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// Shift each 16-bit lane by a run-time count (ggml shifts by a loop variable).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn srl16(x: __m256i, n: i32) -> __m256i {
    _mm256_srl_epi16(x, _mm_cvtsi32_si128(n))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sll16(x: __m256i, n: i32) -> __m256i {
    _mm256_sll_epi16(x, _mm_cvtsi32_si128(n))
}

// Byte shuffles that broadcast 16-bit (or 8-bit) scales across the lanes of a product vector.

/// Row `i`: 16-bit scale `2i` in the low 128-bit lane, `2i + 1` in the high lane (ggml's `get_scale_shuffle_q3k`).
static SHUFFLE_Q3K: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let (row, col) = (b / 32, b % 32);
        t[b] = (4 * row + 2 * (col / 16) + col % 2) as u8;
        b += 1;
    }
    t
};

/// Row `i`: 16-bit scale `i` in all lanes (ggml's `get_scale_shuffle_k4`).
static SHUFFLE_K4: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (2 * (b / 32) + b % 2) as u8;
        b += 1;
    }
    t
};

/// Row `i` (16 bytes): 8-bit scale `2i` in bytes 0..8, `2i + 1` in bytes 8..16 (ggml's `get_scale_shuffle`).
static SHUFFLE_Q6K: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let (row, col) = (b / 16, b % 16);
        t[b] = (2 * row + col / 8) as u8;
        b += 1;
    }
    t
};

/// 16 signed 8-bit sub-block scales widened to i16: scales 0..8 and 8..16, each in both 128-bit lanes
/// (the Q2_K and Q3_K loops take one half per 128 values).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_halves(scales8: __m128i) -> [__m256i; 2] {
    let all_scales = _mm256_cvtepi8_epi16(scales8);
    let l_scales = _mm256_castsi256_si128(all_scales);
    let h_scales = _mm256_extracti128_si256::<1>(all_scales);
    [_mm256_set_m128i(l_scales, l_scales), _mm256_set_m128i(h_scales, h_scales)]
}

/// The i16 products `p16` of the `k`-th 32 values of a Q2_K/Q3_K half, times their two sub-block scales
/// (from [`scale_halves`]), summed in pairs to i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_q3k(scales: __m256i, k: usize, p16: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(&SHUFFLE_Q3K[32 * k..])), p16)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum4(p: [__m256i; 4]) -> __m256i {
    _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]))
}

/// A Q4_K/Q5_K block's 8 sub-block scales as i16 (in both 128-bit lanes), and its 8 mins as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales_mins_i16_k4(scales: &[u8; 12]) -> (__m256i, __m128i) {
    // 8 scales then 8 mins, widened to i16.
    let mins_and_scales = _mm256_cvtepu8_epi16(load128(&scales_mins_k4(scales)));
    let sc128 = _mm256_castsi256_si128(mins_and_scales);
    (_mm256_set_m128i(sc128, sc128), _mm256_extracti128_si256::<1>(mins_and_scales))
}

/// The 8 mins (i16, from [`scales_mins_i16_k4`]) times the Q8 sums of their 32 values, summed in pairs (4 i32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mins_dot_k4(mins16: __m128i, bsums: &[i16; QK_K / 16]) -> __m128i {
    // Pairs of 16-value bsums make the sums of each 32.
    let q8sums = load256(bsums);
    let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256::<1>(q8sums));
    _mm_madd_epi16(mins16, q8s)
}

/// [`scales_mins_i16_k4`]'s scales, and [`mins_dot_k4`] against `bsums`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scales_and_mins_k4(scales: &[u8; 12], bsums: &[i16; QK_K / 16]) -> (__m256i, __m128i) {
    let (scales, mins16) = scales_mins_i16_k4(scales);
    (scales, mins_dot_k4(mins16, bsums))
}

/// The i16 scales of the `j`-th 64 values of a Q4_K/Q5_K block (its two sub-blocks of 32), from the
/// scales of [`scales_and_mins_k4`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scale_pair_k4(scales: __m256i, j: usize) -> [__m256i; 2] {
    [0, 1].map(|h| _mm256_shuffle_epi8(scales, load256(&SHUFFLE_K4[32 * (2 * j + h)..])))
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q2k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xF);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = y.d * f16_to_f32(x.d);
        let dmin = -y.d * f16_to_f32(x.dmin);

        // Mins (high nibbles) against the Q8 block sums.
        let mins_and_scales = load128(&x.scales);
        let scales8 = _mm_and_si128(mins_and_scales, m4);
        let mins8 = _mm_and_si128(_mm_srli_epi16::<4>(mins_and_scales), m4);
        let mins = _mm256_cvtepi8_epi16(mins8);
        let prod = _mm256_madd_epi16(mins, load256(&y.bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);

        let scales = scale_halves(scales8);

        let mut sumi = _mm256_setzero_si256();
        for (j, scales) in scales.into_iter().enumerate() {
            let q2bits = load256(&x.qs[32 * j..]);
            let q8 = &y.qs[128 * j..];
            let q2 = [
                _mm256_and_si256(q2bits, m3),
                _mm256_and_si256(_mm256_srli_epi16::<2>(q2bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q2bits), m3),
                _mm256_and_si256(_mm256_srli_epi16::<6>(q2bits), m3),
            ];
            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                p[k] = scale_q3k(scales, k, _mm256_maddubs_epi16(q2[k], load256(&q8[32 * k..])));
            }
            sumi = _mm256_add_epi32(sumi, sum4(p));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q3k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mone = _mm256_set1_epi8(1);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.iter().zip(a) {
        let d = y.d * f16_to_f32(x.d);

        let scales = scale_halves(load128(&scales_q3k(&x.scales)));

        let hbits = load256(&x.hmask);
        let mut sumi = _mm256_setzero_si256();
        let mut bit = 0;
        for (j, scales) in scales.into_iter().enumerate() {
            let q3bits = load256(&x.qs[32 * j..]);
            let q8 = &y.qs[128 * j..];
            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                // Low 2 bits, and 4 where the high bit is *not* set: q = low - high.
                let q3l = _mm256_and_si256(srl16(q3bits, 2 * k as i32), m3);
                let q3h = _mm256_slli_epi16::<2>(srl16(_mm256_andnot_si256(hbits, sll16(mone, bit)), bit));
                bit += 1;
                let q8k = load256(&q8[32 * k..]);
                let p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q3l, q8k), _mm256_maddubs_epi16(q3h, q8k));
                p[k] = scale_q3k(scales, k, p16);
            }
            sumi = _mm256_add_epi32(sumi, sum4(p));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// Q4_K and Q5_K, which the kernels here and `avx2_k_tiles`'s tiles read alike: d, dmin and the 12 packed bytes of 6-bit
/// scales and mins ([`scales_mins_k4`]) first, then 4-bit quants in the same layout, plus (Q5_K) a fifth bit per
/// value in `qh`. The fifth bits are the one difference: see [`unpack_k4`].
pub(crate) trait K4Block: Sized {
    /// Where the 128 bytes of low nibbles start.
    const QS: usize;
    /// Where the 32 bytes of fifth bits start (Q5_K), if any.
    const QH: Option<usize>;

    /// The f16 super-block scales of the scales and of the mins.
    fn d_dmin(&self) -> ([u8; 2], [u8; 2]);
    fn scales(&self) -> &[u8; 12];
    fn qs(&self) -> &[u8; QK_K / 2];
    /// The fifth bits (Q5_K), if any.
    fn qh(&self) -> Option<&[u8; QK_K / 8]>;
}

impl K4Block for BlockQ4K {
    const QS: usize = offset_of!(BlockQ4K, qs);
    const QH: Option<usize> = None;

    #[inline]
    fn d_dmin(&self) -> ([u8; 2], [u8; 2]) {
        (self.d, self.dmin)
    }
    #[inline]
    fn scales(&self) -> &[u8; 12] {
        &self.scales
    }
    #[inline]
    fn qs(&self) -> &[u8; QK_K / 2] {
        &self.qs
    }
    #[inline]
    fn qh(&self) -> Option<&[u8; QK_K / 8]> {
        None
    }
}

impl K4Block for BlockQ5K {
    const QS: usize = offset_of!(BlockQ5K, qs);
    const QH: Option<usize> = Some(offset_of!(BlockQ5K, qh));

    #[inline]
    fn d_dmin(&self) -> ([u8; 2], [u8; 2]) {
        (self.d, self.dmin)
    }
    #[inline]
    fn scales(&self) -> &[u8; 12] {
        &self.scales
    }
    #[inline]
    fn qs(&self) -> &[u8; QK_K / 2] {
        &self.qs
    }
    #[inline]
    fn qh(&self) -> Option<&[u8; QK_K / 8]> {
        Some(&self.qh)
    }
}

/// A block's fifth bits loaded for [`unpack_k4`], once per block: `None` for Q4_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::manual_map)] // no closure: vector-valued closures were not inlined into these kernels (see `avx2_k_tiles`)
fn load_qh<B: K4Block>(x: &B) -> Option<__m256i> {
    match x.qh() {
        Some(qh) => Some(load256(qh)),
        None => None,
    }
}

/// The `j`-th 64 values of a Q4_K or Q5_K block (sub-blocks `2j` and `2j + 1`) as unsigned bytes: the low and
/// high nibbles of its 32 quant bytes, plus 16 where the value's fifth bit (bit `2j`, then `2j + 1`, of `qh`'s
/// byte, from [`load_qh`]) is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_k4<B: K4Block>(x: &B, hbits: Option<__m256i>, j: usize) -> [__m256i; 2] {
    let m4 = _mm256_set1_epi8(0xF);
    let qbits = load256(&x.qs()[32 * j..]);
    let (lo, hi) = (_mm256_and_si256(qbits, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(qbits), m4));
    match hbits {
        Some(hbits) => [
            _mm256_or_si256(lo, fifth_bit(hbits, 2 * j as i32)),
            _mm256_or_si256(hi, fifth_bit(hbits, 2 * j as i32 + 1)),
        ],
        None => [lo, hi],
    }
}

/// Bit `n` of each byte of `qh`, as 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fifth_bit(qh: __m256i, n: i32) -> __m256i {
    _mm256_and_si256(sll16(srl16(qh, n), 4), _mm256_set1_epi8(16))
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q4k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    vec_dot_k4(w, a)
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q5k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    vec_dot_k4(w, a)
}

/// A Q4_K or Q5_K `vec_dot` in the order of the row kernels and tiles (see [`DotSum`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn vec_dot_k4<B: K4Block>(w: &[B], a: &[BlockQ8K]) -> f32 {
    k4_dot::<B, true>(w, a)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_dot<B: K4Block, const EXACT: bool>(w: &[B], a: &[BlockQ8K]) -> f32 {
    let (mut acc, mut acc_m) = (DotSum::<EXACT>::new(), _mm_setzero_ps());
    for (x, y) in w.iter().zip(a) {
        let (xd, xdmin) = x.d_dmin();
        let d = y.d * f16_to_f32(xd);
        let dmin = -y.d * f16_to_f32(xdmin);

        let (scales, mins) = scales_and_mins_k4(x.scales(), &y.bsums);
        let hbits = load_qh(x);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..QK_K / 64 {
            let [scale_l, scale_h] = scale_pair_k4(scales, j);
            let [q_l, q_h] = unpack_k4(x, hbits, j);

            let q8l = load256(&y.qs[64 * j..]);
            let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q_l, q8l));
            let q8h = load256(&y.qs[64 * j + 32..]);
            let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q_h, q8h));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
        }
        k4_block_sum(&mut acc, &mut acc_m, (d, dmin), sumi, mins);
    }
    k4_dot_end(acc, acc_m)
}

/// A dot's running sum over blocks of `d` times a block's integer sums (8 i32 lanes), in one of two orders:
/// - `EXACT`: each block's lanes summed exactly, then `acc = fma(d, total, acc)`. The order of `avx2_k_tiles`'s tiles
///   (Q4_K, Q5_K), so `vec_dot` and the per-row kernels of those types take it too and every path gives the same
///   bits, at the cost of a horizontal sum per block in the per-row kernels.
/// - otherwise: lane by lane in f32 (`fma(d, lanes, acc)`), summed across lanes at the end: the cheaper order, for
///   Q6_K, which has no tile.
#[derive(Clone, Copy)]
struct DotSum<const EXACT: bool> {
    exact: f32,
    lanes: __m256,
}

impl<const EXACT: bool> DotSum<EXACT> {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn new() -> Self {
        DotSum { exact: 0.0, lanes: _mm256_setzero_ps() }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn add(&mut self, d: f32, sumi: __m256i) {
        if EXACT {
            self.exact = d.mul_add(hsum_i32_8(sumi), self.exact);
        } else {
            self.lanes = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), self.lanes);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn finish(self) -> f32 {
        if EXACT {
            self.exact
        } else {
            hsum(self.lanes)
        }
    }
}

/// The sum of 8 i32 lanes, exact (a K-quant block's integer sums stay far from overflow), rounded to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_i32_8(x: __m256i) -> f32 {
    let x = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
    let x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    _mm_cvtss_f32(_mm_cvtepi32_ps(_mm_add_epi32(x, _mm_shuffle_epi32::<0b01>(x))))
}

/// One Q4_K or Q5_K block's part of a dot: its sums of scaled quants (`sumi`'s lanes) times `d` into `acc`, and its
/// four sums of mins times activation sums (`mins`) times `dmin` into `acc_m`'s lanes (as `avx2_k_tiles` adds them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_block_sum<const EXACT: bool>(
    acc: &mut DotSum<EXACT>,
    acc_m: &mut __m128,
    (d, dmin): (f32, f32),
    sumi: __m256i,
    mins: __m128i,
) {
    acc.add(d, sumi);
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins), *acc_m);
}

/// [`k4_block_sum`] for `A` activation rows `y` at once (the per-row kernels): a block with f16 scales `d`, `dmin`
/// and mins `mins16` (from [`scales_mins_i16_k4`]), its integer sums with each row in `sumi`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_rows_block_sum<const EXACT: bool, const A: usize>(
    (d, dmin): ([u8; 2], [u8; 2]),
    mins16: __m128i,
    y: [&BlockQ8K; A],
    sumi: &[__m256i; A],
    acc: &mut [DotSum<EXACT>; A],
    acc_m: &mut [__m128; A],
) {
    let (xd, xdmin) = (f16_to_f32(d), f16_to_f32(dmin));
    for k in 0..A {
        let mins = mins_dot_k4(mins16, &y[k].bsums);
        k4_block_sum(&mut acc[k], &mut acc_m[k], (y[k].d * xd, -y[k].d * xdmin), sumi[k], mins);
    }
}

/// A Q4_K or Q5_K dot from the running sums of [`k4_block_sum`]: `acc + ((m0 + m2) + (m1 + m3))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_dot_end<const EXACT: bool>(acc: DotSum<EXACT>, acc_m: __m128) -> f32 {
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    acc.finish() + _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)))
}

/// # Safety
/// The CPU must support AVX2, FMA and F16C ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn vec_dot_q6k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    q6k_dot::<false>(w, a) // Q6_K has no tile to match: the lane-by-lane order on every CPU
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_dot<const EXACT: bool>(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m15 = _mm256_set1_epi8(15);
    let mut acc = DotSum::<EXACT>::new();
    for (x, y) in w.iter().zip(a) {
        let d = y.d * f16_to_f32(x.d);

        // The quants are stored as q + 32: take the 32 off at the end as 32 * Σ scale * bsum.
        let q8sums = load256(&y.bsums);
        let scales = load128(&x.scales);
        let scales_16 = _mm256_cvtepi8_epi16(scales);
        let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(q8sums, scales_16));

        let mut sumi = _mm256_setzero_si256();
        for j in 0..QK_K / 128 {
            let q4bits1 = load256(&x.ql[64 * j..]);
            let q4bits2 = load256(&x.ql[64 * j + 32..]);
            let q4bits_h = load256(&x.qh[32 * j..]);

            let q4h_0 = _mm256_slli_epi16::<4>(_mm256_and_si256(q4bits_h, m3));
            let q4h_1 = _mm256_slli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(12)));
            let q4h_2 = _mm256_and_si256(q4bits_h, _mm256_set1_epi8(48));
            let q4h_3 = _mm256_srli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(-64)));
            let q4 = [
                _mm256_or_si256(_mm256_and_si256(q4bits1, m15), q4h_0),
                _mm256_or_si256(_mm256_and_si256(q4bits2, m15), q4h_1),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits1), m15), q4h_2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits2), m15), q4h_3),
            ];

            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let p16 = _mm256_maddubs_epi16(q4[k], load256(&y.qs[128 * j + 32 * k..]));
                let scale = _mm_shuffle_epi8(scales, load128(&SHUFFLE_Q6K[16 * (4 * j + k)..]));
                p[k] = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scale), p16);
            }
            sumi = _mm256_add_epi32(sumi, sum4(p));
        }
        acc.add(d, _mm256_sub_epi32(sumi, q8sclsub));
    }
    acc.finish()
}

/// `acc + madd(a, b)`: i16 pairs multiplied and summed into the i32 lanes of `acc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn madd_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
}

/// [`madd_add`] in one AVX512-VNNI instruction (`vpdpwssd`, not saturating): the same i32 sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
fn madd_add_vnni(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, a, b)
}

/// The K-quants' row kernels, stamped out for AVX2 and for AVX512-VNNI (`$madd_add` scales and adds the
/// i16 products). Each dots every weight row of `w` (rows of `row_blocks` blocks) with `A` Q8_K activation
/// rows, into `out[row][j]`, unpacking each weight block (quants and sub-block scales) once for the `A`
/// rows. Per output they compute the same exact integer sums and then the same float operations, in the
/// same order, as the type's `vec_dot` kernel above: results equal `vec_dot`'s bit for bit, whatever `A`.
macro_rules! k_row_kernels {
    ($features:literal, $madd_add:ident, $k4:ident, $q6k:ident) => {
        /// Q4_K or Q5_K rows · `A` activation rows (see [`k_row_kernels!`]).
        #[target_feature(enable = $features)]
        pub(crate) fn $k4<B: K4Block, const A: usize>(
            w: &[B],
            row_blocks: usize,
            a: [&[BlockQ8K]; A],
            out: &mut [[f32; A]],
        ) {
            check_k_rows(w, row_blocks, &a, out.len());
            let zero = _mm256_setzero_si256();
            for (w, out) in w.chunks_exact(row_blocks).zip(out) {
                let (mut acc, mut acc_m) = ([DotSum::<true>::new(); A], [_mm_setzero_ps(); A]);
                for (i, x) in w.iter().enumerate() {
                    let y: [&BlockQ8K; A] = std::array::from_fn(|k| &a[k][i]);
                    let (scales, mins16) = scales_mins_i16_k4(x.scales());
                    let hbits = load_qh(x);
                    let mut sumi = [_mm256_setzero_si256(); A];
                    for j in 0..QK_K / 64 {
                        let [scale_l, scale_h] = scale_pair_k4(scales, j);
                        let [q_l, q_h] = unpack_k4(x, hbits, j);
                        // Each 64 values' products sum apart before joining the row's: one chain of eight
                        // multiply-adds per block would keep decode (one activation row) waiting on their latency.
                        for k in 0..A {
                            let q8l = load256(&y[k].qs[64 * j..]);
                            let part = $madd_add(zero, scale_l, _mm256_maddubs_epi16(q_l, q8l));
                            let q8h = load256(&y[k].qs[64 * j + 32..]);
                            let part = $madd_add(part, scale_h, _mm256_maddubs_epi16(q_h, q8h));
                            sumi[k] = _mm256_add_epi32(sumi[k], part);
                        }
                    }
                    k4_rows_block_sum(x.d_dmin(), mins16, y, &sumi, &mut acc, &mut acc_m);
                }
                *out = std::array::from_fn(|k| k4_dot_end(acc[k], acc_m[k]));
            }
        }

        /// Q6_K rows · `A` activation rows (see [`k_row_kernels!`]).
        #[target_feature(enable = $features)]
        pub(crate) fn $q6k<const A: usize>(
            w: &[BlockQ6K],
            row_blocks: usize,
            a: [&[BlockQ8K]; A],
            out: &mut [[f32; A]],
        ) {
            check_k_rows(w, row_blocks, &a, out.len());
            let m3 = _mm256_set1_epi8(3);
            let (m15, zero) = (_mm256_set1_epi8(15), _mm256_setzero_si256());
            for (w, out) in w.chunks_exact(row_blocks).zip(out) {
                let mut acc = [DotSum::<false>::new(); A];
                for (i, x) in w.iter().enumerate() {
                    let y: [&BlockQ8K; A] = std::array::from_fn(|k| &a[k][i]);
                    let scales = load128(&x.scales);
                    let mut sumi = [_mm256_setzero_si256(); A];
                    for j in 0..QK_K / 128 {
                        let q4bits1 = load256(&x.ql[64 * j..]);
                        let q4bits2 = load256(&x.ql[64 * j + 32..]);
                        let q4bits_h = load256(&x.qh[32 * j..]);
                        let q4h_0 = _mm256_slli_epi16::<4>(_mm256_and_si256(q4bits_h, m3));
                        let q4h_1 = _mm256_slli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(12)));
                        let q4h_2 = _mm256_and_si256(q4bits_h, _mm256_set1_epi8(48));
                        let q4h_3 = _mm256_srli_epi16::<2>(_mm256_and_si256(q4bits_h, _mm256_set1_epi8(-64)));
                        let q4 = [
                            _mm256_or_si256(_mm256_and_si256(q4bits1, m15), q4h_0),
                            _mm256_or_si256(_mm256_and_si256(q4bits2, m15), q4h_1),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits1), m15), q4h_2),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(q4bits2), m15), q4h_3),
                        ];
                        // Few activation rows leave the CPU waiting on one chain of multiply-adds: two per row
                        // then. With more, the rows' chains overlap already and registers run short.
                        let mut part = [[zero; 2]; A];
                        for (l, q4) in q4.into_iter().enumerate() {
                            let scale = _mm_shuffle_epi8(scales, load128(&SHUFFLE_Q6K[16 * (4 * j + l)..]));
                            let scale = _mm256_cvtepi8_epi16(scale);
                            for k in 0..A {
                                let q8 = load256(&y[k].qs[128 * j + 32 * l..]);
                                let p16 = _mm256_maddubs_epi16(q4, q8);
                                if A < 4 {
                                    part[k][l % 2] = $madd_add(part[k][l % 2], scale, p16);
                                } else {
                                    sumi[k] = $madd_add(sumi[k], scale, p16);
                                }
                            }
                        }
                        if A < 4 {
                            for k in 0..A {
                                sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(part[k][0], part[k][1]));
                            }
                        }
                    }
                    // The quants are stored as q + 32: take the 32 off as 32 * Σ scale * bsum.
                    let scales_16 = _mm256_cvtepi8_epi16(scales);
                    let xd = f16_to_f32(x.d);
                    for k in 0..A {
                        let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(load256(&y[k].bsums), scales_16));
                        acc[k].add(y[k].d * xd, _mm256_sub_epi32(sumi[k], q8sclsub));
                    }
                }
                for (o, acc) in out.iter_mut().zip(acc) {
                    *o = acc.finish();
                }
            }
        }
    };
}

k_row_kernels!("avx2,fma,f16c", madd_add, k4_rows, q6k_rows);
k_row_kernels!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", madd_add_vnni, k4_rows_vnni, q6k_rows_vnni);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::avx2_k_tiles::{k4_rows_tiled, k4_rows_tiled_vnni};
    use crate::quant::{ActKind, Activations, QuantBlock};
    use crate::test_support::Rng;

    /// Both stampings of each row kernel and of `avx2_k_tiles`'s tiles against `vec_dot` in the same order (`DotSum`;
    /// the exact one for Q4_K and Q5_K), bit for bit, with 1 and 4 activation rows (4: the fewest the tiles take), on
    /// quantized rows whose quant and scale bytes are then made random (every value the kernels can meet).
    /// `quant::tests` checks the stamping `dot_rows` runs; this one also reaches the other.
    #[test]
    fn row_kernels_equal_vec_dot() {
        if !crate::simd::cpu::has_avx2() {
            return; // nothing to run on this CPU
        }
        let vnni = crate::simd::cpu::has_vnni();
        let mut rng = Rng::new(5);
        // Rows: a wide tile of sixteen (AVX512-VNNI) and a tile of eight for `avx2_k_tiles`, and four more.
        let (rows, row_blocks) = (28, 5);
        let mut values = |n: usize| (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect::<Vec<f32>>();
        let x = values(rows * row_blocks * QK_K);
        let mut acts = Activations::new();
        acts.quantize(ActKind::Q8K, &values(4 * row_blocks * QK_K), 4);
        let a: [&[BlockQ8K]; 4] = std::array::from_fn(|t| acts.row(t).blocks());
        let mut rng = Rng::new(6);
        macro_rules! check {
            ($B:ty, $dot:expr, [$($plain:path),+], [$($vnni:path),+], |$blk:ident| $randomize:expr) => {{
                let mut stored = vec![0u8; rows * row_blocks * std::mem::size_of::<$B>()];
                let w = crate::quant::as_blocks_mut::<$B>(&mut stored);
                <$B>::quantize(&x, w);
                for $blk in w.iter_mut().skip(row_blocks) {
                    $randomize;
                }
                // SAFETY: as below.
                let want: Vec<[u32; 4]> =
                    (w.chunks_exact(row_blocks)).map(|wr| a.map(|a| unsafe { $dot(wr, a) }.to_bits())).collect();
                let machine: Vec<[u32; 4]> =
                    (w.chunks_exact(row_blocks)).map(|wr| a.map(|a| <$B>::vec_dot(wr, a).to_bits())).collect();
                assert_eq!(machine, want, "vec_dot's order");
                let (mut one, mut four) = (vec![[0f32; 1]; rows], vec![[0f32; 4]; rows]);
                let bits = |o: &[[f32; 4]]| o.iter().map(|r| r.map(f32::to_bits)).collect::<Vec<_>>();
                macro_rules! kernel {
                    ($k:path) => {
                        let w = &*w;
                        $k(w, row_blocks, a, &mut four);
                        assert_eq!(bits(&four), want, "{}", stringify!($k));
                        for t in 0..4 {
                            $k(w, row_blocks, [a[t]], &mut one);
                            assert!(one.iter().zip(&want).all(|(o, w)| o[0].to_bits() == w[t]), "{}", stringify!($k));
                        }
                    };
                }
                // SAFETY: the CPU has AVX2, FMA and F16C, and AVX512 F/VL/VNNI where `vnni`.
                unsafe {
                    $(kernel!($plain);)+
                    if vnni {
                        $(kernel!($vnni);)+
                    }
                }
            }};
        }
        check!(BlockQ4K, k4_dot::<_, true>, [k4_rows, k4_rows_tiled], [k4_rows_vnni, k4_rows_tiled_vnni], |b| {
            rng.fill(&mut b.scales);
            rng.fill(&mut b.qs)
        });
        check!(BlockQ5K, k4_dot::<_, true>, [k4_rows, k4_rows_tiled], [k4_rows_vnni, k4_rows_tiled_vnni], |b| {
            rng.fill(&mut b.scales);
            rng.fill(&mut b.qh);
            rng.fill(&mut b.qs)
        });
        check!(BlockQ6K, q6k_dot::<false>, [q6k_rows], [q6k_rows_vnni], |b| {
            rng.fill(&mut b.ql);
            rng.fill(&mut b.qh);
            let r = [rng.next_u64(), rng.next_u64()];
            b.scales = std::array::from_fn(|i| (r[i / 8] >> (8 * (i % 8))) as u8 as i8)
        });
    }
}
