//! Activation formats for dot products, as ggml's "vec_dot_type"s.
//!
//! A matmul quantizes its input activations once, into the format its weight type is dotted
//! against, then reuses them for every weight row. [`BlockQ8_0`] doubles as the Q8_0 *weight*
//! block, exactly as in ggml.

use std::any::TypeId;

use crate::parallel::for_each_row_chunk;

use half::f16;

pub const QK8: usize = 32;
pub const QK_K: usize = 256;

/// Which activation format a weight type needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    F32,
    Q8_0,
    Q8_1,
    Q8K,
}

/// 32 values: `x[i] ≈ d * qs[i]`. Also the Q8_0 weight block (34 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: [u8; 2], // f16
    pub qs: [i8; QK8],
}

/// 32 values: `x[i] ≈ d * qs[i]`, with `s = d * sum(qs)` (used by weight types with a min/offset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ8_1 {
    pub d: [u8; 2], // f16
    pub s: [u8; 2], // f16
    pub qs: [i8; QK8],
}

/// A Q8_0 or Q8_1 activation block as the legacy SIMD kernels read it (see `legacy::LegacyBlock`).
#[allow(dead_code)] // all of it on targets without SIMD kernels; `s` on x86_64 (AVX2 loads `d, s` as one word)
pub(crate) trait Q8Block {
    /// The scale `d` (f16).
    fn d(&self) -> [u8; 2];
    /// `s = d * sum(qs)` (f16); zero for Q8_0, which has none.
    fn s(&self) -> [u8; 2];
    fn qs(&self) -> &[i8; QK8];
}

/// Implements [`Q8Block`] for `$B`, whose `s` is `$s` (of the block `$b`).
macro_rules! q8_block {
    ($B:ty, |$b:ident| $s:expr) => {
        impl Q8Block for $B {
            #[inline(always)]
            fn d(&self) -> [u8; 2] {
                self.d
            }
            #[inline(always)]
            fn s(&self) -> [u8; 2] {
                let $b = self;
                $s
            }
            #[inline(always)]
            fn qs(&self) -> &[i8; QK8] {
                &self.qs
            }
        }
    };
}

q8_block!(BlockQ8_0, |_b| [0, 0]);
q8_block!(BlockQ8_1, |b| b.s);

/// 256 values for the K-quants: `x[i] ≈ d * qs[i]`, `bsums[j] = sum(qs[16j..16j+16])`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K { d: 0.0, qs: [0; QK_K], bsums: [0; QK_K / 16] }
    }
}

#[inline]
pub fn f16_to_f32(b: [u8; 2]) -> f32 {
    // Normal numbers (exponent 1..=30) by rebiasing the exponent, inline: the kernels convert a scale or two
    // per block, and `half`'s conversion (subnormals, infinities, NaN: the rest, the same bits) is a call
    // with several branches on targets without F16C.
    let h = u16::from_le_bytes(b) as u32;
    let magnitude = h & 0x7FFF;
    if magnitude.wrapping_sub(0x0400) < 0x7800 {
        return f32::from_bits(((h & 0x8000) << 16) | ((magnitude << 13) + ((127 - 15) << 23)));
    }
    f16::from_le_bytes(b).to_f32()
}

