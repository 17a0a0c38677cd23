//! One conversation on the GPU: the KV cache and activation buffers, allocated once, and the
//! list of dispatches of a forward pass, with their bind groups built once. A forward call
//! writes the token ids and a 32-byte step uniform, encodes the prebuilt dispatches and submits
//! them: a decode step at once, a prefill call in parts of `SUBMIT_OPS` (the GPU starts on the
//! first while the CPU encodes the rest).
//!
//! Decode (one token) uses matrix-vector kernels with RMSNorm, the attention merge, the residual
//! add and SwiGLU fused in, and attention with RoPE and the KV store fused in: 5 dispatches per
//! layer. Prefill uses tiled matrix-matrix kernels (split over the columns, with a reduce op, when a
//! short batch gives too few tiles to fill the GPU) and separate small kernels.

use std::collections::HashMap;
use std::sync::Arc;

use super::gpu_error;
use super::model::{GpuModel, MatLoc};
use super::shaders::{self, Input, Kernel, OutMode};
use crate::error::{GpuFault, Result};
use crate::evaluator::{check_eval, Want};
use crate::model::forward::{batches, LogitsFor as Head};

/// Decode attention splits the cache into chunks of a multiple of this many keys, one workgroup
/// each: the keys attn_decode.wgsl takes per block (a smaller chunk would leave invocations idle
/// and finish no sooner, and give the merge more chunks to sum).
const CHUNK_STEP: usize = 128;
/// Most column splits of a prefill matmul (see `split_count`).
const MAX_SPLITS: usize = 4;
/// Greedy steps that can run ahead of the CPU before their ids are read back.
pub const MAX_RUN_AHEAD: usize = 1024;
/// Dispatches per submission of a multi-token call: the GPU starts on the first part while the
/// CPU encodes the rest (a decode step, one token, is one submission).
const SUBMIT_OPS: usize = 64;
/// Bytes between the parameter blocks of consecutive ops (the uniform offset alignment).
const PARAM_SLOT: u64 = 256;

/// GPU time of one kernel kind over the profiled calls.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub label: &'static str,
    pub dispatches: usize,
    pub ms: f64,
}

/// How many workgroups an op dispatches, given the call's token count.
#[derive(Clone, Copy, Debug)]
enum Grid {
    Fixed([u32; 3]),
    /// `x` by one row per token.
    PerToken(u32),
    /// One workgroup per token.
    Tokens,
    /// Matmul tiles of `shaders::MATMUL_TILE` rows by tokens, by column splits.
    Tiles {
        rows: u32,
        splits: u32,
    },
    /// One workgroup per head and key chunk.
    AttnDecode {
        heads: u32,
    },
    /// One workgroup per head and block of `bq` queries.
    AttnPrefill {
        heads: u32,
        bq: u32,
    },
}

struct Op {
    label: &'static str,
    pipeline: Arc<wgpu::ComputePipeline>,
    bind: wgpu::BindGroup,
    grid: Grid,
}

/// The step uniform (common.wgsl `Step`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Step {
    pub n: u32,
    pub pos0: u32,
    pub kv_len: u32,
    pub chunk: u32,
    pub n_chunks: u32,
    pub logit_row: u32,
    pub slot: u32,
}

