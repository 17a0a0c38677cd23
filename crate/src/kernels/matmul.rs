//! `out = acts · Wᵀ` for a quantized weight matrix W [rows × cols] and a batch of activation rows.
//!
//! Work is split over weight rows, so each weight row is read from memory once per call and dotted
//! with every activation row while it is in cache (decode has one activation row; prefill many).
//! The dots go through row kernels ([`crate::quant::dot_rows`]) that take a task's weight rows at once
//! (no dispatch per row) with sixteen, eight or four activation rows (batches; [`crate::quant::dot_rows_batch`]) or one
//! (the rest, and decode). Every output is computed the same way either way, so results depend neither on the
//! batch size nor on the number of threads.

use std::ops::Range;

use super::f16;
use crate::parallel::{for_each_chunk, SharedMut};
use crate::quant::{dot_rows, dot_rows_batch, vec_dot, Activations, GgmlType, QuantMatrix};

/// Weight rows per parallel chunk, the unit the threads share a matrix's rows in: a multiple of 16, so
/// chunks write whole 64-byte lines of an output row (the forward pass's buffers start on a line) and
/// two threads never write one line. Small, so the threads end a loop close together; a thread takes
/// several consecutive chunks at once while it has many left (see `parallel::team`), and runs them as
/// tasks of up to [`MAX_ROWS_PER_TASK`] rows.
const ROWS_PER_CHUNK: usize = 16;
/// Most weight rows per task (one row-kernel call).
const MAX_ROWS_PER_TASK: usize = 64;
/// Most matrices one call multiplies (q/k/v).
const MAX_MATRICES: usize = 4;

/// For each matrix W with its output: `out[t * W.rows + r] = dot(W[r], acts[t])` for every activation
/// row `t`. The matrices share the activations (`acts` quantized for their common `act_kind()`, with
/// `cols` columns), and their rows are split over the pool in one loop: a decode step's q/k/v (and
/// gate/up) are one parallel loop, not three, and the loops' fixed cost is most of decode's threading.
pub fn matmul(mats: &mut [(QuantMatrix, &mut [f32])], acts: &Activations) {
    let n = acts.rows();
    assert!(mats.len() <= MAX_MATRICES);
    // Chunks never straddle two matrices: matrix i has chunks first_chunk[i]..first_chunk[i + 1].
    let mut first_chunk = [0; MAX_MATRICES + 1];
    let mut outs = [None; MAX_MATRICES];
    for (i, (w, out)) in mats.iter_mut().enumerate() {
        assert_eq!(acts.cols(), w.cols, "activation width must equal the matrix's row length");
        assert_eq!(acts.kind(), Some(w.ty.act_kind()));
        assert_eq!(out.len(), n * w.rows);
        assert_eq!(w.bytes.len(), w.rows * w.row_bytes());
        first_chunk[i + 1] = first_chunk[i] + w.rows.div_ceil(ROWS_PER_CHUNK);
        outs[i] = Some(SharedMut::new(out));
    }
    let mats = &*mats;
    for_each_chunk(first_chunk[mats.len()], 1, |chunks| {
        for (i, (w, _)) in mats.iter().enumerate() {
            // This matrix's chunks in the run, as weight rows.
            let (lo, hi) = (chunks.start.max(first_chunk[i]), chunks.end.min(first_chunk[i + 1]));
            if lo >= hi {
                continue;
            }
            let rows = (lo - first_chunk[i]) * ROWS_PER_CHUNK..((hi - first_chunk[i]) * ROWS_PER_CHUNK).min(w.rows);
            let out = outs[i].expect("an output per matrix");
            for r0 in rows.clone().step_by(MAX_ROWS_PER_TASK) {
                // SAFETY: each run of chunks owns a distinct range of weight rows, so the outputs
                // it writes (t * w.rows + r for its rows r) are disjoint from every other run's.
                unsafe { rows_task(w, acts, r0..(r0 + MAX_ROWS_PER_TASK).min(rows.end), out) };
            }
        }
    });
}

/// The outputs of weight rows `rows` of `w` for every activation row.
/// # Safety
/// No other task writes `out` at `t * w.rows + r` for `r` in `rows`.
unsafe fn rows_task(w: &QuantMatrix, acts: &Activations, rows: Range<usize>, out: SharedMut<f32>) {
    let row_bytes = w.row_bytes();
    let wr = &w.bytes[rows.start * row_bytes..rows.end * row_bytes];
    // Activation rows sixteen, eight or four at a time (they stay in L1 while the task's weight rows pass by), then
    // one.
    let mut t = 0;
    // SAFETY: the caller's promise, passed on.
    unsafe {
        let batch = dot_rows_batch(w.ty);
        if batch == 16 {
            t = batches::<16>(w, wr, acts, rows.clone(), t, out);
        }
        if batch >= 8 {
            t = batches::<8>(w, wr, acts, rows.clone(), t, out);
        }
        t = batches::<4>(w, wr, acts, rows.clone(), t, out);
        batches::<1>(w, wr, acts, rows, t, out);
    }
}

