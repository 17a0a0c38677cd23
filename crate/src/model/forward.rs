//! The transformer forward pass, top to bottom, over a batch of tokens (prefill) or one (decode).
//!
//! All buffers live in a [`RunState`] allocated once per session for `n_batch` tokens, so the decode
//! loop allocates nothing.

use crate::kernels::attention::{attention, AttentionShape};
use crate::kernels::matmul::matmul;
use crate::kernels::parallel::in_pool;
use crate::kernels::rmsnorm::rmsnorm;
use crate::kernels::rope::Rope;
use crate::kernels::swiglu::swiglu;
use crate::kv_cache::KvCache;
use crate::model::weights::MatrixRef;
use crate::model::Model;
use crate::quant::{dequantize_row, Activations};

/// Scratch for one forward call of up to `n_batch` tokens.
pub struct RunState {
    pub n_batch: usize,
    x: Vec<f32>,      // [n × d_model] residual stream
    xb: Vec<f32>,     // [n × d_model] normed input of a block
    q: Vec<f32>,      // [n × q_dim]
    k: Vec<f32>,      // [n × kv_dim]
    v: Vec<f32>,      // [n × kv_dim]
    att: Vec<f32>,    // [n × q_dim] attention output
    proj: Vec<f32>,   // [n × d_model] block output before the residual add
    gate: Vec<f32>,   // [n × ffn_dim]
    up: Vec<f32>,     // [n × ffn_dim]
    scores: Vec<f32>, // [n × n_heads × n_ctx]
    acts: Activations,
    rope: Rope,
    angles: Vec<(f32, f32)>, // [n × rope pairs] RoPE's (cos, sin) for each token's position
    /// [rows × vocab]: logits of the rows asked for in the last call.
    pub logits: Vec<f32>,
}

impl RunState {
    pub fn new(model: &Model, n_batch: usize, n_ctx: usize) -> RunState {
        let c = &model.config;
        let n = n_batch;
        RunState {
            n_batch,
            x: vec![0.0; n * c.d_model],
            xb: vec![0.0; n * c.d_model],
            q: vec![0.0; n * c.q_dim()],
            k: vec![0.0; n * c.kv_dim()],
            v: vec![0.0; n * c.kv_dim()],
            att: vec![0.0; n * c.q_dim()],
            proj: vec![0.0; n * c.d_model],
            gate: vec![0.0; n * c.ffn_dim],
            up: vec![0.0; n * c.ffn_dim],
            scores: vec![0.0; n * c.n_heads * n_ctx],
            acts: Activations::new(),
            rope: Rope::new(c.head_dim, c.rope_dims, c.rope_base, c.rope_freq_scale, c.rope_neox),
            angles: vec![(0.0, 0.0); n * (c.rope_dims / 2)],
            logits: Vec::new(),
        }
    }
}

/// Which positions of the batch need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFor {
    None,
    Last,
    All,
}

/// Run `tokens` (at most `s.n_batch`, ids already checked against the vocabulary) at positions
/// `pos0..`, appending their keys/values to `kv`, and leave logits in `s.logits`.
pub fn forward(model: &Model, kv: &mut KvCache, s: &mut RunState, tokens: &[u32], pos0: usize, want: LogitsFor) {
    in_pool(|| forward_layers(model, kv, s, tokens, pos0, want))
}

