//! Known values: each block is worked out by hand from ggml's `quantize_row_*_ref`. The inputs put
//! values just below and above the rounding points, and past the clamped end of the scale.

use super::checks::{dequantized, quantized};
use crate::quant::GgmlType;
use crate::test_support::test;

#[test]
fn q4_0_known_block() {
    // max = -8, so d = 1: q = trunc(x + 8.5), at most 15.
    let mut x: Vec<f32> = (0..16).map(|j| j as f32 - 8.0).collect(); // q = j
    x.extend([7.9, -7.6, 0.49, 0.5, -0.5, -0.51, 3.2, -3.3]); // q = 15 (clamped), 0, 8, 9, 8, 7, 11, 5
    x.extend([0.0; 8]); // q = 8
    #[rustfmt::skip]
    let expected = [
        0x00, 0x3C, // d = 1.0
        0xF0, 0x01, 0x82, 0x93, 0x84, 0x75, 0xB6, 0x57,
        0x88, 0x89, 0x8A, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F,
    ];
    assert_eq!(quantized(GgmlType::Q4_0, &x), expected);
}

#[test]
fn q4_1_known_block() {
    // min = -1, max = 14, so d = 1, m = -1: q = trunc(x + 1 + 0.5).
    let mut x: Vec<f32> = (0..16).map(|j| j as f32 - 1.0).collect(); // q = j
    x.extend([13.6, 0.4, 0.5, -0.5, -0.51, 6.2]); // q = 15, 1, 2, 1, 0, 7
    x.extend([0.0; 10]); // q = 1
    #[rustfmt::skip]
    let expected = [
        0x00, 0x3C, // d = 1.0
        0x00, 0xBC, // m = -1.0
        0xF0, 0x11, 0x22, 0x13, 0x04, 0x75, 0x16, 0x17,
        0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F,
    ];
    assert_eq!(quantized(GgmlType::Q4_1, &x), expected);
}

#[test]
fn q5_0_known_block() {
    // max = -16, so d = 1: q = trunc(x + 16.5), at most 31.
    let mut x: Vec<f32> = (0..16).map(|j| j as f32 - 16.0).collect(); // q = j
    x.extend([15.9, 0.0, 1.49, -0.5, -0.51, 7.7]); // q = 31 (clamped), 16, 17, 16, 15, 24
    x.extend([0.0; 10]); // q = 16
    #[rustfmt::skip]
    let expected = [
        0x00, 0x3C, // d = 1.0
        0x00, 0x00, 0xEF, 0xFF, // fifth bits: elements 16..32 except 20
        0xF0, 0x01, 0x12, 0x03, 0xF4, 0x85, 0x06, 0x07,
        0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    ];
    assert_eq!(quantized(GgmlType::Q5_0, &x), expected);
}

#[test]
fn q5_1_known_block() {
    // min = -1, max = 30, so d = 1, m = -1: q = trunc(x + 1 + 0.5).
    let mut x: Vec<f32> = (0..16).map(|j| j as f32 - 1.0).collect(); // q = j
    x.extend([30.0, 14.5, 14.49, -1.0, 7.2]); // q = 31, 16, 15, 0, 8
    x.extend([0.0; 11]); // q = 1
    #[rustfmt::skip]
    let expected = [
        0x00, 0x3C, // d = 1.0
        0x00, 0xBC, // m = -1.0
        0x00, 0x00, 0x03, 0x00, // fifth bits: elements 16 and 17
        0xF0, 0x01, 0xF2, 0x03, 0x84, 0x15, 0x16, 0x17,
        0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F,
    ];
    assert_eq!(quantized(GgmlType::Q5_1, &x), expected);
}

#[test]
fn q8_0_known_block() {
    // amax = 127, so d = 1: q = round(x), halves away from zero.
    let mut x = vec![127.0, -127.0, 0.5, -0.5, 1.49, -2.5, 63.7];
    x.extend((7..32).map(|j| j as f32 - 20.0));
    let mut expected = vec![0x00, 0x3C]; // d = 1.0
    expected.extend([127i8, -127, 1, -1, 1, -3, 64].map(|q| q as u8));
    expected.extend((7..32).map(|j| (j - 20) as i8 as u8));
    assert_eq!(quantized(GgmlType::Q8_0, &x), expected);
}

#[test]
fn float_known_values() {
    assert_eq!(quantized(GgmlType::F32, &[1.5, -0.0]), [0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0x80]);
    // f16: 1 + 2^-11 ties to even (1.0), 1 + 3 * 2^-11 ties up to 0x3C02, 65504 is the largest finite.
    let x = [1.0, -2.0, 1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 65504.0];
    let expected = [0x00, 0x3C, 0x00, 0xC0, 0x00, 0x3C, 0x02, 0x3C, 0xFF, 0x7B];
    assert_eq!(quantized(GgmlType::F16, &x), expected);
    // bf16: the top half of the f32, rounded to nearest even (pi = 0x40490FDB -> 0x4049).
    let x = [1.0, 1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), std::f32::consts::PI];
    let expected = [0x80, 0x3F, 0x80, 0x3F, 0x82, 0x3F, 0x49, 0x40];
    assert_eq!(quantized(GgmlType::BF16, &x), expected);
}

