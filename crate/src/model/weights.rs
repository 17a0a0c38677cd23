//! The model's weights, borrowed in place from the file's bytes.
//!
//! Matrices stay in their GGUF block format and are read where they lie ([`MatrixRef`] is just a
//! type, a shape and a byte range). Only the small vectors (norm weights, biases) are converted to f32.

use std::ops::Deref;

use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::model::config::{Arch, Config};
use crate::quant::{dequantize_row, GgmlType, QuantMatrix};

/// The bytes of a whole GGUF file: read into memory, or (natively) memory-mapped.
pub enum ModelBytes {
    Owned(Vec<u8>),
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(memmap2::Mmap),
}

impl Deref for ModelBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ModelBytes::Owned(v) => v,
            #[cfg(not(target_arch = "wasm32"))]
            ModelBytes::Mapped(m) => m,
        }
    }
}

/// A 2-D weight matrix of `rows` rows, each `cols` elements of type `ty`, at `offset` in the model bytes.
#[derive(Clone, Copy, Debug)]
pub struct MatrixRef {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub offset: usize,
}

impl MatrixRef {
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols)
    }

    /// The matrix's bytes within the model file.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.offset..self.offset + self.rows * self.row_bytes()]
    }

    /// The matrix as the kernels read it, in place in the model file.
    pub fn view<'a>(&self, file: &'a [u8]) -> QuantMatrix<'a> {
        QuantMatrix { ty: self.ty, rows: self.rows, cols: self.cols, bytes: self.bytes(file) }
    }
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,  // [d_model]
    pub wq: MatrixRef,        // [q_dim rows × d_model]
    pub wk: MatrixRef,        // [kv_dim × d_model]
    pub wv: MatrixRef,        // [kv_dim × d_model]
    pub bq: Option<Vec<f32>>, // [q_dim]  (qwen2)
    pub bk: Option<Vec<f32>>, // [kv_dim] (qwen2)
    pub bv: Option<Vec<f32>>, // [kv_dim] (qwen2)
    pub wo: MatrixRef,        // [d_model × q_dim]
    pub ffn_norm: Vec<f32>,   // [d_model]
    pub w_gate: MatrixRef,    // [ffn_dim × d_model]
    pub w_up: MatrixRef,      // [ffn_dim × d_model]
    pub w_down: MatrixRef,    // [d_model × ffn_dim]
}

pub struct Weights {
    pub token_embd: MatrixRef, // [vocab × d_model]
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [d_model]
    /// [vocab × d_model]; the token embedding itself when the model ties them.
    pub output: MatrixRef,
}

impl Weights {
    pub fn from_gguf(g: &Gguf, file: &[u8], c: &Config) -> Result<Weights> {
        let matrix = |name: &str, rows: usize, cols: usize| read_matrix(g, name, rows, cols);
        let vector = |name: &str, n: usize| read_vector(g, file, name, n);
        let (d, q, kv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
        let token_embd = matrix("token_embd.weight", c.vocab_size, d)?;
        // Before reserving a layer each: every layer has at least these tensors in the file.
        const LAYER_TENSORS: usize = 9; // attn_norm, q, k, v, output, ffn_norm, gate, up, down
        if c.n_layers > g.tensors.len() / LAYER_TENSORS {
            return Err(Error::Model(format!(
                "block_count {} needs at least {LAYER_TENSORS} tensors a layer, but the file has {} tensors",
                c.n_layers,
                g.tensors.len()
            )));
        }
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            let bias = |s: &str, n| match c.arch {
                Arch::Qwen2 => vector(&p(s), n).map(Some),
                Arch::Llama | Arch::Bert if g.tensor(&p(s)).is_some() => vector(&p(s), n).map(Some),
                Arch::Llama | Arch::Bert => Ok(None),
            };
            layers.push(LayerWeights {
                attn_norm: vector(&p("attn_norm.weight"), d)?,
                wq: matrix(&p("attn_q.weight"), q, d)?,
                wk: matrix(&p("attn_k.weight"), kv, d)?,
                wv: matrix(&p("attn_v.weight"), kv, d)?,
                bq: bias("attn_q.bias", q)?,
                bk: bias("attn_k.bias", kv)?,
                bv: bias("attn_v.bias", kv)?,
                wo: matrix(&p("attn_output.weight"), d, q)?,
                ffn_norm: vector(&p("ffn_norm.weight"), d)?,
                w_gate: matrix(&p("ffn_gate.weight"), ff, d)?,
                w_up: matrix(&p("ffn_up.weight"), ff, d)?,
                w_down: matrix(&p("ffn_down.weight"), d, ff)?,
            });
        }
        let output = match g.tensor("output.weight") {
            Some(_) => matrix("output.weight", c.vocab_size, d)?,
            None => token_embd,
        };
        Ok(Weights { token_embd, layers, output_norm: vector("output_norm.weight", d)?, output })
    }

    /// The decoder weights of an encoder model (`bert`): none. The encoder's own are `model::bert::BertWeights`;
    /// `Evaluator::open` refuses encoder models, so no decoder forward pass ever reads these.
    pub fn encoder_only(token_embd: MatrixRef) -> Weights {
        Weights { token_embd, layers: Vec::new(), output_norm: Vec::new(), output: token_embd }
    }
}

/// The 2-D tensor `name`, which must be `rows` rows of `cols` (GGUF dims `[cols, rows]`).
pub(crate) fn read_matrix(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<MatrixRef> {
    let t = g.tensor(name).ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if t.dims != [cols, rows] {
        return Err(Error::Model(format!("tensor {name} has shape {:?}, expected [{cols}, {rows}]", t.dims)));
    }
    Ok(MatrixRef { ty: t.ty, rows, cols, offset: t.offset })
}

/// The 1-D tensor `name` of `n` elements, converted to f32.
pub(crate) fn read_vector(g: &Gguf, file: &[u8], name: &str, n: usize) -> Result<Vec<f32>> {
    let t = g.tensor(name).ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if t.dims != [n] {
        return Err(Error::Model(format!("tensor {name} has shape {:?}, expected [{n}]", t.dims)));
    }
    let mut v = vec![0f32; n];
    dequantize_row(t.ty, &file[t.offset..t.offset + t.size], &mut v);
    Ok(v)
}