#[inline]
pub fn f32_to_f16(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

/// The value of largest magnitude in `x`, with its sign (the first of equal ones; NaNs skipped; 0 for none):
/// the quantizers map it to the most negative level, as ggml's do.
pub(crate) fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// ggml's `quantize_row_q8_0_ref`. `x.len() == out.len() * 32`.
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = f32_to_f16(d);
        for (q, v) in y.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`. `x.len() == out.len() * 32`.
pub fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in y.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        y.d = f32_to_f16(d);
        y.s = f32_to_f16(sum as f32 * d);
    }
}

/// ggml's `quantize_row_q8_K_ref`. `x.len() == out.len() * 256`.
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, y) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let max = signed_max(xb);
        if max == 0.0 {
            *y = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(xb) {
            *q = ((iscale * v).round() as i32).min(127) as i8;
        }
        for (s, qs) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = qs.iter().map(|&q| q as i16).sum();
        }
        y.d = 1.0 / iscale;
    }
}

/// SIMD versions of the Q8_0 and Q8_1 quantizers, byte-identical to the references above: the same
/// block maximum (NaN ignored, as `f32::max` does), round half away from zero computed exactly as
/// `trunc(v) + (|v - trunc(v)| >= 0.5 ? sign(v) : 0)`, and the saturating float-to-i8 conversion of
/// Rust's `as` (NaN to 0). AVX2 on x86_64 at run time, simd128 on wasm32; elsewhere the references.
mod fast {
    use super::*;

    /// One block of 32 values: its quants into `q`, returning `d` and the sum of the quants.
    type BlockFn = fn(&[f32; QK8], &mut [i8; QK8]) -> (f32, i32);

    fn block_kernel() -> Option<BlockFn> {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::cpu::has_avx2() {
            // SAFETY: the CPU has AVX2 (checked just above).
            return Some(|x, q| unsafe { avx2::block(x, q) });
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Some(simd128::block);
        #[allow(unreachable_code)]
        None
    }

    pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
        let Some(block) = block_kernel() else { return super::quantize_q8_0(x, out) };
        for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
            let (d, _) = block(xb.try_into().expect("32 values"), &mut y.qs);
            y.d = f32_to_f16(d);
        }
    }

    pub fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
        let Some(block) = block_kernel() else { return super::quantize_q8_1(x, out) };
        for (xb, y) in x.chunks_exact(QK8).zip(out.iter_mut()) {
            let (d, sum) = block(xb.try_into().expect("32 values"), &mut y.qs);
            y.d = f32_to_f16(d);
            y.s = f32_to_f16(sum as f32 * d);
        }
    }

    /// `d` and its inverse as the references compute them.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
    #[inline]
    fn scale(amax: f32) -> (f32, f32) {
        let d = amax / 127.0;
        (d, if d != 0.0 { 1.0 / d } else { 0.0 })
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use std::arch::x86_64::*;

        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn block(x: &[f32; 32], q: &mut [i8; 32]) -> (f32, i32) {
            let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(x.as_ptr().add(8 * k)));
            let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
            // max_ps returns its second operand when either is NaN: NaN values are skipped.
            let mut m = _mm256_setzero_ps();
            for v in v {
                m = _mm256_max_ps(_mm256_and_ps(v, abs_mask), m);
            }
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let (d, id) = super::scale(amax);
            let idv = _mm256_set1_ps(id);
            let (half, one, sign) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0), _mm256_set1_ps(-0.0));
            let ints = v.map(|v| {
                let p = _mm256_mul_ps(v, idv);
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
                let away = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_and_ps(_mm256_sub_ps(p, t), abs_mask), half);
                let r = _mm256_add_ps(t, _mm256_and_ps(away, _mm256_or_ps(_mm256_and_ps(p, sign), one)));
                // Saturate as `as i8` does (min/max_ps keep a NaN second operand), then NaN to 0.
                let r = _mm256_max_ps(_mm256_set1_ps(-128.0), _mm256_min_ps(_mm256_set1_ps(127.0), r));
                _mm256_cvttps_epi32(_mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r)))
            });
            let sum = ints.iter().fold(_mm256_setzero_si256(), |s, &i| _mm256_add_epi32(s, i));
            let sum = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01_00_11_10>(sum));
            let sum = _mm_cvtsi128_si32(_mm_add_epi32(sum, _mm_shuffle_epi32::<0b10_11_00_01>(sum)));
            // packs work within 128-bit lanes: undo the interleaving with one permute.
            let i16s = (_mm256_packs_epi32(ints[0], ints[1]), _mm256_packs_epi32(ints[2], ints[3]));
            let i8s = _mm256_packs_epi16(i16s.0, i16s.1);
            let i8s = _mm256_permutevar8x32_epi32(i8s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(q.as_mut_ptr().cast(), i8s);
            (d, sum)
        }
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    mod simd128 {
        use core::arch::wasm32::*;

        pub fn block(x: &[f32; 32], q: &mut [i8; 32]) -> (f32, i32) {
            // The constants as values, each used eight times below (why: `quant::simd128::Consts`).
            let [zero, half, sign, one, top, bottom] =
                std::hint::black_box([0.0, 0.5, -0.0, 1.0, 127.0, -128.0f32]).map(|c| f32x4_splat(c));
            // SAFETY: 8 loads of 16 bytes within the 128-byte block; no alignment requirement.
            let v: [v128; 8] = std::array::from_fn(|k| unsafe { v128_load(x.as_ptr().add(4 * k) as *const v128) });
            // pmax(m, a) is `m < a ? a : m`: a NaN `a` leaves m.
            let m = v.iter().fold(zero, |m, &v| f32x4_pmax(m, f32x4_abs(v)));
            let m = f32x4_pmax(m, i32x4_shuffle::<2, 3, 0, 1>(m, m));
            let m = f32x4_pmax(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
            let (d, id) = super::scale(f32x4_extract_lane::<0>(m));
            let idv = f32x4_splat(id);
            let ints = v.map(|v| {
                let p = f32x4_mul(v, idv);
                let t = f32x4_trunc(p);
                let away = f32x4_ge(f32x4_abs(f32x4_sub(p, t)), half);
                let sign_one = v128_or(v128_and(p, sign), one);
                let r = f32x4_add(t, v128_and(away, sign_one));
                // NaN to 0 first, then saturate as `as i8` does: with NaN gone, every min/max agrees (the
                // relaxed-SIMD build's LLVM may turn pmin/pmax into relaxed ones, whose NaN is the engine's).
                let r = v128_and(r, f32x4_eq(r, r));
                i32x4_trunc_sat_f32x4(f32x4_pmax(f32x4_pmin(r, top), bottom))
            });
            let sum = ints.iter().fold(i32x4_splat(0), |s, &i| i32x4_add(s, i));
            let sum = i32x4_extract_lane::<0>(sum)
                + i32x4_extract_lane::<1>(sum)
                + i32x4_extract_lane::<2>(sum)
                + i32x4_extract_lane::<3>(sum);
            let i16s: [v128; 4] = std::array::from_fn(|k| i16x8_narrow_i32x4(ints[2 * k], ints[2 * k + 1]));
            let lo = i8x16_narrow_i16x8(i16s[0], i16s[1]);
            let hi = i8x16_narrow_i16x8(i16s[2], i16s[3]);
            // SAFETY: 32 bytes in bounds; no alignment requirement.
            unsafe {
                v128_store(q.as_mut_ptr() as *mut v128, lo);
                v128_store(q.as_mut_ptr().add(16) as *mut v128, hi);
            }
            (d, sum)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::test_support::{test, Rng};

        /// Blocks of every kind: random, exact ties (amax 127 makes `id` 1), zeros, tiny (subnormal `d`,
        /// infinite `id`), huge, with NaN and infinities.
        fn blocks() -> Vec<f32> {
            let mut rng = Rng::new(1);
            let mut next = || rng.uniform(-1.0, 1.0);
            let mut x = Vec::new();
            for b in 0..64 {
                let block: Vec<f32> = match b % 8 {
                    0 | 1 => (0..32).map(|_| next() * 10.0).collect(),
                    2 => (0..32).map(|i| if i == 0 { 127.0 } else { (i as f32 - 16.0) * 3.5 + 0.5 }).collect(),
                    3 => vec![0.0; 32],
                    4 => (0..32).map(|_| next() * 1e-39).collect(),
                    5 => (0..32).map(|_| next() * 3e38).collect(),
                    6 => (0..32).map(|i| [f32::NAN, 1.0, -2.5, f32::INFINITY][i % 4] * next()).collect(),
                    _ => (0..32).map(|i| if i == 5 { f32::NEG_INFINITY } else { next() }).collect(),
                };
                x.extend(block);
            }
            x
        }

        #[test]
        fn simd_quantizers_are_byte_identical_to_the_references() {
            let x = blocks();
            let n = x.len() / QK8;
            let (mut fast0, mut ref0) = (vec![BlockQ8_0::default(); n], vec![BlockQ8_0::default(); n]);
            quantize_q8_0(&x, &mut fast0);
            super::super::quantize_q8_0(&x, &mut ref0);
            for (b, (f, r)) in fast0.iter().zip(&ref0).enumerate() {
                assert_eq!(f, r, "Q8_0 block {b}");
            }
            let (mut fast1, mut ref1) = (vec![BlockQ8_1::default(); n], vec![BlockQ8_1::default(); n]);
            quantize_q8_1(&x, &mut fast1);
            super::super::quantize_q8_1(&x, &mut ref1);
            for (b, (f, r)) in fast1.iter().zip(&ref1).enumerate() {
                assert_eq!(f, r, "Q8_1 block {b}");
            }
        }
    }
}

/// A batch of activation rows, quantized for one weight type. Buffers are kept and reused
/// across calls, so the decode loop does not allocate.
#[derive(Default)]
pub struct Activations {
    kind: Option<ActKind>,
    rows: usize,
    cols: usize,
    f32s: Vec<f32>,
    q8_0: Vec<BlockQ8_0>,
    q8_1: Vec<BlockQ8_1>,
    q8k: Vec<BlockQ8K>,
    /// Per Q8_0/Q8_1 block: `(d, s)` converted to f32 once (`s = 0` for Q8_0), for the tile and row kernels of
    /// x86_64 and aarch64 (wasm32's take them four blocks at a time, from `quads`).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    scales: Vec<[f32; 2]>,
    /// Per Q8_0 block on x86_64: the sum of its quants, for the tiles of Q4_0, Q5_0 and Q8_0 weights (`avx2_tiles`),
    /// which multiply offset (unsigned) weight quants and take the offset times this sum off.
    #[cfg(target_arch = "x86_64")]
    sums: Vec<i32>,
    /// Per Q8_0/Q8_1 block on wasm32: the quants widened to i16 once, since simd128 multiplies i16 pairs
    /// and widening is several instructions there (the tile kernels would redo it for every weight row).
    #[cfg(target_arch = "wasm32")]
    wide: Vec<[i16; QK8]>,
    /// On wasm32, per activation row and group of four blocks (`Quad`): the blocks' `d`s, `s`s and sums of quants
    /// side by side, so that the legacy row kernels scale four blocks' integer sums with one multiply.
    #[cfg(target_arch = "wasm32")]
    quads: Vec<Quad>,
}

/// Four consecutive blocks of an activation row (`4g..4g+4`) side by side, for wasm32's legacy row kernels: their
/// `d` and `s` (0 for Q8_0) as f32, exactly the blocks' f16 values, and the sums of their quants (for the weight
/// types with an offset). A row's last quad is padded with zeros where the row has fewer blocks.
#[cfg(target_arch = "wasm32")]
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
pub(crate) struct Quad {
    pub d: [f32; 4],
    pub s: [f32; 4],
    pub sums: [i32; 4],
}

impl Activations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Quantize `rows` rows of `x` (row-major, `x.len() / rows` columns each) into `kind`.
    pub fn quantize(&mut self, kind: ActKind, x: &[f32], rows: usize) {
        assert!(rows > 0 && x.len().is_multiple_of(rows));
        self.kind = Some(kind);
        self.rows = rows;
        self.cols = x.len() / rows;
        match kind {
            ActKind::F32 => {
                self.f32s.clear();
                self.f32s.extend_from_slice(x);
            }
            ActKind::Q8_0 => quantize_rows(x, self.cols, QK8, &mut self.q8_0, fast::quantize_q8_0),
            ActKind::Q8_1 => quantize_rows(x, self.cols, QK8, &mut self.q8_1, fast::quantize_q8_1),
            ActKind::Q8K => quantize_rows(x, self.cols, QK_K, &mut self.q8k, quantize_q8k),
        }
        self.prepare_tiles();
    }

    /// Rows of ready-made blocks: `all` holds `rows` rows back to back. For tests, which need quants
    /// that the quantizers never write (-128 in Q8_K, every value at its extreme).
    #[cfg(test)]
    pub(crate) fn from_blocks(all: ActRow<'_>, rows: usize) -> Activations {
        let mut acts = Activations::new();
        let (kind, n) = match all {
            ActRow::F32(x) => {
                acts.f32s = x.to_vec();
                (ActKind::F32, x.len())
            }
            ActRow::Q8_0(b) => {
                acts.q8_0 = b.to_vec();
                (ActKind::Q8_0, b.len() * QK8)
            }
            ActRow::Q8_1(b) => {
                acts.q8_1 = b.to_vec();
                (ActKind::Q8_1, b.len() * QK8)
            }
            ActRow::Q8K(b) => {
                acts.q8k = b.to_vec();
                (ActKind::Q8K, b.len() * QK_K)
            }
        };
        assert!(rows > 0 && n.is_multiple_of(rows));
        (acts.kind, acts.rows, acts.cols) = (Some(kind), rows, n / rows);
        acts.prepare_tiles();
        acts
    }

    /// What the tile kernels read besides the Q8_0/Q8_1 blocks: each block's `(d, s)` as f32 (x86_64, aarch64), the
    /// sums of its quants (x86_64) and, on wasm32, its quants widened to i16 and its blocks four at a time (`Quad`).
    /// (Each buffer is resized, not cleared first: an element written over costs nothing more; one that does not
    /// apply to the kind is emptied.)
    fn prepare_tiles(&mut self) {
        match self.kind {
            Some(ActKind::Q8_0) => {
                #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
                per_block(&self.q8_0, self.rows, &mut self.scales, |b| [f16_to_f32(b.d), 0.0]);
                #[cfg(target_arch = "x86_64")]
                per_block(&self.q8_0, self.rows, &mut self.sums, |b| b.qs.iter().map(|&q| q as i32).sum::<i32>());
                #[cfg(target_arch = "wasm32")]
                widen(&self.q8_0, self.rows, &mut self.wide);
                #[cfg(target_arch = "wasm32")]
                quads(&self.q8_0, self.rows, &mut self.quads, |b| {
                    (f16_to_f32(b.d), 0.0, b.qs.iter().map(|&q| q as i32).sum::<i32>())
                });
            }
            Some(ActKind::Q8_1) => {
                #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
                per_block(&self.q8_1, self.rows, &mut self.scales, |b| [f16_to_f32(b.d), f16_to_f32(b.s)]);
                #[cfg(target_arch = "x86_64")]
                self.sums.clear();
                // Q4_1 and Q5_1, dotted against Q8_1, have no offset: no sums.
                #[cfg(target_arch = "wasm32")]
                quads(&self.q8_1, self.rows, &mut self.quads, |b| (f16_to_f32(b.d), f16_to_f32(b.s), 0));
                // The relaxed-SIMD build dots the types against Q8_1 (Q4_1, Q5_1) with the quants' bytes.
                #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
                widen(&self.q8_1, self.rows, &mut self.wide);
                #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
                self.wide.clear();
            }
            _ => {
                #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
                self.scales.clear();
                #[cfg(target_arch = "x86_64")]
                self.sums.clear();
                #[cfg(target_arch = "wasm32")]
                self.wide.clear();
                #[cfg(target_arch = "wasm32")]
                self.quads.clear();
            }
        }
    }

    pub fn kind(&self) -> Option<ActKind> {
        self.kind
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r`'s block scales `(d, s)` as f32, for Q8_0 (`s = 0`) and Q8_1 rows (exactly the blocks' f16 values;
    /// x86_64, aarch64).
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub fn row_scales(&self, r: usize) -> &[[f32; 2]] {
        assert!(r < self.rows && matches!(self.kind, Some(ActKind::Q8_0 | ActKind::Q8_1)));
        let per = self.scales.len() / self.rows;
        &self.scales[r * per..(r + 1) * per]
    }

    /// Row `r`'s per-block sums of quants, for Q8_0 rows (x86_64).
    #[cfg(target_arch = "x86_64")]
    pub fn row_sums(&self, r: usize) -> &[i32] {
        assert!(r < self.rows && self.kind == Some(ActKind::Q8_0));
        let per = self.sums.len() / self.rows;
        &self.sums[r * per..(r + 1) * per]
    }

    /// Row `r`'s blocks four at a time ([`Quad`]), for Q8_0 and Q8_1 rows (wasm32).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn row_quads(&self, r: usize) -> &[Quad] {
        assert!(r < self.rows && matches!(self.kind, Some(ActKind::Q8_0 | ActKind::Q8_1)));
        let per = self.quads.len() / self.rows;
        &self.quads[r * per..(r + 1) * per]
    }

    /// Row `r`'s Q8_0/Q8_1 quants widened to i16 (wasm32).
    #[cfg(target_arch = "wasm32")]
    pub fn row_wide(&self, r: usize) -> &[[i16; QK8]] {
        assert!(r < self.rows && matches!(self.kind, Some(ActKind::Q8_0 | ActKind::Q8_1)));
        let per = self.wide.len() / self.rows;
        &self.wide[r * per..(r + 1) * per]
    }

    /// Row `r` as a view for `vec_dot`.
    pub fn row(&self, r: usize) -> ActRow<'_> {
        assert!(r < self.rows);
        fn slice<T>(v: &[T], r: usize, rows: usize) -> &[T] {
            let per = v.len() / rows;
            &v[r * per..(r + 1) * per]
        }
        match self.kind.expect("Activations::row before quantize") {
            ActKind::F32 => ActRow::F32(slice(&self.f32s, r, self.rows)),
            ActKind::Q8_0 => ActRow::Q8_0(slice(&self.q8_0, r, self.rows)),
            ActKind::Q8_1 => ActRow::Q8_1(slice(&self.q8_1, r, self.rows)),
            ActKind::Q8K => ActRow::Q8K(slice(&self.q8k, r, self.rows)),
        }
    }
}

