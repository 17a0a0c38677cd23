//! Checks shared by every block format, generic over [`GgmlType`]: a format's tests are one
//! [`check_type`] call (with its round-trip error bound) plus a known-value test of its quantizer.
//!
//! - `vec_dot` (the SIMD kernel this machine runs) equals `vec_dot_ref` on random blocks;
//! - `vec_dot_ref` equals the f64 dot product of the dequantized weights and activations;
//! - `dequantize(quantize(x))` stays within the format's error bound.
//!
//! Dot tolerances are relative to the sum of the absolute terms, `sum |w_i * a_i|` plus, for weights
//! with a per-block offset `m`, `sum |m * a_i|` (the kernels round at that magnitude).

use std::mem::offset_of;

use super::act::{f16_to_f32, f32_to_f16};
use super::*;

/// Tolerance of the dot checks, relative to the sum of absolute terms.
const DOT_TOLERANCE: f64 = 1e-5;
/// Half an f16 ulp, relative (normal range).
const F16_REL: f32 = 1.0 / 2048.0;

/// The rounding error of storing `v` as f16: half an ulp, which is 2^-25 for subnormals.
fn f16_error(v: f32) -> f32 {
    (v.abs() * F16_REL).max(2f32.powi(-25))
}

/// Deterministic xorshift64* generator (tests must not depend on a rand crate or on the run).
pub(super) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for b in bytes {
            *b = self.next_u64() as u8;
        }
    }

    /// A float of random sign and magnitude between 2^-12 and 2 (log-uniform): a sane scale or weight.
    pub fn sane(&mut self) -> f32 {
        let sign = if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        sign * self.uniform(-12.0, 1.0).exp2()
    }
}

#[derive(Clone, Copy)]
enum Float {
    F32,
    F16,
    BF16,
}

/// The floats inside a block of `ty` (byte offset, format): random bytes there could be NaN or huge.
fn float_fields(ty: GgmlType) -> Vec<(usize, Float)> {
    use GgmlType as T;
    match ty {
        T::F32 => vec![(0, Float::F32)],
        T::F16 => vec![(0, Float::F16)],
        T::BF16 => vec![(0, Float::BF16)],
        T::Q4_0 => vec![(offset_of!(BlockQ4_0, d), Float::F16)],
        T::Q4_1 => vec![(offset_of!(BlockQ4_1, d), Float::F16), (offset_of!(BlockQ4_1, m), Float::F16)],
        T::Q5_0 => vec![(offset_of!(BlockQ5_0, d), Float::F16)],
        T::Q5_1 => vec![(offset_of!(BlockQ5_1, d), Float::F16), (offset_of!(BlockQ5_1, m), Float::F16)],
        T::Q8_0 => vec![(offset_of!(BlockQ8_0, d), Float::F16)],
        T::Q2_K => vec![(offset_of!(BlockQ2K, d), Float::F16), (offset_of!(BlockQ2K, dmin), Float::F16)],
        T::Q3_K => vec![(offset_of!(BlockQ3K, d), Float::F16)],
        T::Q4_K => vec![(offset_of!(BlockQ4K, d), Float::F16), (offset_of!(BlockQ4K, dmin), Float::F16)],
        T::Q5_K => vec![(offset_of!(BlockQ5K, d), Float::F16), (offset_of!(BlockQ5K, dmin), Float::F16)],
        T::Q6_K => vec![(offset_of!(BlockQ6K, d), Float::F16)],
    }
}

/// The per-block offset `m` of types dotted against Q8_1 (whose activation sum `s` multiplies it).
fn block_offset(ty: GgmlType, block: &[u8]) -> f32 {
    let f16_at = |o: usize| f16_to_f32([block[o], block[o + 1]]);
    match ty {
        GgmlType::Q4_1 => f16_at(offset_of!(BlockQ4_1, m)),
        GgmlType::Q5_1 => f16_at(offset_of!(BlockQ5_1, m)),
        _ => {
            assert_ne!(ty.act_kind(), ActKind::Q8_1, "{ty:?}: tell block_offset where its offset is");
            0.0
        }
    }
}

