//! The legacy GGUF quants: blocks of 32 values, laid out as ggml's `ggml-common.h` and quantized as
//! ggml-quants.c's `quantize_row_*_ref`.
//!
//! | type | bytes | value of element `i`                                    |
//! |------|-------|---------------------------------------------------------|
//! | Q4_0 | 18    | `d * (q - 8)`, `q` 4 bits                               |
//! | Q4_1 | 20    | `d * q + m`, `q` 4 bits                                 |
//! | Q5_0 | 22    | `d * (q - 16)`, `q` 5 bits                              |
//! | Q5_1 | 24    | `d * q + m`, `q` 5 bits                                 |
//! | Q8_0 | 34    | `d * q`, `q` i8 (the block is [`BlockQ8_0`] in `act`)   |
//!
//! `d` and `m` are f16. Byte `j` of `qs` holds element `j` in its low nibble and element `j + 16` in its
//! high nibble; bit `j` of the little-endian u32 `qh` is the fifth bit of element `j`.
//! Q4_0, Q5_0 and Q8_0 dot against Q8_0 activations; Q4_1 and Q5_1 against Q8_1, whose `s = d * sum(q)`
//! gives the `m` term without touching the activation values again.
//!
//! The scalar `vec_dot_ref`s are ggml's generic `ggml_vec_dot_*` (integer sum per block, then the block
//! scales, in ggml's order of float operations).

use super::act::{f16_to_f32, f32_to_f16, quantize_q8_0, signed_max, ActKind, BlockQ8_0, BlockQ8_1, Q8Block, QK8};
use super::iq4::BlockIQ4NL;
use super::QuantBlock;

const QK: usize = 32;
const HALF: usize = QK / 2;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: [u8; 2], // f16
    pub qs: [u8; HALF],
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: [u8; 2], // f16
    pub m: [u8; 2], // f16
    pub qs: [u8; HALF],
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],  // f16
    pub qh: [u8; 4], // u32, little-endian
    pub qs: [u8; HALF],
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],  // f16
    pub m: [u8; 2],  // f16
    pub qh: [u8; 4], // u32, little-endian
    pub qs: [u8; HALF],
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<BlockQ4_0>() == 18 && align_of::<BlockQ4_0>() == 1);
    assert!(size_of::<BlockQ4_1>() == 20 && align_of::<BlockQ4_1>() == 1);
    assert!(size_of::<BlockQ5_0>() == 22 && align_of::<BlockQ5_0>() == 1);
    assert!(size_of::<BlockQ5_1>() == 24 && align_of::<BlockQ5_1>() == 1);
    assert!(size_of::<BlockQ8_0>() == 34 && align_of::<BlockQ8_0>() == 1);
    assert!(QK == QK8);
};

/// What the SIMD kernels (`legacy_dot`, `legacy_rows` in each ISA's file) read of a legacy weight block
/// besides its quants, which each ISA unpacks its own way: one kernel per ISA serves every legacy type.
#[allow(dead_code)] // all of it on targets without SIMD kernels; `m` on x86_64 (AVX2 loads `d, m` as one word)
pub(crate) trait LegacyBlock: QuantBlock<Act: Q8Block> {
    /// Whether values are `d * q + m` (Q4_1, Q5_1: unsigned quants, dotted against Q8_1, whose `s` gives
    /// the `m` term), rather than `d * (q - offset)` (Q4_0, Q5_0, Q8_0: against Q8_0).
    const WITH_MIN: bool = matches!(Self::ACT, ActKind::Q8_1);
    /// The scale `d` (f16).
    fn d(&self) -> [u8; 2];
    /// The minimum `m` (f16); zero where there is none.
    fn m(&self) -> [u8; 2];
}

/// Implements [`LegacyBlock`] for `$B`, whose `m` is `$m` (of the block `$b`).
macro_rules! legacy_block {
    ($B:ty, |$b:ident| $m:expr) => {
        impl LegacyBlock for $B {
            #[inline(always)]
            fn d(&self) -> [u8; 2] {
                self.d
            }
            #[inline(always)]
            fn m(&self) -> [u8; 2] {
                let $b = self;
                $m
            }
        }
    };
}

