//! The forward pass as lists of GPU ops, built once per session over its buffers (see
//! `session.rs`), in the order `model::forward` computes.
//!
//! Decode (one token) uses matrix-vector kernels with RMSNorm, the attention merge, the residual
//! add and SwiGLU (GeGLU) fused in, and attention with RoPE and the KV store fused in: 5 dispatches per
//! layer. Prefill uses tiled matrix-matrix kernels (split over the columns, with a reduce op, when a
//! short batch gives too few tiles to fill the GPU) and separate small kernels; a split's reduce is
//! folded into the op after it where that op can sum the partials itself.
//!
//! Gemma 3 differs in a few ops: a layer with a sliding window runs the windowed attention variants,
//! with the RoPE table of its own base; the attention and feed-forward blocks' outputs are stored (to
//! `xb`, or left as a split matmul's partials) and a `norm_add` adds their post-norm to the residual,
//! where the other models' matrix ops add to it themselves; the gate's activation is GELU.
//!
//! Granite's multipliers are constants of every kernel's header (`ops/shader.rs`): the matrix ops and LoRA adapters
//! that add to the residual stream scale what they add, attention scales its scores; the logits are divided where
//! they are read (`session.rs`).
//!
//! Qwen3.5 differs in two blocks: a delta-net layer runs its projections (one matrix op), the convolution and the
//! delta rule over the layer's recurrent state (`ops/delta_net.rs`) and `ssm_out` in attention's place; an attention
//! layer computes the output's gate (the query projection's second half, a matrix of its own on the GPU) and gates
//! the attention output with it, in decode in the output matvec's input stage (`MatIn::AttnGated`), in prefill with
//! `attn_gate`; its KV cache layer is `Config::kv_layer`'s.
//!
//! A mixture of experts (qwen3moe, granitemoe) runs dense (`model.rs`): the router's matrix op on the feed-forward block's
//! normed input, every expert's gate/up rows and activation as one wide feed-forward block, the `route` op scaling
//! each expert's hidden values by its weight, and the down product of the experts side by side.
//!
//! Under LoRA adapters (`ops/lora.rs`) a session builds a second set of ops for its adapter set: a LoRA op
//! after each adapted group's matrix op, reading the input that op reads. Decode then stores gate and up
//! before SwiGLU (the adapters add to them), and the output head's logits before greedy argmax (which
//! then scans the logits); prefill keeps the reduce of a split qkv or gate/up matmul where the group is
//! adapted, so that the adapters add to stored rows. The base model's ops are built without any of this.

use super::model::{ffn_width, DeltaLocs, GpuModel, MatLoc};
use super::ops::delta_net::{self, DeltaBuffers};
use super::ops::lora::{self, Group, LoraIn, LoraWeights};
use super::ops::mat::{self, to, MatIn, OutMode, Splits};
use super::ops::rope_store::KvBuffers;
use super::ops::{argmax, attn_decode, attn_gate, attn_prefill, embed, glu, norm, rope_store, route, Op, OpBuilder};
use super::session::Buffers;
use crate::error::Result;

/// Every op of a session's forward calls.
pub(super) struct ForwardOps {
    pub embed: Vec<Op>,
    pub decode_layers: Vec<Op>,
    pub prefill_layers: Vec<Op>,
    /// The last token's logits (a decode step, or the end of a prefill).
    pub logits_last: Vec<Op>,
    /// Every token's logits (prefill).
    pub logits_all: Vec<Op>,
    pub argmax: Op,
    /// The ops' parameter blocks, for the params buffer.
    pub params: Vec<u8>,
}

