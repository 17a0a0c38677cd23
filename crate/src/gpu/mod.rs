//! The WebGPU backend (cargo feature `gpu`): the same forward pass as [`crate::model::forward`],
//! as WGSL compute shaders (`wgsl/`, beside this module) run through wgpu: Vulkan, Metal or DX12
//! natively, the browser's WebGPU on wasm32.
//!
//! - [`GpuModel`]: the device, the weights uploaded once in their GGUF blocks (packed into a few
//!   storage buffers no larger than one binding; larger tensors are split by rows), and the compiled
//!   pipelines, cached per kernel variant.
//! - [`GpuSession`]: one conversation's buffers, allocated once: the f16 KV cache, activations for
//!   `n_batch` tokens, and every dispatch's bind group. A forward call writes two small buffers and
//!   submits one command buffer; greedy decoding reads back only the sampled id. Rows of the KV cache
//!   go up from and down to a host [`KvCache`] (the prefix cache's pages, saved states) as they are:
//!   the same f16 rows of `kv_dim` per position. LoRA adapters run there too: a session builds the ops
//!   of its adapter set beside the base model's (`ops/lora.rs`).
//! - `ops/`: one file per GPU op (its WGSL pieces, bindings, grid and parameter struct);
//!   `forward.rs` strings them into the forward pass a session runs.
//!
//! The evaluator above (`evaluator.rs`) chooses between this and the CPU with [`Backend`](crate::Backend);
//! [`GpuRunner`] is the narrow interface it uses, and exists (uninhabited) without the feature too.
//!
//! # Design
//!
//! The same forward pass as WGSL shaders through wgpu (Vulkan/Metal/DX12 natively, WebGPU in browsers): weights
//! uploaded once in their GGUF blocks (every tensor type the loader takes has a `wgsl/quant/` reader), pipelines and
//! bind groups built once, an f16 KV cache on the device, one
//! submission per decode step; greedy decoding reads back one id. The runtime and the ops are apart: `device.rs`
//! (adapter, limits, typed `GpuFault`s), `model.rs` (`GpuModel`: weights in arenas, pipelines cached per variant),
//! `session.rs` (`GpuSession`: a conversation's buffers, submitting the prebuilt dispatches, readback, profiling;
//! while a call's results are on their way back it encodes the next decode step's commands, so streamed decoding
//! does not wait for the CPU's encoding; after a greedy one-token call it also submits the next step on the id
//! the GPU chose, before that id is read back, and the next call takes that step's result where it is the call
//! the step was made for: a streamed greedy decode keeps the GPU busy through each id's round trip. Not on
//! software adapters, whose "GPU" is the CPU's own cores),
//! `forward.rs` (which ops a decode step and a prefill call run, in order). Its KV cache is a buffer of keys and one of
//! values per layer in `kv/cache.rs`'s row layout, so rows move to and from a host `KvCache` as bytes. Each op has one
//! home in `gpu/ops/`: its WGSL pieces, the binding `Slot`s it fills, its grid, its parameter struct and the function
//! that builds its dispatch. Uniform structs are declared once with `uniform!` (`gpu/ops/params.rs`), which also writes their WGSL
//! declaration, so Rust and WGSL cannot disagree on a layout; binding slots and output modes are named in the
//! generated header (`BIND_*`, `OUT_*`). Decode's matrix-vector products (`ops/mat.rs`) stage the input vector in
//! workgroup memory, through an input stage that computes it there (the RMSNorm of the residual, the merge of decode
//! attention's partials, or the row as it is), so neither is stored. `matvec.wgsl` reads any type through its
//! `dequant8`, eight weights at a time in f32; Q4_K, Q5_K and Q6_K (Q4_K_M and Q5_K_M files) go through `matvec_q8.wgsl`
//! instead: the staged input is quantized to int8 in blocks of 32 (scale max|x| / 127, as llama.cpp's CPU and CUDA
//! backends quantize theirs) and each lane takes 64 columns of a row through its type's `quant/*_q8.wgsl`, four
//! products per packed 8-bit dot product (one instruction on GPUs that have it), its quants and scales read once
//! (benches/README.md has its figures). `gpu::tests` checks it against the CPU's dot with the
//! same int8 input. Both kernels take their rows, teams and output modes from `matvec_shared.wgsl`.
//! Prefill's matrix products (`matmul.wgsl`) dequantize tiles of weights and token rows into workgroup memory and
//! multiply them in f32. Where wgpu offers cooperative matrices (its experimental feature: native Vulkan or Metal, an
//! adapter that multiplies 16x16x16 f16 into f32 and whose subgroups are 32 wide; `Gpu::coop`) they run
//! `matmul_coop.wgsl` instead: the same tiles rounded to f16, multiplied on the tensor cores, summed in f32, values
//! beyond f16's range saturated rather than turned into infinities; tiles of 128 rows x 64 tokens, or 64 x 128 in
//! sessions whose batch is at least 512 tokens (`Tiles::choose`). Both read and store through `matmul_shared.wgsl`.
//! Lavapipe and browsers have no such feature, so CI compiles every variant of that kernel with naga (wgpu's shader
//! compiler) and runs it only on a GPU machine (`benches/gpu_bench.sh`, and the GPU tests there);
//! `GpuOptions::no_cooperative_matrix` keeps prefill in f32.
//! Prefill attention (`ops/attn_prefill.rs`, `attn_prefill.wgsl`) gives each query a team of 8 invocations (4 where a
//! head's width is not a multiple of 32), each holding a few four-dimension chunks of the query and of its output in
//! registers; a workgroup takes 256 / team queries of one head and walks the cached keys and values in tiles staged in
//! workgroup memory, where a team reads a key's chunks side by side and the teams of a subgroup read the same ones. A
//! team sums its scores with subgroup shuffles where a subgroup holds a team (`attn_team_subgroup.wgsl`), else through
//! workgroup memory (`attn_team_shared.wgsl`); the online softmax needs nothing else shared. Over a cache of 128 or
//! more positions the keys are split among up to 8 workgroups per query block and head (`key_splits`, the call's
//! `split_keys` and `n_splits`), each writing its unnormalized output, max and sum, which `attn_merge.wgsl` merges:
//! with one workgroup per block the last block walked every key while most of the GPU idled. Where the device has
//! cooperative matrices and 40 KiB of workgroup memory (`Gpu::coop_attention`), heads of 64 run
//! `attn_prefill_coop.wgsl` instead: 32 queries a workgroup against tiles of 64 keys, the scores and the weighted
//! sums as 16x16 f16 products on the tensor cores, the online softmax between them in workgroup memory (the same
//! partials and merge).
//! On Vulkan the shader modules are made without naga's runtime checks (`Gpu::unchecked_shaders`): clamps on every
//! array index and a counter in every loop, a large part of prefill's time on hardware; the kernels keep their
//! own bounds (the GPU tests run these modules), and Vulkan's robust buffer access keeps a stray buffer access
//! defined. Browsers check every module regardless.
//! `Backend::Auto` skips software adapters and too-small limits and falls back
//! to the CPU on any fault; `Backend::WebGpu` reports them as `Error::Gpu`. A new op: `wgsl/README.md`, "Adding an op".
//!
//! The weights go up as the file's bytes pass (`upload.rs`): the arenas are planned from the header alone
//! (`Weights::layout`: where each matrix goes, which byte ranges are vectors), allocated empty, and each placed run of
//! rows is written where its bytes go by (whole words; a matrix laid out here, Qwen3.5's queries and gates or the
//! experts' down matrices side by side, gathered whole first). A whole load feeds its file's pieces through it;
//! `GpuModelStream` (`stream.rs`) feeds a download as it arrives and keeps in memory only a file held in part (the
//! header, the vectors, the bytes the model's identity samples), so a page runs a model larger than its wasm32 memory,
//! with the same `ModelId` as the whole file (its prefix pages and saved states are the same model's). Such a model runs
//! on the GPU only (`Evaluator::on_gpu_model`; `Model::check_weights_held` refuses the CPU's forward pass,
//! embeddings and MicroLoRA).
//!
//! Qwen3.5 (`qwen35`) runs there too: its delta-net layers' projections are one matrix op into a row per token, then
//! `ops/delta_net.rs`'s convolution (an invocation per channel) and delta rule (a workgroup per value head, each
//! invocation a row of the head's state in registers; the queries' and keys' L2 norms before the walk and the
//! output's norm and gate after it, an invocation a token, or over the workgroup for a decode step's one token) walk
//! the call's tokens in order over the layer's recurrent state, a buffer per layer laid out as `kv::recurrent` lays out a layer, so
//! saved states move between the backends as they are. The session keeps where the state stands and a copy of it
//! after the last call of several tokens (a GPU-side copy): the evaluator takes it back there, or to zeros, when a
//! request shares less than the session evaluated, as on the CPU; a greedy step is never submitted ahead of its
//! input (a step not taken could not be taken back), and LoRA adapters stay on the CPU (the query projection is split
//! on the GPU into queries and the attention output's gate, which the adapters' groups do not know). The prefill is
//! as sequential over its tokens as the CPU's: the chunked form of the rule is not written.
//!
//! Every decoder architecture runs there (`model.rs` `check_supported` refuses encoders, and heads wider than 512,
//! not a multiple of 16, wider than 128 and not a multiple of 32, or wider than 256 and not a multiple of 64, with
//! `GpuFault::Unsupported`). Gemma 4's layers of two shapes compile their kernels for each (`ops::Shape`); its shared
//! keys and values, value norms, per-layer inputs and output scales are `forward.rs`'s; its global heads of 512 take
//! prefill attention's teams of 16 and tiles of f16 pairs (`attn_prefill::Tile`), and decode attention packs their
//! new key and value after the query, in the same invocations.
//! Gemma 3 takes what the CPU's
//! `forward` does differently: its heads of 256 fit decode attention's 128 invocations (the query, the new key and value
//! packed by different invocations) and prefill attention's teams (eight chunks a member, tiles of 4 keys within the
//! default 16 KiB of workgroup memory);
//! a layer `Config::layer_window` marks runs the attention kernels' windowed variant (`WINDOWED`, the window in the header:
//! decode chunks start no earlier than the window, prefill masks keys before each query's and skips the tiles before its
//! block's), with the RoPE table of `Model::local_rope`; the KV cache keeps every position, so the prefix cache and saved
//! states work as for any model. The attention and feed-forward blocks' matrix ops store their output (to `xb`, or leave a
//! split matmul's partials) and `norm_add` adds its post-norm to the residual, where the other models' matrix ops add
//! themselves; the gate's activation is a piece of its own (`glu_gelu.wgsl`, GeGLU, or `glu_silu.wgsl`), in the fused
//! decode matvec (`OutMode::Geglu`) and the prefill `glu` op; QK-norm is Qwen3's `head_norm`; embeddings are scaled in
//! `embed.wgsl` (by its op's scale, 1 elsewhere). Other architectures build the same kernels: a window of 0 selects the
//! unwindowed variants.
//!
//! LoRA adapters (`ops/lora.rs`, `wgsl/lora.wgsl`): `GpuSession::set_adapters` takes a set, and the next call uploads it
//! and builds a second list of ops for it, beside the base model's, which stay as they are (the empty set, or one whose
//! scales are all 0, runs them: no dispatch more). The upload is per group of projections that share their input and write
//! adjacent columns of one output (q/k/v, o, gate/up, down, the output head): the `A` rows of every adapter of the set on
//! them, then as many rows of `Bᵀ` as wide as the group's output, each adapter's scale folded in and zeros outside its
//! projection's columns, so one dispatch adds a group's adapters, `out[t] += s·B·(A·x_t)`, right after its matrix op (each
//! workgroup computes `A·x` with team sums, then 256 outputs). The op reads its input through the matvec input stages in
//! decode (`in_norm.wgsl`, `in_attn.wgsl`, `in_plain.wgsl`: the normed row and the merged attention output are never
//! stored there) and every row of the stored input in prefill (`in_rows.wgsl`). Where the base ops fuse past a
//! projection's output, the adapted ops do not: decode stores gate and up before SwiGLU, the output head stores the logits
//! before argmax scans them (no best rows per workgroup), and prefill keeps the reduce of a split qkv or gate/up matmul.
//! The output head is adapted only where the model has its own `output.weight`: llama.cpp refuses an adapter of tied
//! embeddings, and so does `LoraAdapter::from_bytes`. A set switched per request costs its upload and the bind groups of
//! its ops, once per switch; as on the CPU, the evaluator forgets the cache's keys and values when the set changes, and
//! the GPU's pages go to and come from the set's prefix cache.