legacy_block!(BlockQ4_0, |_b| [0, 0]);
legacy_block!(BlockQ4_1, |b| b.m);
legacy_block!(BlockQ5_0, |_b| [0, 0]);
legacy_block!(BlockQ5_1, |b| b.m);
legacy_block!(BlockQ8_0, |_b| [0, 0]);
legacy_block!(BlockIQ4NL, |_b| [0, 0]);

// The kernels read a block's `d` and `m` (an activation's `d` and `s`) as one 4-byte word.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(BlockQ4_0, d) == 0 && offset_of!(BlockQ5_0, d) == 0 && offset_of!(BlockQ8_0, d) == 0);
    assert!(offset_of!(BlockIQ4NL, d) == 0);
    assert!(offset_of!(BlockQ4_1, d) == 0 && offset_of!(BlockQ4_1, m) == 2);
    assert!(offset_of!(BlockQ5_1, d) == 0 && offset_of!(BlockQ5_1, m) == 2);
    assert!(offset_of!(BlockQ8_1, d) == 0 && offset_of!(BlockQ8_1, s) == 2);
};

/// The 5-bit quants of a Q5 block, in element order.
#[inline]
fn q5_values(qh: [u8; 4], qs: &[u8; HALF]) -> [u8; QK] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for j in 0..HALF {
        q[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10) as u8;
        q[j + HALF] = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10) as u8;
    }
    q
}

/// A block's 4-bit quants (in element order) packed into `qs`: element `j` low, element `j + 16` high.
fn pack_nibbles(q: &[u8; QK]) -> [u8; HALF] {
    std::array::from_fn(|j| (q[j] & 0x0F) | ((q[j + HALF] & 0x0F) << 4))
}

/// A Q5 block's 5-bit quants (in element order) packed into `(qh, qs)`, the inverse of [`q5_values`].
fn pack_q5(q: &[u8; QK]) -> ([u8; 4], [u8; HALF]) {
    let qh = q.iter().enumerate().fold(0u32, |qh, (j, &q)| qh | ((q as u32 & 0x10) >> 4) << j);
    (qh.to_le_bytes(), pack_nibbles(q))
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (if v < lo { v } else { lo }, if v > hi { v } else { hi }))
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Rounds `v + bias` toward zero into a byte, clamped to `max`: ggml's `MIN(max, (int8_t)(v + bias))`.
#[inline]
fn trunc_clamp(v: f32, max: u8) -> u8 {
    ((v as i8) as u8).min(max)
}