/// `out[i] = f(&blocks[i])` for each block of `rows` rows, rows in parallel as the quantizers run them (a prefill
/// has thousands of blocks: serial, this was a stretch the other threads waited through in every matrix product).
fn per_block<B: Sync, T: Clone + Default + Send>(
    blocks: &[B],
    rows: usize,
    out: &mut Vec<T>,
    f: impl Fn(&B) -> T + Sync + Send,
) {
    out.resize(blocks.len(), T::default()); // every element is written below
    let per_row = blocks.len() / rows;
    for_each_row_chunk(out, per_row, |r0, out| {
        out.iter_mut().zip(&blocks[r0 * per_row..]).for_each(|(o, b)| *o = f(b))
    });
}

/// The rows of `x` (`cols` values each) into `blocks` of `block_len` values by `quantize`, rows in
/// parallel (a prefill batch; a single row runs inline).
fn quantize_rows<B: Clone + Default + Send>(
    x: &[f32],
    cols: usize,
    block_len: usize,
    blocks: &mut Vec<B>,
    quantize: impl Fn(&[f32], &mut [B]) + Sync + Send,
) {
    blocks.resize(x.len() / block_len, B::default());
    for_each_row_chunk(blocks, cols / block_len, |r0, b| quantize(&x[r0 * cols..][..b.len() * block_len], b));
}