#[cfg(feature = "gpu")]
mod device;
#[cfg(feature = "gpu")]
mod forward;
#[cfg(feature = "gpu")]
mod model;
#[cfg(feature = "gpu")]
mod ops;
#[cfg(feature = "gpu")]
mod session;
#[cfg(feature = "gpu")]
mod stream;
/// Every kernel against the CPU reference: native unit tests, and on wasm32 public (hidden) checks
/// for the browser suite (tests/rust/gpu_browser.rs).
#[cfg(all(feature = "gpu", any(test, target_arch = "wasm32")))]
#[doc(hidden)]
pub mod tests;
#[cfg(feature = "gpu")]
mod upload;

#[cfg(all(feature = "gpu", not(target_arch = "wasm32")))]
pub use device::block_on;
#[cfg(feature = "gpu")]
pub use device::AdapterSummary;
#[cfg(feature = "gpu")]
pub use model::GpuModel;
#[cfg(feature = "gpu")]
pub use session::{GpuSession, KernelTime, MAX_RUN_AHEAD};
#[cfg(feature = "gpu")]
pub use stream::{GpuModelStream, StreamedModel};

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, GpuFault, Result};
use crate::kv::cache::KvCache;
use crate::kv::recurrent::RecurrentState;
use crate::model::eval::Want;
use crate::model::lora::AdapterSet;
use crate::model::Model;