fn forward_layers(model: &Model, kv: &mut KvCache, s: &mut RunState, tokens: &[u32], pos0: usize, want: LogitsFor) {
    let c = &model.config;
    let w = &model.weights;
    let file = model.file();
    let n = tokens.len();
    assert!(n > 0 && n <= s.n_batch && pos0 + n <= kv.n_ctx);
    let (d, qd, kvd, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    let shape = AttentionShape { n_heads: c.n_heads, n_kv_heads: c.n_kv_heads, head_dim: c.head_dim };

    let pairs = s.rope.pairs();
    for (t, angles) in s.angles[..n * pairs].chunks_exact_mut(pairs).enumerate() {
        s.rope.angles(pos0 + t, angles);
    }

    // Token embeddings: one row of token_embd per token, dequantized.
    let emb_row = w.token_embd.row_bytes();
    for (t, &id) in tokens.iter().enumerate() {
        let row = &w.token_embd.bytes(file)[id as usize * emb_row..][..emb_row];
        dequantize_row(w.token_embd.ty, row, &mut s.x[t * d..(t + 1) * d]);
    }

    for (l, lw) in w.layers.iter().enumerate() {
        // Attention block: x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
        rmsnorm(&mut s.xb[..n * d], &s.x[..n * d], &lw.attn_norm, c.rms_eps);
        project(
            &mut s.acts,
            &s.xb[..n * d],
            n,
            &mut [(&lw.wq, &mut s.q[..n * qd]), (&lw.wk, &mut s.k[..n * kvd]), (&lw.wv, &mut s.v[..n * kvd])],
            file,
        );
        for (buf, bias, dim) in [(&mut s.q, &lw.bq, qd), (&mut s.k, &lw.bk, kvd), (&mut s.v, &lw.bv, kvd)] {
            if let Some(b) = bias {
                for row in buf[..n * dim].chunks_exact_mut(dim) {
                    row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
                }
            }
        }
        for t in 0..n {
            let angles = &s.angles[t * pairs..(t + 1) * pairs];
            s.rope.rotate(&mut s.q[t * qd..(t + 1) * qd], angles);
            s.rope.rotate(&mut s.k[t * kvd..(t + 1) * kvd], angles);
        }
        kv.layers[l].store(pos0, &s.k[..n * kvd], &s.v[..n * kvd]);
        attention(&shape, &s.q[..n * qd], &kv.layers[l], pos0, &mut s.att[..n * qd], &mut s.scores);
        project(&mut s.acts, &s.att[..n * qd], n, &mut [(&lw.wo, &mut s.proj[..n * d])], file);
        add(&mut s.x[..n * d], &s.proj[..n * d]);

        // Feed-forward block: x += W_down · (silu(W_gate·norm(x)) * W_up·norm(x))
        rmsnorm(&mut s.xb[..n * d], &s.x[..n * d], &lw.ffn_norm, c.rms_eps);
        project(
            &mut s.acts,
            &s.xb[..n * d],
            n,
            &mut [(&lw.w_gate, &mut s.gate[..n * ff]), (&lw.w_up, &mut s.up[..n * ff])],
            file,
        );
        swiglu(&mut s.gate[..n * ff], &s.up[..n * ff]);
        project(&mut s.acts, &s.gate[..n * ff], n, &mut [(&lw.w_down, &mut s.proj[..n * d])], file);
        add(&mut s.x[..n * d], &s.proj[..n * d]);
    }

    // Output head on the rows that need logits.
    let first = match want {
        LogitsFor::None => return,
        LogitsFor::All => 0,
        LogitsFor::Last => n - 1,
    };
    let rows = n - first;
    rmsnorm(&mut s.xb[..rows * d], &s.x[first * d..n * d], &w.output_norm, c.rms_eps);
    s.logits.resize(rows * c.vocab_size, 0.0);
    project(&mut s.acts, &s.xb[..rows * d], rows, &mut [(&w.output, &mut s.logits[..])], file);
}

/// Multiply the same input rows `x` by several matrices, quantizing `x` once per activation format
/// and multiplying the matrices that share one in one call.
fn project(acts: &mut Activations, x: &[f32], n: usize, outs: &mut [(&MatrixRef, &mut [f32])], file: &[u8]) {
    let mut rest = outs;
    while let Some((m, _)) = rest.first() {
        let kind = m.ty.act_kind();
        let same = rest.iter().take_while(|(m, _)| m.ty.act_kind() == kind).count();
        let (group, tail) = rest.split_at_mut(same);
        acts.quantize(kind, x, n);
        matmul(group, file, acts);
        rest = tail;
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}