/// `blocks`' quants (`rows` rows) widened to i16 into `wide`, rows in parallel.
#[cfg(target_arch = "wasm32")]
fn widen<B: Q8Block + Sync>(blocks: &[B], rows: usize, wide: &mut Vec<[i16; QK8]>) {
    per_block(blocks, rows, wide, |b| b.qs().map(i16::from));
}

/// `blocks` (`rows` rows) as [`Quad`]s into `out`, each block's `(d, s, sum)` by `f`, rows in parallel.
#[cfg(target_arch = "wasm32")]
fn quads<B: Sync>(blocks: &[B], rows: usize, out: &mut Vec<Quad>, f: impl Fn(&B) -> (f32, f32, i32) + Sync + Send) {
    let per_row = blocks.len() / rows;
    let quads_per_row = per_row.div_ceil(4);
    out.resize(rows * quads_per_row, Quad::default()); // every element is written below
    for_each_row_chunk(out, quads_per_row, |r0, out| {
        for (r, quads) in out.chunks_exact_mut(quads_per_row).enumerate() {
            let row = &blocks[(r0 + r) * per_row..][..per_row];
            for (quad, group) in quads.iter_mut().zip(row.chunks(4)) {
                *quad = Quad::default();
                for (k, b) in group.iter().enumerate() {
                    (quad.d[k], quad.s[k], quad.sums[k]) = f(b);
                }
            }
        }
    });
}

