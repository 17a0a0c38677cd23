//! The BERT encoder (llama.cpp's `bert` architecture: all-MiniLM, bge, ...): its weights and its forward pass over
//! a batch of sequences, to the last layer's hidden states that `crate::embed` pools.
//!
//! Per token: token + position + token-type (always type 0) embeddings, LayerNorm. Per layer, norms after each
//! block (post-norm): `x = LN(x + Wo·attention(Wq·x+bq, Wk·x+bk, Wv·x+bv) + bo)`, then
//! `x = LN(x + W_down·gelu(W_up·x + b_up) + b_down)`. Attention sees the whole sequence (no causal mask) and never
//! another sequence of the batch. The matrices are multiplied for all the batch's tokens at once, by the same
//! matmul and quantized kernels as the decoders (`forward::project`).

use std::ops::Range;

use crate::error::{Error, Result};
use crate::gguf::bytes::ModelBytes;
use crate::gguf::Gguf;
use crate::kernels::full_attention::full_attention;
use crate::kernels::gelu::gelu;
use crate::kernels::layernorm::layernorm;
use crate::model::config::Config;
use crate::model::forward::{add, project};
use crate::model::weights::{read_matrix, read_vector, MatrixRef, VectorBytes};
use crate::parallel::{for_each_row_chunk, in_pool};
use crate::quant::{dequantize_row, Activations};

/// A LayerNorm's weight and bias, each `[d_model]`.
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

/// A matrix and its bias (`[rows]`).
pub struct Linear {
    pub matrix: MatrixRef,
    pub bias: Vec<f32>,
}

pub struct BertLayer {
    pub q: Linear,              // [d_model × d_model]
    pub k: Linear,              // [d_model × d_model]
    pub v: Linear,              // [d_model × d_model]
    pub attn_output: Linear,    // [d_model × d_model]
    pub attn_norm: LayerNorm,   // after the attention block
    pub ffn_up: Linear,         // [ffn_dim × d_model]
    pub ffn_down: Linear,       // [d_model × ffn_dim]
    pub output_norm: LayerNorm, // after the feed-forward block
}

pub struct BertWeights {
    pub token_embd: MatrixRef,    // [vocab × d_model]
    pub position_embd: MatrixRef, // [context_length × d_model]
    pub token_types: MatrixRef,   // [token types × d_model]; every token is type 0
    pub embd_norm: LayerNorm,
    pub layers: Vec<BertLayer>,
}

