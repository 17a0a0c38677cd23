//! A model on the GPU: the device, the weights uploaded once in their GGUF blocks, and the
//! pipelines, compiled on first use and cached.
//!
//! Weights are packed into "arenas": storage buffers of at most one binding's size, filled in the
//! order the forward pass reads them, so a layer's q/k/v (and gate/up) usually share an arena and
//! one dispatch. A matrix larger than an arena is split by rows into several.
//!
//! Qwen3.5's query projection (per head its queries, then the attention output's gate) is placed as two matrices,
//! the queries and the gates ([`alternate_runs`]), so that q/k/v keep the rows every kernel reads; its delta-net
//! layers' small f32 tensors (convolution taps, `dt_bias`, `a`, the output norm) go up as one buffer per layer.
//!
//! A mixture of experts (qwen3moe) runs dense on the GPU: every expert's gate and up rows on every token (the stacked
//! tensors as they are), each expert's hidden values scaled by the token's routing weight (0 for the experts it did
//! not choose; `ops/route.rs`), and one down product over the experts' down matrices laid side by side
//! ([`experts_side_by_side`]), which sums the chosen experts' outputs by their weights. It computes all the experts
//! where the CPU computes the chosen ones: exact, and `count / used` times the work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::Gpu;
use super::ops::{self, Kernel};
use super::{gpu_error, AdapterSummary, GpuOptions};
use crate::error::{GpuFault, Result};
use crate::gguf::bytes::ModelBytes;
use crate::model::config::Config;
use crate::model::weights::MatrixRef;
use crate::model::Model;
use crate::quant::GgmlType;

/// Rows `row0..row0 + rows` of a matrix, at byte `offset` of arena `arena`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk {
    pub arena: usize,
    pub offset: u64,
    pub row0: usize,
    pub rows: usize,
}

/// Where a weight matrix lives on the GPU.
#[derive(Clone, Debug)]
pub(crate) struct MatLoc {
    pub ty: GgmlType,
    pub cols: usize,
    pub chunks: Vec<Chunk>,
}

pub(crate) struct LayerLocs {
    pub wq: MatLoc,
    pub wk: MatLoc,
    pub wv: MatLoc,
    pub wo: MatLoc,
    pub w_gate: MatLoc,
    pub w_up: MatLoc,
    /// With experts: `w_gate` and `w_up` hold every expert's rows ([n_experts·ffn_dim × d_model]), `w_down` their
    /// down matrices side by side ([d_model × n_experts·ffn_dim]), and this is the router ([n_experts × d_model]).
    pub router: Option<MatLoc>,
    pub w_down: MatLoc,
    pub attn_norm: wgpu::Buffer,
    pub ffn_norm: wgpu::Buffer,
    /// q, k and v biases concatenated (qwen2), like the rows of the fused q/k/v output.
    pub qkv_bias: Option<wgpu::Buffer>,
    /// The query and key heads' norms concatenated (qwen3, gemma3).
    pub qk_norm: Option<wgpu::Buffer>,
    /// The norms of the attention block's and the feed-forward block's outputs (gemma3).
    pub post_attn_norm: Option<wgpu::Buffer>,
    pub post_ffn_norm: Option<wgpu::Buffer>,
    /// Qwen3.5's attention output gate ([q_dim × d_model]): the second half of each head's rows of `attn_q`, whose
    /// first halves are `wq`.
    pub attn_gate: Option<MatLoc>,
    /// Qwen3.5's delta-net block, in attention's place (`wq`..`wo` are then empty).
    pub delta: Option<DeltaLocs>,
}

/// A delta-net layer's weights on the GPU (`model::weights::DeltaNetWeights`).
pub(crate) struct DeltaLocs {
    /// The projections, in the order of a token's row of them (`ops::delta_net::in_stride`): `attn_qkv`,
    /// `attn_gate` (z), `ssm_alpha`, `ssm_beta`.
    pub proj: [MatLoc; 4],
    pub out: MatLoc,
    /// The convolution's taps, `dt_bias`, `a`, the output norm, f32 (`ops::delta_net::params_len`).
    pub params: wgpu::Buffer,
}

pub struct GpuModel {
    pub(crate) gpu: Gpu,
    pub(crate) model: Arc<Model>,
    pub(crate) arenas: Vec<wgpu::Buffer>,
    pub(crate) token_embd: MatLoc,
    pub(crate) output: MatLoc,
    pub(crate) layers: Vec<LayerLocs>,
    pub(crate) output_norm: wgpu::Buffer,
    header: String,
    pipelines: Mutex<HashMap<Kernel, Arc<wgpu::ComputePipeline>>>,
}

