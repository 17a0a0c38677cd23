//! A model on the GPU: the device, the weights uploaded once in their GGUF blocks, and the
//! pipelines, compiled on first use and cached.
//!
//! Weights are packed into "arenas": storage buffers of at most one binding's size, filled in the
//! order the forward pass reads them, so a layer's q/k/v (and gate/up) usually share an arena and
//! one dispatch. A matrix larger than an arena is split by rows into several. `upload.rs` plans them and
//! fills them from the file's bytes as they pass (a whole file's pieces here, a stream in `stream.rs`).
//!
//! Qwen3.5's query projection (per head its queries, then the attention output's gate) is placed as two matrices,
//! the queries and the gates (`upload::MadeKind::AlternateRuns`), so that q/k/v keep the rows every kernel reads; its delta-net
//! layers' small f32 tensors (convolution taps, `dt_bias`, `a`, the output norm) go up as one buffer per layer.
//!
//! A mixture of experts (qwen3moe) runs dense on the GPU: every expert's gate and up rows on every token (the stacked
//! tensors as they are), each expert's hidden values scaled by the token's routing weight (0 for the experts it did
//! not choose; `ops/route.rs`), and one down product over the experts' down matrices laid side by side
//! (`upload::MadeKind::SideBySide`), which sums the chosen experts' outputs by their weights. It computes all the experts
//! where the CPU computes the chosen ones: exact, and `count / used` times the work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::Gpu;
use super::ops::{self, Kernel, Shape};
use super::upload::{self, Placed, PlacedLayer, WeightUpload};
use super::{gpu_error, AdapterSummary, GpuOptions};
use crate::error::{Error, GpuFault, Result};
use crate::model::config::Config;
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
    /// The query and key heads' norms concatenated (qwen3, gemma3), and the value heads' (gemma4).
    pub qk_norm: Option<wgpu::Buffer>,
    /// The heads `qk_norm` norms in each qkv row: the query heads, the key heads, the value heads as far as it has
    /// norms for them (a layer that reads another's keys and values norms its queries only).
    pub normed_heads: usize,
    /// The norms of the attention block's and the feed-forward block's outputs (gemma3).
    pub post_attn_norm: Option<wgpu::Buffer>,
    pub post_ffn_norm: Option<wgpu::Buffer>,
    /// Qwen3.5's attention output gate ([q_dim × d_model]): the second half of each head's rows of `attn_q`, whose
    /// first halves are `wq`.
    pub attn_gate: Option<MatLoc>,
    /// Qwen3.5's delta-net block, in attention's place (`wq`..`wo` are then empty).
    pub delta: Option<DeltaLocs>,
    /// Gemma 4's per-layer input block.
    pub per_layer: Option<PerLayerLocs>,
    /// What the residual stream is multiplied by after the layer (Gemma 4's `layer_output_scale`; 1 elsewhere).
    pub out_scale: f32,
}

/// Gemma 4's per-layer input block of a layer (`model::weights::PerLayerBlock`).
pub(crate) struct PerLayerLocs {
    /// [width × d_model]
    pub inp_gate: MatLoc,
    /// [d_model × width]
    pub proj: MatLoc,
    pub post_norm: wgpu::Buffer,
}

/// Gemma 4's per-layer embedding (`model::weights::PerLayerEmbedding`).
pub(crate) struct PerLayerEmbedding {
    /// [vocab × n_layers·width]
    pub token_embd: MatLoc,
    /// [n_layers·width × d_model]
    pub model_proj: MatLoc,
    pub proj_norm: wgpu::Buffer,
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
    pub(crate) per_layer: Option<PerLayerEmbedding>,
    pub(crate) output: MatLoc,
    pub(crate) layers: Vec<LayerLocs>,
    pub(crate) output_norm: wgpu::Buffer,
    /// By kernel and the shape of the layer it runs in (its header).
    pipelines: Mutex<HashMap<(Kernel, Shape), Arc<wgpu::ComputePipeline>>>,
}