impl BertWeights {
    pub fn from_gguf(g: &Gguf, file: &ModelBytes, c: &Config) -> Result<BertWeights> {
        let (d, ff) = (c.d_model, c.ffn_dim);
        if c.q_dim() != d || c.kv_dim() != d {
            return Err(Error::Model(format!(
                "bert: {} heads of dim {} do not make embedding_length {d}",
                c.n_heads, c.head_dim
            )));
        }
        let norm = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                weight: read_vector(g, &VectorBytes::File(file), &format!("{name}.weight"), d)?,
                bias: read_vector(g, &VectorBytes::File(file), &format!("{name}.bias"), d)?,
            })
        };
        let linear = |name: &str, rows: usize, cols: usize| -> Result<Linear> {
            Ok(Linear {
                matrix: read_matrix(g, &format!("{name}.weight"), rows, cols)?,
                bias: read_vector(g, &VectorBytes::File(file), &format!("{name}.bias"), rows)?,
            })
        };
        let token_types_rows = g
            .tensor("token_types.weight")
            .and_then(|t| t.dims.get(1).copied())
            .filter(|&rows| rows > 0)
            .ok_or_else(|| Error::Model("tensor token_types.weight is missing or has no rows".into()))?;
        // Before reserving a layer each: every layer has these 16 tensors in the file.
        const LAYER_TENSORS: usize = 16;
        if c.n_layers > g.tensors.len() / LAYER_TENSORS {
            return Err(Error::Model(format!(
                "block_count {} needs {LAYER_TENSORS} tensors a layer, but the file has {} tensors",
                c.n_layers,
                g.tensors.len()
            )));
        }
        let layers = (0..c.n_layers)
            .map(|i| {
                let p = |s: &str| format!("blk.{i}.{s}");
                Ok(BertLayer {
                    q: linear(&p("attn_q"), d, d)?,
                    k: linear(&p("attn_k"), d, d)?,
                    v: linear(&p("attn_v"), d, d)?,
                    attn_output: linear(&p("attn_output"), d, d)?,
                    attn_norm: norm(&p("attn_output_norm"))?,
                    ffn_up: linear(&p("ffn_up"), ff, d)?,
                    ffn_down: linear(&p("ffn_down"), d, ff)?,
                    output_norm: norm(&p("layer_output_norm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BertWeights {
            token_embd: read_matrix(g, "token_embd.weight", c.vocab_size, d)?,
            position_embd: read_matrix(g, "position_embd.weight", c.context_length, d)?,
            token_types: read_matrix(g, "token_types.weight", token_types_rows, d)?,
            embd_norm: norm("token_embd_norm")?,
            layers,
        })
    }
}

/// Run the encoder over `tokens`, which hold the sequences `seqs` (ranges that tile `tokens`, each at most
/// `context_length` long; ids checked against the vocabulary), and return the last layer's hidden states,
/// `[tokens.len() × d_model]`.
pub fn encode(c: &Config, w: &BertWeights, file: &ModelBytes, tokens: &[u32], seqs: &[Range<usize>]) -> Vec<f32> {
    in_pool(|| encode_layers(c, w, file, tokens, seqs))
}

fn encode_layers(c: &Config, w: &BertWeights, file: &ModelBytes, tokens: &[u32], seqs: &[Range<usize>]) -> Vec<f32> {
    let (n, d, ff) = (tokens.len(), c.d_model, c.ffn_dim);
    let eps = c.rms_eps;
    let mut x = vec![0f32; n * d];
    let mut xb = vec![0f32; n * d];
    let (mut q, mut k, mut v, mut att) = (vec![0f32; n * d], vec![0f32; n * d], vec![0f32; n * d], vec![0f32; n * d]);
    let mut up = vec![0f32; n * ff];
    let mut acts = Activations::new();

    // Embeddings: token + position (within its sequence) + token type 0, then LayerNorm.
    let mut row = vec![0f32; d];
    let mut embed_row = |m: &MatrixRef, i: usize, out: &mut [f32]| {
        let bytes = &m.bytes(file)[i * m.row_bytes()..][..m.row_bytes()];
        dequantize_row(m.ty, bytes, &mut row);
        out.iter_mut().zip(&row).for_each(|(o, r)| *o += r);
    };
    for seq in seqs {
        for (pos, t) in seq.clone().enumerate() {
            let out = &mut xb[t * d..(t + 1) * d];
            embed_row(&w.token_embd, tokens[t] as usize, out);
            embed_row(&w.position_embd, pos, out);
            embed_row(&w.token_types, 0, out);
        }
    }
    norm(&mut x, &xb, &w.embd_norm, eps);

    for l in &w.layers {
        // Attention block, then its norm over the residual sum.
        project(
            &mut acts,
            &x,
            n,
            &mut [
                (l.q.matrix.view(file), &mut q[..]),
                (l.k.matrix.view(file), &mut k[..]),
                (l.v.matrix.view(file), &mut v[..]),
            ],
        );
        add_bias(&mut q, &l.q.bias);
        add_bias(&mut k, &l.k.bias);
        add_bias(&mut v, &l.v.bias);
        for seq in seqs {
            let rows = seq.start * d..seq.end * d;
            full_attention(c.n_heads, c.head_dim, &q[rows.clone()], &k[rows.clone()], &v[rows.clone()], &mut att[rows]);
        }
        project(&mut acts, &att, n, &mut [(l.attn_output.matrix.view(file), &mut xb[..])]);
        add_bias(&mut xb, &l.attn_output.bias);
        add(&mut xb, &x, d);
        norm(&mut x, &xb, &l.attn_norm, eps);

        // Feed-forward block, then its norm over the residual sum.
        project(&mut acts, &x, n, &mut [(l.ffn_up.matrix.view(file), &mut up[..])]);
        add_bias(&mut up, &l.ffn_up.bias);
        for_each_row_chunk(&mut up, ff, |_, rows| gelu(rows));
        project(&mut acts, &up, n, &mut [(l.ffn_down.matrix.view(file), &mut xb[..])]);
        add_bias(&mut xb, &l.ffn_down.bias);
        add(&mut xb, &x, d);
        norm(&mut x, &xb, &l.output_norm, eps);
    }
    x
}

/// Add `bias` to each row of `x` (rows of `bias.len()`).
fn add_bias(x: &mut [f32], bias: &[f32]) {
    for_each_row_chunk(x, bias.len(), |_, rows| {
        for row in rows.chunks_exact_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
        }
    });
}

/// LayerNorm of each row of `x` into `out`.
fn norm(out: &mut [f32], x: &[f32], n: &LayerNorm, eps: f32) {
    let d = n.weight.len();
    for_each_row_chunk(out, d, |t0, out| layernorm(out, &x[t0 * d..][..out.len()], &n.weight, &n.bias, eps));
}