impl Step {
    pub(crate) fn bytes(&self) -> [u8; 32] {
        let words = [self.n, self.pos0, self.kv_len, self.chunk, self.n_chunks, self.logit_row, self.slot, 0];
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(words) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// The buffers of a session.
struct Buffers {
    step: wgpu::Buffer,
    params: wgpu::Buffer,
    tokens: wgpu::Buffer,
    x: wgpu::Buffer,
    xb: wgpu::Buffer,
    qkv: wgpu::Buffer,
    q_rot: wgpu::Buffer,
    att: wgpu::Buffer,
    part: wgpu::Buffer,
    /// Partial products of split matmuls.
    split: wgpu::Buffer,
    gu: wgpu::Buffer,
    h: wgpu::Buffer,
    logits: wgpu::Buffer,
    /// The best (value, id) of each output-head matvec workgroup, for argmax.
    best: wgpu::Buffer,
    ids: wgpu::Buffer,
    rope: wgpu::Buffer,
    kv: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    logits_staging: wgpu::Buffer,
    ids_staging: wgpu::Buffer,
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
    embed: Vec<Op>,
    decode_layers: Vec<Op>,
    prefill_layers: Vec<Op>,
    head_last: Vec<Op>,
    head_all: Vec<Op>,
    argmax: Op,
    profiler: Option<Profiler>,
    kv_bytes: usize,
    /// CPU time spent writing, encoding and submitting forward calls (ms), for benchmarks.
    cpu_submit_ms: f64,
    /// The token ids of a call as bytes (kept: decoding allocates nothing per token).
    token_bytes: Vec<u8>,
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

        let rope = rope_table(&c, n_ctx);
        let kv_layer = (n_ctx * c.kv_dim() * 2) as u64;
        let mut kv = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            kv.push((
                gpu.buffer("k cache", kv_layer, U::STORAGE).await?,
                gpu.buffer("v cache", kv_layer, U::STORAGE).await?,
            ));
        }
        let qkv_dim = c.q_dim() + 2 * c.kv_dim();
        let b = Buffers {
            step: gpu.buffer("step", 32, U::UNIFORM | U::COPY_DST).await?,
            params: gpu.buffer("params", PARAM_SLOT * 2048, U::UNIFORM | U::COPY_DST).await?,
            tokens: gpu.buffer("tokens", f32s(nb), storage).await?,
            x: gpu.buffer("x", f32s(nb * c.d_model), storage).await?,
            xb: gpu.buffer("xb", f32s(nb * c.d_model), storage).await?,
            qkv: gpu.buffer("qkv", f32s(nb * qkv_dim), storage).await?,
            q_rot: gpu.buffer("q_rot", f32s(nb * c.q_dim()), storage).await?,
            att: gpu.buffer("att", f32s(nb * c.q_dim()), storage).await?,
            part: gpu
                .buffer("attention partials", f32s(shaders::attn_partials_len(c.n_heads, c.head_dim)), storage)
                .await?,
            split: {
                let rows = qkv_dim.max(2 * c.ffn_dim).max(c.d_model);
                gpu.buffer("split partials", f32s(MAX_SPLITS * nb * rows).min(gpu.max_binding), storage).await?
            },
            gu: gpu.buffer("gate_up", f32s(nb * 2 * c.ffn_dim), storage).await?,
            h: gpu.buffer("ffn hidden", f32s(nb * c.ffn_dim), storage).await?,
            logits: gpu.buffer("logits", f32s(logit_rows * c.vocab_size), storage).await?,
            best: gpu
                .buffer(
                    "best rows",
                    f32s(2 * c.vocab_size.div_ceil(shaders::matvec_rows(c.vocab_size) as usize)),
                    storage,
                )
                .await?,
            ids: gpu.buffer("ids", f32s(MAX_RUN_AHEAD), storage).await?,
            rope: gpu.buffer_with("rope", &rope, U::STORAGE).await?,
            kv,
            logits_staging: gpu
                .buffer("logits staging", f32s(logit_rows * c.vocab_size), U::MAP_READ | U::COPY_DST)
                .await?,
            ids_staging: gpu.buffer("ids staging", f32s(MAX_RUN_AHEAD), U::MAP_READ | U::COPY_DST).await?,
        };

        let mut builder = Builder { m: &m, b: &b, n_batch: nb, params: Vec::new(), pending_add: None, argmax_per: 1 };
        let embed = builder.embed().await?;
        let mut decode_layers = Vec::new();
        let mut prefill_layers = Vec::new();
        for l in 0..c.n_layers {
            decode_layers.extend(builder.decode_layer(l).await?);
            prefill_layers.extend(builder.prefill_layer(l).await?);
        }
        let head_last = builder.head_last().await?;
        let head_all = builder.head_all().await?;
        let argmax = builder.argmax().await?;
        let params = std::mem::take(&mut builder.params);
        if params.len() as u64 > b.params.size() {
            return Err(gpu_error(GpuFault::Limits, "too many ops for the parameter buffer"));
        }
        gpu.queue.write_buffer(&b.params, 0, &params);
        gpu.check()?;
        let kv_bytes = 2 * c.n_layers * kv_layer as usize;
        Ok(GpuSession {
            m,
            n_ctx,
            n_batch,
            logit_rows,
            b,
            embed,
            decode_layers,
            prefill_layers,
            head_last,
            head_all,
            argmax,
            profiler: None,
            kv_bytes,
            cpu_submit_ms: 0.0,
            token_bytes: Vec::with_capacity(4 * n_batch),
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

    /// Dispatches of one greedy decode step (embedding to sampled id).
    pub fn dispatches_per_token(&self) -> usize {
        self.embed.len() + self.decode_layers.len() + self.head_last.len() + 1
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
        let vocab = self.m.model.config.vocab_size;
        let (per_call, rows) = match want {
            Want::Nothing => (self.n_batch, Head::None),
            Want::Last | Want::Argmax => (self.n_batch, Head::Last),
            Want::All => (self.n_batch.min(self.logit_rows), Head::All),
        };
        for (range, head) in batches(tokens.len(), per_call, rows) {
            let argmax_slot = (want == Want::Argmax && head == Head::Last).then_some(0);
            let n = range.len();
            self.submit(Some(&tokens[range.clone()]), pos0 + range.start, head, argmax_slot).await?;
            if head != Head::None && argmax_slot.is_none() {
                let rows = if head == Head::All { n } else { 1 };
                let bytes = self.m.gpu.read(&self.b.logits_staging, (rows * vocab * 4) as u64).await?;
                out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            }
        }
        Ok(match want {
            Want::Argmax => Some(self.read_ids(1).await?[0]),
            _ => None,
        })
    }

    /// Greedy decoding without a round trip per token: feed the id of the last `eval_argmax` (or
    /// decode step) back at positions `pos0..pos0 + count`, submitting every step before reading
    /// the `count` sampled ids back at once. The caller handles end-of-generation tokens (the
    /// steps after one are wasted, not wrong: later calls overwrite their cache positions).
    pub async fn decode_greedy(&mut self, pos0: usize, count: usize) -> Result<Vec<u32>> {
        if count == 0 || count > MAX_RUN_AHEAD || pos0 + count > self.n_ctx {
            return Err(crate::Error::InvalidArgument(format!(
                "decode_greedy of {count} tokens at {pos0} (at most {MAX_RUN_AHEAD}, context {})",
                self.n_ctx
            )));
        }
        for s in 0..count {
            self.submit(None, pos0 + s, Head::Last, Some(s as u32)).await?;
        }
        self.read_ids(count).await
    }

    /// Measure each kernel's GPU time with timestamp queries from now on (when the device has them;
    /// returns whether it does). Every dispatch then gets its own compute pass.
    pub async fn set_profiling(&mut self, on: bool) -> Result<bool> {
        if !on || !self.m.gpu.timestamps {
            self.profiler = None;
            return Ok(false);
        }
        let capacity = 1
            + self.embed.len()
            + self.prefill_layers.len().max(self.decode_layers.len())
            + self.head_all.len().max(self.head_last.len());
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

    async fn read_ids(&self, count: usize) -> Result<Vec<u32>> {
        let bytes = self.m.gpu.read(&self.b.ids_staging, (count * 4) as u64).await?;
        Ok(bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// One forward call as one submission: `tokens` (or, with `None`, the one token the last
    /// argmax left in the tokens buffer) at `pos0..`; the head's logits copied for reading, or
    /// their argmax stored at `argmax_slot` of the ids.
    async fn submit(
        &mut self,
        tokens: Option<&[u32]>,
        pos0: usize,
        head: Head,
        argmax_slot: Option<u32>,
    ) -> Result<()> {
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
        let kv_len = pos0 + n;
        let max_chunks = shaders::max_chunks(self.m.model.config.n_heads);
        let chunk = CHUNK_STEP * kv_len.div_ceil(CHUNK_STEP * max_chunks).max(1);
        let step = Step {
            n: n as u32,
            pos0: pos0 as u32,
            kv_len: kv_len as u32,
            chunk: chunk as u32,
            n_chunks: kv_len.div_ceil(chunk) as u32,
            logit_row: if head == Head::All { n as u32 - 1 } else { 0 },
            slot: argmax_slot.unwrap_or(0),
        };
        gpu.queue.write_buffer(&self.b.step, 0, &step.bytes());

        let layers = if n == 1 { &self.decode_layers } else { &self.prefill_layers };
        let head_ops: &[Op] = match head {
            Head::None => &[],
            Head::Last => &self.head_last,
            Head::All if n == 1 => &self.head_last,
            Head::All => &self.head_all,
        };
        let argmax = argmax_slot.map(|_| std::slice::from_ref(&self.argmax)).unwrap_or(&[]);
        let ops = self.embed.iter().chain(layers).chain(head_ops).chain(argmax);

        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        let mut profiled = Vec::new();
        match self.profiler.as_ref() {
            None => {
                let per_submit = if n > 1 { SUBMIT_OPS } else { usize::MAX };
                let mut ops = ops.peekable();
                loop {
                    {
                        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some("forward"),
                            timestamp_writes: None,
                        });
                        for op in ops.by_ref().take(per_submit) {
                            dispatch(&mut pass, op, &step);
                        }
                    }
                    if ops.peek().is_none() {
                        break;
                    }
                    let part = std::mem::replace(
                        &mut enc,
                        gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") }),
                    );
                    gpu.queue.submit([part.finish()]);
                }
            }
            Some(p) => {
                for (i, op) in ops.enumerate().take(p.capacity) {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(op.label),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: &p.queries,
                            beginning_of_pass_write_index: Some(2 * i as u32),
                            end_of_pass_write_index: Some(2 * i as u32 + 1),
                        }),
                    });
                    dispatch(&mut pass, op, &step);
                    profiled.push(op.label);
                }
                let q = 2 * profiled.len() as u32;
                enc.resolve_query_set(&p.queries, 0..q, &p.resolve, 0);
                enc.copy_buffer_to_buffer(&p.resolve, 0, &p.staging, 0, 8 * q as u64);
            }
        }
        let vocab = self.m.model.config.vocab_size;
        match (head, argmax_slot) {
            (_, Some(slot)) => {
                // Every id so far (a few bytes): in run-ahead decoding the last step's copy has them all.
                enc.copy_buffer_to_buffer(&self.b.ids, 0, &self.b.ids_staging, 0, 4 * (slot as u64 + 1));
            }
            (Head::None, None) => {}
            (h, None) => {
                let rows = if h == Head::All { n } else { 1 };
                enc.copy_buffer_to_buffer(&self.b.logits, 0, &self.b.logits_staging, 0, (rows * vocab * 4) as u64);
            }
        }
        gpu.queue.submit([enc.finish()]);
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
        Ok(())
    }
}