/// Build the ops of model `m` over the session buffers `b`, for calls of up to `n_batch` tokens, with
/// the adapters `lora` (none: the base model), their parameter blocks destined for `params`.
pub(super) async fn build(
    m: &GpuModel,
    b: &Buffers,
    params: &wgpu::Buffer,
    n_batch: usize,
    lora: Option<&LoraWeights>,
) -> Result<ForwardOps> {
    let mut f = Forward {
        m,
        b,
        ops: OpBuilder::new(m, &b.call, params),
        splits: Splits { buf: &b.split, n_batch },
        pending_add: None,
        lora,
    };
    let embed = embed::ops(&mut f.ops, &m.token_embd, &b.x, &b.tokens).await?;
    let mut decode_layers = Vec::new();
    let mut prefill_layers = Vec::new();
    for l in 0..m.model.config.n_layers {
        decode_layers.extend(f.decode_layer(l).await?);
        prefill_layers.extend(f.prefill_layer(l).await?);
    }
    let (logits_last, argmax_per) = f.logits_last().await?;
    let logits_all = f.logits_all().await?;
    let candidates = if argmax_per > 1 { &b.best } else { &b.logits };
    let argmax = argmax::op(&f.ops, argmax_per, candidates, &b.ids, &b.tokens).await?;
    Ok(ForwardOps { embed, decode_layers, prefill_layers, logits_last, logits_all, argmax, params: f.ops.finish() })
}

struct Forward<'a> {
    m: &'a GpuModel,
    b: &'a Buffers,
    ops: OpBuilder<'a>,
    splits: Splits<'a>,
    /// Prefill: the column splits of a residual add left in the split buffer for the next RMSNorm
    /// to sum (its reduce dispatch folded into the norm).
    pending_add: Option<u32>,
    lora: Option<&'a LoraWeights>,
}

impl<'a> Forward<'a> {
    /// Whether an adapter adds to `group`.
    fn adapts(&self, group: Group) -> bool {
        self.lora.is_some_and(|w| w.adapts(group, self.m.model.config.n_layers))
    }

    /// The LoRA ops adding to `group`'s output `out` from `input` (none without adapters there).
    async fn lora(&mut self, group: Group, input: LoraIn<'_>, out: &wgpu::Buffer) -> Result<Vec<Op>> {
        let residual = std::ptr::eq(out, &self.b.x);
        match self.lora {
            Some(w) => lora::ops(&mut self.ops, w, group, input, out, residual).await,
            None => Ok(Vec::new()),
        }
    }