impl GpuModel {
    /// Open a device and upload `model`'s weights. Errors: no adapter, limits too small, a tensor
    /// type or shape the kernels do not handle, out of memory.
    pub async fn new(model: Arc<Model>, opts: &GpuOptions) -> Result<GpuModel> {
        check_supported(&model)?;
        let gpu = Gpu::new(opts).await?;
        let w = &model.weights;

        // Plan the arenas: every matrix in the order the forward pass reads them.
        let mut plan = ArenaPlan::new(gpu.max_binding);
        let token_embd = plan.place(&w.token_embd)?;
        let mut placed = Vec::new();
        let file = model.file();
        for lw in &w.layers {
            let mut locs = Vec::with_capacity(7);
            // Qwen3.5's query rows, per head the queries then the gate: placed as two matrices.
            let attn_gate = match model.config.attention_output_gate() && lw.delta_net.is_none() {
                true => {
                    let (queries, gate) = alternate_runs(&lw.wq, model.config.head_dim, file);
                    locs.push(plan.place_made(queries)?);
                    Some(plan.place_made(gate)?)
                }
                false => {
                    locs.push(plan.place(&lw.wq)?);
                    None
                }
            };
            for m in [&lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up] {
                locs.push(plan.place(m)?);
            }
            locs.push(match model.config.experts {
                Some(e) => plan.place_made(experts_side_by_side(&lw.w_down, e.count, file))?,
                None => plan.place(&lw.w_down)?,
            });
            let router = match &lw.router {
                Some(r) => Some(plan.place(r)?),
                None => None,
            };
            let delta = match &lw.delta_net {
                Some(dn) => Some((
                    [plan.place(&dn.qkv)?, plan.place(&dn.gate)?, plan.place(&dn.alpha)?, plan.place(&dn.beta)?],
                    plan.place(&dn.out)?,
                )),
                None => None,
            };
            placed.push((locs, router, attn_gate, delta));
        }
        let tied = w.output.offset == w.token_embd.offset;
        let output = if tied { token_embd.clone() } else { plan.place(&w.output)? };

        // Upload: each arena is filled from the file's bytes (or the rows laid out here) in one write.
        let mut arenas = Vec::with_capacity(plan.sizes.len());
        for (a, &size) in plan.sizes.iter().enumerate() {
            let mut bytes = vec![0u8; size as usize];
            for (source, chunk) in plan.placed.iter().filter(|(_, c)| c.arena == a) {
                let (all, rb) = match source {
                    Source::File(m) => (m.bytes(file), m.row_bytes()),
                    Source::Made(i) => (&plan.made[*i].bytes[..], plan.made[*i].row_bytes),
                };
                let src = &all[chunk.row0 * rb..(chunk.row0 + chunk.rows) * rb];
                bytes[chunk.offset as usize..chunk.offset as usize + src.len()].copy_from_slice(src);
            }
            arenas.push(gpu.buffer_with(&format!("weights {a}"), &bytes, wgpu::BufferUsages::STORAGE).await?);
        }

        let vector = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut layers = Vec::with_capacity(w.layers.len());
        for (lw, (locs, router, attn_gate, delta)) in w.layers.iter().zip(placed) {
            let mut locs = locs.into_iter();
            let mut next = || locs.next().expect("seven matrices were placed per layer");
            let (wq, wk, wv, wo, w_gate, w_up, w_down) = (next(), next(), next(), next(), next(), next(), next());
            let qkv_bias = match (&lw.bq, &lw.bk, &lw.bv) {
                (None, None, None) => None,
                (bq, bk, bv) => {
                    let c = &model.config;
                    let or_zero = |b: &Option<Vec<f32>>, n: usize| b.clone().unwrap_or_else(|| vec![0.0; n]);
                    let all = [or_zero(bq, c.q_dim()), or_zero(bk, c.kv_dim()), or_zero(bv, c.kv_dim())].concat();
                    Some(gpu.buffer_with("qkv bias", &vector(&all), wgpu::BufferUsages::STORAGE).await?)
                }
            };
            let qk_norm = match (&lw.q_norm, &lw.k_norm) {
                (Some(q), Some(k)) => {
                    Some(gpu.buffer_with("qk norm", &vector(&[&q[..], k].concat()), wgpu::BufferUsages::STORAGE).await?)
                }
                _ => None,
            };
            let mut post_norms = Vec::with_capacity(2);
            for (label, norm) in [("post_attn_norm", &lw.post_attn_norm), ("post_ffn_norm", &lw.post_ffn_norm)] {
                post_norms.push(match norm {
                    Some(w) => Some(gpu.buffer_with(label, &vector(w), wgpu::BufferUsages::STORAGE).await?),
                    None => None,
                });
            }
            let post_ffn_norm = post_norms.pop().flatten();
            let post_attn_norm = post_norms.pop().flatten();
            let delta = match (delta, &lw.delta_net) {
                (Some((proj, out)), Some(dn)) => {
                    let params = [&dn.conv[..], &dn.dt_bias, &dn.a, &dn.norm].concat();
                    let shape = model.config.delta_net.as_ref().map(|d| d.shape);
                    debug_assert_eq!(Some(params.len()), shape.map(|s| ops::delta_net::params_len(&s)));
                    let params =
                        gpu.buffer_with("delta-net params", &vector(&params), wgpu::BufferUsages::STORAGE).await?;
                    Some(DeltaLocs { proj, out, params })
                }
                _ => None,
            };
            layers.push(LayerLocs {
                wq,
                wk,
                wv,
                wo,
                w_gate,
                w_up,
                router,
                w_down,
                attn_norm: gpu.buffer_with("attn_norm", &vector(&lw.attn_norm), wgpu::BufferUsages::STORAGE).await?,
                ffn_norm: gpu.buffer_with("ffn_norm", &vector(&lw.ffn_norm), wgpu::BufferUsages::STORAGE).await?,
                qkv_bias,
                qk_norm,
                post_attn_norm,
                post_ffn_norm,
                attn_gate,
                delta,
            });
        }
        let output_norm = gpu.buffer_with("output_norm", &vector(&w.output_norm), wgpu::BufferUsages::STORAGE).await?;
        let header = ops::model_header(&model.config);
        Ok(GpuModel {
            gpu,
            model,
            arenas,
            token_embd,
            output,
            layers,
            output_norm,
            header,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    pub fn adapter(&self) -> &AdapterSummary {
        &self.gpu.summary
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Bytes of weights on the GPU.
    pub fn weight_bytes(&self) -> u64 {
        self.arenas.iter().map(|a| a.size()).sum()
    }

    /// Number of weight arenas (storage buffers holding the matrices).
    pub fn arena_count(&self) -> usize {
        self.arenas.len()
    }

    /// Lose the device on purpose (tests of the CPU fallback).
    pub fn destroy_device(&self) {
        self.gpu.destroy();
    }

    /// The pipeline of `kernel`, compiled on first use.
    pub(crate) async fn pipeline(&self, kernel: Kernel) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).get(&kernel) {
            return Ok(p.clone());
        }
        let src = kernel.source(&self.header, self.gpu.subgroups);
        let pipeline = self.gpu.pipeline(&format!("{kernel:?}"), src).await?;
        let pipeline = Arc::new(pipeline);
        self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).insert(kernel, pipeline.clone());
        Ok(pipeline)
    }
}

/// The widest attention head the kernels take: decode attention's workgroup packs a head's query, new key and
/// new value in its 128 invocations, and a member of prefill attention's query teams holds at most eight
/// chunks of four dimensions (`attn_prefill::Tile`: teams of 8 where a head's width is a multiple of 32, of 4
/// otherwise, so those heads go up to 128).
const MAX_HEAD_DIM: usize = 256;

/// What the kernels assume about the model; anything else stays on the CPU.
fn check_supported(model: &Model) -> Result<()> {
    let c = &model.config;
    let unsupported = |m: String| Err(gpu_error(GpuFault::Unsupported, m));
    let hd = c.head_dim;
    if !hd.is_multiple_of(16) || hd > MAX_HEAD_DIM || (hd > 128 && !hd.is_multiple_of(32)) {
        return unsupported(format!(
            "head size {hd} (the GPU kernels take multiples of 16 up to 128 and of 32 up to {MAX_HEAD_DIM})"
        ));
    }
    // The decoders the forward pass knows (`forward.rs`); an encoder has no decoder weights to run.
    if !c.arch.is_decoder() {
        return unsupported(format!("architecture {} has no GPU forward pass", c.arch.name()));
    }
    if c.layer_shapes.is_some() {
        return unsupported(format!("{}'s layers of different shapes have no GPU forward pass yet", c.arch.name()));
    }
    if let Some(dn) = &c.delta_net {
        let s = &dn.shape;
        if s.head_dim > ops::delta_net::MAX_HEAD_DIM || s.conv_kernel > ops::delta_net::MAX_TAPS {
            return unsupported(format!(
                "delta-net heads of {} and convolutions of {} taps (the GPU kernels take up to {} and {})",
                s.head_dim,
                s.conv_kernel,
                ops::delta_net::MAX_HEAD_DIM,
                ops::delta_net::MAX_TAPS
            ));
        }
    }
    if !c.d_model.is_multiple_of(32) || !c.ffn_dim.is_multiple_of(32) {
        return unsupported(format!("widths {} / {} are not multiples of 32", c.d_model, c.ffn_dim));
    }
    Ok(())
}

/// The width of the feed-forward rows on the GPU: `ffn_dim`, or every expert's together (the dense mixture).
pub(crate) fn ffn_width(c: &Config) -> usize {
    c.ffn_dim * c.experts.map_or(1, |e| e.count)
}

/// A matrix laid out here rather than read from the file in place.
struct MadeMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    bytes: Vec<u8>,
}

