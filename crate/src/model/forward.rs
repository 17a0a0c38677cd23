//! The transformer forward pass, top to bottom, over a batch of tokens (prefill) or one (decode).
//!
//! All buffers live in a [`RunState`] allocated once per session for `n_batch` tokens, so the decode
//! loop allocates nothing.

use crate::kernels::attention::{attention, AttentionScratch};
use crate::kernels::delta_net::{causal_conv_silu, delta_rule, DeltaNetShape};
use crate::kernels::exp::Exp;
use crate::kernels::gelu::geglu;
use crate::kernels::matmul::matmul;
use crate::kernels::rmsnorm::{rmsnorm, rmsnorm_in_place};
use crate::kernels::rope::Rope;
use crate::kernels::swiglu::swiglu;
use crate::kv::cache::KvCache;
use crate::model::config::{Arch, Config};
use crate::model::experts::{self, ExpertScratch};
use crate::model::lora::{AdapterSet, Proj, Site};
use crate::model::weights::{DeltaNetWeights, PerLayerEmbedding};
use crate::model::Model;
use crate::parallel::{for_each_row_chunk, in_pool, LineBuf};
use crate::quant::{dequantize_row, Activations, QuantMatrix};
use crate::simd::cpu::widest_fn;

/// Scratch for one forward call of up to `n_batch` tokens.
pub struct RunState {
    pub n_batch: usize,
    x: LineBuf,    // [n × d_model] residual stream
    xb: LineBuf,   // [n × d_model] normed input of a block
    q: LineBuf,    // [n × q_dim] (Qwen3.5: [n × 2·q_dim], each head's queries and output gate, until split)
    k: LineBuf,    // [n × kv_dim]
    v: LineBuf,    // [n × kv_dim]
    att: LineBuf,  // [n × q_dim] attention output
    proj: LineBuf, // [n × d_model] block output before the residual add
    gate: LineBuf, // [n × ffn_dim]
    up: LineBuf,   // [n × ffn_dim]
    /// Gemma 4's per-layer inputs (`PerLayerInputs`), where the model has them.
    per_layer: Option<PerLayerInputs>,
    /// Qwen3.5's delta-net layers' and gated attention's scratch, where the model has them.
    delta_net: Option<DeltaNetScratch>,
    experts: ExpertScratch,
    att_scratch: AttentionScratch,
    acts: Activations,
    rope: Rope,
    angles: Vec<(f32, f32)>, // [n × rope pairs] RoPE's (cos, sin) for each token's position
    /// The RoPE of layers with a base of their own (Gemma 3's and 4's windowed ones), and its angles.
    local: Option<(Rope, Vec<(f32, f32)>)>,
    /// [rows × vocab]: logits of the rows asked for in the last call.
    pub logits: Vec<f32>,
    /// With `Some(l)`, each call keeps the residual stream after the first `l` layers in `kept`, `[n × d_model]`
    /// (what a MicroLoRA of the later layers trains on: `Evaluator::frozen_residuals`).
    pub keep_after: Option<usize>,
    pub kept: Vec<f32>,
}

impl RunState {
    pub fn new(model: &Model, n_batch: usize, n_ctx: usize) -> RunState {
        let c = &model.config;
        let n = n_batch;
        RunState {
            n_batch,
            x: LineBuf::zeros(n * c.d_model),
            xb: LineBuf::zeros(n * c.d_model),
            q: LineBuf::zeros(n * query_rows(c)),
            k: LineBuf::zeros(n * c.kv_dim()),
            v: LineBuf::zeros(n * c.kv_dim()),
            att: LineBuf::zeros(n * c.q_dim()),
            proj: LineBuf::zeros(n * c.d_model),
            gate: LineBuf::zeros(n * c.ffn_dim),
            up: LineBuf::zeros(n * c.ffn_dim),
            per_layer: PerLayerInputs::new(c, n),
            delta_net: c.delta_net.as_ref().map(|dn| DeltaNetScratch::new(&dn.shape, c.q_dim(), n)),
            experts: ExpertScratch::new(c.experts, n, c.d_model),
            att_scratch: AttentionScratch::new(&c.attention_shape(), n_ctx),
            acts: Activations::new(),
            rope: model.rope(n_ctx),
            angles: vec![(0.0, 0.0); n * (c.rope_dims / 2)],
            local: model.local_rope(n_ctx).map(|r| {
                let pairs = r.pairs();
                (r, vec![(0.0, 0.0); n * pairs])
            }),
            logits: Vec::new(),
            keep_after: None,
            kept: Vec::new(),
        }
    }