impl QuantBlock for BlockQ4_0 {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_0;
    type Act = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = f16_to_f32(b.d);
            for j in 0..HALF {
                y[j] = ((b.qs[j] & 0x0F) as i32 - 8) as f32 * d;
                y[j + HALF] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        for (x, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
            // The value of largest magnitude maps to -8 (so the other side reaches 7 after clamping).
            let d = signed_max(x) / -8.0;
            let id = inverse(d);
            b.d = f32_to_f16(d);
            b.qs = pack_nibbles(&std::array::from_fn(|j| trunc_clamp(x[j] * id + 8.5, 15)));
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let mut sumi = 0i32;
            for j in 0..HALF {
                sumi += ((x.qs[j] & 0x0F) as i32 - 8) * y.qs[j] as i32;
                sumi += ((x.qs[j] >> 4) as i32 - 8) * y.qs[j + HALF] as i32;
            }
            sumf += sumi as f32 * f16_to_f32(x.d) * f16_to_f32(y.d);
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}

impl QuantBlock for BlockQ4_1 {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_1;
    type Act = BlockQ8_1;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
            for j in 0..HALF {
                y[j] = (b.qs[j] & 0x0F) as f32 * d + m;
                y[j + HALF] = (b.qs[j] >> 4) as f32 * d + m;
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        for (x, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let (min, max) = min_max(x);
            let d = (max - min) / 15.0;
            let id = inverse(d);
            b.d = f32_to_f16(d);
            b.m = f32_to_f16(min);
            b.qs = pack_nibbles(&std::array::from_fn(|j| trunc_clamp((x[j] - min) * id + 0.5, 15)));
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_1]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let mut sumi = 0i32;
            for j in 0..HALF {
                sumi += (x.qs[j] & 0x0F) as i32 * y.qs[j] as i32;
                sumi += (x.qs[j] >> 4) as i32 * y.qs[j + HALF] as i32;
            }
            sumf += (f16_to_f32(x.d) * f16_to_f32(y.d)) * sumi as f32 + f16_to_f32(x.m) * f16_to_f32(y.s);
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_1]) -> f32 {
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}

impl QuantBlock for BlockQ5_0 {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_0;
    type Act = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = f16_to_f32(b.d);
            for (y, q) in y.iter_mut().zip(q5_values(b.qh, &b.qs)) {
                *y = (q as i32 - 16) as f32 * d;
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        for (x, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let d = signed_max(x) / -16.0;
            let id = inverse(d);
            b.d = f32_to_f16(d);
            (b.qh, b.qs) = pack_q5(&std::array::from_fn(|j| trunc_clamp(x[j] * id + 16.5, 31)));
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let sumi: i32 = q5_values(x.qh, &x.qs).iter().zip(&y.qs).map(|(&q, &v)| (q as i32 - 16) * v as i32).sum();
            sumf += (f16_to_f32(x.d) * f16_to_f32(y.d)) * sumi as f32;
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}

impl QuantBlock for BlockQ5_1 {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_1;
    type Act = BlockQ8_1;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
            for (y, q) in y.iter_mut().zip(q5_values(b.qh, &b.qs)) {
                *y = q as f32 * d + m;
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        for (x, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let (min, max) = min_max(x);
            let d = (max - min) / 31.0;
            let id = inverse(d);
            b.d = f32_to_f16(d);
            b.m = f32_to_f16(min);
            // ggml does not clamp here: `(x - min) * id` stays within 0..=31 (plus rounding).
            (b.qh, b.qs) = pack_q5(&std::array::from_fn(|j| ((x[j] - min) * id + 0.5) as u8));
        }
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_1]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let sumi: i32 = q5_values(x.qh, &x.qs).iter().zip(&y.qs).map(|(&q, &v)| q as i32 * v as i32).sum();
            sumf += (f16_to_f32(x.d) * f16_to_f32(y.d)) * sumi as f32 + f16_to_f32(x.m) * f16_to_f32(y.s);
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_1]) -> f32 {
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}

impl QuantBlock for BlockQ8_0 {
    const ELEMS: usize = QK;
    const ACT: ActKind = ActKind::Q8_0;
    type Act = BlockQ8_0;

    fn dequantize(blocks: &[Self], out: &mut [f32]) {
        for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
            let d = f16_to_f32(b.d);
            for (y, &q) in y.iter_mut().zip(&b.qs) {
                *y = q as f32 * d;
            }
        }
    }

    fn quantize(x: &[f32], out: &mut [Self]) {
        // The weight quantizer is the activation quantizer (ggml's `quantize_row_q8_0_ref`).
        quantize_q8_0(x, out)
    }

    fn vec_dot_ref(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        let mut sumf = 0f32;
        for (x, y) in w.iter().zip(a) {
            let sumi: i32 = x.qs.iter().zip(&y.qs).map(|(&q, &v)| q as i32 * v as i32).sum();
            sumf += sumi as f32 * (f16_to_f32(x.d) * f16_to_f32(y.d));
        }
        sumf
    }

    fn vec_dot(w: &[Self], a: &[BlockQ8_0]) -> f32 {
        simd_kernel!(legacy_dot(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}