fn dispatch(pass: &mut wgpu::ComputePass<'_>, op: &Op, step: &Step) {
    let n = step.n;
    let [x, y, z] = match op.grid {
        Grid::Fixed(g) => g,
        Grid::PerToken(x) => [x, n, 1],
        Grid::Tokens => [n, 1, 1],
        Grid::Tiles { rows, splits } => {
            [rows.div_ceil(shaders::MATMUL_TILE.0), n.div_ceil(shaders::MATMUL_TILE.1), splits]
        }
        Grid::AttnDecode { heads } => [heads, step.n_chunks, 1],
        Grid::AttnPrefill { heads, bq } => [n.div_ceil(bq), heads, 1],
    };
    pass.set_pipeline(&op.pipeline);
    pass.set_bind_group(0, &op.bind, &[]);
    pass.dispatch_workgroups(x, y, z);
}

/// RoPE (cos, sin) per position and rotated pair, exactly as the CPU computes them (kernels/rope.rs):
/// theta starts at the position and is multiplied by `base^(-2/rope_dims)` per pair, in f32.
pub(crate) fn rope_table(c: &crate::model::config::Config, n_ctx: usize) -> Vec<u8> {
    let pairs = c.rope_dims / 2;
    let theta_scale = c.rope_base.powf(-2.0 / c.rope_dims as f32);
    let mut rope = Vec::with_capacity(n_ctx * pairs * 8);
    for pos in 0..n_ctx {
        let mut theta = pos as f32;
        for _ in 0..pairs {
            let (sin, cos) = (theta * c.rope_freq_scale).sin_cos();
            rope.extend(cos.to_le_bytes());
            rope.extend(sin.to_le_bytes());
            theta *= theta_scale;
        }
    }
    rope
}

