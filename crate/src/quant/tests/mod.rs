//! The tests of every block format, through one harness generic over [`GgmlType`]: a format's checks are
//! one line of [`type_checks!`] stating its tolerances, plus known-value tests of its quantizer (`known`).
//!
//! For each type, on random rows of many lengths and on saturated rows ([`checks`], data from [`data`]):
//! - `vec_dot` (the SIMD kernel this machine runs) and the row kernels of `dot_rows` equal `vec_dot_ref`;
//!   the row kernels give the same bits for one activation row at a time as for four;
//! - `vec_dot_ref` equals the f64 dot product of the dequantized weights and activations;
//! - `dequantize(quantize(x))` stays within the format's error bound on inputs of many shapes.

mod bounds;
mod checks;
pub(super) mod data;
mod known;

use super::*;
use crate::test_support::test;

/// How far `dequantize(quantize(x))` may be from `x`.
#[derive(Clone, Copy)]
enum RoundTrip {
    /// Element `x` of block `block` within `bound(block, x)`.
    PerElement(fn(block: &[f32], x: f32) -> f32),
    /// Per block: the largest error at most `max * max|x|`, the RMS error at most `rms * rms(x)`;
    /// all-zero blocks stay zero. Where tiny inputs make the f16 super-block scale `d` subnormal, each
    /// bound is at least the rounding of `d` (2^-25) at `d_multiple`, the largest multiple of `d` a value takes.
    Relative { max: f32, rms: f32, d_multiple: f32 },
}

use RoundTrip::{PerElement, Relative};

/// All checks for one type: dots within `dot_tolerance` (relative to the sum of absolute terms), round
/// trip within `round_trip`.
fn check_type(ty: GgmlType, dot_tolerance: f64, round_trip: RoundTrip) {
    checks::random_dots(ty, dot_tolerance);
    checks::saturated_dots(ty, dot_tolerance);
    checks::round_trip(ty, round_trip);
}

/// One test per type: `name: type, dot tolerance, round-trip bound;`.
macro_rules! type_checks {
    ($($name:ident: $ty:ident, $dot_tolerance:expr, $round_trip:expr;)*) => {$(
        #[test]
        fn $name() {
            check_type(GgmlType::$ty, $dot_tolerance, $round_trip);
        }
    )*};
}

type_checks! {
    f32_checks: F32, 1e-5, PerElement(|_, _| 0.0);
    f16_checks: F16, 1e-5, PerElement(|_, x| bounds::f16_error(x));
    bf16_checks: BF16, 1e-5, PerElement(|_, x| x.abs() / 256.0);
    q4_0_checks: Q4_0, 1e-5, PerElement(bounds::q4_0);
    q4_1_checks: Q4_1, 1e-5, PerElement(bounds::q4_1);
    q5_0_checks: Q5_0, 1e-5, PerElement(bounds::q5_0);
    q5_1_checks: Q5_1, 1e-5, PerElement(bounds::q5_1);
    q8_0_checks: Q8_0, 1e-5, PerElement(bounds::q8_0);
    // The K-quant kernels sum a block's integers exactly, as the reference does: they differ only in the
    // rounding of a few float operations per block. Round trips: half a step of the quant levels over
    // (up to) the block's range, plus the rounding of the sub-block scales; the RMSE-optimal scales of
    // Q3_K trade some clipping for a smaller step.
    q2_k_checks: Q2_K, 1e-6, Relative { max: 0.45, rms: 0.40, d_multiple: 15.0 * 3.0 }; // 4 levels over 2 max|x|: max|x| / 3
    q3_k_checks: Q3_K, 1e-6, Relative { max: 0.30, rms: 0.22, d_multiple: 32.0 * 4.0 }; // 8 signed levels: max|x| / 8
    q4_k_checks: Q4_K, 1e-6, Relative { max: 0.12, rms: 0.10, d_multiple: 63.0 * 15.0 }; // 16 levels over 2 max|x|: max|x| / 15
    q5_k_checks: Q5_K, 1e-6, Relative { max: 0.06, rms: 0.07, d_multiple: 63.0 * 31.0 }; // 32 levels over 2 max|x|: max|x| / 31
    q6_k_checks: Q6_K, 1e-6, Relative { max: 0.03, rms: 0.04, d_multiple: 128.0 * 32.0 }; // 64 signed levels: max|x| / 64
    // IQ4: 16 table levels over 2 max|x|, at most 24/127 of max|x| apart, at the scale that fits best with
    // weights x^2 (so small values err more than at max|x| / -127). IQ4_XS's sub-block scales are 6-bit
    // multiples of `d`; a subnormal `d` rounded down clips its largest sub-block a little more.
    iq4_nl_checks: IQ4_NL, 1e-5, Relative { max: 0.12, rms: 0.11, d_multiple: 127.0 };
    iq4_xs_checks: IQ4_XS, 1e-6, Relative { max: 0.14, rms: 0.09, d_multiple: 32.0 * 127.0 };
}

/// Rough decode-speed numbers: `cargo test -p ruvllm --lib timing -- --ignored --nocapture`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore = "timing, not a check"]
fn timing_576_wide_rows() {
    use std::time::Instant;
    let (cols, rows) = (576, 1536);
    let mut rng = crate::test_support::Rng::new(7);
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::F16] {
        let w = data::random_row(ty, rows * cols / ty.block_size(), &mut rng);
        let acts = data::random_activations(ty.act_kind(), 1, cols, data::ActSource::Quantized, &mut rng);
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

/// Rough prefill-kernel numbers for the K-quants: `dot_rows` of 64 rows of 2048 columns (in L2) with four
/// activation rows and with one, in multiply-adds per ns. `cargo test --release -p ruvllm --lib timing_k_rows
/// -- --ignored --nocapture`.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore = "timing, not a check"]
fn timing_k_rows() {
    use std::time::Instant;
    /// Multiply-adds per ns of `dot_rows` with `A` activation rows (of the 4 in `acts`, repeated), best of 200.
    fn speed<const A: usize>(ty: GgmlType, w: &[u8], cols: usize, acts: &Activations) -> f64 {
        let rows = w.len() / ty.row_bytes(cols);
        let mut best = f64::MAX;
        for _ in 0..200 {
            let t = Instant::now();
            let mut out = vec![[0f32; A]; rows];
            assert!(dot_rows(ty, w, cols, acts, std::array::from_fn(|j| j % 4), &mut out));
            std::hint::black_box(&out);
            best = best.min(t.elapsed().as_secs_f64() * 1e9);
        }
        (rows * cols * A) as f64 / best
    }
    let (cols, rows) = (2048, 64);
    let mut rng = crate::test_support::Rng::new(7);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let w = data::random_row(ty, rows * cols / ty.block_size(), &mut rng);
        let acts = data::random_activations(ty.act_kind(), 4, cols, data::ActSource::Quantized, &mut rng);
        let (eight, four, one) =
            (speed::<8>(ty, &w, cols, &acts), speed::<4>(ty, &w, cols, &acts), speed::<1>(ty, &w, cols, &acts));
        println!("{ty:?}: 8 activation rows {eight:.1}, 4 activation rows {four:.1} MAC/ns, 1 row {one:.1} MAC/ns");
    }
}

#[test]
fn the_readme_lists_every_tensor_type_in_order() {
    let names: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(crate::test_support::readme_supported("Tensor types"), names, "README.md's tensor types");
}