/// `blocks` random blocks of `ty`: random bytes, with every float field a sane value.
pub(super) fn random_row(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let mut row = vec![0u8; ty.row_bytes(blocks * ty.block_size())];
    rng.fill(&mut row);
    let fields = float_fields(ty);
    for block in row.chunks_exact_mut(ty.block_bytes()) {
        for &(at, format) in &fields {
            let v = rng.sane();
            match format {
                Float::F32 => block[at..at + 4].copy_from_slice(&v.to_le_bytes()),
                Float::F16 => block[at..at + 2].copy_from_slice(&f32_to_f16(v)),
                Float::BF16 => block[at..at + 2].copy_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            }
        }
    }
    row
}

/// One activation row of `n` values in `ty`'s activation format, quantized from random floats
/// (a few outliers, as real activations have).
pub(super) fn random_activations(ty: GgmlType, n: usize, rng: &mut Rng) -> Activations {
    let x: Vec<f32> = (0..n)
        .map(|_| {
            let outlier = if rng.next_u64().is_multiple_of(16) { 8.0 } else { 1.0 };
            rng.uniform(-1.0, 1.0) * outlier
        })
        .collect();
    let mut acts = Activations::new();
    acts.quantize(ty.act_kind(), &x, 1);
    acts
}

/// An activation row's values, exactly as its blocks hold them (`d * q`).
fn activation_values(row: ActRow<'_>) -> Vec<f32> {
    match row {
        ActRow::F32(x) => x.to_vec(),
        ActRow::Q8_0(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * f16_to_f32(b.d))).collect(),
        ActRow::Q8_1(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * f16_to_f32(b.d))).collect(),
        ActRow::Q8K(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * b.d)).collect(),
    }
}

fn dequantized(ty: GgmlType, row: &[u8]) -> Vec<f32> {
    let mut w = vec![0f32; row.len() / ty.block_bytes() * ty.block_size()];
    dequantize_row(ty, row, &mut w);
    w
}

/// What `vec_dot` should return, in f64: the dot of the dequantized values, plus what Q8_1's f16 sum
/// `s` adds: `m * (s - d * sum(q))` per block.
fn expected_dot(ty: GgmlType, w_row: &[u8], a: ActRow<'_>) -> f64 {
    let w = dequantized(ty, w_row);
    let mut dot: f64 = w.iter().zip(activation_values(a)).map(|(&w, a)| w as f64 * a as f64).sum();
    if let ActRow::Q8_1(blocks) = a {
        for (wb, ab) in w_row.chunks_exact(ty.block_bytes()).zip(blocks) {
            let qsum: i32 = ab.qs.iter().map(|&q| q as i32).sum();
            let exact_sum = f16_to_f32(ab.d) as f64 * qsum as f64;
            dot += block_offset(ty, wb) as f64 * (f16_to_f32(ab.s) as f64 - exact_sum);
        }
    }
    dot
}

/// The scale of the rounding errors of a dot: `sum |w_i * a_i| + sum |m_block * a_i|`.
fn abs_terms(ty: GgmlType, w_row: &[u8], a: ActRow<'_>) -> f64 {
    let w = dequantized(ty, w_row);
    let a = activation_values(a);
    let per_block = ty.block_size();
    let mut sum = 0f64;
    for (b, wb) in w_row.chunks_exact(ty.block_bytes()).enumerate() {
        let m = block_offset(ty, wb).abs() as f64;
        for i in b * per_block..(b + 1) * per_block {
            sum += (w[i].abs() as f64 + m) * a[i].abs() as f64;
        }
    }
    sum
}

