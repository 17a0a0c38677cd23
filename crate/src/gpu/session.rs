//! One conversation on the GPU, the runtime of its forward calls: the KV cache and activation
//! buffers, allocated once, and the ops of a forward pass (built once by `forward.rs`, with their
//! bind groups). A forward call writes the token ids and its `CallParams` uniform, encodes the
//! prebuilt dispatches and submits them: a decode step at once, a prefill call in parts of
//! `SUBMIT_OPS` (the GPU starts on the first while the CPU encodes the rest); then it reads back the
//! logits or the sampled ids. Before waiting for them, it encodes the one-token step that would
//! come next (`EncodedStep`), so a streamed decode submits each step as soon as the last id is in.
//! A greedy one-token call (the argmax computed on the GPU: a step of a streamed greedy decode) also
//! submits the step after it before reading its id (`Speculative`): that step's input is the id the
//! GPU just chose, which the decode passes next, so the GPU runs it while the id travels to the
//! caller and back; any other next call leaves it unused (its cache position is past the
//! conversation's, rewritten by the next call there). Profiling times each dispatch with timestamp queries.
//!
//! Under LoRA adapters the session runs a second list of ops, built for its adapter set (`forward.rs`,
//! `ops/lora.rs`) when a call first runs under it, with the set's weights and parameter blocks in
//! buffers of their own; the base model's ops stay as they are, and run whenever the set is empty.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::forward::{self, ForwardOps};
use super::gpu_error;
use super::model::GpuModel;
use super::ops::lora::LoraWeights;
use super::ops::{self, attn_decode, attn_prefill, delta_net, mat, rope_store, CallParams, Op};
use crate::error::{GpuFault, Result};
use crate::kv::cache::KvCache;
use crate::kv::recurrent::RecurrentState;
use crate::model::eval::{check_eval, Want};
use crate::model::forward::{batches, LogitsFor};
use crate::model::lora::AdapterSet;
use crate::quant::GgmlType;

/// Greedy steps that can run ahead of the CPU before their ids are read back.
pub const MAX_RUN_AHEAD: usize = 1024;
/// Dispatches per submission of a multi-token call: the GPU starts on the first part while the
/// CPU encodes the rest (a decode step, one token, is one submission).
const SUBMIT_OPS: usize = 64;
/// Most ops (parameter blocks) of a session.
const MAX_PARAMS: u64 = 2048;
/// Bytes of the staging buffer a KV download goes through (larger downloads take several rounds).
const KV_STAGING_BYTES: u64 = 8 << 20;

/// GPU time of one kernel kind over the profiled calls.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub label: &'static str,
    pub dispatches: usize,
    pub ms: f64,
}

/// The buffers of a session.
pub(super) struct Buffers {
    pub call: wgpu::Buffer,
    pub params: wgpu::Buffer,
    pub tokens: wgpu::Buffer,
    pub x: wgpu::Buffer,
    pub xb: wgpu::Buffer,
    pub qkv: wgpu::Buffer,
    pub q_rot: wgpu::Buffer,
    pub att: wgpu::Buffer,
    pub part: wgpu::Buffer,
    /// Prefill attention's partials where it splits the keys (`attn_prefill::parts_len`).
    pub att_parts: wgpu::Buffer,
    /// Partial products of split matmuls.
    pub split: wgpu::Buffer,
    pub gu: wgpu::Buffer,
    pub h: wgpu::Buffer,
    /// With experts: the router's logits, [n × n_experts].
    pub route: Option<wgpu::Buffer>,
    pub logits: wgpu::Buffer,
    /// The best (value, id) of each output-layer matvec workgroup, for argmax.
    pub best: wgpu::Buffer,
    pub ids: wgpu::Buffer,
    pub rope: wgpu::Buffer,
    /// The RoPE table of the layers with a base of their own (Gemma 3's windowed layers; `Model::local_rope`).
    pub rope_local: Option<wgpu::Buffer>,
    /// The table of the layers without RoPE (`Config::layer_uses_rope`: SmolLM3's NoPE layers), which rotates by 0.
    pub rope_none: Option<wgpu::Buffer>,
    /// Keys and values of each layer of the KV cache (`Config::kv_layer`; Qwen3.5's attention layers only).
    pub kv: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    /// Qwen3.5: the attention output's gate rows, [n × q_dim].
    pub attn_gate: Option<wgpu::Buffer>,
    /// Qwen3.5: the delta-net blocks' working rows.
    pub delta: Option<DeltaRows>,
    /// Gemma 4: the per-layer inputs' rows.
    pub per_layer: Option<PerLayerRows>,
    /// Each delta-net layer's recurrent state (`Config::recurrent_layer`), laid out as `kv::recurrent` lays out a
    /// layer: the convolution's state, then the rule's.
    pub recurrent: Vec<wgpu::Buffer>,
    pub logits_staging: wgpu::Buffer,
    /// Two, taken by the parity of the call's last position: a step's ids can be read while the
    /// next step, which copies its own to the other, runs.
    pub ids_staging: [wgpu::Buffer; 2],
}

/// A delta-net block's rows for a call (`ops::delta_net`).
pub(super) struct DeltaRows {
    /// The projections, `[n × in_stride]`.
    pub input: wgpu::Buffer,
    /// The convolution's output, `[n × conv_dim]`.
    pub conv: wgpu::Buffer,
    /// The block's output before `ssm_out`, `[n × value_dim]`.
    pub out: wgpu::Buffer,
}

/// Gemma 4's per-layer inputs of a call (`ops::per_layer`).
pub(super) struct PerLayerRows {
    /// The inputs of every layer, `[n × n_layers·width]` (first the per-layer embeddings).
    pub inputs: wgpu::Buffer,
    /// The projection of the token embeddings, `[n × n_layers·width]`.
    pub proj: wgpu::Buffer,
    /// A layer's gate, `[n × width]`.
    pub gate: wgpu::Buffer,
}

