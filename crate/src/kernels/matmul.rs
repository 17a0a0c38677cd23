//! `out = acts · Wᵀ` for a quantized weight matrix W [rows × cols] and a batch of activation rows.
//!
//! Work is split over weight rows, so each weight row is read from memory once per call and dotted
//! with every activation row while it is in cache (decode has one activation row; prefill many).
//! The dots go through row kernels ([`crate::quant::dot_rows`]) that take a task's weight rows at once
//! (no dispatch per row) with four activation rows (batches) or one (the rest, and decode). Every
//! output is computed the same way either way, so results depend neither on the batch size nor on
//! the number of threads.

use crate::kernels::parallel::{chunk_size, for_each_chunk, SharedMut};
use crate::model::weights::MatrixRef;
use crate::quant::{dot_rows, vec_dot, Activations};

/// Most weight rows per parallel task.
const MAX_ROWS_PER_TASK: usize = 64;

/// `out[t * w.rows + r] = dot(W[r], acts[t])` for every activation row `t`.
/// `acts` must have been quantized for `w.ty.act_kind()` with `w.cols` columns.
pub fn matmul(w: &MatrixRef, file: &[u8], acts: &Activations, out: &mut [f32]) {
    let n = acts.rows();
    assert_eq!(acts.cols(), w.cols, "activation width must equal the matrix's row length");
    assert_eq!(acts.kind(), Some(w.ty.act_kind()));
    assert_eq!(out.len(), n * w.rows);
    let bytes = w.bytes(file);
    let row_bytes = w.row_bytes();
    let out_ptr = SharedMut::new(out);
    for_each_chunk(w.rows, chunk_size(w.rows, 16, MAX_ROWS_PER_TASK, 1), |rows| {
        let wr = &bytes[rows.start * row_bytes..rows.end * row_bytes];
        // SAFETY: each task owns a distinct range of weight rows r, so indices t * w.rows + r are disjoint.
        let put = |t: usize, r: usize, v: f32| unsafe { out_ptr.write(t * w.rows + r, v) };
        // Activation rows four at a time: the four stay in L1 while the task's weight rows pass by.
        let mut t = 0;
        let mut four = [[0f32; 4]; MAX_ROWS_PER_TASK];
        while t + 4 <= n {
            let four = &mut four[..rows.len()];
            dots(w, wr, acts, [t, t + 1, t + 2, t + 3], four);
            for (r, dots) in rows.clone().zip(four.iter()) {
                dots.iter().enumerate().for_each(|(j, &v)| put(t + j, r, v));
            }
            t += 4;
        }
        let mut one = [[0f32; 1]; MAX_ROWS_PER_TASK];
        for t in t..n {
            let one = &mut one[..rows.len()];
            dots(w, wr, acts, [t], one);
            rows.clone().zip(one.iter()).for_each(|(r, &[v])| put(t, r, v));
        }
    });
}

/// The row kernel, or `vec_dot` output by output for types without one.
fn dots<const A: usize>(w: &MatrixRef, rows: &[u8], acts: &Activations, a_rows: [usize; A], out: &mut [[f32; A]]) {
    if !dot_rows(w.ty, rows, w.cols, acts, a_rows, out) {
        for (wr, o) in rows.chunks_exact(w.row_bytes()).zip(out) {
            *o = a_rows.map(|t| vec_dot(w.ty, wr, acts.row(t)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_row, quantize_row, vec_dot_ref, GgmlType};

    /// Values in -1..1 from a fixed sequence, with an occasional outlier.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let v = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                if i % 37 == 0 {
                    v * 10.0
                } else {
                    v
                }
            })
            .collect()
    }

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn outputs_match_the_reference_and_do_not_depend_on_the_batch() {
        // Q4_1 and Q8_0 have tile kernels; Q4_0 and Q4_K go dot by dot. Odd and even block counts,
        // weight rows over several tasks (and not a multiple of 4), batch sizes around the tile of 4.
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K] {
            for cols in [ty.block_size() * 3, ty.block_size() * 8] {
                let rows = 71;
                let mut file = vec![0u8; ty.row_bytes(rows * cols)];
                quantize_row(ty, &values(rows * cols, ty as u64), &mut file);
                let w = MatrixRef { ty, rows, cols, offset: 0 };
                for n in [1, 3, 4, 5, 9] {
                    let x = values(n * cols, 100 + n as u64);
                    let mut acts = Activations::new();
                    acts.quantize(ty.act_kind(), &x, n);
                    let mut out = vec![0f32; n * rows];
                    matmul(&w, &file, &acts, &mut out);
                    for t in 0..n {
                        let mut one = Activations::new();
                        one.quantize(ty.act_kind(), &x[t * cols..(t + 1) * cols], 1);
                        let mut alone = vec![0f32; rows];
                        matmul(&w, &file, &one, &mut alone);
                        for r in 0..rows {
                            let at = format!("{ty:?} {cols} cols, batch {n}, [{t}, {r}]");
                            let got = out[t * rows + r];
                            assert_eq!(got.to_bits(), alone[r].to_bits(), "{at}: batched != alone");
                            let wr = &file[r * w.row_bytes()..][..w.row_bytes()];
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
}

/// Rough single-thread speed of the model's matrix shapes, against the plain one-dot-per-output loop (best of
/// several runs): `cargo test --release -p ruvllm --lib matmul_timing -- --ignored --nocapture`, and on wasm32 in
/// Node the same with `--target wasm32-unknown-unknown` and `--include-ignored`.
#[cfg(test)]
mod timing {
    use super::*;
    use crate::clock::now_ms;
    use crate::quant::{quantize_row, GgmlType};

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

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    #[ignore = "timing, not a check"]
    fn matmul_timing() {
        for (ty, rows, cols, n) in
            [(GgmlType::Q4_1, 1536, 576, 64), (GgmlType::Q4_1, 1536, 576, 1), (GgmlType::Q8_0, 49152, 576, 1)]
        {
            let x: Vec<f32> =
                (0..rows.max(n) * cols).map(|i| ((i as u64 * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
            let mut file = vec![0u8; ty.row_bytes(rows * cols)];
            quantize_row(ty, &x[..rows * cols], &mut file);
            let w = MatrixRef { ty, rows, cols, offset: 0 };
            let mut acts = Activations::new();
            acts.quantize(ty.act_kind(), &x[..n * cols], n);
            let mut out = vec![0f32; n * rows];
            let reps = if n == 1 && rows < 10000 { 100 } else { 5 };
            let fast = best_ns(reps, || matmul(&w, &file, &acts, &mut out));
            let plain = best_ns(reps, || {
                for r in 0..rows {
                    let wr = &file[r * w.row_bytes()..][..w.row_bytes()];
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
