//! `out = acts · Wᵀ` for a quantized weight matrix W [rows × cols] and a batch of activation rows.
//!
//! Work is split over weight rows, so each weight row is read from memory once per call and dotted
//! with every activation row while it is in cache (decode has one activation row; prefill many).

use crate::kernels::parallel::{for_each_chunk, SharedMut};
use crate::model::weights::MatrixRef;
use crate::quant::{vec_dot, Activations};

/// Weight rows per parallel task: large enough to amortize scheduling, small enough to balance 2-16 cores.
const ROWS_PER_TASK: usize = 64;

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
    for_each_chunk(w.rows, ROWS_PER_TASK, |rows| {
        for r in rows {
            let wr = &bytes[r * row_bytes..(r + 1) * row_bytes];
            for t in 0..n {
                let v = vec_dot(w.ty, wr, acts.row(t));
                // SAFETY: each task owns a distinct range of r, so indices t*rows+r are disjoint.
                unsafe { out_ptr.write(t * w.rows + r, v) };
            }
        }
    });
}
