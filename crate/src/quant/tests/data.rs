//! Test data: weight rows of any type, activation rows of any kind, and the inputs of the round-trip
//! checks, drawn from [`crate::test_support::Rng`].

use std::mem::offset_of;

use crate::quant::act::{f16_to_f32, f32_to_f16, QK8, QK_K};
use crate::quant::*;
use crate::test_support::Rng;

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
        T::IQ4_NL => vec![(offset_of!(BlockIQ4NL, d), Float::F16)],
        T::IQ4_XS => vec![(offset_of!(BlockIQ4XS, d), Float::F16)],
    }
}

/// Sets every float field of the blocks of `ty` in `row` to a sane random value.
fn sane_floats(ty: GgmlType, row: &mut [u8], rng: &mut Rng) {
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
}

/// The value of a block's first float field: the (super-block) scale `d` of every quantized type.
pub(super) fn super_scale(ty: GgmlType, block: &[u8]) -> f32 {
    let (at, format) = float_fields(ty)[0];
    match format {
        Float::F32 => f32::from_le_bytes(block[at..at + 4].try_into().unwrap()),
        Float::F16 => f16_to_f32([block[at], block[at + 1]]),
        Float::BF16 => half::bf16::from_le_bytes([block[at], block[at + 1]]).to_f32(),
    }
}

/// `blocks` random blocks of `ty`: random bytes, with every float field a sane value.
pub(crate) fn random_row(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let mut row = vec![0u8; blocks * ty.block_bytes()];
    rng.fill(&mut row);
    sane_floats(ty, &mut row, rng);
    row
}

/// `blocks` blocks of `ty` whose every byte is `fill` but the float fields, which are sane: with 0xFF,
/// every quant and sub-block scale at its largest.
pub(super) fn filled_row(ty: GgmlType, blocks: usize, fill: u8, rng: &mut Rng) -> Vec<u8> {
    let mut row = vec![fill; blocks * ty.block_bytes()];
    sane_floats(ty, &mut row, rng);
    row
}

/// Values per activation block of `kind`.
fn act_block_size(kind: ActKind) -> usize {
    match kind {
        ActKind::F32 => 1,
        ActKind::Q8_0 | ActKind::Q8_1 => QK8,
        ActKind::Q8K => QK_K,
    }
}

/// The most negative quant that the kernels dotting against `kind` accept: Q8_K's take all of i8, Q8_0's
/// and Q8_1's need -127..=127 (as the quantizers write: the x86 kernels move the weights' signs onto
/// the activations, and -128 has no positive counterpart).
fn min_quant(kind: ActKind) -> i8 {
    if kind == ActKind::Q8K {
        -128
    } else {
        -127
    }
}

/// `rows` activation rows in `kind` made directly as blocks: quants `qs` (all rows back to back) and
/// one scale per block in `scales` (per value for F32, whose values are `q * scale`).
fn activation_blocks(kind: ActKind, rows: usize, qs: &[i8], scales: &[f32]) -> Activations {
    let per = act_block_size(kind);
    assert_eq!(qs.len(), scales.len() * per);
    let blocks = qs.chunks_exact(per).zip(scales);
    match kind {
        ActKind::F32 => {
            let x: Vec<f32> = blocks.map(|(q, &d)| q[0] as f32 * d).collect();
            Activations::from_blocks(ActRow::F32(&x), rows)
        }
        ActKind::Q8_0 => {
            let b: Vec<BlockQ8_0> =
                blocks.map(|(q, &d)| BlockQ8_0 { d: f32_to_f16(d), qs: q.try_into().unwrap() }).collect();
            Activations::from_blocks(ActRow::Q8_0(&b), rows)
        }
        ActKind::Q8_1 => {
            let b: Vec<BlockQ8_1> = blocks
                .map(|(q, &d)| {
                    // `s` as ggml's quantizer writes it.
                    let sum: i32 = q.iter().map(|&q| q as i32).sum();
                    BlockQ8_1 { d: f32_to_f16(d), s: f32_to_f16(sum as f32 * d), qs: q.try_into().unwrap() }
                })
                .collect();
            Activations::from_blocks(ActRow::Q8_1(&b), rows)
        }
        ActKind::Q8K => {
            let b: Vec<BlockQ8K> = blocks
                .map(|(q, &d)| {
                    let qs: [i8; QK_K] = q.try_into().unwrap();
                    let bsums = std::array::from_fn(|j| qs[16 * j..16 * j + 16].iter().map(|&v| v as i16).sum());
                    BlockQ8K { d, qs, bsums }
                })
                .collect();
            Activations::from_blocks(ActRow::Q8K(&b), rows)
        }
    }
}