    /// The bytes [`RunState::new`] allocates for `n_batch` tokens over `n_ctx` positions, saturating (a hostile
    /// file's shapes); the buffers that grow as they are used (activations, logits) aside.
    pub fn bytes(c: &Config, n_batch: usize, n_ctx: usize) -> usize {
        let widths =
            [c.d_model, c.d_model, query_rows(c), c.kv_dim(), c.kv_dim(), c.q_dim(), c.d_model, c.ffn_dim, c.ffn_dim];
        let rows = widths.iter().fold(0usize, |a, &w| a.saturating_add(LineBuf::bytes(n_batch.saturating_mul(w))));
        let pairs = c.rope_dims / 2 + c.local_rope_dims().map_or(0, |dims| dims / 2);
        let angles = n_batch.saturating_mul(pairs).saturating_mul(std::mem::size_of::<(f32, f32)>());
        rows.saturating_add(AttentionScratch::bytes(&c.attention_shape(), n_ctx))
            .saturating_add(angles)
            .saturating_add(ExpertScratch::bytes(c.experts, n_batch, c.d_model))
            .saturating_add(PerLayerInputs::bytes(c, n_batch))
            .saturating_add(c.delta_net.as_ref().map_or(0, |dn| DeltaNetScratch::bytes(&dn.shape, c.q_dim(), n_batch)))
    }
}

/// The rows of a layer's query projection: each head's queries, and for Qwen3.5 its output gate too.
fn query_rows(c: &Config) -> usize {
    if c.attention_output_gate() {
        2 * c.q_dim()
    } else {
        c.q_dim()
    }
}

/// Qwen3.5's scratch for a batch: its attention layers' output gate, and a delta-net layer's projections.
struct DeltaNetScratch {
    attn_gate: LineBuf, // [n × q_dim] the sigmoid gate of each head's attention output
    qkv: LineBuf,       // [n × conv_dim] queries, keys and values, convolved in place
    conv_in: LineBuf,   // [(conv_kernel - 1 + n) × conv_dim] the convolution's inputs, its state's first
    z: LineBuf,         // [n × value_dim] the output's gate
    g: LineBuf,         // [n × v_heads] each head's decay (its log)
    beta: LineBuf,      // [n × v_heads] each head's write strength
    out: LineBuf,       // [n × value_dim] the delta rule's output
}

impl DeltaNetScratch {
    fn widths(shape: &DeltaNetShape, q_dim: usize) -> [usize; 6] {
        [q_dim, shape.conv_dim(), shape.value_dim(), shape.v_heads, shape.v_heads, shape.value_dim()]
    }

    fn new(shape: &DeltaNetShape, q_dim: usize, n: usize) -> DeltaNetScratch {
        let [attn_gate, qkv, z, g, beta, out] = DeltaNetScratch::widths(shape, q_dim).map(|w| LineBuf::zeros(n * w));
        let conv_in = LineBuf::zeros(shape.conv_inputs_len(n));
        DeltaNetScratch { attn_gate, qkv, conv_in, z, g, beta, out }
    }

    fn bytes(shape: &DeltaNetShape, q_dim: usize, n: usize) -> usize {
        let widths = DeltaNetScratch::widths(shape, q_dim);
        let rows = widths.iter().fold(0usize, |a, &w| a.saturating_add(LineBuf::bytes(n.saturating_mul(w))));
        let conv_in = (shape.conv_kernel - 1).saturating_add(n).saturating_mul(shape.conv_dim());
        rows.saturating_add(LineBuf::bytes(conv_in))
    }
}

