//! The non-linear 4-bit quants IQ4_NL and IQ4_XS: each 4-bit quant indexes [`KVALUES`], a fixed table of
//! 16 signed levels (denser near zero), scaled per block of 32. Laid out as ggml's `ggml-common.h`.
//!
//! | type   | bytes | values | value of element `i` of sub-block `ib`                       |
//! |--------|-------|--------|--------------------------------------------------------------|
//! | IQ4_NL | 18    | 32     | `d * KVALUES[q]`                                             |
//! | IQ4_XS | 136   | 256    | `d * (ls[ib] - 32) * KVALUES[q]`, `ls` 6 bits per sub-block  |
//!
//! `d` is f16. In each sub-block of 32, byte `j` of its 16 bytes of `qs` holds element `j` in its low
//! nibble and element `j + 16` in its high nibble (as the legacy types). IQ4_NL dots against Q8_0
//! activations, IQ4_XS against Q8_K, as ggml's vec_dot types.
//!
//! `vec_dot_ref` is ggml's generic `ggml_vec_dot_iq4_nl_q8_0` / `ggml_vec_dot_iq4_xs_q8_K` (integer sum
//! per sub-block, then the scales, in ggml's order of float operations). The SIMD kernels: IQ4_NL through the
//! legacy ones (its `Unpack` in each ISA's file looks its nibbles up in the table), IQ4_XS's
//! `vec_dot_iq4_xs` beside them. `quantize` follows ggml's
//! `quantize_row_iq4_nl_impl` without importance weights: per sub-block, the scale that best fits the
//! table (weights `x^2`) among 15 candidates around `max / -127`. Unlike ggml, the quants (and IQ4_XS's
//! sub-block scales) are chosen against `d` as stored in f16, not its f32 value: where `d` is a subnormal
//! f16 its rounding would otherwise add to the quantization error.

use super::act::{f16_to_f32, f32_to_f16, ActKind, BlockQ8K, BlockQ8_0, QK8, QK_K};
use super::k_quants::nearest_int;
use super::QuantBlock;

/// ggml's `kvalues_iq4nl`: the value of each 4-bit quant, before the scale.
pub(crate) const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

const QK: usize = 32;
const HALF: usize = QK / 2;
/// Sub-blocks of 32 in an IQ4_XS block.
const SUBS: usize = QK_K / QK;

/// ggml's `block_iq4_nl` (18 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockIQ4NL {
    pub d: [u8; 2], // f16
    pub qs: [u8; HALF],
}

/// ggml's `block_iq4_xs` (136 bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockIQ4XS {
    /// f16 super-block scale.
    pub d: [u8; 2],
    /// u16, little-endian: bits `2 * ib..2 * ib + 2` are the high 2 bits of sub-block `ib`'s scale.
    pub scales_h: [u8; 2],
    /// The low 4 bits of the scales: sub-block `ib` in the low (even `ib`) or high (odd) nibble of byte `ib / 2`.
    pub scales_l: [u8; SUBS / 2],
    /// 16 bytes per sub-block, nibbles as IQ4_NL's.
    pub qs: [u8; QK_K / 2],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<BlockIQ4NL>() == 18 && align_of::<BlockIQ4NL>() == 1);
    assert!(size_of::<BlockIQ4XS>() == 136 && align_of::<BlockIQ4XS>() == 1);
    assert!(QK == QK8);
};

impl Default for BlockIQ4XS {
    fn default() -> Self {
        BlockIQ4XS { d: [0; 2], scales_h: [0; 2], scales_l: [0; SUBS / 2], qs: [0; QK_K / 2] }
    }
}