/// Consecutive matrix rows that one matrix dispatch covers: up to 4 segments of one weight type in
/// one arena, whose outputs are adjacent columns.
struct Group {
    ty: crate::quant::GgmlType,
    arena: usize,
    cols: usize,
    col0: usize,
    rows: usize,
    segs: Vec<(u64, usize)>,
}

/// Split `(matrix, first output column)` pairs into dispatchable groups.
fn groups(mats: &[(&MatLoc, usize)]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for &(m, col0) in mats {
        for ch in &m.chunks {
            let col = col0 + ch.row0;
            match out.last_mut() {
                Some(g)
                    if g.ty == m.ty
                        && g.arena == ch.arena
                        && g.cols == m.cols
                        && g.segs.len() < 4
                        && g.col0 + g.rows == col =>
                {
                    g.segs.push((ch.offset, ch.rows));
                    g.rows += ch.rows;
                }
                _ => out.push(Group {
                    ty: m.ty,
                    arena: ch.arena,
                    cols: m.cols,
                    col0: col,
                    rows: ch.rows,
                    segs: vec![(ch.offset, ch.rows)],
                }),
            }
        }
    }
    out
}

/// The `MatParams` uniform (mat_common.wgsl) of an unsplit op.
pub(crate) fn mat_params(segs: &[(u64, usize)], cols: usize, out_stride: usize, out_col0: usize) -> Vec<u8> {
    mat_params_split(segs, cols, out_stride, out_col0, cols, 1)
}

/// The 64-byte `MatParams` uniform of a matmul split into `splits` runs of `k_len` columns.
pub(crate) fn mat_params_split(
    segs: &[(u64, usize)],
    cols: usize,
    out_stride: usize,
    out_col0: usize,
    k_len: usize,
    splits: usize,
) -> Vec<u8> {
    let mut off = [0u32; 4];
    let mut end = [0u32; 4];
    let mut total = 0;
    for (i, &(o, rows)) in segs.iter().enumerate() {
        off[i] = o as u32;
        total += rows;
        end[i] = total as u32;
    }
    let shape = [cols, out_stride, out_col0, segs.len(), k_len, splits, 0, 0].map(|v| v as u32);
    off.into_iter().chain(end).chain(shape).flat_map(u32::to_le_bytes).collect()
}

/// Column splits for a prefill matmul of `rows` x `cols` (all the rows of the op's matrices, so that
/// a matrix split over several buffers sums in the same order): a short prompt has few tiles, and
/// each walks all the columns serially, so the columns are split until there are about 128
/// workgroups at a 128-token batch (two token tiles), keeping at least 4 column slices per split
/// and the partials of a dispatch's `group_rows` within `capacity` bytes for `n_batch` tokens.
fn split_count(rows: usize, group_rows: usize, cols: usize, n_batch: usize, capacity: u64) -> usize {
    let (tm, _) = shaders::MATMUL_TILE;
    let slices = cols.div_ceil(shaders::MATMUL_TK);
    let mut s = 64usize.div_ceil(rows.div_ceil(tm as usize)).min(slices / 4).clamp(1, MAX_SPLITS);
    while s > 1 && (s * n_batch * group_rows * 4) as u64 > capacity {
        s -= 1;
    }
    s
}