    /// The KV cache layer attention layer `l` stores to and reads (`Config::kv_layer`).
    fn kv(&self, l: usize) -> KvBuffers<'a> {
        let (k, v) = &self.b.kv[self.m.model.config.kv_layer(l)];
        KvBuffers { k, v }
    }

    /// Whether layer `l` attends within a sliding window, and its RoPE table (as `model::forward` picks them).
    fn attention_of(&self, l: usize) -> (bool, &'a wgpu::Buffer) {
        let c = &self.m.model.config;
        let windowed = c.layer_window(l) > 0;
        match (&self.b.rope_local, &self.b.rope_none) {
            (_, Some(none)) if !c.layer_uses_rope(l) => (windowed, none),
            (Some(local), _) if windowed => (true, local),
            _ => (windowed, &self.b.rope),
        }
    }

    /// Decode: the matrix op of a block's output (`wo`, `down`) from `input` and its adapters `group`, added
    /// to the residual stream `x`: by the matvec itself, or, with a post-norm (Gemma), stored to `xb` and
    /// normed into `x` by `norm_add`.
    async fn decode_block_out(
        &mut self,
        label: &'static str,
        mat: &MatLoc,
        input: MatIn<'_>,
        group: Group,
        lora_in: LoraIn<'_>,
        post_norm: Option<&wgpu::Buffer>,
    ) -> Result<Vec<Op>> {
        let b = self.b;
        let d = self.m.model.config.d_model;
        let out = if post_norm.is_some() { &b.xb } else { &b.x };
        let mode = if post_norm.is_some() { OutMode::Store } else { OutMode::Add };
        let mut ops = mat::ops(&mut self.ops, label, &[(mat, 0)], input, to(out, d, mode, None), &self.splits).await?;
        ops.extend(self.lora(group, lora_in, out).await?);
        if let Some(norm) = post_norm {
            ops.push(norm::norm_add(&self.ops, 1, &b.xb, norm, &b.x).await?);
        }
        Ok(ops)
    }

    /// Prefill: [`Self::decode_block_out`] over every token row (`input`). Without a post-norm a split
    /// matmul's partials are left for the next RMSNorm to add when `pending` (`pending_add`); with one,
    /// `norm_add` sums them itself unless adapters add to the stored rows.
    async fn prefill_block_out(
        &mut self,
        label: &'static str,
        mat: &MatLoc,
        input: &wgpu::Buffer,
        group: Group,
        post_norm: Option<&wgpu::Buffer>,
        pending: bool,
    ) -> Result<Vec<Op>> {
        let b = self.b;
        let d = self.m.model.config.d_model;
        let out = if post_norm.is_some() { &b.xb } else { &b.x };
        let mode = if post_norm.is_some() { OutMode::Store } else { OutMode::Add };
        let mut ops =
            mat::ops(&mut self.ops, label, &[(mat, 0)], MatIn::Rows(input), to(out, d, mode, None), &self.splits)
                .await?;
        match post_norm {
            None => {
                if pending {
                    self.pending_add = mat::take_reduce(&mut ops);
                }
                // Added to the residual stream: before or after the pending partials, the sum is the same.
                ops.extend(self.lora(group, LoraIn::Rows(input), &b.x).await?);
            }
            Some(norm) => {
                let split = if self.adapts(group) { None } else { mat::take_reduce(&mut ops) };
                ops.extend(self.lora(group, LoraIn::Rows(input), &b.xb).await?);
                ops.push(match split {
                    Some(splits) => norm::norm_add(&self.ops, splits, &b.split, norm, &b.x).await?,
                    None => norm::norm_add(&self.ops, 1, &b.xb, norm, &b.x).await?,
                });
            }
        }
        Ok(ops)
    }

    /// Prefill RMSNorm of `x` into `xb`, first adding the residual partials a split matmul left
    /// pending.
    async fn prefill_norm(&mut self, norm: &wgpu::Buffer) -> Result<Op> {
        let b = self.b;
        match self.pending_add.take() {
            None => norm::rmsnorm(&self.ops, &b.x, norm, &b.xb).await,
            Some(splits) => norm::add_rmsnorm(&self.ops, splits, &b.split, &b.x, norm, &b.xb).await,
        }
    }

    /// A mixture's router logits of the feed-forward block's `input` (none without experts).
    async fn router(&mut self, l: usize, label: &'static str, input: MatIn<'_>) -> Result<Vec<Op>> {
        let (lw, c) = (&self.m.layers[l], &self.m.model.config);
        match (&lw.router, &self.b.route, c.experts) {
            (Some(router), Some(logits), Some(e)) => {
                let out = to(logits, e.count, OutMode::Store, None);
                mat::ops(&mut self.ops, label, &[(router, 0)], input, out, &self.splits).await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// A mixture's `route` op, scaling the experts' hidden values in `h` (none without experts).
    async fn route(&mut self) -> Result<Option<Op>> {
        match (&self.b.route, self.m.model.config.experts) {
            (Some(logits), Some(e)) => Ok(Some(route::op(&self.ops, e, logits, &self.b.h).await?)),
            _ => Ok(None),
        }
    }

    async fn decode_layer(&mut self, l: usize) -> Result<Vec<Op>> {
        let mut ops = match &self.m.layers[l].delta {
            Some(delta) => self.decode_delta_net(l, delta).await?,
            None => self.decode_attention(l).await?,
        };
        ops.extend(self.decode_ffn(l).await?);
        Ok(ops)
    }

    async fn decode_attention(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let qkv = [(&lw.wq, 0), (&lw.wk, qd), (&lw.wv, qd + kvd)];
        let qkv_out = to(&b.qkv, qd + 2 * kvd, OutMode::Store, lw.qkv_bias.as_ref());
        let mut ops =
            mat::ops(&mut self.ops, "matvec_qkv", &qkv, MatIn::Norm(&b.x, &lw.attn_norm), qkv_out, &self.splits)
                .await?;
        ops.extend(self.lora(Group::Qkv(l), LoraIn::Norm(&b.x, &lw.attn_norm), &b.qkv).await?);
        let gate = self.attention_gate(l);
        if let Some((gate, rows)) = gate {
            let out = to(rows, qd, OutMode::Store, None);
            let input = MatIn::Norm(&b.x, &lw.attn_norm);
            ops.extend(mat::ops(&mut self.ops, "matvec_attn_gate", &[(gate, 0)], input, out, &self.splits).await?);
        }
        if let Some(qk_norm) = &lw.qk_norm {
            ops.push(norm::head_norm(&self.ops, &b.qkv, qk_norm).await?);
        }
        let (windowed, rope) = self.attention_of(l);
        ops.push(attn_decode::op(&self.ops, windowed, &b.qkv, rope, &b.part, self.kv(l)).await?);
        let post = lw.post_attn_norm.as_ref();
        let input = match gate {
            Some((_, rows)) => MatIn::AttnGated(&b.part, rows),
            None => MatIn::Attn(&b.part),
        };
        ops.extend(self.decode_block_out("matvec_wo", &lw.wo, input, Group::O(l), LoraIn::Attn(&b.part), post).await?);
        Ok(ops)
    }

    /// Qwen3.5's attention output gate of layer `l`, and the rows it is computed into (none elsewhere).
    fn attention_gate(&self, l: usize) -> Option<(&'a MatLoc, &'a wgpu::Buffer)> {
        self.m.layers[l].attn_gate.as_ref().zip(self.b.attn_gate.as_ref())
    }

    /// Qwen3.5's delta-net block of layer `l` (`delta`'s weights) over the call's rows of the normed residual
    /// (`input`: decode's matvec input stage or prefill's rows), into the projections' rows, then the convolution
    /// and the rule over the layer's recurrent state.
    async fn delta_net(
        &mut self,
        l: usize,
        delta: &DeltaLocs,
        input: MatIn<'_>,
        label: &'static str,
    ) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let (Some(dn), Some(rows)) = (&c.delta_net, &b.delta) else {
            unreachable!("a layer with delta-net weights is of a model with delta-net rows");
        };
        let s = &dn.shape;
        let [qkv, z, alpha, beta] = &delta.proj;
        let (cd, vd) = (s.conv_dim(), s.value_dim());
        let proj = [(qkv, 0), (z, cd), (alpha, cd + vd), (beta, cd + vd + s.v_heads)];
        let out = to(&rows.input, delta_net::in_stride(s), OutMode::Store, None);
        let mut ops = mat::ops(&mut self.ops, label, &proj, input, out, &self.splits).await?;
        let bufs = DeltaBuffers {
            dn_in: &rows.input,
            conv: &rows.conv,
            out: &rows.out,
            state: &b.recurrent[c.recurrent_layer(l)],
            params: &delta.params,
        };
        ops.extend(delta_net::ops(&self.ops, s, bufs).await?);
        Ok(ops)
    }

    async fn decode_delta_net(&mut self, l: usize, delta: &DeltaLocs) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let lw = &m.layers[l];
        let mut ops = self.delta_net(l, delta, MatIn::Norm(&b.x, &lw.attn_norm), "matvec_delta_in").await?;
        let out = &b.delta.as_ref().expect("delta-net rows").out;
        let post = lw.post_attn_norm.as_ref();
        ops.extend(
            self.decode_block_out(
                "matvec_ssm_out",
                &delta.out,
                MatIn::Plain(out),
                Group::O(l),
                LoraIn::Plain(out),
                post,
            )
            .await?,
        );
        Ok(ops)
    }

    async fn decode_ffn(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let ff = ffn_width(c);
        let mut ops = self.router(l, "matvec_router", MatIn::Norm(&b.x, &lw.ffn_norm)).await?;
        // The gated activation fused into one matvec when gate and up can share a dispatch and no adapter adds to
        // them.
        let (g, u) = (&lw.w_gate, &lw.w_up);
        let pairable = g.ty == u.ty
            && g.chunks.len() == 1
            && u.chunks.len() == 1
            && g.chunks[0].arena == u.chunks[0].arena
            && !self.adapts(Group::GateUp(l));
        if pairable {
            ops.push(mat::gate_up_glu(&mut self.ops, g, u, &b.x, &lw.ffn_norm, &b.h).await?);
        } else {
            let gu = [(g, 0), (u, ff)];
            let gu_out = to(&b.gu, 2 * ff, OutMode::Store, None);
            let input = MatIn::Norm(&b.x, &lw.ffn_norm);
            ops.extend(mat::ops(&mut self.ops, "matvec_gate_up", &gu, input, gu_out, &self.splits).await?);
            ops.extend(self.lora(Group::GateUp(l), LoraIn::Norm(&b.x, &lw.ffn_norm), &b.gu).await?);
            ops.push(glu::op(&self.ops, 1, &b.gu, &b.h).await?);
        }
        ops.extend(self.route().await?);
        let post = lw.post_ffn_norm.as_ref();
        ops.extend(
            self.decode_block_out(
                "matvec_down",
                &lw.w_down,
                MatIn::Plain(&b.h),
                Group::Down(l),
                LoraIn::Plain(&b.h),
                post,
            )
            .await?,
        );
        Ok(ops)
    }

    async fn prefill_layer(&mut self, l: usize) -> Result<Vec<Op>> {
        let mut ops = match &self.m.layers[l].delta {
            Some(delta) => self.prefill_delta_net(l, delta).await?,
            None => self.prefill_attention(l).await?,
        };
        ops.extend(self.prefill_ffn(l).await?);
        Ok(ops)
    }

    async fn prefill_attention(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        let mut ops = vec![self.prefill_norm(&lw.attn_norm).await?];
        let qkv = [(&lw.wq, 0), (&lw.wk, qd), (&lw.wv, qd + kvd)];
        let qkv_out = to(&b.qkv, qd + 2 * kvd, OutMode::Store, lw.qkv_bias.as_ref());
        let mut qkv_ops =
            mat::ops(&mut self.ops, "matmul_qkv", &qkv, MatIn::Rows(&b.xb), qkv_out, &self.splits).await?;
        // rope_store sums a split qkv matmul's partials itself (no bias to add, no head norm or adapter between).
        let adapted = self.adapts(Group::Qkv(l));
        let qkv_splits = if lw.qkv_bias.is_none() && lw.qk_norm.is_none() && !adapted {
            mat::take_reduce(&mut qkv_ops)
        } else {
            None
        };
        ops.extend(qkv_ops);
        ops.extend(self.lora(Group::Qkv(l), LoraIn::Rows(&b.xb), &b.qkv).await?);
        let gate = self.attention_gate(l);
        if let Some((gate, rows)) = gate {
            let out = to(rows, qd, OutMode::Store, None);
            let input = MatIn::Rows(&b.xb);
            ops.extend(mat::ops(&mut self.ops, "matmul_attn_gate", &[(gate, 0)], input, out, &self.splits).await?);
        }
        if let Some(qk_norm) = &lw.qk_norm {
            ops.push(norm::head_norm(&self.ops, &b.qkv, qk_norm).await?);
        }
        let qkv_rows = if qkv_splits.is_some() { &b.split } else { &b.qkv };
        let (windowed, rope) = self.attention_of(l);
        ops.push(rope_store::op(&self.ops, qkv_splits.unwrap_or(1), qkv_rows, rope, &b.q_rot, self.kv(l)).await?);
        ops.extend(attn_prefill::ops(&self.ops, windowed, &b.q_rot, &b.att_parts, &b.att, self.kv(l)).await?);
        if let Some((_, rows)) = gate {
            ops.push(attn_gate::op(&self.ops, &b.att, rows).await?);
        }
        let post = lw.post_attn_norm.as_ref();
        ops.extend(self.prefill_block_out("matmul_wo", &lw.wo, &b.att, Group::O(l), post, true).await?);
        Ok(ops)
    }

    async fn prefill_delta_net(&mut self, l: usize, delta: &DeltaLocs) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let lw = &m.layers[l];
        let mut ops = vec![self.prefill_norm(&lw.attn_norm).await?];
        ops.extend(self.delta_net(l, delta, MatIn::Rows(&b.xb), "matmul_delta_in").await?);
        let out = &b.delta.as_ref().expect("delta-net rows").out;
        let post = lw.post_attn_norm.as_ref();
        ops.extend(self.prefill_block_out("matmul_ssm_out", &delta.out, out, Group::O(l), post, true).await?);
        Ok(ops)
    }

    async fn prefill_ffn(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let ff = ffn_width(c);
        let mut ops = vec![self.prefill_norm(&lw.ffn_norm).await?];
        ops.extend(self.router(l, "matmul_router", MatIn::Rows(&b.xb)).await?);
        let gu = [(&lw.w_gate, 0), (&lw.w_up, ff)];
        let gu_out = to(&b.gu, 2 * ff, OutMode::Store, None);
        let mut gu_ops =
            mat::ops(&mut self.ops, "matmul_gate_up", &gu, MatIn::Rows(&b.xb), gu_out, &self.splits).await?;
        // One split matmul for gate and up: the activation op sums its partials itself (no reduce dispatch),
        // unless adapters add to gate and up.
        let split = if self.adapts(Group::GateUp(l)) { None } else { mat::take_reduce(&mut gu_ops) };
        ops.extend(gu_ops);
        ops.extend(self.lora(Group::GateUp(l), LoraIn::Rows(&b.xb), &b.gu).await?);
        ops.push(match split {
            Some(splits) => glu::op(&self.ops, splits, &b.split, &b.h).await?,
            None => glu::op(&self.ops, 1, &b.gu, &b.h).await?,
        });
        ops.extend(self.route().await?);
        // The next layer's attention norm adds the partials; the output layer's norm reads x itself.
        let post = lw.post_ffn_norm.as_ref();
        let pending = l + 1 < c.n_layers;
        ops.extend(self.prefill_block_out("matmul_down", &lw.w_down, &b.h, Group::Down(l), post, pending).await?);
        Ok(ops)
    }

    /// The output layer on the last token, and the logits per argmax candidate: the output matvec's
    /// rows per workgroup when it leaves their best rows (one dispatch: the output matrix in one
    /// buffer, no adapter adding to the logits), else 1.
    async fn logits_last(&mut self) -> Result<(Vec<Op>, u32)> {
        let (m, b) = (self.m, self.b);
        let vocab = m.model.config.vocab_size;
        let input = MatIn::Norm(&b.x, &m.output_norm);
        let mut out = to(&b.logits, vocab, OutMode::Store, None);
        let mut per = 1;
        if m.output.chunks.len() == 1 && !self.adapts(Group::Output) {
            out.mode = OutMode::Argmax;
            out.best = Some(&b.best);
            per = mat::matvec_rows(vocab, m.output.ty);
        }
        let mut ops = mat::ops(&mut self.ops, "matvec_output", &[(&m.output, 0)], input, out, &self.splits).await?;
        ops.extend(self.lora(Group::Output, LoraIn::Norm(&b.x, &m.output_norm), &b.logits).await?);
        Ok((ops, per))
    }

    /// The output layer on every token.
    async fn logits_all(&mut self) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let vocab = m.model.config.vocab_size;
        let mut ops = vec![norm::rmsnorm(&self.ops, &b.x, &m.output_norm, &b.xb).await?];
        let out = to(&b.logits, vocab, OutMode::Store, None);
        let output = [(&m.output, 0)];
        ops.extend(mat::ops(&mut self.ops, "matmul_output", &output, MatIn::Rows(&b.xb), out, &self.splits).await?);
        ops.extend(self.lora(Group::Output, LoraIn::Rows(&b.xb), &b.logits).await?);
        Ok(ops)
    }
}