/// Where a session runs its forward passes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// A hardware GPU when one with large enough limits exists, else the CPU. If the GPU fails
    /// later (device lost), the session replays its tokens on the CPU and carries on.
    Auto,
    /// WebGPU only (any adapter, software ones included); failures are typed errors ([`Error::Gpu`]).
    WebGpu,
    /// The CPU kernels.
    #[default]
    Cpu,
}

impl std::str::FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Backend> {
        match s {
            "auto" => Ok(Backend::Auto),
            "webgpu" | "gpu" => Ok(Backend::WebGpu),
            "cpu" => Ok(Backend::Cpu),
            other => Err(Error::InvalidArgument(format!("backend '{other}' is not one of auto, webgpu, cpu"))),
        }
    }
}

/// Device choices, mostly for tests and benchmarks; the defaults suit normal use.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// Accept a software adapter (lavapipe, SwiftShader). `Backend::Auto` does not: it would be
    /// slower than the CPU kernels.
    pub allow_software: bool,
    /// Use at most this many bytes per storage binding (below the device's own limit), e.g. to
    /// exercise tensor splitting or the too-small-limits path.
    pub max_binding_bytes: Option<u64>,
    /// Request TIMESTAMP_QUERY when offered, for per-kernel timings.
    pub timestamps: bool,
    /// Do not use subgroup operations even where the adapter offers them: the kernels' reductions
    /// then go through workgroup memory only (benchmarks and tests of that variant).
    pub no_subgroups: bool,
    /// Do not multiply on cooperative matrices even where the adapter offers them: prefill then
    /// runs the f32 matmul (benchmarks and tests of that variant).
    pub no_cooperative_matrix: bool,
    /// Submit a streamed greedy decode's next step before its input id is read back even on a
    /// software adapter (tests of that path). There the "GPU" is the CPU's own cores: the step only
    /// competes with the caller, and a whole step is wasted at the end of each generation.
    pub speculate_on_software: bool,
}