/// Gemma 4's per-layer inputs of a batch: for each layer, a `width` row per token, from the per-layer embedding of
/// the token and a projection of its (scaled) embedding; and the scratch of the layers' blocks that use them.
struct PerLayerInputs {
    width: usize,
    inputs: LineBuf, // [n_layers × n × width], layer-major: a layer's rows are one slice
    proj: LineBuf,   // [n × n_layers·width] the embeddings' projection
    token: Vec<f32>, // [n_layers·width] one token's per-layer embedding
    gate: LineBuf,   // [n × width]
}

impl PerLayerInputs {
    fn new(c: &Config, n: usize) -> Option<PerLayerInputs> {
        let width = c.per_layer_input();
        (width > 0).then(|| PerLayerInputs {
            width,
            inputs: LineBuf::zeros(c.n_layers * n * width),
            proj: LineBuf::zeros(n * c.n_layers * width),
            token: vec![0.0; c.n_layers * width],
            gate: LineBuf::zeros(n * width),
        })
    }

    fn bytes(c: &Config, n: usize) -> usize {
        let all = c.per_layer_input().saturating_mul(c.n_layers);
        let per_batch = LineBuf::bytes(n.saturating_mul(all)).saturating_mul(2);
        let gate = LineBuf::bytes(n.saturating_mul(c.per_layer_input()));
        per_batch.saturating_add(all.saturating_mul(4)).saturating_add(gate)
    }
}

/// Which positions of the batch need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFor {
    None,
    Last,
    All,
}

/// The one batching rule of an eval call (CPU and GPU): `n` tokens in forward calls of at most
/// `per_call`, each with the rows of logits it needs: every row under `All`, the last call's last
/// row under `Last`, none under `None`.
pub fn batches(
    n: usize,
    per_call: usize,
    want: LogitsFor,
) -> impl Iterator<Item = (std::ops::Range<usize>, LogitsFor)> {
    let calls = n.div_ceil(per_call);
    (0..calls).map(move |i| {
        let rows = match want {
            LogitsFor::Last if i + 1 < calls => LogitsFor::None,
            w => w,
        };
        (i * per_call..n.min((i + 1) * per_call), rows)
    })
}

/// Run `tokens` (at most `s.n_batch`, ids already checked against the vocabulary) at positions
/// `pos0..` with the adapters `lora` (checked against the model), appending their keys/values to `kv`,
/// and leave logits in `s.logits`.
pub fn forward(
    model: &Model,
    lora: &AdapterSet,
    kv: &mut KvCache,
    s: &mut RunState,
    tokens: &[u32],
    pos0: usize,
    want: LogitsFor,
) {
    in_pool(|| {
        forward_layers(model, lora, kv, s, tokens, pos0, model.config.n_layers);
        output_head(model, lora, s, tokens.len(), want);
    })
}

/// The base model's residual stream after its first `n_layers` layers for `tokens` at positions `pos0..`,
/// `[n × d_model]`, into `out`: what a MicroLoRA of the later layers trains on (`training`).
pub(crate) fn residual_after(
    model: &Model,
    kv: &mut KvCache,
    s: &mut RunState,
    tokens: &[u32],
    pos0: usize,
    n_layers: usize,
    out: &mut [f32],
) {
    in_pool(|| {
        forward_layers(model, &AdapterSet::default(), kv, s, tokens, pos0, n_layers);
        out.copy_from_slice(&s.x[..tokens.len() * model.config.d_model]);
    })
}

/// [`forward`] without the output head: the final norm's output for every token of the batch, `[n × d_model]`,
/// into `out` (what llama.cpp pools into a decoder model's embeddings).
pub fn hidden_states(model: &Model, kv: &mut KvCache, s: &mut RunState, tokens: &[u32], pos0: usize, out: &mut [f32]) {
    in_pool(|| {
        forward_layers(model, &AdapterSet::default(), kv, s, tokens, pos0, model.config.n_layers);
        let d = model.config.d_model;
        norm(out, &s.x[..tokens.len() * d], &model.weights.output_norm, model.config.rms_eps);
    })
}

