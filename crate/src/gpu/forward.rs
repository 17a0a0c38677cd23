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
//! Gemma 4's layers differ in shape (`ops::Shape`: head size, KV heads, rotated width, feed-forward width): the op
//! builder takes each layer's shape before its ops, which compiles its kernels for that shape's header; the KV
//! cache's rows are the widest layer's (`KV_ROW`). Its last layers read earlier layers' keys and values: their qkv op
//! computes the queries only, `rope_store` rotates those only, and decode attention reads the new position from the
//! cache (`own_kv`). The value heads are normed with the others (`head_norm`); a layer without `attn_v` reads its
//! keys' matrix for the values. Before the layers the per-layer inputs are made (`ops/per_layer.rs`: the per-layer
//! embedding by `embed`, the token embeddings' projection, `per_layer_in`); after each layer's feed-forward block its
//! per-layer block gates its input, projects it and `norm_add`s it to the residual, then scales the residual by the
//! layer's output scale. The logits' soft-cap is applied where they are read (`Config::finish_logits`).
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

use super::model::{DeltaLocs, GpuModel, MatLoc};
use super::ops::delta_net::{self, DeltaBuffers};
use super::ops::lora::{self, Group, LoraIn, LoraWeights};
use super::ops::mat::{self, to, MatIn, OutMode, Splits};
use super::ops::per_layer::{self, PerLayerParams};
use super::ops::rope_store::KvBuffers;
use super::ops::{
    argmax, attn_decode, attn_gate, attn_prefill, embed, glu, norm, rope_store, route, Op, OpBuilder, Shape,
};
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
    let c = &m.model.config;
    let mut embed = embed::ops(&mut f.ops, (&m.token_embd, c.embedding_scale()), &b.x, &b.tokens).await?;
    let (mut decode_layers, mut prefill_layers) = (Vec::new(), Vec::new());
    if let (Some(table), Some(rows)) = (&m.per_layer, &b.per_layer) {
        let scale = (c.per_layer_input() as f32).sqrt();
        embed.extend(embed::ops(&mut f.ops, (&table.token_embd, scale), &rows.inputs, &b.tokens).await?);
        decode_layers.extend(f.per_layer_inputs(MatIn::Plain(&b.x), "matvec_per_layer_model_proj").await?);
        prefill_layers.extend(f.per_layer_inputs(MatIn::Rows(&b.x), "matmul_per_layer_model_proj").await?);
    }
    for l in 0..c.n_layers {
        f.ops.shape = Shape::layer(c, l);
        decode_layers.extend(f.decode_layer(l).await?);
        prefill_layers.extend(f.prefill_layer(l).await?);
    }
    f.ops.shape = Shape::model(c);
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

    /// Layer `l`'s widths of a query row and of a key (value) row, and whether it computes keys and values of its
    /// own (Gemma 4's last layers read earlier layers').
    fn attention_widths(&self, l: usize) -> (usize, usize, bool) {
        let c = &self.m.model.config;
        (self.ops.shape.q_dim(c), self.ops.shape.kv_dim(), c.layer_stores_kv(l))
    }

    /// The q/k/v matrices of layer `l` with their first output columns: q only where it reads another layer's keys
    /// and values.
    fn qkv_mats(&self, l: usize) -> Vec<(&'a MatLoc, usize)> {
        let lw = &self.m.layers[l];
        let (qd, kvd, own_kv) = self.attention_widths(l);
        match own_kv {
            true => vec![(&lw.wq, 0), (&lw.wk, qd), (&lw.wv, qd + kvd)],
            false => vec![(&lw.wq, 0)],
        }
    }

    /// The post-norm of layer `l`'s feed-forward block with what `norm_add` then scales the residual by: the layer's
    /// output scale unless a per-layer input block follows, which applies it. (Only Gemma 4 scales its layers' output,
    /// and its weights always have this post-norm.)
    fn post_ffn_norm(&self, l: usize) -> Option<(&'a wgpu::Buffer, f32)> {
        let lw = &self.m.layers[l];
        let scale = if lw.per_layer.is_some() { 1.0 } else { lw.out_scale };
        lw.post_ffn_norm.as_ref().map(|norm| (norm, scale))
    }

    /// Gemma 4's per-layer inputs of the call (`ops/per_layer.rs`), from the per-layer embeddings the embed ops put
    /// in its rows and the projection of the token embeddings `x` (`input`: decode's last row, or prefill's rows).
    async fn per_layer_inputs(&mut self, input: MatIn<'_>, label: &'static str) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let (Some(table), Some(rows)) = (&m.per_layer, &b.per_layer) else { return Ok(Vec::new()) };
        let params = PerLayerParams::new(c.per_layer_input(), c.n_layers, c.d_model);
        let out = to(&rows.proj, params.all as usize, OutMode::Store, None);
        let mut ops = mat::ops(&mut self.ops, label, &[(&table.model_proj, 0)], input, out, &self.splits).await?;
        ops.push(per_layer::inputs_op(&mut self.ops, params, &rows.inputs, &rows.proj, &table.proj_norm).await?);
        Ok(ops)
    }

    /// Gemma 4's per-layer input block of layer `l` (none elsewhere): `x += norm(proj · (gelu(inp_gate · x) *
    /// input))`, then `x *=` the layer's output scale. `decode`: on the last row, else on the call's rows.
    async fn per_layer_block(&mut self, l: usize, decode: bool) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let (Some(block), Some(rows)) = (&lw.per_layer, &b.per_layer) else { return Ok(Vec::new()) };
        let params = PerLayerParams::new(c.per_layer_input(), c.n_layers, c.d_model);
        let (width, d) = (params.width as usize, c.d_model);
        let (gate_in, proj_in, labels) = match decode {
            true => (MatIn::Plain(&b.x), MatIn::Plain(&rows.gate), ["matvec_inp_gate", "matvec_per_layer_proj"]),
            false => (MatIn::Rows(&b.x), MatIn::Rows(&rows.gate), ["matmul_inp_gate", "matmul_per_layer_proj"]),
        };
        let gate_out = to(&rows.gate, width, OutMode::Store, None);
        let mut ops =
            mat::ops(&mut self.ops, labels[0], &[(&block.inp_gate, 0)], gate_in, gate_out, &self.splits).await?;
        ops.push(per_layer::gate_op(&mut self.ops, params, l, &rows.gate, &rows.inputs).await?);
        let out = to(&b.xb, d, OutMode::Store, None);
        let mut proj = mat::ops(&mut self.ops, labels[1], &[(&block.proj, 0)], proj_in, out, &self.splits).await?;
        let splits = mat::take_reduce(&mut proj);
        ops.extend(proj);
        let post = (&block.post_norm, lw.out_scale);
        ops.push(match splits {
            Some(splits) => norm::norm_add(&mut self.ops, splits, &b.split, post, &b.x).await?,
            None => norm::norm_add(&mut self.ops, 1, &b.xb, post, &b.x).await?,
        });
        Ok(ops)
    }

    /// Decode: the matrix op of a block's output (`wo`, `down`) from `input` and its adapters `group`, added
    /// to the residual stream `x`: by the matvec itself, or, with a post-norm (Gemma), stored to `xb` and
    /// normed into `x` by `norm_add` (which then scales `x` by the post-norm's factor).
    async fn decode_block_out(
        &mut self,
        label: &'static str,
        mat: &MatLoc,
        input: MatIn<'_>,
        group: Group,
        lora_in: LoraIn<'_>,
        post_norm: Option<(&wgpu::Buffer, f32)>,
    ) -> Result<Vec<Op>> {
        let b = self.b;
        let d = self.m.model.config.d_model;
        let out = if post_norm.is_some() { &b.xb } else { &b.x };
        let mode = if post_norm.is_some() { OutMode::Store } else { OutMode::Add };
        let mut ops = mat::ops(&mut self.ops, label, &[(mat, 0)], input, to(out, d, mode, None), &self.splits).await?;
        ops.extend(self.lora(group, lora_in, out).await?);
        if let Some(norm) = post_norm {
            ops.push(norm::norm_add(&mut self.ops, 1, &b.xb, norm, &b.x).await?);
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
        post_norm: Option<(&wgpu::Buffer, f32)>,
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
                    Some(splits) => norm::norm_add(&mut self.ops, splits, &b.split, norm, &b.x).await?,
                    None => norm::norm_add(&mut self.ops, 1, &b.xb, norm, &b.x).await?,
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
        ops.extend(self.per_layer_block(l, true).await?);
        Ok(ops)
    }

    async fn decode_attention(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let lw = &m.layers[l];
        let (qd, kvd, own_kv) = self.attention_widths(l);
        let qkv = self.qkv_mats(l);
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
            ops.push(norm::head_norm(&self.ops, &b.qkv, qk_norm, lw.normed_heads).await?);
        }
        let (windowed, rope) = self.attention_of(l);
        ops.push(attn_decode::op(&self.ops, (windowed, own_kv), &b.qkv, rope, &b.part, self.kv(l)).await?);
        let post = lw.post_attn_norm.as_ref().map(|norm| (norm, 1.0));
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
        let post = lw.post_attn_norm.as_ref().map(|norm| (norm, 1.0));
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
        let lw = &m.layers[l];
        let ff = self.ops.shape.ffn;
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
        let post = self.post_ffn_norm(l);
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
        ops.extend(self.per_layer_block(l, false).await?);
        Ok(ops)
    }

    async fn prefill_attention(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let lw = &m.layers[l];
        let (qd, kvd, own_kv) = self.attention_widths(l);
        let mut ops = vec![self.prefill_norm(&lw.attn_norm).await?];
        let qkv = self.qkv_mats(l);
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
            ops.push(norm::head_norm(&self.ops, &b.qkv, qk_norm, lw.normed_heads).await?);
        }
        let qkv_rows = if qkv_splits.is_some() { &b.split } else { &b.qkv };
        let (windowed, rope) = self.attention_of(l);
        let variant = (qkv_splits.unwrap_or(1), own_kv);
        ops.push(rope_store::op(&self.ops, variant, qkv_rows, rope, &b.q_rot, self.kv(l)).await?);
        ops.extend(attn_prefill::ops(&self.ops, windowed, &b.q_rot, &b.att_parts, &b.att, self.kv(l)).await?);
        if let Some((_, rows)) = gate {
            ops.push(attn_gate::op(&self.ops, &b.att, rows).await?);
        }
        let post = lw.post_attn_norm.as_ref().map(|norm| (norm, 1.0));
        ops.extend(self.prefill_block_out("matmul_wo", &lw.wo, &b.att, Group::O(l), post, true).await?);
        Ok(ops)
    }

    async fn prefill_delta_net(&mut self, l: usize, delta: &DeltaLocs) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let lw = &m.layers[l];
        let mut ops = vec![self.prefill_norm(&lw.attn_norm).await?];
        ops.extend(self.delta_net(l, delta, MatIn::Rows(&b.xb), "matmul_delta_in").await?);
        let out = &b.delta.as_ref().expect("delta-net rows").out;
        let post = lw.post_attn_norm.as_ref().map(|norm| (norm, 1.0));
        ops.extend(self.prefill_block_out("matmul_ssm_out", &delta.out, out, Group::O(l), post, true).await?);
        Ok(ops)
    }

    async fn prefill_ffn(&mut self, l: usize) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let c = &m.model.config;
        let lw = &m.layers[l];
        let ff = self.ops.shape.ffn;
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
        // The next layer's attention norm adds the partials; the output layer's norm reads x itself, as does a
        // per-layer input block.
        let post = self.post_ffn_norm(l);
        let pending = l + 1 < c.n_layers && lw.per_layer.is_none();
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
