//! `out = acts · Wᵀ` for a quantized weight matrix W [rows × cols] and a batch of activation rows.
//!
//! Work is split over weight rows, so each weight row is read from memory once per call and dotted
//! with every activation row while it is in cache (decode has one activation row; prefill many).
//! The dots go through tile kernels (W weight rows × A activation rows at once, see
//! [`crate::quant::dot_tile`]): 1 × 4 for batches of activation rows, 4 × 1 for the rest (decode).
//! Every output is computed the same way whatever the tile, so results depend neither on the batch
//! size nor on the number of threads.

use crate::kernels::parallel::{chunk_size, for_each_chunk, SharedMut};
use crate::model::weights::MatrixRef;
use crate::quant::{dot_tile, vec_dot, Activations, GgmlType};


/// `out[t * w.rows + r] = dot(W[r], acts[t])` for every activation row `t`.
/// `acts` must have been quantized for `w.ty.act_kind()` with `w.cols` columns.
pub fn matmul(w: &MatrixRef, file: &[u8], acts: &Activations, out: &mut [f32]) {
    let n = acts.rows();
    assert_eq!(acts.cols(), w.cols, "activation width must equal the matrix's row length");
    assert_eq!(acts.kind(), Some(w.ty.act_kind()));
    assert_eq!(out.len(), n * w.rows);
    let bytes = w.bytes(file);
    let row_bytes = w.row_bytes();
    let row = |r: usize| &bytes[r * row_bytes..(r + 1) * row_bytes];
    let out_ptr = SharedMut::new(out);
    // Weight rows per task: a multiple of 4 (the tiles' weight rows), 16 to 64.
    for_each_chunk(w.rows, chunk_size(w.rows, 16, 64, 4), |rows| {
        // SAFETY: each task owns a distinct range of weight rows r, so indices t * w.rows + r are disjoint.
        let put = |t: usize, r: usize, v: f32| unsafe { out_ptr.write(t * w.rows + r, v) };
        // Activation rows four at a time: the four stay in L1 while the task's weight rows pass by.
        let mut t = 0;
        while t + 4 <= n {
            for r in rows.clone() {
                let [dots] = tile(w.ty, [row(r)], acts, [t, t + 1, t + 2, t + 3]);
                dots.into_iter().enumerate().for_each(|(j, v)| put(t + j, r, v));
            }
            t += 4;
        }
        // The remaining activation rows one at a time, against four weight rows at once.
        for t in t..n {
            let mut r = rows.start;
            while r + 4 <= rows.end {
                let dots = tile(w.ty, [row(r), row(r + 1), row(r + 2), row(r + 3)], acts, [t]);
                dots.into_iter().enumerate().for_each(|(k, [v])| put(t, r + k, v));
                r += 4;
            }
            for r in r..rows.end {
                put(t, r, tile(w.ty, [row(r)], acts, [t])[0][0]);
            }
        }
    });
}

/// The tile kernel, or `vec_dot` output by output for types without one.
#[inline]
fn tile<const W: usize, const A: usize>(
    ty: GgmlType,
    w: [&[u8]; W],
    acts: &Activations,
    a_rows: [usize; A],
) -> [[f32; A]; W] {
    dot_tile(ty, w, acts, a_rows)
        .unwrap_or_else(|| w.map(|w| a_rows.map(|t| vec_dot(ty, w, acts.row(t)))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize_row, quantize_row, vec_dot_ref};

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

/// Rough single-thread speed of the model's matrix shapes, against the plain one-dot-per-output loop:
/// `cargo test --release -p ruvllm --lib matmul_timing -- --ignored --nocapture` (best of many runs).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod timing {
    use std::time::Instant;

    use super::*;
    use crate::quant::quantize_row;

    fn best_ns(mut f: impl FnMut()) -> f64 {
        (0..30)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_nanos() as f64
            })
            .fold(f64::MAX, f64::min)
    }

    #[test]
    #[ignore = "timing, not a check"]
    fn matmul_timing() {
        for (ty, rows, cols, n) in
            [(GgmlType::Q4_1, 1536, 576, 64), (GgmlType::Q4_1, 1536, 576, 1), (GgmlType::Q8_0, 8192, 576, 1)]
        {
            let x: Vec<f32> = (0..rows.max(n) * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
            let mut file = vec![0u8; ty.row_bytes(rows * cols)];
            quantize_row(ty, &x[..rows * cols], &mut file);
            let w = MatrixRef { ty, rows, cols, offset: 0 };
            let mut acts = Activations::new();
            acts.quantize(ty.act_kind(), &x[..n * cols], n);
            let mut out = vec![0f32; n * rows];
            let fast = best_ns(|| matmul(&w, &file, &acts, &mut out));
            let plain = best_ns(|| {
                for r in 0..rows {
                    let wr = &file[r * w.row_bytes()..][..w.row_bytes()];
                    for t in 0..n {
                        out[t * rows + r] = vec_dot(ty, wr, acts.row(t));
                    }
                }
            });
            let per = |ns: f64| ns / (rows * n) as f64;
            println!("{ty:?} {rows}x{cols}, {n} rows: matmul {:.1} ns/dot, plain vec_dot {:.1} ns/dot", per(fast), per(plain));
        }
    }
}