/// Builds a session's ops: pipelines from the model's cache, one bind group each, and their
/// parameter blocks (collected, written to the params buffer at the end).
struct Builder<'a> {
    m: &'a GpuModel,
    b: &'a Buffers,
    n_batch: usize,
    params: Vec<u8>,
    /// Prefill: the column splits of a residual add left in the split buffer for the next RMSNorm
    /// to sum (its reduce dispatch folded into the norm).
    pending_add: Option<u32>,
    /// Logits per argmax candidate: the output head's rows per workgroup when it leaves their
    /// best rows.
    argmax_per: u32,
}

/// Where and how a matrix op writes: `stride` floats between token rows, `mode`, optional bias.
struct MatOut<'b> {
    buf: &'b wgpu::Buffer,
    stride: usize,
    mode: OutMode,
    bias: Option<&'b wgpu::Buffer>,
}

fn to<'b>(buf: &'b wgpu::Buffer, stride: usize, mode: OutMode, bias: Option<&'b wgpu::Buffer>) -> MatOut<'b> {
    MatOut { buf, stride, mode, bias }
}

/// Where a matrix op reads its input.
enum MatIn<'a> {
    /// matvec, RMSNorm of the last row of `x` with this norm weight.
    Norm(&'a wgpu::Buffer, &'a wgpu::Buffer),
    /// matvec, the last row of a buffer.
    Plain(&'a wgpu::Buffer),
    /// matvec, the decode attention partials.
    Attn,
    /// matmul over every token row of a buffer.
    Rows(&'a wgpu::Buffer),
}

impl<'a> Builder<'a> {
    fn add_params(&mut self, bytes: &[u8]) -> wgpu::BindingResource<'a> {
        let offset = self.params.len() as u64;
        self.params.extend_from_slice(bytes);
        self.params.resize((offset + PARAM_SLOT) as usize, 0);
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.b.params,
            offset,
            size: std::num::NonZeroU64::new(bytes.len() as u64),
        })
    }

    async fn op(
        &self,
        label: &'static str,
        kernel: Kernel,
        grid: Grid,
        entries: Vec<(u32, wgpu::BindingResource<'_>)>,
    ) -> Result<Op> {
        let pipeline = self.m.pipeline(kernel).await?;
        let wanted = shaders::bindings(kernel);
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .into_iter()
            .filter(|(b, _)| wanted.contains(b))
            .map(|(binding, resource)| wgpu::BindGroupEntry { binding, resource })
            .collect();
        assert_eq!(entries.len(), wanted.len(), "{label}: bindings {wanted:?}");
        let layout = pipeline.get_bind_group_layout(0);
        let device = &self.m.gpu.device;
        let bind = self
            .m
            .gpu
            .guarded(label, GpuFault::Shader, || {
                device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(label),
                    layout: &layout,
                    entries: &entries,
                })
            })
            .await?;
        Ok(Op { label, pipeline, bind, grid })
    }

    /// Matrix ops computing `mats` (with their output columns) from `input` into `out`.
    async fn mat_ops(
        &mut self,
        label: &'static str,
        mats: &[(&MatLoc, usize)],
        input: MatIn<'_>,
        out: MatOut<'_>,
    ) -> Result<Vec<Op>> {
        let MatOut { buf: out, stride: out_stride, mode, bias } = out;
        let mut ops = Vec::new();
        let rows: usize = mats.iter().flat_map(|(m, _)| &m.chunks).map(|c| c.rows).sum();
        for g in groups(mats) {
            let splits = match input {
                MatIn::Rows(_) => split_count(rows, g.rows, g.cols, self.n_batch, self.b.split.size()),
                _ => 1,
            };
            let tk = shaders::MATMUL_TK;
            let k_len = g.cols.div_ceil(tk).div_ceil(splits) * tk;
            let param_bytes = mat_params_split(&g.segs, g.cols, out_stride, g.col0, k_len, splits);
            let params = self.add_params(&param_bytes);
            let (kernel, grid) = match input {
                MatIn::Rows(_) => {
                    let mode = if splits > 1 { OutMode::Partial } else { mode };
                    let bias = bias.is_some() && splits == 1;
                    (
                        Kernel::Matmul { ty: g.ty, mode, bias },
                        Grid::Tiles { rows: g.rows as u32, splits: splits as u32 },
                    )
                }
                MatIn::Norm(..) | MatIn::Plain(_) | MatIn::Attn => {
                    let input = match input {
                        MatIn::Norm(..) => Input::Norm,
                        MatIn::Plain(_) => Input::Plain,
                        _ => Input::Attn,
                    };
                    let rows = shaders::matvec_rows(g.rows);
                    let cols = g.cols as u32;
                    let kernel = Kernel::Matvec { ty: g.ty, input, mode, bias: bias.is_some(), rows, cols };
                    (kernel, matvec_grid(g.rows, rows))
                }
            };
            let mut entries = self.common(g.arena, params);
            entries.push((3, if splits > 1 { self.b.split.as_entire_binding() } else { out.as_entire_binding() }));
            if let Some(bias) = bias {
                entries.push((4, bias.as_entire_binding()));
            }
            if mode == OutMode::Argmax {
                entries.push((4, self.b.best.as_entire_binding()));
            }
            match input {
                MatIn::Norm(x, w) => entries.extend([(5, x.as_entire_binding()), (6, w.as_entire_binding())]),
                MatIn::Plain(x) | MatIn::Rows(x) => entries.push((5, x.as_entire_binding())),
                MatIn::Attn => entries.push((5, self.b.part.as_entire_binding())),
            }
            ops.push(self.op(label, kernel, grid, entries).await?);
            if splits > 1 {
                let mut entries = vec![
                    (1, self.add_params(&param_bytes)),
                    (2, self.b.step.as_entire_binding()),
                    (3, out.as_entire_binding()),
                    (5, self.b.split.as_entire_binding()),
                ];
                if let Some(bias) = bias {
                    entries.push((4, bias.as_entire_binding()));
                }
                let kernel = Kernel::SplitReduce { mode, bias: bias.is_some() };
                let grid = Grid::PerToken((g.rows as u32).div_ceil(256));
                ops.push(self.op("split_reduce", kernel, grid, entries).await?);
            }
        }
        Ok(ops)
    }

    /// Weights, op parameters and the step uniform (bindings 0, 1, 2).
    fn common(&self, arena: usize, params: wgpu::BindingResource<'a>) -> Vec<(u32, wgpu::BindingResource<'a>)> {
        vec![(0, self.m.arenas[arena].as_entire_binding()), (1, params), (2, self.b.step.as_entire_binding())]
    }

    async fn embed(&mut self) -> Result<Vec<Op>> {
        let e = &self.m.token_embd;
        let mut ops = Vec::new();
        for ch in &e.chunks {
            let words = [ch.offset as u32, ch.row0 as u32, (ch.row0 + ch.rows) as u32, e.cols as u32];
            let params = self.add_params(&words.map(u32::to_le_bytes).concat());
            let mut entries = self.common(ch.arena, params);
            entries.extend([(3, self.b.x.as_entire_binding()), (5, self.b.tokens.as_entire_binding())]);
            let grid = Grid::PerToken((e.cols as u32 / 8).div_ceil(64));
            ops.push(self.op("embed", Kernel::Embed { ty: e.ty }, grid, entries).await?);
        }
        Ok(ops)
    }

    /// The rope/KV-store op of layer `l` (prefill), reading the qkv rows or `splits` partials of
    /// them in the split buffer.
    async fn rope_store(&self, l: usize, splits: u32) -> Result<Op> {
        let c = &self.m.model.config;
        let (k, v) = &self.b.kv[l];
        let entries = vec![
            (2, self.b.step.as_entire_binding()),
            (3, self.b.q_rot.as_entire_binding()),
            (4, k.as_entire_binding()),
            (5, if splits > 1 { &self.b.split } else { &self.b.qkv }.as_entire_binding()),
            (6, self.b.rope.as_entire_binding()),
            (7, v.as_entire_binding()),
        ];
        let pairs = (c.q_dim() / 2 + c.kv_dim()) as u32;
        self.op("rope_store", Kernel::RopeStore { splits }, Grid::PerToken(pairs.div_ceil(64)), entries).await
    }

    /// Prefill attention over the cache (after rope_store), into `att`.
    async fn attn_prefill(&self, l: usize) -> Result<Op> {
        let c = &self.m.model.config;
        let (k, v) = &self.b.kv[l];
        let entries = vec![
            (2, self.b.step.as_entire_binding()),
            (3, self.b.att.as_entire_binding()),
            (5, self.b.q_rot.as_entire_binding()),
            (6, k.as_entire_binding()),
            (7, v.as_entire_binding()),
        ];
        let grid = Grid::AttnPrefill { heads: c.n_heads as u32, bq: shaders::attn_tiles(c.head_dim).0 as u32 };
        self.op("attn_prefill", Kernel::AttnPrefill, grid, entries).await
    }

    /// Decode attention with RoPE and the KV store fused in, into the partials.
    async fn attn_decode(&self, l: usize) -> Result<Op> {
        let (k, v) = &self.b.kv[l];
        let entries = vec![
            (2, self.b.step.as_entire_binding()),
            (3, self.b.part.as_entire_binding()),
            (4, k.as_entire_binding()),
            (5, self.b.qkv.as_entire_binding()),
            (6, self.b.rope.as_entire_binding()),
            (7, v.as_entire_binding()),
        ];
        let heads = self.m.model.config.n_heads as u32;
        self.op("attn_decode", Kernel::AttnDecode, Grid::AttnDecode { heads }, entries).await
    }

    async fn rmsnorm(&self, label: &'static str, norm: &wgpu::Buffer) -> Result<Op> {
        let entries =
            vec![(3, self.b.xb.as_entire_binding()), (5, self.b.x.as_entire_binding()), (6, norm.as_entire_binding())];
        self.op(label, Kernel::RmsNorm, Grid::Tokens, entries).await
    }

    /// Prefill RMSNorm of `x` into `xb`, first adding the residual partials a split matmul left
    /// pending.
    async fn prefill_norm(&mut self, norm: &wgpu::Buffer) -> Result<Op> {
        let Some(splits) = self.pending_add.take() else { return self.rmsnorm("rmsnorm", norm).await };
        let b = self.b;
        let entries = vec![
            (2, b.step.as_entire_binding()),
            (3, b.xb.as_entire_binding()),
            (4, b.x.as_entire_binding()),
            (5, b.split.as_entire_binding()),
            (6, norm.as_entire_binding()),
        ];
        self.op("add_rmsnorm", Kernel::AddRmsNorm { splits }, Grid::Tokens, entries).await
    }

    /// SwiGLU into `h` from gate/up rows in `gu`, or from `splits` partial products there.
    async fn swiglu(&self, gu: &wgpu::Buffer, splits: u32) -> Result<Op> {
        let ff = self.m.model.config.ffn_dim as u32;
        let entries =
            vec![(2, self.b.step.as_entire_binding()), (3, self.b.h.as_entire_binding()), (5, gu.as_entire_binding())];
        self.op("swiglu", Kernel::Swiglu { splits }, Grid::PerToken(ff.div_ceil(256)), entries).await
    }

    async fn decode_layer(&mut self, l: usize) -> Result<Vec<Op>> {
        let m = self.m;
        let b = self.b;
        let c = &m.model.config;
        let lw = &m.layers[l];
        let (qd, kvd, ff, d) = (c.q_dim(), c.kv_dim(), c.ffn_dim, c.d_model);
        let qkv = [(&lw.wq, 0), (&lw.wk, qd), (&lw.wv, qd + kvd)];
        let mut ops = self
            .mat_ops(
                "matvec_qkv",
                &qkv,
                MatIn::Norm(&b.x, &lw.attn_norm),
                to(&b.qkv, qd + 2 * kvd, OutMode::Store, lw.qkv_bias.as_ref()),
            )
            .await?;
        ops.push(self.attn_decode(l).await?);
        ops.extend(self.mat_ops("matvec_wo", &[(&lw.wo, 0)], MatIn::Attn, to(&b.x, d, OutMode::Add, None)).await?);

        // SwiGLU fused into one matvec when gate and up can share a dispatch.
        let (g, u) = (&lw.w_gate, &lw.w_up);
        let pairable =
            g.ty == u.ty && g.chunks.len() == 1 && u.chunks.len() == 1 && g.chunks[0].arena == u.chunks[0].arena;
        if pairable {
            let segs = [(g.chunks[0].offset, ff), (u.chunks[0].offset, ff)];
            let params = self.add_params(&mat_params(&segs, g.cols, ff, 0));
            let mut entries = self.common(g.chunks[0].arena, params);
            entries.extend([
                (3, b.h.as_entire_binding()),
                (5, b.x.as_entire_binding()),
                (6, lw.ffn_norm.as_entire_binding()),
            ]);
            let rows = shaders::matvec_rows(ff);
            let (input, mode, cols) = (Input::Norm, OutMode::Swiglu, g.cols as u32);
            let kernel = Kernel::Matvec { ty: g.ty, input, mode, bias: false, rows, cols };
            ops.push(self.op("matvec_gate_up_swiglu", kernel, matvec_grid(ff, rows), entries).await?);
        } else {
            let gu = [(g, 0), (u, ff)];
            ops.extend(
                self.mat_ops(
                    "matvec_gate_up",
                    &gu,
                    MatIn::Norm(&b.x, &lw.ffn_norm),
                    to(&b.gu, 2 * ff, OutMode::Store, None),
                )
                .await?,
            );
            ops.push(self.swiglu(&b.gu, 1).await?);
        }
        ops.extend(
            self.mat_ops("matvec_down", &[(&lw.w_down, 0)], MatIn::Plain(&b.h), to(&b.x, d, OutMode::Add, None))
                .await?,
        );
        Ok(ops)
    }

    async fn prefill_layer(&mut self, l: usize) -> Result<Vec<Op>> {
        let m = self.m;
        let b = self.b;
        let c = &m.model.config;
        let lw = &m.layers[l];
        let (qd, kvd, ff, d) = (c.q_dim(), c.kv_dim(), c.ffn_dim, c.d_model);
        let mut ops = vec![self.prefill_norm(&lw.attn_norm).await?];
        let qkv = [(&lw.wq, 0), (&lw.wk, qd), (&lw.wv, qd + kvd)];
        let mut qkv_ops = self
            .mat_ops(
                "matmul_qkv",
                &qkv,
                MatIn::Rows(&b.xb),
                to(&b.qkv, qd + 2 * kvd, OutMode::Store, lw.qkv_bias.as_ref()),
            )
            .await?;
        // rope_store sums a split qkv matmul's partials itself (no bias to add).
        let qkv_splits = if lw.qkv_bias.is_none() { take_reduce(&mut qkv_ops) } else { None };
        ops.extend(qkv_ops);
        ops.push(self.rope_store(l, qkv_splits.unwrap_or(1)).await?);
        ops.push(self.attn_prefill(l).await?);
        let mut wo_ops =
            self.mat_ops("matmul_wo", &[(&lw.wo, 0)], MatIn::Rows(&b.att), to(&b.x, d, OutMode::Add, None)).await?;
        self.pending_add = take_reduce(&mut wo_ops);
        ops.extend(wo_ops);
        ops.push(self.prefill_norm(&lw.ffn_norm).await?);
        let gu = [(&lw.w_gate, 0), (&lw.w_up, ff)];
        let mut gu_ops =
            self.mat_ops("matmul_gate_up", &gu, MatIn::Rows(&b.xb), to(&b.gu, 2 * ff, OutMode::Store, None)).await?;
        // One split matmul for gate and up: SwiGLU sums its partials itself (no reduce dispatch).
        let split = take_reduce(&mut gu_ops);
        ops.extend(gu_ops);
        ops.push(match split {
            Some(splits) => self.swiglu(&b.split, splits).await?,
            None => self.swiglu(&b.gu, 1).await?,
        });
        let mut down_ops =
            self.mat_ops("matmul_down", &[(&lw.w_down, 0)], MatIn::Rows(&b.h), to(&b.x, d, OutMode::Add, None)).await?;
        // The next layer's attention norm adds the partials; the last layer's head reads x itself.
        if l + 1 < c.n_layers {
            self.pending_add = take_reduce(&mut down_ops);
        }
        ops.extend(down_ops);
        Ok(ops)
    }

    async fn head_last(&mut self) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let vocab = m.model.config.vocab_size;
        let input = MatIn::Norm(&b.x, &m.output_norm);
        // One dispatch (the head in one buffer): its workgroups leave their best rows for argmax.
        let mode = if m.output.chunks.len() == 1 { OutMode::Argmax } else { OutMode::Store };
        self.argmax_per = if mode == OutMode::Argmax { shaders::matvec_rows(vocab) } else { 1 };
        self.mat_ops("matvec_output", &[(&m.output, 0)], input, to(&b.logits, vocab, mode, None)).await
    }

    async fn head_all(&mut self) -> Result<Vec<Op>> {
        let (m, b) = (self.m, self.b);
        let vocab = m.model.config.vocab_size;
        let mut ops = vec![self.rmsnorm("rmsnorm", &m.output_norm).await?];
        ops.extend(
            self.mat_ops(
                "matmul_output",
                &[(&m.output, 0)],
                MatIn::Rows(&b.xb),
                to(&b.logits, vocab, OutMode::Store, None),
            )
            .await?,
        );
        Ok(ops)
    }

    async fn argmax(&self) -> Result<Op> {
        let entries = vec![
            (2, self.b.step.as_entire_binding()),
            (3, self.b.ids.as_entire_binding()),
            (4, self.b.tokens.as_entire_binding()),
            (5, if self.argmax_per > 1 { &self.b.best } else { &self.b.logits }.as_entire_binding()),
        ];
        let kernel = Kernel::Argmax { per: self.argmax_per };
        self.op("argmax", kernel, Grid::Fixed([1, 1, 1]), entries).await
    }
}

/// Drop the reduce of a single split matmul (`ops` = [matmul, split_reduce]) whose partials the
/// next op sums itself; its split count. (A matrix over several buffers keeps its reduces.)
fn take_reduce(ops: &mut Vec<Op>) -> Option<u32> {
    match ops.as_slice() {
        [Op { grid: Grid::Tiles { splits, .. }, .. }, reduce] if reduce.label == "split_reduce" => {
            let splits = *splits;
            ops.pop();
            Some(splits)
        }
        _ => None,
    }
}

/// Matvec workgroups (`per_wg` rows each), folded into two dimensions past 65535.
fn matvec_grid(rows: usize, per_wg: u32) -> Grid {
    let wgs = rows.div_ceil(per_wg as usize) as u32;
    Grid::Fixed([wgs.min(65535), wgs.div_ceil(65535), 1])
}