/// [`rows_task`]'s outputs for activation rows from `t`, `A` at a time while `A` are left; returns the first
/// activation row not done.
/// # Safety
/// As [`rows_task`].
unsafe fn batches<const A: usize>(
    w: &QuantMatrix,
    wr: &[u8],
    acts: &Activations,
    rows: Range<usize>,
    mut t: usize,
    out: SharedMut<f32>,
) -> usize {
    if t + A > acts.rows() {
        return t; // not one batch: no buffer to clear
    }
    let mut batch = [[0f32; A]; MAX_ROWS_PER_TASK];
    let batch = &mut batch[..rows.len()];
    while t + A <= acts.rows() {
        dots(w, wr, acts, std::array::from_fn(|j| t + j), batch);
        for (r, dots) in rows.clone().zip(batch.iter()) {
            // SAFETY: the caller's promise: these outputs are this task's.
            dots.iter().enumerate().for_each(|(j, &v)| unsafe { out.write((t + j) * w.rows + r, v) });
        }
        t += A;
    }
    t
}

/// The row kernel, or `vec_dot` output by output for types without one.
fn dots<const A: usize>(w: &QuantMatrix, rows: &[u8], acts: &Activations, a_rows: [usize; A], out: &mut [[f32; A]]) {
    if w.ty == GgmlType::F16 && A > 1 {
        return f16_dots(w, rows, acts, a_rows, out);
    }
    if !dot_rows(w.ty, rows, w.cols, acts, a_rows, out) {
        for (wr, o) in rows.chunks_exact(w.row_bytes()).zip(out) {
            *o = a_rows.map(|t| vec_dot(w.ty, wr, acts.row(t)));
        }
    }
}