/// The `count` experts' down matrices of `w_down` ([count·d_model × ffn_dim], each expert's d_model rows in turn) side
/// by side, [d_model × count·ffn_dim]: row i is each expert's row i, one after another. Each expert's row is whole
/// quantization blocks (a row of a GGUF tensor), so the joined row is a row of the same type.
fn experts_side_by_side(w_down: &MatrixRef, count: usize, file: &ModelBytes) -> MadeMatrix {
    let (d, rb) = (w_down.rows / count, w_down.row_bytes());
    let stacked = w_down.bytes(file);
    let mut bytes = Vec::with_capacity(stacked.len());
    for i in 0..d {
        for e in 0..count {
            bytes.extend_from_slice(&stacked[(e * d + i) * rb..][..rb]);
        }
    }
    MadeMatrix { ty: w_down.ty, rows: d, cols: count * w_down.cols, row_bytes: count * rb, bytes }
}

/// The rows of `w` in runs of `run`, the runs alternately to the first and the second matrix returned (Qwen3.5's
/// `attn_q`: per head its queries, then its gate).
fn alternate_runs(w: &MatrixRef, run: usize, file: &ModelBytes) -> (MadeMatrix, MadeMatrix) {
    let rb = w.row_bytes();
    let mut halves = [Vec::with_capacity(w.rows / 2 * rb), Vec::with_capacity(w.rows / 2 * rb)];
    for (i, rows) in w.bytes(file).chunks(run * rb).enumerate() {
        halves[i % 2].extend_from_slice(rows);
    }
    let [a, b] =
        halves.map(|bytes| MadeMatrix { ty: w.ty, rows: bytes.len() / rb, cols: w.cols, row_bytes: rb, bytes });
    (a, b)
}

