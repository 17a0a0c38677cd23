//! The checks every type goes through (see the module above for what each shows).
//!
//! Dot tolerances are relative to the sum of the absolute terms, `sum |w_i * a_i|` plus, for weights
//! with a per-block offset `m` dotted against Q8_1, `sum |m * a_i|` (the kernels round at that magnitude).

use std::mem::offset_of;

use super::data::{filled_row, random_activations, random_row, round_trip_inputs, saturated_activations, super_scale};
use super::data::{ActSource, Saturated};
use super::RoundTrip;
use crate::quant::act::f16_to_f32;
use crate::quant::*;
use crate::test_support::Rng;

/// Random trials per row length, alternately with quantized and raw activations.
const TRIALS: usize = 20;
/// Weight rows per trial: on x86_64 a wide tile of sixteen (`avx2_tiles` with AVX512-VNNI) and a tile of eight for the
/// row kernels that take eight at a time (`avx2_tiles`, `avx2_k_tiles`), and one more; elsewhere (slower test targets:
/// wasm32 in a browser, aarch64 under qemu) two.
const W_ROWS: usize = if cfg!(target_arch = "x86_64") { 25 } else { 2 };
/// Activation rows per trial: the row kernels take them one at a time, four at a time from every first row (groups
/// of four and four that straddle two groups) and eight at a time from rows 0 and 1; on x86_64 also sixteen (the
/// AVX512-VNNI tiles' batch) from rows 0 and 1.
const A_ROWS: usize = if cfg!(target_arch = "x86_64") { 17 } else { 9 };

/// Row lengths to test, in blocks: every tail of the SIMD loops (2 blocks at a time; 4, 8 or 16 floats
/// at a time, unrolled 4 times), and the real widths.
fn lengths(ty: GgmlType) -> &'static [usize] {
    match ty.block_size() {
        1 => &[0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 39, 63, 64, 65, 100, 576, 1536],
        256 => &[0, 1, 2, 3, 4, 8, 9, 17],
        _ => &[0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 18, 31, 32, 33, 48, 67],
    }
}

/// Every dot path on random rows of every length.
pub(super) fn random_dots(ty: GgmlType, tolerance: f64) {
    let mut rng = Rng::new(ty as u64 + 1);
    for &blocks in lengths(ty) {
        let cols = blocks * ty.block_size();
        for trial in 0..TRIALS {
            let source = [ActSource::Quantized, ActSource::Raw][trial % 2];
            let w = random_row(ty, W_ROWS * blocks, &mut rng);
            let acts = random_activations(ty.act_kind(), A_ROWS, cols, source, &mut rng);
            check_dots(ty, tolerance, &w, cols, &acts, &format!("{ty:?}, {blocks} blocks, trial {trial} ({source:?})"));
        }
    }
}

/// Every dot path on saturated rows: every weight byte but the floats 0x00, 0xFF, 0xAA, 0x55, 0x80 or 0x7F
/// (quants and sub-block scales at their extremes) against activations all at their most negative, all
/// 127, or alternating. Catches 16-bit overflow in SIMD kernels.
pub(super) fn saturated_dots(ty: GgmlType, tolerance: f64) {
    let mut rng = Rng::new(99);
    // Odd block counts, for the tails; floats past the SIMD loops' unrolled steps.
    let blocks = if ty.block_size() == 1 { 67 } else { 3 };
    let cols = blocks * ty.block_size();
    for fill in [0x00, 0xFF, 0xAA, 0x55, 0x80, 0x7F] {
        let w = filled_row(ty, W_ROWS * blocks, fill, &mut rng);
        for pattern in [Saturated::Min, Saturated::Max, Saturated::Alternating] {
            let acts = saturated_activations(ty.act_kind(), A_ROWS, cols, pattern);
            check_dots(ty, tolerance, &w, cols, &acts, &format!("{ty:?}, bytes {fill:#04x}, activations {pattern:?}"));
        }
    }
}