pub(crate) fn gpu_error(kind: GpuFault, message: impl Into<String>) -> Error {
    Error::Gpu { kind, message: message.into() }
}

/// The GPU side of the evaluator above (`evaluator.rs`): what it needs, nothing more.
/// Without the `gpu` feature it cannot be constructed.
pub(crate) struct GpuRunner {
    #[cfg(feature = "gpu")]
    session: GpuSession,
    #[cfg(not(feature = "gpu"))]
    never: std::convert::Infallible,
}

#[cfg(feature = "gpu")]
impl GpuRunner {
    /// Open the device and allocate a session of `n_ctx` positions, `n_batch` tokens per call.
    pub(crate) async fn open(model: &Arc<Model>, n_ctx: usize, n_batch: usize, opts: &GpuOptions) -> Result<GpuRunner> {
        let gm = Arc::new(GpuModel::new(model.clone(), opts).await?);
        GpuRunner::on_model(gm, n_ctx, n_batch).await
    }

    /// A session of `n_ctx` positions, `n_batch` tokens per call, on a model already on the GPU.
    pub(crate) async fn on_model(gm: Arc<GpuModel>, n_ctx: usize, n_batch: usize) -> Result<GpuRunner> {
        Ok(GpuRunner { session: GpuSession::new(gm, n_ctx, n_batch).await? })
    }