/// The first `n_layers` layers (all of them but for a MicroLoRA's frozen part): leave the residual stream in `s.x`.
fn forward_layers(
    model: &Model,
    lora: &AdapterSet,
    kv: &mut KvCache,
    s: &mut RunState,
    tokens: &[u32],
    pos0: usize,
    n_layers: usize,
) {
    let c = &model.config;
    let w = &model.weights;
    let file = model.file();
    let n = tokens.len();
    assert!(n > 0 && n <= s.n_batch && pos0 + n <= kv.n_ctx);
    let d = c.d_model;

    kv.make_room(pos0, n);
    // A recurrent state goes on from where it is: the evaluator rewinds it before an earlier position.
    if let Some(state) = &mut kv.recurrent {
        assert!(state.len == pos0 && n_layers == c.n_layers, "a recurrent state of {} at {pos0}", state.len);
        state.len = pos0 + n;
    }
    let pairs = s.rope.pairs();
    for (t, angles) in s.angles[..n * pairs].chunks_exact_mut(pairs).enumerate() {
        s.rope.angles(pos0 + t, angles);
    }
    if let Some((rope, angles)) = &mut s.local {
        let pairs = rope.pairs();
        for (t, angles) in angles[..n * pairs].chunks_exact_mut(pairs).enumerate() {
            rope.angles(pos0 + t, angles);
        }
    }

    // Token embeddings: one row of token_embd per token, dequantized (and scaled, for Gemma).
    let emb_row = w.token_embd.row_bytes();
    let scale = c.embedding_scale();
    for (t, &id) in tokens.iter().enumerate() {
        let row = &w.token_embd.bytes(file)[id as usize * emb_row..][..emb_row];
        let x = &mut s.x[t * d..(t + 1) * d];
        dequantize_row(w.token_embd.ty, row, x);
        if scale != 1.0 {
            x.iter_mut().for_each(|v| *v *= scale);
        }
    }
    if let (Some(embd), Some(pl)) = (&w.per_layer, &mut s.per_layer) {
        per_layer_inputs(model, embd, pl, &mut s.acts, &s.x[..n * d], tokens);
    }

    for (l, lw) in w.layers[..n_layers].iter().enumerate() {
        if s.keep_after == Some(l) {
            s.kept.clear();
            s.kept.extend_from_slice(&s.x[..n * d]);
        }
        // This layer's feed-forward width (Gemma 4's differ from layer to layer).
        let ff = c.layer_ffn_dim(l);
        // Attention block, or Qwen3.5's delta net in its place: x += block(norm(x)).
        norm(&mut s.xb[..n * d], &s.x[..n * d], &lw.attn_norm, c.rms_eps);
        if let (Some(dw), Some(dn), Some(scratch)) = (&lw.delta_net, &c.delta_net, &mut s.delta_net) {
            // Qwen3.5's linear attention: x += W_out · gated delta net(norm(x)), continuing the layer's state.
            let state = kv.recurrent.as_mut().expect("a model with delta-net layers has a recurrent state");
            let (conv_state, rule_state) = state.layer_mut(c.recurrent_layer(l));
            let (xb, proj) = (&s.xb[..n * d], &mut s.proj[..n * d]);
            delta_net_block(c, file, dw, &dn.shape, scratch, &mut s.acts, xb, (conv_state, rule_state), proj);
        } else {
            attention_block(model, lora, kv, s, l, pos0, n);
        }
        add_residual(&mut s.x[..n * d], &s.proj[..n * d], d, c.scales.residual);

        // Feed-forward block: x += W_down · (silu(W_gate·norm(x)) * W_up·norm(x)), GELU for Gemma, whose block
        // output is normed again before the add; or the same of each token's experts, weighted (qwen3moe).
        norm(&mut s.xb[..n * d], &s.x[..n * d], &lw.ffn_norm, c.rms_eps);
        if let Some(e) = c.experts {
            let (gate, up, out) = (&mut s.gate[..n * ff], &mut s.up[..n * ff], &mut s.proj[..n * d]);
            experts::ffn(e, lw, file, &s.xb[..n * d], n, &mut s.experts, &mut s.acts, gate, up, out);
        } else {
            project(
                &mut s.acts,
                &s.xb[..n * d],
                n,
                &mut [(lw.w_gate.view(file), &mut s.gate[..n * ff]), (lw.w_up.view(file), &mut s.up[..n * ff])],
            );
            for (p, out) in [(Proj::Gate, &mut s.gate[..n * ff]), (Proj::Up, &mut s.up[..n * ff])] {
                lora.add_to(Site::Layer(l, p), &s.xb[..n * d], n, out);
            }
            let (up, gelu) = (&s.up, matches!(c.arch, Arch::Gemma3 | Arch::Gemma4));
            for_each_row_chunk(&mut s.gate[..n * ff], ff, |t0, g| {
                let u = &up[t0 * ff..][..g.len()];
                if gelu {
                    geglu(g, u)
                } else {
                    swiglu(g, u)
                }
            });
            project(&mut s.acts, &s.gate[..n * ff], n, &mut [(lw.w_down.view(file), &mut s.proj[..n * d])]);
            lora.add_to(Site::Layer(l, Proj::Down), &s.gate[..n * ff], n, &mut s.proj[..n * d]);
        }
        if let Some(w) = &lw.post_ffn_norm {
            norm_in_place(&mut s.proj[..n * d], w, c.rms_eps);
        }
        add_residual(&mut s.x[..n * d], &s.proj[..n * d], d, c.scales.residual);

        // Gemma 4's per-layer input: x += norm(proj · (gelu(inp_gate · x) * the layer's input)); then the whole
        // stream scaled by the layer's output scale.
        if let (Some(block), Some(pl)) = (&lw.per_layer, &mut s.per_layer) {
            let width = pl.width;
            let gate = &mut pl.gate[..n * width];
            project(&mut s.acts, &s.x[..n * d], n, &mut [(block.inp_gate.view(file), &mut *gate)]);
            let input = &pl.inputs[l * n * width..][..n * width];
            for_each_row_chunk(gate, width, |t0, g| geglu(g, &input[t0 * width..][..g.len()]));
            project(&mut s.acts, &pl.gate[..n * width], n, &mut [(block.proj.view(file), &mut s.proj[..n * d])]);
            norm_in_place(&mut s.proj[..n * d], &block.post_norm, c.rms_eps);
            add(&mut s.x[..n * d], &s.proj[..n * d], d);
        }
        if let Some(scale) = lw.out_scale {
            for_each_row_chunk(&mut s.x[..n * d], d, |_, x| x.iter_mut().for_each(|v| *v *= scale));
        }
    }
}