/// Where the activation rows of a dot check come from.
#[derive(Clone, Copy, Debug)]
pub(super) enum ActSource {
    /// Quantized from random floats, as inference makes them: normal values with a few outliers.
    Quantized,
    /// Random quants over the whole range the kernels accept (-128 included for Q8_K, which ggml's
    /// quantizer never writes) and random scales of either sign.
    Raw,
}

/// `rows` random activation rows of `cols` values in `kind`.
pub(super) fn random_activations(
    kind: ActKind,
    rows: usize,
    cols: usize,
    source: ActSource,
    rng: &mut Rng,
) -> Activations {
    match source {
        ActSource::Quantized => {
            let x: Vec<f32> = (0..rows * cols)
                .map(|_| {
                    let outlier = if rng.next_u64().is_multiple_of(16) { 8.0 } else { 1.0 };
                    rng.normal() * outlier
                })
                .collect();
            let mut acts = Activations::new();
            acts.quantize(kind, &x, rows);
            acts
        }
        ActSource::Raw => {
            let min = min_quant(kind) as i64;
            let span = (128 - min) as u64; // quants min..=127
            let qs: Vec<i8> = (0..rows * cols).map(|_| (min + (rng.next_u64() % span) as i64) as i8).collect();
            let scales: Vec<f32> = (0..rows * cols / act_block_size(kind)).map(|_| rng.sane()).collect();
            activation_blocks(kind, rows, &qs, &scales)
        }
    }
}

/// Activation rows with every quant at an extreme: all the most negative, all 127, or alternating.
#[derive(Clone, Copy, Debug)]
pub(super) enum Saturated {
    Min,
    Max,
    Alternating,
}

pub(super) fn saturated_activations(kind: ActKind, rows: usize, cols: usize, pattern: Saturated) -> Activations {
    let min = min_quant(kind);
    let qs: Vec<i8> = (0..rows * cols)
        .map(|i| match pattern {
            Saturated::Min => min,
            Saturated::Max => 127,
            Saturated::Alternating => [min, 127][i % 2],
        })
        .collect();
    activation_blocks(kind, rows, &qs, &vec![0.01; rows * cols / act_block_size(kind)])
}

/// Inputs of the round-trip checks: named runs of 1024 values (whole blocks of every type), random
/// blocks of several shapes: centered, all one sign, tiny, large, weight-like, with outliers, constant
/// per block (`block_size`) and zero.
pub(super) fn round_trip_inputs(block_size: usize, rng: &mut Rng) -> Vec<(&'static str, Vec<f32>)> {
    const N: usize = 4 * QK_K;
    type Gen = fn(&mut Rng, usize) -> f32;
    let shapes: [(&str, Gen); 9] = [
        ("uniform", |r, _| r.uniform(-1.0, 1.0)),
        ("normal", |r, _| r.normal()),
        ("positive", |r, _| r.uniform(0.5, 1.5)),
        ("negative", |r, _| r.uniform(-3.0, -2.0)),
        ("tiny", |r, _| r.uniform(-1e-3, 1e-3)),
        ("large", |r, _| r.uniform(-300.0, 300.0)),
        ("weight-like", |r, _| 0.02 * r.normal()),
        ("outlier", |r, i| if i % 97 == 5 { 8.0 } else { 0.05 * r.normal() }),
        ("zero", |_, _| 0.0),
    ];
    let mut inputs: Vec<(&str, Vec<f32>)> =
        shapes.into_iter().map(|(name, gen)| (name, (0..N).map(|i| gen(rng, i)).collect())).collect();
    let constant = (0..N / block_size).flat_map(|_| vec![rng.uniform(-1.0, 1.0); block_size]).collect();
    inputs.push(("constant", constant));
    inputs
}