/// The dots of weight rows `w` (rows of `cols` values) with every row of `acts`: `vec_dot` and the row
/// kernels equal `vec_dot_ref`, which equals the f64 dot of the dequantized values, all within `tolerance`.
fn check_dots(ty: GgmlType, tolerance: f64, w: &[u8], cols: usize, acts: &Activations, at: &str) {
    let row_bytes = ty.row_bytes(cols);
    let rows = w.len().checked_div(row_bytes).unwrap_or(W_ROWS); // rows of 0 columns: W_ROWS
    let mut references = vec![vec![0f64; acts.rows()]; rows];
    let mut limits = references.clone();
    for r in 0..rows {
        let wr = &w[r * row_bytes..(r + 1) * row_bytes];
        for t in 0..acts.rows() {
            let a = acts.row(t);
            let fast = vec_dot(ty, wr, a) as f64;
            let reference = vec_dot_ref(ty, wr, a) as f64;
            let expected = expected_dot(ty, wr, a);
            let limit = tolerance * abs_terms(ty, wr, a);
            assert!(
                (fast - reference).abs() <= limit,
                "{at}, [{r}, {t}]: vec_dot {fast} != vec_dot_ref {reference} (tolerance {limit})"
            );
            assert!(
                (reference - expected).abs() <= limit,
                "{at}, [{r}, {t}]: vec_dot_ref {reference} != dequantized dot {expected} (tolerance {limit})"
            );
            (references[r][t], limits[r][t]) = (reference, limit);
        }
    }
    if cols > 0 {
        check_row_kernels(ty, w, cols, acts, &references, &limits, at);
    }
}

/// Whether `dot_rows` has a row kernel for `ty` on this machine: what it must say.
fn has_row_kernel(ty: GgmlType) -> bool {
    #[cfg(target_arch = "x86_64")]
    let simd = crate::simd::cpu::has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    let simd = cfg!(any(target_arch = "aarch64", all(target_arch = "wasm32", target_feature = "simd128")));
    let legacy = matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0);
    let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
    simd && (legacy || ty == GgmlType::IQ4_NL || (k_quant && !cfg!(target_arch = "aarch64")))
}