/// Layer `l`'s attention block on the normed input of `n` tokens at `pos0..` (`s.xb`), into `s.proj`, storing the
/// layer's keys and values where it has its own.
fn attention_block(
    model: &Model,
    lora: &AdapterSet,
    kv: &mut KvCache,
    s: &mut RunState,
    l: usize,
    pos0: usize,
    n: usize,
) {
    let (c, file, lw) = (&model.config, model.file(), &model.weights.layers[l]);
    let (d, row, qd, kvd) = (c.d_model, c.kv_dim(), c.layer_q_dim(l), c.layer_kv_dim(l));
    let has_kv = c.layer_stores_kv(l);
    // Attention block: x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x)), with q/k/v biases
    // (qwen2), each query and key head RMS-normed before RoPE (qwen3), and each value head (gemma4); Qwen3.5's
    // output gated per head by the sigmoid of the query projection's second half.
    let q_rows = if c.attention_output_gate() { 2 * qd } else { qd };
    let q = (lw.wq.view(file), &mut s.q[..n * q_rows]);
    if has_kv {
        let (k, v) = ((lw.wk.view(file), &mut s.k[..n * kvd]), (lw.wv.view(file), &mut s.v[..n * kvd]));
        project(&mut s.acts, &s.xb[..n * d], n, &mut [q, k, v]);
    } else {
        project(&mut s.acts, &s.xb[..n * d], n, &mut [q]);
    }
    // Each adapter's `s·B·(A·x)` is added where the weight's product is, before any bias or norm.
    for (p, out) in [(Proj::Q, &mut s.q[..n * q_rows]), (Proj::K, &mut s.k[..n * kvd]), (Proj::V, &mut s.v[..n * kvd])]
    {
        lora.add_to(Site::Layer(l, p), &s.xb[..n * d], n, out);
    }
    if let (true, Some(scratch)) = (c.attention_output_gate(), &mut s.delta_net) {
        split_query_gate(&mut s.q[..n * q_rows], &mut scratch.attn_gate[..n * qd], c.layer_head_dim(l));
    }
    for (buf, bias, dim) in [(&mut s.q, &lw.bq, qd), (&mut s.k, &lw.bk, kvd), (&mut s.v, &lw.bv, kvd)] {
        if let Some(b) = bias {
            for row in buf[..n * dim].chunks_exact_mut(dim) {
                row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
            }
        }
    }
    for (buf, head_norm, dim) in [(&mut s.q, &lw.q_norm, qd), (&mut s.k, &lw.k_norm, kvd), (&mut s.v, &lw.v_norm, kvd)]
    {
        if let Some(w) = head_norm {
            norm_in_place(&mut buf[..n * dim], w, c.rms_eps);
        }
    }
    // A windowed layer (Gemma 3, 4) sees the last `window` positions, with its own RoPE; a NoPE layer (SmolLM3)
    // rotates nothing.
    let shape = c.layer_attention_shape(l);
    let rotates = c.layer_uses_rope(l);
    let (rope, angles) = match &s.local {
        Some((rope, angles)) if shape.window > 0 => (rope, angles),
        _ => (&s.rope, &s.angles),
    };
    let pairs = rope.pairs();
    // The keys too, where the layer computes its own.
    let rotated = if has_kv { 2 } else { 1 };
    for (buf, dim) in [(&mut s.q, qd), (&mut s.k, kvd)].into_iter().filter(|_| rotates).take(rotated) {
        for_each_row_chunk(&mut buf[..n * dim], dim, |t0, rows| {
            for (t, row) in rows.chunks_exact_mut(dim).enumerate() {
                rope.rotate(row, &angles[(t0 + t) * pairs..][..pairs]);
            }
        });
    }
    if has_kv {
        // The cache's rows are the widest layer's: a narrower layer's are padded.
        widen_rows(&mut s.k[..n * row], kvd, row);
        widen_rows(&mut s.v[..n * row], kvd, row);
        kv.layers[c.kv_layer(l)].store(pos0, &s.k[..n * row], &s.v[..n * row]);
    }
    let view = kv.layers[c.kv_layer(l)].view();
    attention(&shape, &s.q[..n * qd], &view, pos0, &mut s.att[..n * qd], &mut s.att_scratch);
    if let (true, Some(scratch)) = (c.attention_output_gate(), &s.delta_net) {
        let gate = &scratch.attn_gate[..n * qd];
        for_each_row_chunk(&mut s.att[..n * qd], qd, |t0, att| sigmoid_gate(att, &gate[t0 * qd..][..att.len()]));
    }
    project(&mut s.acts, &s.att[..n * qd], n, &mut [(lw.wo.view(file), &mut s.proj[..n * d])]);
    lora.add_to(Site::Layer(l, Proj::O), &s.att[..n * qd], n, &mut s.proj[..n * d]);
    if let Some(w) = &lw.post_attn_norm {
        norm_in_place(&mut s.proj[..n * d], w, c.rms_eps);
    }
}