/// One activation row in one of the formats.
#[derive(Clone, Copy, Debug)]
pub enum ActRow<'a> {
    F32(&'a [f32]),
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    Q8K(&'a [BlockQ8K]),
}

impl<'a> ActRow<'a> {
    /// The row as blocks of `T`. Panics when `T` is not this row's block type (a caller bug).
    pub fn blocks<T: 'static>(self) -> &'a [T] {
        fn cast<S: 'static, T: 'static>(s: &[S]) -> Option<&[T]> {
            // SAFETY: S and T are the same type when their TypeIds are equal.
            (TypeId::of::<S>() == TypeId::of::<T>())
                .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr() as *const T, s.len()) })
        }
        let r = match self {
            ActRow::F32(s) => cast(s),
            ActRow::Q8_0(s) => cast(s),
            ActRow::Q8_1(s) => cast(s),
            ActRow::Q8K(s) => cast(s),
        };
        r.unwrap_or_else(|| panic!("activation row {self:?} is not of the requested block type"))
    }
}

#[cfg(test)]
mod f16_tests {
    use super::*;
    use crate::test_support::test;

    /// The inline conversion of normal numbers and `half`'s of the rest agree with `half` on every f16.
    #[test]
    fn f16_to_f32_is_halfs_on_every_value() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_to_f32(h.to_le_bytes()), f16::from_bits(h).to_f32());
            assert_eq!(got.to_bits(), want.to_bits(), "f16 {h:#06x}: {got} != {want}");
        }
    }
}