/// Where a session's recurrent state stands (Qwen3.5's delta nets), and a copy of it (`Recurrent::checkpoint`)
/// after the last call of several tokens: going back to an earlier position restarts from there or from zeros
/// (`GpuSession::rewind_recurrent`), as a recurrent state cannot drop tokens.
struct Recurrent {
    /// The tokens the state has taken in.
    len: usize,
    checkpoint: Vec<wgpu::Buffer>,
    /// The tokens the checkpoint had taken in (`None`: no checkpoint).
    checkpoint_len: Option<usize>,
}

/// The ops of an adapter set that adds something, with what their bind groups hold.
struct LoraOps {
    ops: ForwardOps,
    _weights: LoraWeights,
    _params: wgpu::Buffer,
}

struct Profiler {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    staging: wgpu::Buffer,
    capacity: usize,
    totals: HashMap<&'static str, (usize, f64)>,
}

pub struct GpuSession {
    m: Arc<GpuModel>,
    n_ctx: usize,
    n_batch: usize,
    /// Rows the logits buffer holds (all-logits calls are split to fit).
    logit_rows: usize,
    b: Buffers,
    ops: ForwardOps,
    /// The adapters the next calls run with (`set_adapters`).
    adapters: AdapterSet,
    /// The set `lora` was built for, and its ops (`None`: the set adds nothing, the base ops run).
    built: AdapterSet,
    lora: Option<LoraOps>,
    profiler: Option<Profiler>,
    kv_bytes: usize,
    /// What prefill attention's keys per split are a multiple of (`attn_prefill::split_step`).
    split_step: usize,
    /// CPU time spent writing, encoding and submitting forward calls (ms), for benchmarks.
    cpu_submit_ms: f64,
    /// The token ids of a call as bytes (kept: decoding allocates nothing per token).
    token_bytes: Vec<u8>,
    /// The decode step the next call is expected to be, encoded while the GPU ran the last one.
    next_step: Option<EncodedStep>,
    /// The greedy step submitted after the last greedy call, on the id it chose.
    speculative: Option<Speculative>,
    /// Where the model has delta-net layers: where their state stands.
    recurrent: Option<Recurrent>,
}

/// A greedy one-token step at `pos0` submitted before the id it takes as input (the last call's
/// argmax, in the tokens buffer) was read back; a call of that token at `pos0` under the same adapter
/// set takes its id instead of running again.
struct Speculative {
    pos0: usize,
    /// The id the step runs on, once read back (`None` until then).
    input: Option<u32>,
    set: AdapterSet,
    submission: wgpu::SubmissionIndex,
}

/// One decode step's commands, encoded ahead: a streamed decode then submits step k + 1 as soon as
/// step k's logits are read (greedy: as soon as step k is submitted, `Speculative`), its encoding
/// having overlapped the GPU's work on step k. The
/// commands read the token and the call parameters from their buffers, which the call writes first;
/// the grid sizes depend only on the position, so they are the call's own.
struct EncodedStep {
    pos0: usize,
    logits: LogitsFor,
    argmax_slot: Option<u32>,
    /// The adapter set whose ops it runs.
    set: AdapterSet,
    commands: wgpu::CommandBuffer,
}