/// Row lengths to test, in blocks: every tail of the 2-block and 4x8-element loops, and the real widths.
fn lengths(ty: GgmlType) -> &'static [usize] {
    if ty.block_size() == 1 {
        &[0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 39, 63, 64, 65, 100, 576, 1536]
    } else {
        &[0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 18, 31, 32, 33, 48, 67]
    }
}

fn check_dots(ty: GgmlType) {
    let mut rng = Rng::new(ty as u64 + 1);
    for &blocks in lengths(ty) {
        for trial in 0..3 {
            let w = random_row(ty, blocks, &mut rng);
            let acts = random_activations(ty, blocks * ty.block_size(), &mut rng);
            let a = acts.row(0);
            let fast = vec_dot(ty, &w, a) as f64;
            let reference = vec_dot_ref(ty, &w, a) as f64;
            let expected = expected_dot(ty, &w, a);
            let tolerance = DOT_TOLERANCE * abs_terms(ty, &w, a);
            let at = format!("{ty:?}, {blocks} blocks, trial {trial}");
            assert!(
                (fast - reference).abs() <= tolerance,
                "{at}: vec_dot {fast} != vec_dot_ref {reference} (tolerance {tolerance})"
            );
            assert!(
                (reference - expected).abs() <= tolerance,
                "{at}: vec_dot_ref {reference} != dequantized dot {expected} (tolerance {tolerance})"
            );
        }
    }
}

/// Error bound of one element `x` of block `block` after `dequantize(quantize(block))`.
pub(super) type Bound = fn(block: &[f32], x: f32) -> f32;

/// Random blocks of several shapes: centered, offset (all one sign), tiny, large, constant and zero.
fn round_trip_input(block_size: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::new();
    for shape in 0..64 {
        let mut uniform = |lo: f32, hi: f32| -> Vec<f32> { (0..block_size).map(|_| rng.uniform(lo, hi)).collect() };
        let block = match shape % 8 {
            0..=2 => uniform(-1.0, 1.0),
            3 => uniform(0.5, 1.5),
            4 => uniform(-3.0, -2.0),
            5 => uniform(-1e-3, 1e-3),
            6 => uniform(-300.0, 300.0),
            _ if shape % 16 == 7 => vec![uniform(-1.0, 1.0)[0]; block_size],
            _ => vec![0.0; block_size],
        };
        x.extend(block);
    }
    x
}

fn check_round_trip(ty: GgmlType, bound: Bound) {
    let mut rng = Rng::new(ty as u64 + 1000);
    let x = round_trip_input(ty.block_size(), &mut rng);
    let mut bytes = vec![0u8; ty.row_bytes(x.len())];
    quantize_row(ty, &x, &mut bytes);
    let y = dequantized(ty, &bytes);
    for (b, (xb, yb)) in x.chunks_exact(ty.block_size()).zip(y.chunks_exact(ty.block_size())).enumerate() {
        for (i, (&x, &y)) in xb.iter().zip(yb).enumerate() {
            let limit = bound(xb, x);
            assert!((x - y).abs() <= limit, "{ty:?} block {b} [{i}]: {x} -> {y}, error above {limit}");
        }
    }
}