/// llama.cpp's `kvalues_iq4nl`, written out again so that the tests check the kernels' own table.
const IQ4NL_VALUES: [f32; 16] =
    [-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0];

/// An IQ4_NL block's bytes: `d` (f16) and, for element `i`, quant `q(i)`: element `j` in the low nibble of
/// byte `j`, element `j + 16` in its high nibble.
fn iq4_nl_block(d: [u8; 2], q: impl Fn(usize) -> u8) -> Vec<u8> {
    let mut b = d.to_vec();
    b.extend((0..16).map(|j| q(j) | (q(j + 16) << 4)));
    b
}

#[test]
fn iq4_nl_known_block() {
    // d = 0.5; quants 0..16 then 15..=0: every level, at both nibbles.
    let q = |i: usize| if i < 16 { i as u8 } else { (31 - i) as u8 };
    let block = iq4_nl_block([0x00, 0x38], q);
    let expected: Vec<f32> = (0..32).map(|i| 0.5 * IQ4NL_VALUES[q(i) as usize]).collect();
    assert_eq!(dequantized(GgmlType::IQ4_NL, &block), expected);
    // Values on the levels come back from the quantizer as they were: d = 0.5, every quant in place.
    assert_eq!(quantized(GgmlType::IQ4_NL, &expected), block);
    // An all-zero block: d = 0, every quant the level nearest 0 (index 8, value 1).
    assert_eq!(quantized(GgmlType::IQ4_NL, &[0.0; 32]), iq4_nl_block([0, 0], |_| 8));
}

#[test]
fn iq4_xs_known_block() {
    // d = 0.25; 6-bit sub-block scales `ls` at the ends of their range and around 32 (scale ls - 32).
    let ls: [u16; 8] = [0, 63, 32, 33, 31, 16, 47, 48];
    let scales_h = ls.iter().enumerate().fold(0u16, |h, (ib, &l)| h | (l >> 4) << (2 * ib));
    assert_eq!(scales_h, 0xE5AC);
    let mut block = vec![0x00, 0x34, 0xAC, 0xE5];
    block.extend([0xF0, 0x10, 0x0F, 0x0F]); // the low nibbles of ls, sub-block 2k low and 2k + 1 high
    let q = |ib: usize, i: usize| ((i * 7 + ib * 3) % 16) as u8;
    for ib in 0..8 {
        block.extend((0..16).map(|j| q(ib, j) | (q(ib, j + 16) << 4)));
    }
    // llama.cpp's dequantize_row_iq4_xs: dl = d * (ls - 32), value = dl * kvalues_iq4nl[q].
    let expected: Vec<f32> = (0..256)
        .map(|k| {
            let (ib, i) = (k / 32, k % 32);
            0.25 * (ls[ib] as f32 - 32.0) * IQ4NL_VALUES[q(ib, i) as usize]
        })
        .collect();
    assert_eq!(dequantized(GgmlType::IQ4_XS, &block), expected);
}

#[test]
fn iq4_xs_known_quantization() {
    // Every sub-block on the levels at scale 0.5 (sub-block 0 reaching -127 there), but sub-block 7 at half
    // that: d = -0.5 / 32 exactly, sub-block scales -32 and -16 (ls 0 and 16), every quant in place.
    let q = |ib: usize, i: usize| if ib == 0 && i == 0 { 0 } else { ((i * 5 + ib) % 16) as u8 };
    let x: Vec<f32> = (0..256)
        .map(|k| {
            let (ib, i) = (k / 32, k % 32);
            let scale = if ib == 7 { 0.25 } else { 0.5 };
            scale * IQ4NL_VALUES[q(ib, i) as usize]
        })
        .collect();
    let block = quantized(GgmlType::IQ4_XS, &x);
    assert_eq!(&block[..2], &half::f16::from_f32(-0.5 / 32.0).to_le_bytes());
    assert_eq!(&block[2..8], &[0x00, 0x40, 0x00, 0x00, 0x00, 0x00], "scales: ls 0, and 16 for sub-block 7");
    for ib in 0..8 {
        let expected: Vec<u8> = (0..16).map(|j| q(ib, j) | (q(ib, j + 16) << 4)).collect();
        assert_eq!(&block[8 + 16 * ib..8 + 16 * (ib + 1)], &expected[..], "sub-block {ib}");
    }
    assert_eq!(dequantized(GgmlType::IQ4_XS, &block), x);
}