/// Qwen3.5's delta-net block on the normed input `xb` (`[n × d_model]`) into `out` (`[n × d_model]`), continuing
/// the layer's convolution and delta-rule `state`, as llama.cpp's `build_layer_attn_linear`: projections to the
/// convolved q/k/v, the output gate z, each value head's decay `g = softplus(alpha + dt_bias) · a` and write strength
/// `beta = sigmoid(b)`; the convolution and SiLU; the delta rule; each head's output RMS-normed, times SiLU(z);
/// `ssm_out`.
#[allow(clippy::too_many_arguments)]
fn delta_net_block(
    c: &Config,
    file: &crate::gguf::bytes::ModelBytes,
    w: &DeltaNetWeights,
    shape: &DeltaNetShape,
    s: &mut DeltaNetScratch,
    acts: &mut Activations,
    xb: &[f32],
    state: (&mut [f32], &mut [f32]),
    out: &mut [f32],
) {
    let n = xb.len() / c.d_model;
    let (cd, vd, vh) = (shape.conv_dim(), shape.value_dim(), shape.v_heads);
    let (qkv, z, g, beta) = (&mut s.qkv[..n * cd], &mut s.z[..n * vd], &mut s.g[..n * vh], &mut s.beta[..n * vh]);
    project(
        acts,
        xb,
        n,
        &mut [
            (w.qkv.view(file), &mut *qkv),
            (w.gate.view(file), &mut *z),
            (w.alpha.view(file), &mut *g),
            (w.beta.view(file), &mut *beta),
        ],
    );
    let e = Exp::new();
    for (row_g, row_b) in g.chunks_exact_mut(vh).zip(beta.chunks_exact_mut(vh)) {
        for (h, (g, b)) in row_g.iter_mut().zip(row_b.iter_mut()).enumerate() {
            // ggml's softplus: x past 20 is its own.
            let x = *g + w.dt_bias[h];
            *g = if x > 20.0 { x } else { (1.0 + x.exp()).ln() } * w.a[h];
            *b = 1.0 / (1.0 + e.at(-*b));
        }
    }
    let (conv_state, rule_state) = state;
    causal_conv_silu(shape, qkv, &w.conv, conv_state, &mut s.conv_in);
    let o = &mut s.out[..n * vd];
    delta_rule(shape, qkv, g, beta, rule_state, o, c.rms_eps);
    // Each head's output normed, then gated: z = silu(z) · norm(o).
    norm_in_place(o, &w.norm, c.rms_eps);
    let o = &*o;
    for_each_row_chunk(z, vd, |t0, z| swiglu(z, &o[t0 * vd..][..z.len()]));
    project(acts, z, n, &mut [(w.out.view(file), out)]);
}