impl GpuSession {
    /// Allocate a session of `n_ctx` positions that evaluates up to `n_batch` tokens per call.
    pub async fn new(m: Arc<GpuModel>, n_ctx: usize, n_batch: usize) -> Result<GpuSession> {
        let c = m.model.config.clone();
        let gpu = &m.gpu;
        if n_ctx == 0 || n_batch == 0 || n_batch > n_ctx {
            return Err(crate::Error::InvalidArgument(format!("n_ctx {n_ctx} / n_batch {n_batch}")));
        }
        use wgpu::BufferUsages as U;
        let storage = U::STORAGE | U::COPY_SRC | U::COPY_DST;
        let f32s = |n: usize| (n * 4) as u64;
        let nb = n_batch;
        let logit_rows = nb.min((gpu.max_binding / f32s(c.vocab_size)) as usize);
        if logit_rows == 0 {
            return Err(gpu_error(GpuFault::Limits, "one row of logits does not fit in a storage binding"));
        }

        let rope = rope_store::rope_table(&m.model.rope(n_ctx), n_ctx);
        let rope_local = match m.model.local_rope(n_ctx) {
            Some(r) => Some(gpu.buffer_with("rope local", &rope_store::rope_table(&r, n_ctx), U::STORAGE).await?),
            None => None,
        };
        let rope_none = match (0..c.n_layers).all(|l| c.layer_uses_rope(l)) {
            true => None,
            false => {
                let table = rope_store::identity_table(c.rope_dims / 2, n_ctx);
                Some(gpu.buffer_with("rope none", &table, U::STORAGE).await?)
            }
        };
        let kv_layer = (n_ctx * c.kv_dim() * 2) as u64;
        let mut kv = Vec::with_capacity(c.kv_layers());
        for _ in 0..c.kv_layers() {
            kv.push((
                gpu.buffer("k cache", kv_layer, U::STORAGE | U::COPY_SRC | U::COPY_DST).await?,
                gpu.buffer("v cache", kv_layer, U::STORAGE | U::COPY_SRC | U::COPY_DST).await?,
            ));
        }
        let qkv_dim = c.q_dim() + 2 * c.kv_dim();
        let ff = ops::Shape::model(&c).ffn;
        let delta_stride = c.delta_net.as_ref().map_or(0, |dn| delta_net::in_stride(&dn.shape));
        let (delta, recurrent, checkpoint) = match (&c.delta_net, c.recurrent_state()) {
            (Some(dn), Some(state)) => {
                let s = &dn.shape;
                let rows = DeltaRows {
                    input: gpu.buffer("delta-net projections", f32s(nb * delta_stride), storage).await?,
                    conv: gpu.buffer("delta-net convolution", f32s(nb * s.conv_dim()), storage).await?,
                    out: gpu.buffer("delta-net output", f32s(nb * s.value_dim()), storage).await?,
                };
                let layer_bytes = (state.bytes() / state.n_layers()) as u64;
                let (mut layers, mut copies) = (Vec::new(), Vec::new());
                for _ in 0..state.n_layers() {
                    layers.push(gpu.buffer("recurrent state", layer_bytes, storage).await?);
                    copies.push(gpu.buffer("recurrent checkpoint", layer_bytes, storage).await?);
                }
                (Some(rows), layers, Some(Recurrent { len: 0, checkpoint: copies, checkpoint_len: None }))
            }
            _ => (None, Vec::new(), None),
        };
        let b = Buffers {
            call: gpu.buffer("call", size_of::<CallParams>() as u64, U::UNIFORM | U::COPY_DST).await?,
            params: gpu.buffer("params", ops::PARAM_SLOT * MAX_PARAMS, U::UNIFORM | U::COPY_DST).await?,
            tokens: gpu.buffer("tokens", f32s(nb), storage).await?,
            x: gpu.buffer("x", f32s(nb * c.d_model), storage).await?,
            xb: gpu.buffer("xb", f32s(nb * c.d_model), storage).await?,
            qkv: gpu.buffer("qkv", f32s(nb * qkv_dim), storage).await?,
            q_rot: gpu.buffer("q_rot", f32s(nb * c.q_dim()), storage).await?,
            att: gpu.buffer("att", f32s(nb * c.q_dim()), storage).await?,
            part: gpu
                .buffer("attention partials", f32s(attn_decode::partials_len(c.n_heads, c.max_head_dim())), storage)
                .await?,
            att_parts: gpu.buffer("prefill attention partials", f32s(attn_prefill::parts_len(&c, nb)), storage).await?,
            split: {
                let rows = qkv_dim.max(2 * ff).max(c.d_model).max(delta_stride);
                gpu.buffer("split partials", f32s(mat::MAX_SPLITS * nb * rows).min(gpu.max_binding), storage).await?
            },
            gu: gpu.buffer("gate_up", f32s(nb * 2 * ff), storage).await?,
            h: gpu.buffer("ffn hidden", f32s(nb * ff), storage).await?,
            route: match c.experts {
                Some(e) => Some(gpu.buffer("router logits", f32s(nb * e.count), storage).await?),
                None => None,
            },
            logits: gpu.buffer("logits", f32s(logit_rows * c.vocab_size), storage).await?,
            best: gpu
                .buffer(
                    "best rows",
                    f32s(2 * c.vocab_size.div_ceil(mat::matvec_rows(c.vocab_size, GgmlType::F32) as usize)),
                    storage,
                )
                .await?,
            ids: gpu.buffer("ids", f32s(MAX_RUN_AHEAD), storage).await?,
            rope: gpu.buffer_with("rope", &rope, U::STORAGE).await?,
            rope_local,
            rope_none,
            kv,
            attn_gate: match c.attention_output_gate() {
                true => Some(gpu.buffer("attention gate", f32s(nb * c.q_dim()), storage).await?),
                false => None,
            },
            delta,
            per_layer: match c.per_layer_input() {
                0 => None,
                width => Some(PerLayerRows {
                    inputs: gpu.buffer("per-layer inputs", f32s(nb * width * c.n_layers), storage).await?,
                    proj: gpu.buffer("per-layer projection", f32s(nb * width * c.n_layers), storage).await?,
                    gate: gpu.buffer("per-layer gate", f32s(nb * width), storage).await?,
                }),
            },
            recurrent,
            logits_staging: gpu
                .buffer("logits staging", f32s(logit_rows * c.vocab_size), U::MAP_READ | U::COPY_DST)
                .await?,
            ids_staging: [
                gpu.buffer("ids staging", f32s(MAX_RUN_AHEAD), U::MAP_READ | U::COPY_DST).await?,
                gpu.buffer("ids staging", f32s(MAX_RUN_AHEAD), U::MAP_READ | U::COPY_DST).await?,
            ],
        };

        let ops = forward::build(&m, &b, &b.params, nb, None).await?;
        if ops.params.len() as u64 > b.params.size() {
            return Err(gpu_error(GpuFault::Limits, "too many ops for the parameter buffer"));
        }
        gpu.queue.write_buffer(&b.params, 0, &ops.params);
        gpu.check()?;
        let kv_bytes = 2 * c.kv_layers() * kv_layer as usize + c.recurrent_state_bytes();
        Ok(GpuSession {
            m,
            n_ctx,
            n_batch,
            logit_rows,
            b,
            ops,
            adapters: AdapterSet::default(),
            built: AdapterSet::default(),
            lora: None,
            profiler: None,
            kv_bytes,
            split_step: attn_prefill::split_step(&c),
            cpu_submit_ms: 0.0,
            token_bytes: Vec::with_capacity(4 * n_batch),
            next_step: None,
            speculative: None,
            recurrent: checkpoint,
        })
    }

