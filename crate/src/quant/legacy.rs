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

use super::act::{f16_to_f32, f32_to_f16, quantize_q8_0, ActKind, BlockQ8_0, BlockQ8_1, QK8};
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

/// ggml's scale for the symmetric types: the value of largest magnitude, keeping its sign, maps to
/// `-levels` (so the other side reaches `+levels - 1` after clamping).
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
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
            let d = signed_max(x) / -8.0;
            let id = inverse(d);
            b.d = f32_to_f16(d);
            for j in 0..HALF {
                let lo = trunc_clamp(x[j] * id + 8.5, 15);
                let hi = trunc_clamp(x[j + HALF] * id + 8.5, 15);
                b.qs[j] = lo | (hi << 4);
            }
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
        simd_kernel!(q4_0_q8_0(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
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
            for j in 0..HALF {
                let lo = trunc_clamp((x[j] - min) * id + 0.5, 15);
                let hi = trunc_clamp((x[j + HALF] - min) * id + 0.5, 15);
                b.qs[j] = lo | (hi << 4);
            }
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
        simd_kernel!(q4_1_q8_1(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
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
            let mut qh = 0u32;
            for j in 0..HALF {
                let lo = trunc_clamp(x[j] * id + 16.5, 31);
                let hi = trunc_clamp(x[j + HALF] * id + 16.5, 31);
                b.qs[j] = (lo & 0x0F) | ((hi & 0x0F) << 4);
                qh |= ((lo as u32 & 0x10) >> 4) << j;
                qh |= ((hi as u32 & 0x10) >> 4) << (j + HALF);
            }
            b.qh = qh.to_le_bytes();
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
        simd_kernel!(q5_0_q8_0(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
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
            let mut qh = 0u32;
            for j in 0..HALF {
                // ggml does not clamp here: `(x - min) * id` stays within 0..=31 (plus rounding).
                let lo = ((x[j] - min) * id + 0.5) as u8;
                let hi = ((x[j + HALF] - min) * id + 0.5) as u8;
                b.qs[j] = (lo & 0x0F) | ((hi & 0x0F) << 4);
                qh |= ((lo as u32 & 0x10) >> 4) << j;
                qh |= ((hi as u32 & 0x10) >> 4) << (j + HALF);
            }
            b.qh = qh.to_le_bytes();
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
        simd_kernel!(q5_1_q8_1(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
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
        simd_kernel!(q8_0_q8_0(w, a)).unwrap_or_else(|| Self::vec_dot_ref(w, a))
    }
}