/// All checks for one type; `bound` is its round-trip error bound.
pub(super) fn check_type(ty: GgmlType, bound: Bound) {
    check_dots(ty);
    check_round_trip(ty, bound);
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// Symmetric types (Q4_0, Q5_0): `levels` steps of `amax / levels` on the side of the largest
/// magnitude, one fewer on the other side, where values beyond the last level clamp to it.
fn symmetric_bound(block: &[f32], x: f32, levels: f32) -> f32 {
    let max = block.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let step = max.abs() / levels;
    let clamped = if x * max < 0.0 { x.abs() - (levels - 1.0) * step } else { 0.0 };
    // Rounding to the nearest level, the f16 scale's error times the level, f32 arithmetic.
    (0.5 * step).max(clamped) + levels * f16_error(step) + max.abs() * 1e-6
}

/// Offset types (Q4_1, Q5_1): `levels` steps from the minimum, which is stored as f16.
fn offset_bound(block: &[f32], levels: f32) -> f32 {
    let (min, max) = block.iter().fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let step = (max - min) / levels;
    0.5 * step + levels * f16_error(step) + f16_error(min) + amax(block) * 1e-6
}

pub(super) fn q4_0_bound(block: &[f32], x: f32) -> f32 {
    symmetric_bound(block, x, 8.0)
}

pub(super) fn q5_0_bound(block: &[f32], x: f32) -> f32 {
    symmetric_bound(block, x, 16.0)
}

pub(super) fn q4_1_bound(block: &[f32], _: f32) -> f32 {
    offset_bound(block, 15.0)
}

pub(super) fn q5_1_bound(block: &[f32], _: f32) -> f32 {
    offset_bound(block, 31.0)
}

pub(super) fn q8_0_bound(block: &[f32], _: f32) -> f32 {
    let step = amax(block) / 127.0;
    0.5 * step + 127.0 * f16_error(step) + amax(block) * 1e-6
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn f32_checks() {
    check_type(GgmlType::F32, |_, _| 0.0);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn f16_checks() {
    check_type(GgmlType::F16, |_, x| f16_error(x));
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn bf16_checks() {
    check_type(GgmlType::BF16, |_, x| x.abs() / 256.0);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q4_0_checks() {
    check_type(GgmlType::Q4_0, q4_0_bound);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q4_1_checks() {
    check_type(GgmlType::Q4_1, q4_1_bound);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q5_0_checks() {
    check_type(GgmlType::Q5_0, q5_0_bound);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q5_1_checks() {
    check_type(GgmlType::Q5_1, q5_1_bound);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q8_0_checks() {
    check_type(GgmlType::Q8_0, q8_0_bound);
}

fn quantized(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_bytes(x.len())];
    quantize_row(ty, x, &mut out);
    out
}

// Known values: each block is worked out by hand from ggml's `quantize_row_*_ref`. The inputs put
// values just below and above the rounding points, and past the clamped end of the scale.

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn q8_0_known_block() {
    // amax = 127, so d = 1: q = round(x), halves away from zero.
    let mut x = vec![127.0, -127.0, 0.5, -0.5, 1.49, -2.5, 63.7];
    x.extend((7..32).map(|j| j as f32 - 20.0));
    let mut expected = vec![0x00, 0x3C]; // d = 1.0
    expected.extend([127i8, -127, 1, -1, 1, -3, 64].map(|q| q as u8));
    expected.extend((7..32).map(|j| (j - 20) as i8 as u8));
    assert_eq!(quantized(GgmlType::Q8_0, &x), expected);
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
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

/// Rough decode-speed numbers: `cargo test -p ruvllm --lib timing -- --ignored --nocapture`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore = "timing, not a check"]
fn timing_576_wide_rows() {
    use std::time::Instant;
    let (cols, rows) = (576, 1536);
    let mut rng = Rng::new(7);
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::F16] {
        let w = random_row(ty, rows * cols / ty.block_size(), &mut rng);
        let acts = random_activations(ty, cols, &mut rng);
        let row_bytes = ty.row_bytes(cols);
        let time = |dot: fn(GgmlType, &[u8], ActRow<'_>) -> f32| {
            let mut best = f64::MAX;
            let mut sink = 0f32;
            for _ in 0..20 {
                let t = Instant::now();
                for r in w.chunks_exact(row_bytes) {
                    sink += dot(ty, r, acts.row(0));
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e9 / rows as f64);
            }
            std::hint::black_box(sink);
            best
        };
        let (fast, reference) = (time(vec_dot), time(vec_dot_ref));
        println!("{ty:?} x {cols}: vec_dot {fast:.1} ns/row, vec_dot_ref {reference:.1} ns/row");
    }
}