/// Qwen3.5's query projection `q` (`[n × 2·q_dim]`: per head its queries, then its gate, `head_dim` each) split:
/// the queries packed into `q`'s first `n × q_dim`, the gates into `gate` (`[n × q_dim]`). In order, so that no
/// query is overwritten before it has moved (each moves to a lower index).
fn split_query_gate(q: &mut [f32], gate: &mut [f32], head_dim: usize) {
    for (i, g) in gate.chunks_exact_mut(head_dim).enumerate() {
        let from = 2 * i * head_dim;
        g.copy_from_slice(&q[from + head_dim..from + 2 * head_dim]);
        q.copy_within(from..from + head_dim, i * head_dim);
    }
}

widest_fn! {
    /// `x *= sigmoid(gate)`, element by element (Qwen3.5's gated attention output); compiled for the widest vectors
    /// the CPU has, as SwiGLU is (the same bits at any width).
    fn sigmoid_gate(x: &mut [f32], gate: &[f32]) {
        let e = Exp::new();
        x.iter_mut().zip(gate).for_each(|(x, &g)| *x *= 1.0 / (1.0 + e.at(-g)));
    }
}

/// Gemma 4's per-layer inputs of the batch `tokens`, whose scaled embeddings are `x`, into `pl.inputs`: for layer
/// `l` and token `t`, `(norm(P_l · x_t / sqrt(d_model)) + E_l[t] · sqrt(width)) / sqrt(2)`, with `P_l` and `E_l` layer
/// `l`'s rows of the projection and of the per-layer embedding (as llama.cpp's `project_per_layer_inputs`).
fn per_layer_inputs(
    model: &Model,
    embd: &PerLayerEmbedding,
    pl: &mut PerLayerInputs,
    acts: &mut Activations,
    x: &[f32],
    tokens: &[u32],
) {
    let (c, file, n, width) = (&model.config, model.file(), tokens.len(), pl.width);
    let all = c.n_layers * width;
    project(acts, x, n, &mut [(embd.model_proj.view(file), &mut pl.proj[..n * all])]);
    let (proj_scale, embd_scale, sum_scale) =
        (1.0 / (c.d_model as f32).sqrt(), (width as f32).sqrt(), 1.0 / 2f32.sqrt());
    let row_bytes = embd.token_embd.row_bytes();
    for (t, &id) in tokens.iter().enumerate() {
        let row = &embd.token_embd.bytes(file)[id as usize * row_bytes..][..row_bytes];
        dequantize_row(embd.token_embd.ty, row, &mut pl.token);
        let proj = &mut pl.proj[t * all..][..all];
        proj.iter_mut().for_each(|v| *v *= proj_scale);
        rmsnorm_in_place(proj, &embd.proj_norm, c.rms_eps);
        for l in 0..c.n_layers {
            let input = &mut pl.inputs[(l * n + t) * width..][..width];
            let (p, e) = (&proj[l * width..][..width], &pl.token[l * width..][..width]);
            input.iter_mut().zip(p.iter().zip(e)).for_each(|(o, (p, e))| *o = (p + e * embd_scale) * sum_scale);
        }
    }
}