/// `dots` of f16 weights: each weight row converted to f32 once for the `A` activation rows (on simd128 the
/// conversion costs more than the multiply-adds it feeds), then the f32 kernel. The conversion is exact and every
/// ISA's f32 kernel adds in its f16 kernel's order, so outputs equal `vec_dot`'s bit for bit, whatever `A`.
fn f16_dots<const A: usize>(
    w: &QuantMatrix,
    rows: &[u8],
    acts: &Activations,
    a_rows: [usize; A],
    out: &mut [[f32; A]],
) {
    let mut values = vec![0f32; w.cols];
    for (wr, o) in rows.chunks_exact(w.row_bytes()).zip(out) {
        f16::to_f32(wr.as_chunks::<2>().0, &mut values);
        // SAFETY: f32 has no padding and u8 no alignment: the values' bytes, as an F32 row's (little-endian).
        let row = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), 4 * values.len()) };
        *o = a_rows.map(|t| vec_dot(GgmlType::F32, row, acts.row(t)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_row, quantize_row, vec_dot_ref, GgmlType};
    use crate::test_support::{test, Rng};

    /// Values in -1..1 from a fixed sequence, with an occasional outlier.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|i| rng.uniform(-1.0, 1.0) * if i % 37 == 0 { 10.0 } else { 1.0 }).collect()
    }

    #[test]
    fn outputs_match_the_reference_and_do_not_depend_on_the_batch() {
        // The legacy types and the K-quants have row kernels, F16 converts each row once; IQ4_XS goes dot by dot. Odd
        // and even block counts, weight rows over several tasks (and not a multiple of 4), batch sizes around the
        // batches of 4, 8 and 16 (`dot_rows_batch`), and one of every batch (29).
        let types = [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K]
            .into_iter()
            .chain([GgmlType::F16]);
        for ty in types.into_iter().chain([GgmlType::IQ4_NL, GgmlType::IQ4_XS]) {
            for cols in [ty.block_size() * 3, ty.block_size() * 8] {
                let rows = 71;
                let mut bytes = vec![0u8; ty.row_bytes(rows * cols)];
                quantize_row(ty, &values(rows * cols, ty as u64), &mut bytes);
                let w = QuantMatrix { ty, rows, cols, bytes: &bytes };
                for n in [1, 3, 4, 5, 9, 13, 17, 29] {
                    let x = values(n * cols, 100 + n as u64);
                    let mut acts = Activations::new();
                    acts.quantize(ty.act_kind(), &x, n);
                    let mut out = vec![0f32; n * rows];
                    matmul(&mut [(w, &mut out)], &acts);
                    for t in 0..n {
                        let mut one = Activations::new();
                        one.quantize(ty.act_kind(), &x[t * cols..(t + 1) * cols], 1);
                        let mut alone = vec![0f32; rows];
                        matmul(&mut [(w, &mut alone)], &one);
                        for r in 0..rows {
                            let at = format!("{ty:?} {cols} cols, batch {n}, [{t}, {r}]");
                            let got = out[t * rows + r];
                            assert_eq!(got.to_bits(), alone[r].to_bits(), "{at}: batched != alone");
                            let wr = &bytes[r * w.row_bytes()..][..w.row_bytes()];
                            let want = vec_dot_ref(ty, wr, acts.row(t));
                            let mut wf = vec![0f32; cols];
                            dequantize_row(ty, wr, &mut wf);
                            let terms: f32 = wf.iter().zip(&x[t * cols..]).map(|(w, x)| (w * x).abs()).sum();
                            assert!((got - want).abs() <= 1e-5 * terms, "{at}: {got} != {want}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn several_matrices_in_one_call_equal_one_call_each() {
        let ty = GgmlType::Q4_1;
        let cols = ty.block_size() * 4;
        let shapes = [71, 16, 130]; // rows of each matrix
        let stored: Vec<Vec<u8>> = (shapes.iter().enumerate())
            .map(|(i, &rows)| {
                let mut bytes = vec![0u8; ty.row_bytes(rows * cols)];
                quantize_row(ty, &values(rows * cols, 7 + i as u64), &mut bytes);
                bytes
            })
            .collect();
        let mats: Vec<QuantMatrix> =
            shapes.iter().zip(&stored).map(|(&rows, bytes)| QuantMatrix { ty, rows, cols, bytes }).collect();
        for n in [1, 6] {
            let mut acts = Activations::new();
            acts.quantize(ty.act_kind(), &values(n * cols, 50 + n as u64), n);
            let mut together: Vec<Vec<f32>> = mats.iter().map(|m| vec![0f32; n * m.rows]).collect();
            let mut pairs: Vec<_> = mats.iter().zip(together.iter_mut()).map(|(&m, o)| (m, &mut o[..])).collect();
            matmul(&mut pairs, &acts);
            for (m, got) in mats.iter().zip(&together) {
                let mut alone = vec![0f32; n * m.rows];
                matmul(&mut [(*m, &mut alone)], &acts);
                assert!(got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()), "{} rows, batch {n}", m.rows);
            }
        }
    }
}

/// Rough single-thread speed of the model's matrix shapes, against the plain one-dot-per-output loop (best of
/// several runs): `cargo test --release -p ruvllm --lib matmul_timing -- --ignored --nocapture`, and on wasm32 in
/// Node the same with `--target wasm32-unknown-unknown` and `--include-ignored`.
#[cfg(test)]
mod timing {
    use super::*;
    use crate::clock::now_ms;
    use crate::quant::{quantize_row, GgmlType};
    use crate::test_support::test;

    /// The best time of `f` in ns per call, over `reps` calls at a time (the wasm32 clock counts whole ms).
    fn best_ns(reps: usize, mut f: impl FnMut()) -> f64 {
        (0..10)
            .map(|_| {
                let t = now_ms();
                (0..reps).for_each(|_| f());
                (now_ms() - t) * 1e6 / reps as f64
            })
            .fold(f64::MAX, f64::min)
    }

    #[test]
    #[ignore = "timing, not a check"]
    fn matmul_timing() {
        for (ty, rows, cols, n) in [
            (GgmlType::Q4_1, 1536, 576, 64),
            (GgmlType::Q4_1, 1536, 576, 1),
            (GgmlType::Q8_0, 49152, 576, 1),
            (GgmlType::Q4_0, 49152, 576, 1),
            (GgmlType::Q4_0, 1536, 576, 64),
            (GgmlType::Q4_K, 2048, 2048, 64),
            (GgmlType::Q4_K, 2048, 2048, 1),
            (GgmlType::Q6_K, 2048, 2048, 1),
            (GgmlType::Q6_K, 2048, 2048, 64),
            (GgmlType::Q5_K, 2048, 2048, 64),
        ] {
            let x: Vec<f32> =
                (0..rows.max(n) * cols).map(|i| ((i as u64 * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
            let mut bytes = vec![0u8; ty.row_bytes(rows * cols)];
            quantize_row(ty, &x[..rows * cols], &mut bytes);
            let w = QuantMatrix { ty, rows, cols, bytes: &bytes };
            let mut acts = Activations::new();
            acts.quantize(ty.act_kind(), &x[..n * cols], n);
            let mut out = vec![0f32; n * rows];
            let reps = if n == 1 && rows < 10000 { 100 } else { 5 };
            let fast = best_ns(reps, || matmul(&mut [(w, &mut out)], &acts));
            let plain = best_ns(reps, || {
                for r in 0..rows {
                    let wr = &bytes[r * w.row_bytes()..][..w.row_bytes()];
                    for t in 0..n {
                        out[t * rows + r] = vec_dot(ty, wr, acts.row(t));
                    }
                }
            });
            let per = |ns: f64| ns / (rows * n) as f64;
            let line = format!(
                "{ty:?} {rows}x{cols}, {n} rows: matmul {:.1} ns/dot, plain vec_dot {:.1} ns/dot",
                per(fast),
                per(plain)
            );
            #[cfg(target_arch = "wasm32")]
            wasm_bindgen_test::console_log!("{line}");
            #[cfg(not(target_arch = "wasm32"))]
            println!("{line}");
        }
    }
}