impl BlockIQ4XS {
    /// The 6-bit scale of sub-block `ib`, minus 32 (so in `-32..=31`).
    #[inline]
    pub(crate) fn scale(&self, ib: usize) -> i32 {
        let h = u16::from_le_bytes(self.scales_h);
        let ls = ((self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) as i32 | (((h >> (2 * ib)) & 3) as i32) << 4;
        ls - 32
    }
}

/// Below this max |x| a sub-block counts as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `best_index_int8`: the index of the table value nearest `x` (the upper one on a tie).
fn best_index(x: f32) -> u8 {
    let v = |i: usize| KVALUES[i] as f32;
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0, 15);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - v(hi - 1) < v(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// The weighted sums `(sum w q x, sum w q^2)` of `x` quantized with inverse scale `id` (quants into `l`).
fn fit(x: &[f32], id: f32, l: &mut [u8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (&x, l) in x.iter().zip(l) {
        *l = best_index(id * x);
        let (q, w) = (KVALUES[*l as usize] as f32, x * x);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The scale of one sub-block of 32, as ggml's `quantize_row_iq4_nl_impl` with `ntry = 7`: the least-squares
/// scale of the quants at `max / -127`, or of those at `max / (t - 127)` for `t` in `-7..=7` where that fits
/// better. Zero for an all-zero sub-block.
fn sub_block_scale(x: &[f32]) -> f32 {
    const NTRY: i32 = 7;
    let max = x.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if max.abs() < GROUP_MAX_EPS {
        return 0.0;
    }
    let mut l = [0u8; QK];
    let d = -max / KVALUES[0] as f32;
    let (sumqx, sumq2) = fit(x, 1.0 / d, &mut l);
    // Unlike ggml, keep the first guess where every `w = x^2` underflows (ggml divides 0 by 0 there).
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { d };
    let mut best = d * sumqx;
    for t in -NTRY..=NTRY {
        let (sumqx, sumq2) = fit(x, (t + KVALUES[0] as i32) as f32 / max, &mut l);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Quants of `x` against scale `d` (zero where `d` is), packed: element `j` low, element `j + 16` high.
fn pack(x: &[f32], d: f32) -> [u8; HALF] {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    std::array::from_fn(|j| best_index(id * x[j]) | (best_index(id * x[j + HALF]) << 4))
}

/// ggml's integer sum of one sub-block: its 16 bytes of quants against 32 activation quants.
#[inline]
fn sub_block_dot(qs: &[u8], q8: &[i8]) -> i32 {
    let (mut sumi1, mut sumi2) = (0i32, 0i32);
    for j in 0..HALF {
        sumi1 += q8[j] as i32 * KVALUES[(qs[j] & 0xF) as usize] as i32;
        sumi2 += q8[j + HALF] as i32 * KVALUES[(qs[j] >> 4) as usize] as i32;
    }
    sumi1 + sumi2
}

/// One sub-block's 32 values at scale `d`.
#[inline]
fn dequantize_sub_block(qs: &[u8], d: f32, y: &mut [f32]) {
    for j in 0..HALF {
        y[j] = d * KVALUES[(qs[j] & 0xF) as usize] as f32;
        y[j + HALF] = d * KVALUES[(qs[j] >> 4) as usize] as f32;
    }
}

impl QuantBlock for BlockIQ4NL {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_0;
    type Act = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK);
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            dequantize_sub_block(&b.qs, f16_to_f32(b.d), y);
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK);
        for (x, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let d = f32_to_f16(sub_block_scale(x));
            *b = BlockIQ4NL { d, qs: pack(x, f16_to_f32(d)) };
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let d = f16_to_f32(y.d) * f16_to_f32(x.d);
            sumf += d * sub_block_dot(&x.qs, &y.qs) as f32;
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        // The legacy kernels, with the table lookup as the ISA's `Unpack` (|value| <= 127, as Q8_0's quants).
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}

impl QuantBlock for BlockIQ4XS {
    const ELEMS: usize = QK_K;
    const ACT: ActKind = ActKind::Q8K;
    type Act = BlockQ8K;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        assert_eq!(out.len(), blocks.len() * QK_K);
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
            let d = f16_to_f32(b.d);
            for (ib, (qs, y)) in b.qs.chunks_exact(HALF).zip(y.chunks_exact_mut(QK)).enumerate() {
                dequantize_sub_block(qs, d * b.scale(ib) as f32, y);
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        assert_eq!(x.len(), out.len() * QK_K);
        for (x, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let scales: [f32; SUBS] = std::array::from_fn(|ib| sub_block_scale(&x[QK * ib..QK * (ib + 1)]));
            // The scale of largest magnitude maps to -32, the end of the 6-bit range with the most room.
            let max_scale = scales.iter().fold(0f32, |m, &s| if s.abs() > m.abs() { s } else { m });
            *b = BlockIQ4XS { d: f32_to_f16(-max_scale / 32.0), ..Default::default() };
            let d = f16_to_f32(b.d);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut scales_h = 0u16;
            for (ib, (x, qs)) in x.chunks_exact(QK).zip(b.qs.chunks_exact_mut(HALF)).enumerate() {
                let l = nearest_int(id * scales[ib]).clamp(-32, 31);
                qs.copy_from_slice(&pack(x, d * l as f32));
                let ls = (l + 32) as u8;
                b.scales_l[ib / 2] |= (ls & 0xF) << (4 * (ib % 2));
                scales_h |= ((ls >> 4) as u16) << (2 * ib);
            }
            b.scales_h = scales_h.to_le_bytes();
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8K]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let d4d8 = f16_to_f32(x.d) * y.d;
            for (ib, (qs, q8)) in x.qs.chunks_exact(HALF).zip(y.qs.chunks_exact(QK)).enumerate() {
                sumf += d4d8 * x.scale(ib) as f32 * sub_block_dot(qs, q8) as f32;
            }
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8K]) -> f32 {
        simd_kernel!(vec_dot_iq4_xs(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}