    pub fn model(&self) -> &Arc<GpuModel> {
        &self.m
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn kv_cache_bytes(&self) -> usize {
        self.kv_bytes
    }

    /// CPU time spent writing, encoding and submitting forward calls so far (ms).
    pub fn cpu_submit_ms(&self) -> f64 {
        self.cpu_submit_ms
    }

    /// Dispatches of one greedy decode step (embedding to sampled id), under the adapters built last.
    pub fn dispatches_per_token(&self) -> usize {
        let f = self.forward_ops();
        f.embed.len() + f.decode_layers.len() + f.logits_last.len() + 1
    }

    /// The ops the next call runs: its adapter set's, or the base model's.
    fn forward_ops(&self) -> &ForwardOps {
        self.lora.as_ref().map_or(&self.ops, |l| &l.ops)
    }

    /// Run the next calls with the LoRA adapters `set` (read for this model; empty: the base model). The
    /// cache's keys and values stay: forgetting those computed under another set is the caller's part. The
    /// set's weights go up and its ops are built when a call first runs under it (a fault is then that
    /// call's error).
    pub fn set_adapters(&mut self, set: &AdapterSet) -> Result<()> {
        set.check(&self.m.model)?;
        self.adapters = set.clone();
        Ok(())
    }

    /// Build the ops of the adapter set the next call runs with, if they are not those built last.
    async fn prepare_adapters(&mut self) -> Result<()> {
        if self.adapters == self.built {
            return Ok(());
        }
        // The old set's buffers go before the new set's come.
        self.lora = None;
        self.built = AdapterSet::default();
        if let Some(weights) = LoraWeights::upload(&self.m, &self.adapters).await? {
            if self.recurrent.is_some() {
                // Its query projection is split in two on the GPU (`model.rs`), which the adapters' groups do not know.
                return Err(gpu_error(
                    GpuFault::Unsupported,
                    format!("LoRA adapters on {} run on the CPU backend only", self.m.model.config.arch.name()),
                ));
            }
            let gpu = &self.m.gpu;
            let size = ops::PARAM_SLOT * MAX_PARAMS;
            let params =
                gpu.buffer("lora params", size, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST).await?;
            let ops = forward::build(&self.m, &self.b, &params, self.n_batch, Some(&weights)).await?;
            if ops.params.len() as u64 > size {
                return Err(gpu_error(GpuFault::Limits, "too many ops for the parameter buffer"));
            }
            gpu.queue.write_buffer(&params, 0, &ops.params);
            gpu.check()?;
            self.lora = Some(LoraOps { ops, _weights: weights, _params: params });
        }
        self.built = self.adapters.clone();
        // The profiler's queries must cover a call of the new ops.
        if self.profiler.as_ref().is_some_and(|p| p.capacity < profile_capacity(self.forward_ops())) {
            let totals = self.profiler.take().map(|p| p.totals).unwrap_or_default();
            self.set_profiling(true).await?;
            if let Some(p) = self.profiler.as_mut() {
                p.totals = totals;
            }
        }
        Ok(())
    }

    /// Write rows `positions` of `kv` (a host cache or window holding them) into the cache at
    /// those positions: the prefix cache's pages and saved states go up this way. The rows are
    /// copied out at once (`queue.write_buffer`), before any later forward call runs.
    pub fn upload_kv(&self, kv: &KvCache, positions: Range<usize>) -> Result<()> {
        let gpu = &self.m.gpu;
        gpu.check()?;
        self.check_rows(kv, &positions)?;
        if positions.is_empty() {
            return Ok(());
        }
        let at = (positions.start * kv.kv_dim() * 2) as u64;
        for (layer, (k, v)) in kv.layers.iter().zip(&self.b.kv) {
            let (keys, values) = layer.rows(positions.clone());
            gpu.queue.write_buffer(k, at, keys.as_flattened());
            gpu.queue.write_buffer(v, at, values.as_flattened());
        }
        gpu.check()
    }

    /// Read the cache's rows at `positions` into `kv` (a host cache or window holding them), through
    /// a staging buffer of at most `KV_STAGING_BYTES`: the prefix cache's new pages and saved states
    /// come down this way.
    pub async fn download_kv(&self, kv: &mut KvCache, positions: Range<usize>) -> Result<()> {
        self.check_rows(kv, &positions)?;
        if positions.is_empty() {
            return Ok(());
        }
        let gpu = &self.m.gpu;
        gpu.check()?;
        let row = (kv.kv_dim() * 2) as u64;
        let per_position = 2 * kv.layers.len() as u64 * row;
        let step = (KV_STAGING_BYTES / per_position).max(1) as usize;
        let size = per_position * step.min(positions.len()) as u64;
        let staging =
            gpu.buffer("kv staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST).await?;
        for start in positions.clone().step_by(step) {
            let part = start..(start + step).min(positions.end);
            let bytes = part.len() as u64 * row;
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kv download") });
            for (l, (k, v)) in self.b.kv.iter().enumerate() {
                let to = 2 * l as u64 * bytes;
                enc.copy_buffer_to_buffer(k, part.start as u64 * row, &staging, to, bytes);
                enc.copy_buffer_to_buffer(v, part.start as u64 * row, &staging, to + bytes, bytes);
            }
            gpu.queue.submit([enc.finish()]);
            gpu.read_with(&staging, 2 * kv.layers.len() as u64 * bytes, |data| {
                for (layer, rows) in kv.layers.iter_mut().zip(data.chunks_exact(2 * bytes as usize)) {
                    let (keys, values) = layer.rows_mut(part.clone());
                    let (k, v) = rows.split_at(bytes as usize);
                    keys.as_flattened_mut().copy_from_slice(k);
                    values.as_flattened_mut().copy_from_slice(v);
                }
            })
            .await?;
        }
        Ok(())
    }

    /// `kv` has this cache's shape and holds `positions`, within the context.
    fn check_rows(&self, kv: &KvCache, positions: &Range<usize>) -> Result<()> {
        let c = &self.m.model.config;
        let held = kv.positions();
        if kv.layers.len() != c.kv_layers()
            || kv.kv_dim() != c.kv_dim()
            || positions.start < held.start
            || positions.end > held.end.min(self.n_ctx)
        {
            return Err(crate::Error::InvalidArgument(format!(
                "rows {positions:?} of a cache of {} layers × {} holding {held:?}, for a GPU cache of {} layers × {}, {} positions",
                kv.layers.len(),
                kv.kv_dim(),
                c.n_layers,
                c.kv_dim(),
                self.n_ctx
            )));
        }
        Ok(())
    }

    /// Where the model has delta-net layers, the tokens their recurrent state has taken in.
    pub fn recurrent_len(&self) -> Option<usize> {
        self.recurrent.as_ref().map(|r| r.len)
    }

    /// Bring the recurrent state back to at most `pos` tokens: the checkpoint's where it has no more, else the
    /// start's (zeros). Returns the tokens it then holds; the caller evaluates the rest up to `pos` again.
    pub fn rewind_recurrent(&mut self, pos: usize) -> usize {
        let gpu = &self.m.gpu;
        let Some(r) = self.recurrent.as_mut() else { return pos };
        if r.len <= pos {
            return r.len;
        }
        self.next_step = None;
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("rewind") });
        match r.checkpoint_len {
            Some(len) if len <= pos => {
                for (state, copy) in self.b.recurrent.iter().zip(&r.checkpoint) {
                    enc.copy_buffer_to_buffer(copy, 0, state, 0, state.size());
                }
                r.len = len;
            }
            _ => {
                for state in &self.b.recurrent {
                    enc.clear_buffer(state, 0, None);
                }
                r.len = 0;
            }
        }
        gpu.queue.submit([enc.finish()]);
        r.len
    }