/// Whether `dot_rows` for `ty` gives `vec_dot`'s bits (the K-quants' row kernels do `vec_dot`'s operations).
fn rows_equal_vec_dot(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// The row kernels of `dot_rows`, for one activation row at a time, and four and eight at a time from every first
/// row: every output within its limit of `vec_dot_ref`, and the same bits each way.
fn check_row_kernels(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    acts: &Activations,
    references: &[Vec<f64>],
    limits: &[Vec<f64>],
    at: &str,
) {
    let rows = references.len();
    let mut one_by_one = vec![vec![0f32; acts.rows()]; rows];
    for t in 0..acts.rows() {
        let mut out = vec![[f32::NAN; 1]; rows];
        let has = dot_rows(ty, w, cols, acts, [t], &mut out);
        assert_eq!(has, has_row_kernel(ty), "{at}: dot_rows for {ty:?} returned {has}");
        if !has {
            return;
        }
        for r in 0..rows {
            let (got, want) = (out[r][0] as f64, references[r][t]);
            assert!((got - want).abs() <= limits[r][t], "{at}, [{r}, {t}]: dot_rows {got} != vec_dot_ref {want}");
            if rows_equal_vec_dot(ty) {
                let wr = &w[r * ty.row_bytes(cols)..(r + 1) * ty.row_bytes(cols)];
                let fast = vec_dot(ty, wr, acts.row(t));
                assert_eq!(
                    out[r][0].to_bits(),
                    fast.to_bits(),
                    "{at}, [{r}, {t}]: dot_rows {} != vec_dot {fast}",
                    out[r][0]
                );
            }
            one_by_one[r][t] = out[r][0];
        }
    }
    check_batches::<4>(ty, w, cols, acts, &one_by_one, at);
    check_batches::<8>(ty, w, cols, acts, &one_by_one, at);
    if acts.rows() >= 16 {
        check_batches::<16>(ty, w, cols, acts, &one_by_one, at);
    }
}

/// `dot_rows` with `B` activation rows from every first row gives the bits of one row at a time (`one_by_one`).
fn check_batches<const B: usize>(
    ty: GgmlType,
    w: &[u8],
    cols: usize,
    acts: &Activations,
    one_by_one: &[Vec<f32>],
    at: &str,
) {
    for first in 0..=acts.rows() - B {
        let mut out = vec![[f32::NAN; B]; one_by_one.len()];
        assert!(dot_rows(ty, w, cols, acts, std::array::from_fn(|j| first + j), &mut out));
        for (r, (out, one)) in out.iter().zip(one_by_one).enumerate() {
            for j in 0..B {
                assert_eq!(
                    out[j].to_bits(),
                    one[first + j].to_bits(),
                    "{at}, [{r}, {}]: {B} rows from {first} {} != 1 row {}",
                    first + j,
                    out[j],
                    one[first + j]
                );
            }
        }
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

/// An activation row's values, exactly as its blocks hold them (`d * q`).
fn activation_values(row: ActRow<'_>) -> Vec<f32> {
    match row {
        ActRow::F32(x) => x.to_vec(),
        ActRow::Q8_0(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * f16_to_f32(b.d))).collect(),
        ActRow::Q8_1(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * f16_to_f32(b.d))).collect(),
        ActRow::Q8K(b) => b.iter().flat_map(|b| b.qs.map(|q| q as f32 * b.d)).collect(),
    }
}

pub(super) fn dequantized(ty: GgmlType, row: &[u8]) -> Vec<f32> {
    let mut w = vec![0f32; row.len() / ty.block_bytes() * ty.block_size()];
    dequantize_row(ty, row, &mut w);
    w
}

pub(super) fn quantized(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_bytes(x.len())];
    quantize_row(ty, x, &mut out);
    out
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

/// `dequantize(quantize(x))` on every input shape: finite, and within `bound`.
pub(super) fn round_trip(ty: GgmlType, bound: RoundTrip) {
    let mut rng = Rng::new(ty as u64 + 1000);
    let per = ty.block_size();
    for (shape, x) in round_trip_inputs(per, &mut rng) {
        let q = quantized(ty, &x);
        let y = dequantized(ty, &q);
        for (b, (xb, yb)) in x.chunks_exact(per).zip(y.chunks_exact(per)).enumerate() {
            let at = format!("{ty:?}, {shape} block {b}");
            assert!(yb.iter().all(|v| v.is_finite()), "{at}: non-finite output");
            match bound {
                RoundTrip::PerElement(bound) => {
                    for (i, (&x, &y)) in xb.iter().zip(yb).enumerate() {
                        let limit = bound(xb, x);
                        assert!((x - y).abs() <= limit, "{at} [{i}]: {x} -> {y}, error above {limit}");
                    }
                }
                RoundTrip::Relative { max, rms, d_multiple } => {
                    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let rms_x = (xb.iter().map(|v| v * v).sum::<f32>() / per as f32).sqrt();
                    let max_err = xb.iter().zip(yb).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                    let rms_err = (xb.iter().zip(yb).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() / per as f32).sqrt();
                    let d = super_scale(ty, &q[b * ty.block_bytes()..(b + 1) * ty.block_bytes()]);
                    // A subnormal f16 `d` is off by up to half its fixed quantum, 2^-25, at every multiple.
                    let subnormal =
                        if d.abs() < half::f16::MIN_POSITIVE.to_f32() { d_multiple * 2f32.powi(-25) } else { 0.0 };
                    let (max_limit, rms_limit) = ((max * amax).max(subnormal), (rms * rms_x).max(subnormal));
                    assert!(amax > 0.0 || max_err == 0.0, "{at}: an all-zero block came back as {yb:?}");
                    assert!(max_err <= max_limit, "{at}: max error {max_err} > {max_limit} ({max} * {amax})");
                    assert!(rms_err <= rms_limit, "{at}: rms error {rms_err} > {rms_limit} ({rms} * {rms_x})");
                }
            }
        }
    }
}
