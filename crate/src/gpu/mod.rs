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
/// Every kernel against the CPU reference: native unit tests, and on wasm32 public (hidden) checks
/// for the browser suite (tests/rust/gpu_browser.rs).
#[cfg(all(feature = "gpu", any(test, target_arch = "wasm32")))]
#[doc(hidden)]
pub mod tests;

#[cfg(all(feature = "gpu", not(target_arch = "wasm32")))]
pub use device::block_on;
#[cfg(feature = "gpu")]
pub use device::AdapterSummary;
#[cfg(feature = "gpu")]
pub use model::GpuModel;
#[cfg(feature = "gpu")]
pub use session::{GpuSession, KernelTime, MAX_RUN_AHEAD};

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, GpuFault, Result};
use crate::kv::cache::KvCache;
use crate::lora::AdapterSet;
use crate::model::eval::Want;
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
}