    /// The checkpoint (if any) holds more than the first `n` tokens, which are no longer the conversation's.
    pub fn forget_recurrent_from(&mut self, n: usize) {
        if let Some(r) = self.recurrent.as_mut().filter(|r| r.checkpoint_len.is_some_and(|len| len > n)) {
            r.checkpoint_len = None;
        }
    }

    /// Set the recurrent state to `state` (of this model's shape: a saved conversation's), after `state.len`
    /// tokens; the checkpoint goes.
    pub fn upload_recurrent(&mut self, state: &RecurrentState) -> Result<()> {
        let gpu = &self.m.gpu;
        gpu.check()?;
        let Some(r) = self.recurrent.as_mut() else { return Ok(()) };
        if state.n_layers() != self.b.recurrent.len() {
            return Err(crate::Error::InvalidArgument(format!(
                "a recurrent state of {} layers for a model of {}",
                state.n_layers(),
                self.b.recurrent.len()
            )));
        }
        for (i, buffer) in self.b.recurrent.iter().enumerate() {
            gpu.queue.write_buffer(buffer, 0, bytemuck::cast_slice(state.layer_floats(i)));
        }
        self.next_step = None;
        (r.len, r.checkpoint_len) = (state.len, None);
        gpu.check()
    }

    /// The recurrent state as it stands (after `recurrent_len` tokens) into `state` (of this model's shape).
    pub async fn download_recurrent(&self, state: &mut RecurrentState) -> Result<()> {
        let Some(r) = self.recurrent.as_ref() else { return Ok(()) };
        let gpu = &self.m.gpu;
        gpu.check()?;
        // Every layer's state into one staging buffer, one after another, read back at once.
        let sizes: Vec<u64> = self.b.recurrent.iter().map(wgpu::Buffer::size).collect();
        let total = sizes.iter().sum();
        let staging =
            gpu.buffer("recurrent staging", total, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST).await?;
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("state") });
        let mut at = 0;
        for (buffer, &bytes) in self.b.recurrent.iter().zip(&sizes) {
            enc.copy_buffer_to_buffer(buffer, 0, &staging, at, bytes);
            at += bytes;
        }
        gpu.queue.submit([enc.finish()]);
        gpu.read_with(&staging, total, |data| {
            let mut at = 0;
            for (i, &bytes) in sizes.iter().enumerate() {
                let layer = &data[at as usize..(at + bytes) as usize];
                state.layer_floats_mut(i).copy_from_slice(bytemuck::cast_slice(layer));
                at += bytes;
            }
        })
        .await?;
        state.len = r.len;
        Ok(())
    }

    /// Run `tokens` at positions `pos0..` and put the logits in `out`: every row when
    /// `all_logits`, else the last token's.
    pub async fn eval(&mut self, tokens: &[u32], pos0: usize, all_logits: bool, out: &mut Vec<f32>) -> Result<()> {
        out.clear();
        self.eval_want(tokens, pos0, if all_logits { Want::All } else { Want::Last }, out).await?;
        Ok(())
    }

    /// Run `tokens` at positions `pos0..` and return the argmax of the last token's logits,
    /// computed on the GPU: only the id is read back. The id also becomes the input of
    /// [`decode_greedy`](Self::decode_greedy).
    pub async fn eval_argmax(&mut self, tokens: &[u32], pos0: usize) -> Result<u32> {
        let id = self.eval_want(tokens, pos0, Want::Argmax, &mut Vec::new()).await?;
        Ok(id.expect("an argmax call returns an id"))
    }

    /// Run `tokens` at positions `pos0..` in forward calls of at most `n_batch` tokens (fewer for
    /// all rows of logits, when the logits buffer holds fewer), appending the logits `want` asks
    /// for to `out`; the id under `Want::Argmax`.
    pub(crate) async fn eval_want(
        &mut self,
        tokens: &[u32],
        pos0: usize,
        want: Want,
        out: &mut Vec<f32>,
    ) -> Result<Option<u32>> {
        check_eval(tokens, pos0, self.n_ctx, self.m.model.config.vocab_size)?;
        if let Some(len) = self.recurrent_len().filter(|&len| len != pos0) {
            return Err(crate::Error::InvalidArgument(format!(
                "a call at {pos0} where the recurrent state holds {len} tokens (rewind_recurrent first)"
            )));
        }
        self.prepare_adapters().await?;
        // A greedy one-token call is a step of a streamed greedy decode, whose next call is likely the
        // step after it; after any other call the next one is not known.
        let speculative = self.speculative.take();
        if let (Want::Argmax, &[token]) = (want, tokens) {
            let ran = speculative.filter(|s| s.pos0 == pos0 && s.input == Some(token) && s.set == self.built);
            let submission = match ran {
                Some(s) => s.submission,
                None => self.submit(Some(tokens), pos0, LogitsFor::Last, Some(0)).await?,
            };
            self.advance_recurrent(pos0 + 1, false);
            return self.speculate_after(pos0 + 1, submission).await.map(Some);
        }
        let vocab = self.m.model.config.vocab_size;
        let (per_call, wanted) = match want {
            Want::Nothing => (self.n_batch, LogitsFor::None),
            Want::Last | Want::Argmax => (self.n_batch, LogitsFor::Last),
            Want::All => (self.n_batch.min(self.logit_rows), LogitsFor::All),
        };
        for (range, logits) in batches(tokens.len(), per_call, wanted) {
            let argmax_slot = (want == Want::Argmax && logits == LogitsFor::Last).then_some(0);
            let n = range.len();
            self.submit(Some(&tokens[range.clone()]), pos0 + range.start, logits, argmax_slot).await?;
            self.advance_recurrent(pos0 + range.end, n > 1);
            if range.end == tokens.len() && logits == LogitsFor::Last {
                // What a streamed decode does next: one token after these, the same readback (not after
                // all rows of logits: scoring, whose next call is another prompt).
                self.encode_ahead(pos0 + tokens.len(), LogitsFor::Last, argmax_slot);
            }
            if logits != LogitsFor::None && argmax_slot.is_none() {
                let rows = if logits == LogitsFor::All { n } else { 1 };
                let bytes = self.m.gpu.read(&self.b.logits_staging, (rows * vocab * 4) as u64).await?;
                // Granite's divisor and Gemma 4's cap, here rather than in a kernel: greedy argmax on the GPU does not
                // need them.
                let start = out.len();
                out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
                self.m.model.config.finish_logits(&mut out[start..]);
            }
        }
        Ok(match want {
            Want::Argmax => Some(self.read_ids(1, pos0 + tokens.len() - 1, None).await?[0]),
            _ => None,
        })
    }

    /// The recurrent state (if any) has taken in `len` tokens; after a call of several (a prompt), kept as the
    /// checkpoint.
    fn advance_recurrent(&mut self, len: usize, checkpoint: bool) {
        let Some(r) = self.recurrent.as_mut() else { return };
        r.len = len;
        if checkpoint {
            let gpu = &self.m.gpu;
            let mut enc =
                gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("checkpoint") });
            for (state, copy) in self.b.recurrent.iter().zip(&r.checkpoint) {
                enc.copy_buffer_to_buffer(state, 0, copy, 0, state.size());
            }
            gpu.queue.submit([enc.finish()]);
            r.checkpoint_len = Some(len);
        }
    }

    /// After the greedy call of `submission`, whose last position is `pos0 - 1`: submit the step at
    /// `pos0` on the id it chooses and encode the one after that (else, past the context, under
    /// profiling or on a software adapter (`Gpu::speculate`), only encode the step at `pos0`), then
    /// read the id back.
    async fn speculate_after(&mut self, pos0: usize, submission: wgpu::SubmissionIndex) -> Result<u32> {
        // Not with a recurrent state: a step the caller does not take could not be taken back.
        if self.m.gpu.speculate && self.profiler.is_none() && pos0 < self.n_ctx && self.recurrent.is_none() {
            let next = self.submit(None, pos0, LogitsFor::Last, Some(0)).await?;
            let set = self.built.clone();
            self.speculative = Some(Speculative { pos0, input: None, set, submission: next });
            self.encode_ahead(pos0 + 1, LogitsFor::Last, Some(0));
        } else {
            self.encode_ahead(pos0, LogitsFor::Last, Some(0));
        }
        let id = match self.read_ids(1, pos0 - 1, Some(submission)).await {
            Ok(ids) => ids[0],
            Err(e) => {
                self.speculative = None; // its input is unknown
                return Err(e);
            }
        };
        if let Some(s) = self.speculative.as_mut() {
            s.input = Some(id);
        }
        Ok(id)
    }

    /// Greedy decoding without a round trip per token: feed the id of the last `eval_argmax` (or
    /// decode step) back at positions `pos0..pos0 + count`, submitting every step before reading
    /// the `count` sampled ids back at once. The caller handles end-of-generation tokens (the
    /// steps after one are wasted, not wrong: later calls overwrite their cache positions; a recurrent
    /// state has taken them in, and goes back with `rewind_recurrent`).
    pub async fn decode_greedy(&mut self, pos0: usize, count: usize) -> Result<Vec<u32>> {
        let behind = self.recurrent_len().is_some_and(|len| len != pos0);
        if count == 0 || count > MAX_RUN_AHEAD || pos0 + count > self.n_ctx || behind {
            return Err(crate::Error::InvalidArgument(format!(
                "decode_greedy of {count} tokens at {pos0} (at most {MAX_RUN_AHEAD}, context {})",
                self.n_ctx
            )));
        }
        self.prepare_adapters().await?;
        // The first step may be running already (submitted after the last greedy call); where a
        // step at another position is, the tokens buffer holds its id, not its input.
        let mut last = None;
        let mut first = 0;
        match self.speculative.take() {
            Some(s) if s.pos0 == pos0 && s.set == self.built => {
                (first, last) = (1, Some(s.submission));
            }
            Some(Speculative { input: Some(id), .. }) => {
                (first, last) = (1, Some(self.submit(Some(&[id]), pos0, LogitsFor::Last, Some(0)).await?));
            }
            _ => {}
        }
        for s in first..count {
            last = Some(self.submit(None, pos0 + s, LogitsFor::Last, Some(s as u32)).await?);
        }
        self.advance_recurrent(pos0 + count, false);
        self.read_ids(count, pos0 + count - 1, last).await
    }

    /// Measure each kernel's GPU time with timestamp queries from now on (when the device has them;
    /// returns whether it does). Every dispatch then gets its own compute pass.
    pub async fn set_profiling(&mut self, on: bool) -> Result<bool> {
        if !on || !self.m.gpu.timestamps {
            self.profiler = None;
            return Ok(false);
        }
        let capacity = profile_capacity(self.forward_ops());
        let gpu = &self.m.gpu;
        let queries = gpu
            .guarded("timestamp queries", GpuFault::Limits, || {
                gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: (2 * capacity) as u32,
                })
            })
            .await?;
        use wgpu::BufferUsages as U;
        let bytes = (16 * capacity) as u64;
        let resolve = gpu.buffer("timestamps", bytes, U::QUERY_RESOLVE | U::COPY_SRC).await?;
        let staging = gpu.buffer("timestamps staging", bytes, U::MAP_READ | U::COPY_DST).await?;
        self.profiler = Some(Profiler { queries, resolve, staging, capacity, totals: HashMap::new() });
        Ok(true)
    }

    /// GPU time per kernel kind since profiling was switched on (or last taken), largest first.
    pub fn take_profile(&mut self) -> Vec<KernelTime> {
        let Some(p) = self.profiler.as_mut() else { return Vec::new() };
        let mut v: Vec<KernelTime> =
            p.totals.drain().map(|(label, (dispatches, ms))| KernelTime { label, dispatches, ms }).collect();
        v.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        v
    }

    /// The staging buffer the ids of a call whose last position is `pos` go through: by its parity,
    /// so that the next step, submitted before they are read, copies its own to the other.
    fn ids_staging(&self, pos: usize) -> &wgpu::Buffer {
        &self.b.ids_staging[pos % 2]
    }

    /// The first `count` ids, as the call whose last position is `pos` copied them (after its
    /// `submission`, later ones running on).
    async fn read_ids(&self, count: usize, pos: usize, submission: Option<wgpu::SubmissionIndex>) -> Result<Vec<u32>> {
        let staging = self.ids_staging(pos);
        let ids = |bytes: &[u8]| bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        self.m.gpu.read_after(submission, staging, (count * 4) as u64, ids).await
    }

    /// One forward call as one submission: `tokens` (or, with `None`, the one token the last
    /// argmax left in the tokens buffer) at `pos0..`; the rows of logits `logits` names copied for
    /// reading, or their argmax stored at `argmax_slot` of the ids.
    async fn submit(
        &mut self,
        tokens: Option<&[u32]>,
        pos0: usize,
        logits: LogitsFor,
        argmax_slot: Option<u32>,
    ) -> Result<wgpu::SubmissionIndex> {
        let t0 = crate::clock::now_ms();
        let gpu = &self.m.gpu;
        gpu.check()?;
        let n = tokens.map_or(1, <[u32]>::len);
        debug_assert!(n <= self.n_batch && pos0 + n <= self.n_ctx);
        if let Some(t) = tokens {
            self.token_bytes.clear();
            self.token_bytes.extend(t.iter().flat_map(|id| id.to_le_bytes()));
            gpu.queue.write_buffer(&self.b.tokens, 0, &self.token_bytes);
        }
        let call = self.call_params(n, pos0, logits, argmax_slot);
        gpu.queue.write_buffer(&self.b.call, 0, bytemuck::bytes_of(&call));

        let ahead = self.next_step.take();
        let mut profiled = Vec::new();
        let submission = match self.profiler.as_ref() {
            None if n == 1 => {
                let commands = match ahead {
                    Some(e)
                        if (e.pos0, e.logits, e.argmax_slot) == (pos0, logits, argmax_slot) && e.set == self.built =>
                    {
                        e.commands
                    }
                    _ => self.encode_step(&call, logits, argmax_slot),
                };
                gpu.queue.submit([commands])
            }
            None => {
                // A multi-token call in parts: the GPU starts on the first while the rest are encoded.
                let mut enc = self.encoder();
                let mut ops = self.call_ops(n, logits, argmax_slot).peekable();
                loop {
                    {
                        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some("forward"),
                            timestamp_writes: None,
                        });
                        for op in ops.by_ref().take(SUBMIT_OPS) {
                            dispatch(&mut pass, op, &call);
                        }
                    }
                    if ops.peek().is_none() {
                        break;
                    }
                    gpu.queue.submit([std::mem::replace(&mut enc, self.encoder()).finish()]);
                }
                self.copy_out(&mut enc, &call, logits, argmax_slot);
                gpu.queue.submit([enc.finish()])
            }
            Some(p) => {
                let mut enc = self.encoder();
                for (i, op) in self.call_ops(n, logits, argmax_slot).enumerate().take(p.capacity) {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(op.label),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &p.queries,
                            beginning_of_pass_write_index: Some(2 * i as u32),
                            end_of_pass_write_index: Some(2 * i as u32 + 1),
                        }),
                    });
                    dispatch(&mut pass, op, &call);
                    profiled.push(op.label);
                }
                let q = 2 * profiled.len() as u32;
                enc.resolve_query_set(&p.queries, 0..q, &p.resolve, 0);
                enc.copy_buffer_to_buffer(&p.resolve, 0, &p.staging, 0, 8 * q as u64);
                self.copy_out(&mut enc, &call, logits, argmax_slot);
                gpu.queue.submit([enc.finish()])
            }
        };
        self.cpu_submit_ms += crate::clock::now_ms() - t0;
        gpu.check()?;
        if let Some(p) = self.profiler.as_mut() {
            let period = gpu.queue.get_timestamp_period() as f64;
            let bytes = gpu.read(&p.staging, 16 * profiled.len() as u64).await?;
            let ticks: Vec<u64> =
                bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
            for (label, t) in profiled.iter().zip(ticks.chunks_exact(2)) {
                let e = p.totals.entry(label).or_insert((0, 0.0));
                e.0 += 1;
                e.1 += t[1].saturating_sub(t[0]) as f64 * period / 1e6;
            }
        }
        Ok(submission)
    }

    /// Encode the one-token step at `pos0` for the next call to submit if it is that step (not
    /// under profiling, whose passes are per dispatch; not past the context).
    fn encode_ahead(&mut self, pos0: usize, logits: LogitsFor, argmax_slot: Option<u32>) {
        if self.profiler.is_some() || pos0 >= self.n_ctx {
            return;
        }
        let t0 = crate::clock::now_ms();
        let call = self.call_params(1, pos0, logits, argmax_slot);
        let commands = self.encode_step(&call, logits, argmax_slot);
        let set = self.built.clone();
        self.next_step = Some(EncodedStep { pos0, logits, argmax_slot, set, commands });
        self.cpu_submit_ms += crate::clock::now_ms() - t0;
    }

    fn call_params(&self, n: usize, pos0: usize, logits: LogitsFor, argmax_slot: Option<u32>) -> CallParams {
        let kv_len = pos0 + n;
        let c = &self.m.model.config;
        let (chunk, n_chunks) = attn_decode::chunks(kv_len, c.n_heads);
        let (split_keys, n_splits) = attn_prefill::key_splits(kv_len, self.split_step);
        CallParams {
            n: n as u32,
            pos0: pos0 as u32,
            kv_len: kv_len as u32,
            chunk,
            n_chunks,
            logit_row: if logits == LogitsFor::All { n as u32 - 1 } else { 0 },
            slot: argmax_slot.unwrap_or(0),
            split_keys,
            n_splits,
            ..CallParams::default()
        }
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.m.gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") })
    }

    /// A one-token call's commands, in one compute pass.
    fn encode_step(&self, call: &CallParams, logits: LogitsFor, argmax_slot: Option<u32>) -> wgpu::CommandBuffer {
        let mut enc = self.encoder();
        {
            let mut pass =
                enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
            for op in self.call_ops(1, logits, argmax_slot) {
                dispatch(&mut pass, op, call);
            }
        }
        self.copy_out(&mut enc, call, logits, argmax_slot);
        enc.finish()
    }

    /// The dispatches of a call of `n` tokens, in order.
    fn call_ops(&self, n: usize, logits: LogitsFor, argmax_slot: Option<u32>) -> impl Iterator<Item = &Op> {
        let f = self.forward_ops();
        let layers = if n == 1 { &f.decode_layers } else { &f.prefill_layers };
        let logits_ops: &[Op] = match logits {
            LogitsFor::None => &[],
            LogitsFor::Last => &f.logits_last,
            LogitsFor::All if n == 1 => &f.logits_last,
            LogitsFor::All => &f.logits_all,
        };
        let argmax = argmax_slot.map(|_| std::slice::from_ref(&f.argmax)).unwrap_or(&[]);
        f.embed.iter().chain(layers).chain(logits_ops).chain(argmax)
    }

    /// The copies for reading a call's results back: the ids up to `argmax_slot` (to `ids_staging`),
    /// or its rows of logits.
    fn copy_out(&self, enc: &mut wgpu::CommandEncoder, call: &CallParams, logits: LogitsFor, argmax_slot: Option<u32>) {
        let vocab = self.m.model.config.vocab_size;
        let n = call.n as usize;
        match (logits, argmax_slot) {
            (_, Some(slot)) => {
                // Every id so far (a few bytes): in run-ahead decoding the last step's copy has them all.
                let staging = self.ids_staging(call.kv_len as usize - 1);
                enc.copy_buffer_to_buffer(&self.b.ids, 0, staging, 0, 4 * (slot as u64 + 1));
            }
            (LogitsFor::None, None) => {}
            (l, None) => {
                let rows = if l == LogitsFor::All { n } else { 1 };
                enc.copy_buffer_to_buffer(&self.b.logits, 0, &self.b.logits_staging, 0, (rows * vocab * 4) as u64);
            }
        }
    }
}

/// Most dispatches of one forward call of `f`.
fn profile_capacity(f: &ForwardOps) -> usize {
    1 + f.embed.len() + f.prefill_layers.len().max(f.decode_layers.len()) + f.logits_all.len().max(f.logits_last.len())
}

fn dispatch(pass: &mut wgpu::ComputePass<'_>, op: &Op, call: &CallParams) {
    let [x, y, z] = op.grid.workgroups(call);
    if x == 0 || y == 0 || z == 0 {
        return; // an op with nothing to do in this call (a merge of unsplit attention)
    }
    pass.set_pipeline(&op.pipeline);
    pass.set_bind_group(0, &op.bind, &[]);
    pass.dispatch_workgroups(x, y, z);
}