/// Where a placed matrix's rows come from.
#[derive(Clone)]
enum Source {
    File(MatrixRef),
    /// `ArenaPlan::made[i]`.
    Made(usize),
}

/// Packing of matrices into arenas of at most `max` bytes (each matrix 4-byte aligned).
struct ArenaPlan {
    max: u64,
    sizes: Vec<u64>,
    placed: Vec<(Source, Chunk)>,
    made: Vec<MadeMatrix>,
}

impl ArenaPlan {
    fn new(max: u64) -> Self {
        ArenaPlan { max, sizes: Vec::new(), placed: Vec::new(), made: Vec::new() }
    }

    fn place(&mut self, m: &MatrixRef) -> Result<MatLoc> {
        self.place_rows(Source::File(*m), m.ty, m.rows, m.cols, m.row_bytes())
    }

    fn place_made(&mut self, m: MadeMatrix) -> Result<MatLoc> {
        debug_assert_eq!(m.ty.row_bytes(m.cols), m.row_bytes);
        let (ty, rows, cols, rb) = (m.ty, m.rows, m.cols, m.row_bytes);
        self.made.push(m);
        self.place_rows(Source::Made(self.made.len() - 1), ty, rows, cols, rb)
    }

    fn place_rows(&mut self, source: Source, ty: GgmlType, n_rows: usize, cols: usize, rb: usize) -> Result<MatLoc> {
        let rb = rb as u64;
        if rb > self.max {
            return Err(gpu_error(
                GpuFault::Limits,
                format!("a weight row of {rb} bytes does not fit in one storage binding of {} bytes", self.max),
            ));
        }
        let rows_per_arena = (self.max / rb) as usize;
        let mut chunks = Vec::new();
        let mut row0 = 0;
        while row0 < n_rows {
            let rows = (n_rows - row0).min(rows_per_arena);
            let bytes = rows as u64 * rb;
            let fits = self.sizes.last().is_some_and(|&used| used + bytes <= self.max);
            if !fits {
                self.sizes.push(0);
            }
            let arena = self.sizes.len() - 1;
            let offset = self.sizes[arena];
            self.sizes[arena] = (offset + bytes).div_ceil(4) * 4;
            let chunk = Chunk { arena, offset, row0, rows };
            self.placed.push((source.clone(), chunk));
            chunks.push(chunk);
            row0 += rows;
        }
        Ok(MatLoc { ty, cols, chunks })
    }
}