impl GpuModel {
    /// Open a device and upload `model`'s weights. Errors: no adapter, limits too small, a tensor
    /// type or shape the kernels do not handle, out of memory.
    pub async fn new(model: Arc<Model>, opts: &GpuOptions) -> Result<GpuModel> {
        check_supported(&model.config)?;
        if !model.file().is_whole() {
            return Err(Error::Model("this model's matrices are not in memory: it was streamed to a GPU".into()));
        }
        let gpu = Gpu::new(opts).await?;
        let (plan, placed) = upload::plan(&model.weights, &model.config, gpu.max_binding)?;
        let mut upload = WeightUpload::new(gpu, plan).await?;
        let file = model.file();
        for piece in file.chunks(0..file.len()) {
            upload.push(piece)?;
        }
        GpuModel::uploaded(model, upload, placed).await
    }

    /// The model whose matrices `upload` has written where `placed` says; its vectors (norms, biases) go up here.
    pub(crate) async fn uploaded(model: Arc<Model>, upload: WeightUpload, placed: Placed) -> Result<GpuModel> {
        let (gpu, arenas) = upload.finish()?;
        let w = &model.weights;
        let Placed { token_embd, per_layer, output, layers: placed } = placed;
        let storage = wgpu::BufferUsages::STORAGE;
        let vector = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut layers = Vec::with_capacity(w.layers.len());
        for (l, (lw, p)) in w.layers.iter().zip(placed).enumerate() {
            let PlacedLayer { wq, wk, wv, wo, w_gate, w_up, w_down, router, attn_gate, delta, per_layer } = p;
            let qkv_bias = match (&lw.bq, &lw.bk, &lw.bv) {
                (None, None, None) => None,
                (bq, bk, bv) => {
                    let c = &model.config;
                    let or_zero = |b: &Option<Vec<f32>>, n: usize| b.clone().unwrap_or_else(|| vec![0.0; n]);
                    let all = [or_zero(bq, c.q_dim()), or_zero(bk, c.kv_dim()), or_zero(bv, c.kv_dim())].concat();
                    Some(gpu.buffer_with("qkv bias", &vector(&all), wgpu::BufferUsages::STORAGE).await?)
                }
            };
            let c = &model.config;
            let heads =
                [(&lw.q_norm, c.n_heads), (&lw.k_norm, c.layer_n_kv_heads(l)), (&lw.v_norm, c.layer_n_kv_heads(l))];
            // The norms in the order of the heads in a qkv row, as far as the layer has them (a value norm only
            // with a key norm), and of its queries only where it reads another layer's keys and values.
            let rows = if c.layer_stores_kv(l) { 3 } else { 1 };
            let normed: Vec<_> = heads[..rows].iter().map_while(|(norm, n)| norm.as_ref().map(|w| (w, n))).collect();
            let normed_heads = normed.iter().map(|(_, &n)| n).sum();
            let qk_norm = match normed.is_empty() {
                true => None,
                false => {
                    let all: Vec<f32> = normed.iter().flat_map(|(w, _)| w.iter().copied()).collect();
                    Some(gpu.buffer_with("qk norm", &vector(&all), storage).await?)
                }
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
            let per_layer = match (per_layer, &lw.per_layer) {
                (Some((inp_gate, proj)), Some(block)) => {
                    let post_norm = gpu.buffer_with("per-layer post_norm", &vector(&block.post_norm), storage).await?;
                    Some(PerLayerLocs { inp_gate, proj, post_norm })
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
                normed_heads,
                post_attn_norm,
                post_ffn_norm,
                attn_gate,
                delta,
                per_layer,
                out_scale: lw.out_scale.unwrap_or(1.0),
            });
        }
        let per_layer = match (per_layer, &w.per_layer) {
            (Some((token_embd, model_proj)), Some(pl)) => {
                let proj_norm = gpu.buffer_with("per_layer_proj_norm", &vector(&pl.proj_norm), storage).await?;
                Some(PerLayerEmbedding { token_embd, model_proj, proj_norm })
            }
            _ => None,
        };
        let output_norm = gpu.buffer_with("output_norm", &vector(&w.output_norm), wgpu::BufferUsages::STORAGE).await?;
        Ok(GpuModel {
            gpu,
            model,
            arenas,
            token_embd,
            per_layer,
            output,
            layers,
            output_norm,
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

    /// The pipeline of `kernel` in a layer of `shape`, compiled on first use.
    pub(crate) async fn pipeline(&self, kernel: Kernel, shape: Shape) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).get(&(kernel, shape)) {
            return Ok(p.clone());
        }
        let src = kernel.source(&ops::shape_header(&self.model.config, &shape), self.gpu.subgroups);
        let pipeline = self.gpu.pipeline(&format!("{kernel:?}"), src).await?;
        let pipeline = Arc::new(pipeline);
        self.pipelines.lock().unwrap_or_else(|p| p.into_inner()).insert((kernel, shape), pipeline.clone());
        Ok(pipeline)
    }
}

/// The widest attention head the kernels take: decode attention's workgroup rotates a head's query in its 128
/// invocations, four dimensions each, and a member of prefill attention's query teams holds at most eight chunks
/// of four dimensions (`attn_prefill::Tile`: teams of 16 past 256 dimensions, of 8 where a head's width is a
/// multiple of 32, of 4 otherwise, so those heads go up to 128).
const MAX_HEAD_DIM: usize = 512;

/// What the kernels assume about the model; anything else stays on the CPU.
pub(crate) fn check_supported(c: &Config) -> Result<()> {
    let unsupported = |m: String| Err(gpu_error(GpuFault::Unsupported, m));
    for l in 0..c.n_layers {
        let hd = c.layer_head_dim(l);
        let multiple = match hd {
            0..=128 => 16,
            129..=256 => 32,
            _ => 64,
        };
        if !hd.is_multiple_of(multiple) || hd > MAX_HEAD_DIM {
            return unsupported(format!(
                "head size {hd} (the GPU kernels take multiples of 16 up to 128, of 32 up to 256 and of 64 up to \
                 {MAX_HEAD_DIM})"
            ));
        }
        if !c.layer_ffn_dim(l).is_multiple_of(32) {
            return unsupported(format!("a feed-forward width of {} is not a multiple of 32", c.layer_ffn_dim(l)));
        }
        // A Gemma 4 layer that reads another's keys and values (the layer of the cache layer of the same index)
        // reads them as its own heads.
        let source = c.kv_layer(l);
        let shape = |l| (c.layer_head_dim(l), c.layer_n_kv_heads(l));
        if c.layer_shapes.is_some() && !c.layer_stores_kv(l) && shape(l) != shape(source) {
            return unsupported(format!("layer {l} reads the keys and values of layer {source}, of another shape"));
        }
    }
    // The decoders the forward pass knows (`forward.rs`); an encoder has no decoder weights to run.
    if !c.arch.is_decoder() {
        return unsupported(format!("architecture {} has no GPU forward pass", c.arch.name()));
    }
    if !c.per_layer_input().is_multiple_of(8) {
        return unsupported(format!("per-layer inputs {} wide (the GPU takes multiples of 8)", c.per_layer_input()));
    }
    if let Some(dn) = &c.delta_net {
        let s = &dn.shape;
        let head_ok = s.head_dim <= ops::delta_net::MAX_HEAD_DIM && s.head_dim.is_power_of_two();
        if !head_ok || s.conv_kernel > ops::delta_net::MAX_TAPS {
            return unsupported(format!(
                "delta-net heads of {} and convolutions of {} taps (the GPU kernels take powers of two up to {} and {})",
                s.head_dim,
                s.conv_kernel,
                ops::delta_net::MAX_HEAD_DIM,
                ops::delta_net::MAX_TAPS
            ));
        }
    }
    if !c.d_model.is_multiple_of(32) {
        return unsupported(format!("a width of {} is not a multiple of 32", c.d_model));
    }
    Ok(())
}