    /// Run `tokens` at positions `pos0..`, appending the logits `want` asks for to `out`; the id
    /// under `Want::Argmax` (read back alone).
    pub(crate) async fn eval(
        &mut self,
        tokens: &[u32],
        pos0: usize,
        want: Want,
        out: &mut Vec<f32>,
    ) -> Result<Option<u32>> {
        self.session.eval_want(tokens, pos0, want, out).await
    }

    /// Run the next evals with the LoRA adapters `lora` (checked against the model; its ops are built by
    /// the next eval).
    pub(crate) fn set_adapters(&mut self, lora: &AdapterSet) -> Result<()> {
        self.session.set_adapters(lora)
    }

    pub(crate) fn kv_cache_bytes(&self) -> usize {
        self.session.kv_cache_bytes()
    }

    /// Write rows `positions` of `kv` into the GPU's cache.
    pub(crate) fn upload_kv(&self, kv: &KvCache, positions: Range<usize>) -> Result<()> {
        self.session.upload_kv(kv, positions)
    }

    /// Read the GPU cache's rows at `positions` into `kv`.
    pub(crate) async fn download_kv(&self, kv: &mut KvCache, positions: Range<usize>) -> Result<()> {
        self.session.download_kv(kv, positions).await
    }

    /// Bring the recurrent state (if the model has one) back to at most `pos` tokens; the tokens it then holds
    /// (`pos` without one), from which the caller evaluates up to `pos` again.
    pub(crate) fn rewind_recurrent(&mut self, pos: usize) -> usize {
        self.session.rewind_recurrent(pos)
    }

    /// The conversation's tokens from `n` on are no longer those the recurrent state's checkpoint took in.
    pub(crate) fn forget_recurrent_from(&mut self, n: usize) {
        self.session.forget_recurrent_from(n);
    }

    /// Set the recurrent state (a saved conversation's).
    pub(crate) fn upload_recurrent(&mut self, state: &RecurrentState) -> Result<()> {
        self.session.upload_recurrent(state)
    }

    /// Read the recurrent state into `state`.
    pub(crate) async fn download_recurrent(&self, state: &mut RecurrentState) -> Result<()> {
        self.session.download_recurrent(state).await
    }

    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn adapter(&self) -> &AdapterSummary {
        self.session.model().adapter()
    }

    /// Lose the device on purpose (tests of the fallback).
    pub(crate) fn destroy_device(&self) {
        self.session.model().destroy_device();
    }
}

#[cfg(not(feature = "gpu"))]
impl GpuRunner {
    pub(crate) async fn open(_: &Arc<Model>, _: usize, _: usize, _: &GpuOptions) -> Result<GpuRunner> {
        Err(gpu_error(GpuFault::NoAdapter, "this build of ruvllm has no WebGPU backend (cargo feature `gpu`)"))
    }

    pub(crate) async fn eval(&mut self, _: &[u32], _: usize, _: Want, _: &mut Vec<f32>) -> Result<Option<u32>> {
        match self.never {}
    }

    pub(crate) fn set_adapters(&mut self, _: &AdapterSet) -> Result<()> {
        match self.never {}
    }

    pub(crate) fn kv_cache_bytes(&self) -> usize {
        match self.never {}
    }

    pub(crate) fn upload_kv(&self, _: &KvCache, _: Range<usize>) -> Result<()> {
        match self.never {}
    }

    pub(crate) async fn download_kv(&self, _: &mut KvCache, _: Range<usize>) -> Result<()> {
        match self.never {}
    }

    pub(crate) fn rewind_recurrent(&mut self, _: usize) -> usize {
        match self.never {}
    }

    pub(crate) fn forget_recurrent_from(&mut self, _: usize) {
        match self.never {}
    }

    pub(crate) fn upload_recurrent(&mut self, _: &RecurrentState) -> Result<()> {
        match self.never {}
    }

    pub(crate) async fn download_recurrent(&self, _: &mut RecurrentState) -> Result<()> {
        match self.never {}
    }
}