/// `buf` holds rows of `width` at its start; spread them to rows of `row` (>= `width`) over all of `buf`, each
/// padded with zeros. From the last row back, so that no row is overwritten before it has moved.
fn widen_rows(buf: &mut [f32], width: usize, row: usize) {
    if width == row {
        return;
    }
    for t in (0..buf.len() / row).rev() {
        buf.copy_within(t * width..(t + 1) * width, t * row);
        buf[t * row + width..(t + 1) * row].fill(0.0);
    }
}

/// The output head on the rows of the last `n` tokens' residual stream that need logits.
fn output_head(model: &Model, lora: &AdapterSet, s: &mut RunState, n: usize, want: LogitsFor) {
    let (c, w, file) = (&model.config, &model.weights, model.file());
    let d = c.d_model;
    let first = match want {
        LogitsFor::None => return,
        LogitsFor::All => 0,
        LogitsFor::Last => n - 1,
    };
    let rows = n - first;
    norm(&mut s.xb[..rows * d], &s.x[first * d..n * d], &w.output_norm, c.rms_eps);
    s.logits.resize(rows * c.vocab_size, 0.0);
    project(&mut s.acts, &s.xb[..rows * d], rows, &mut [(w.output.view(file), &mut s.logits[..])]);
    lora.add_to(Site::Output, &s.xb[..rows * d], rows, &mut s.logits[..]);
    c.finish_logits(&mut s.logits);
}

/// Multiply the same input rows `x` by several matrices, quantizing `x` once per activation format
/// and multiplying the matrices that share one in one call.
pub(crate) fn project(acts: &mut Activations, x: &[f32], n: usize, outs: &mut [(QuantMatrix, &mut [f32])]) {
    let mut rest = outs;
    while let Some((m, _)) = rest.first() {
        let kind = m.ty.act_kind();
        let same = rest.iter().take_while(|(m, _)| m.ty.act_kind() == kind).count();
        let (group, tail) = rest.split_at_mut(same);
        acts.quantize(kind, x, n);
        matmul(group, acts);
        rest = tail;
    }
}

/// `x += y`, row by row (rows of `d`).
pub(crate) fn add(x: &mut [f32], y: &[f32], d: usize) {
    for_each_row_chunk(x, d, |t0, x| x.iter_mut().zip(&y[t0 * d..]).for_each(|(a, b)| *a += b));
}

/// A block's output `y` added to the residual stream `x`, times `scale` (Granite's `residual_scale`; 1 elsewhere).
fn add_residual(x: &mut [f32], y: &[f32], d: usize, scale: f32) {
    if scale == 1.0 {
        return add(x, y, d);
    }
    for_each_row_chunk(x, d, |t0, x| x.iter_mut().zip(&y[t0 * d..]).for_each(|(a, b)| *a += scale * b));
}

/// RMSNorm of each row of `x` (rows of `weight.len()`) into `out`.
fn norm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    for_each_row_chunk(out, d, |t0, out| rmsnorm(out, &x[t0 * d..][..out.len()], weight, eps));
}

/// RMSNorm of each row of `x` (rows of `weight.len()`: a token's, or one head's) in place.
fn norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    for_each_row_chunk(x, weight.len(), |_, rows| rmsnorm_in_place(rows, weight, eps));
}
