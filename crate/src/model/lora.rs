//! LoRA adapters at run time: llama.cpp's GGUF adapter files ([`LoraAdapter`], `adapter.rs`), applied in
//! the CPU forward pass (and the WebGPU backend's, `gpu/ops/lora.rs`) to the projections they adapt, each
//! with a scale chosen per request ([`AdapterSet`]), without touching the model's weights.
//!
//! A projection `y = W·x` with an adapter of rank `r` becomes `y = W·x + s·B·(A·x)`, where `A` is
//! `r × n_in`, `B` is `n_out × r` and `s` is the request's scale times `alpha / r` (llama.cpp's rule).
//! `A·x` is `r` values per token: an adapter is kept in f32 (B transposed) and applied a token at a time
//! with the f32 vector kernels, `r` dot products over `x` and `r` scaled rows of `Bᵀ` added to `y`. That is
//! cheaper than two thin matmuls beside the weight's (no activation quantization, no tasks for `r` rows).
//!
//! Keys and values computed under one set of adapters are not those of another: a session's cache is
//! forgotten when its set changes, and the pages of a set's sessions go to a prefix cache of that set only
//! (`Model::prefix_cache_for`).
//!
//! # Design
//!
//! llama.cpp's GGUF adapter files (`general.type = "adapter"`, `adapter.type = "lora"`, `adapter.lora.alpha`, a
//! `<weight>.lora_a` of `rank` rows of the weight's input width and a `<weight>.lora_b` of the weight's rows, `rank`
//! wide), applied without touching the model's weights: a projection `y = W·x` with an adapter becomes
//! `y = W·x + s·B·(A·x)`, `s` the request's scale times `alpha / rank` (llama.cpp's rule; alpha 0: the scale itself).
//! `adapter.rs` is `LoraAdapter::from_bytes`: the file is checked against the model it is read for (architecture, that
//! every pair names a weight the forward pass adapts, shapes, a rank no larger than the weight's larger side, finite
//! factors), so a bad file is an `Error::Adapter` (`E_ADAPTER`), or an `Error::Gguf` when it is not a whole GGUF; memory
//! for its f32 factors is asked for (`Error::OutOfMemory`, never a trap); its matrices are converted to f32 at load (they are small), `B`
//! transposed, and applied a token at a time with the f32 vector kernels of `crate::simd` (`A·x` is `rank` dot
//! products; `B·(A·x)` is `rank` scaled rows of `Bᵀ` added to the output): no activation quantization and no thread-pool
//! tasks for `rank`-row matrices, which cost more than the arithmetic as two thin matmuls did (a prefill batch shares
//! its rows among the threads). Phi-3's fused `attn_qkv` and `ffn_up` pairs are split into the projections' row ranges
//! of `B`, as the weights are. `mod.rs` is `AdapterSet`:
//! the adapters of one request with their scales (`GenerateOptions::adapters`, `Session::set_adapters`), which
//! `forward` takes and adds at each projection (`Site`: a layer's q/k/v/o, gate/up/down, or the output head) right
//! after the weight's product. Keys and values computed under one set are not another's: the evaluator forgets its
//! cache when the set changes, sessions under adapters use a prefix cache of their set (`Model::prefix_cache_for`:
//! its records name a model id mixed with the set's digest, so no page crosses between sets or to the base model's
//! cache; the model keeps the latest set's, in memory only; on either backend) and saved states are the base model's.
//! The WebGPU backend runs adapters too (`gpu/ops/lora.rs`, below), so a GPU session stays on the GPU when a request brings
//! them. `tests/rust/lora.rs` checks them against float64 merged weights on the tiny models and against llama.cpp on the
//! default model (fixtures from `tests/fixtures/make_lora_adapters.py`, reference from `tests/fixtures/lora_reference.mjs`);
//! `tests/rust/gpu.rs` does both on the GPU.
//!
//! `train.rs` is `MicroLora`: an adapter (rank 1-16, on chosen projections of the last `K` layers, `B = 0` at first)
//! trained on the device from feedback. A step on an example (a prompt and its answer) runs the base model's first
//! `n_layers - K` layers on the fast path (`forward::residual_after`; they hold no adapter, so their output is kept for
//! the next step on the same tokens), then the last `K` layers and the output head again in f32 with the weights
//! dequantized a row at a time (no activation quantization, exact `exp`), keeping what the backward pass needs. The loss
//! is the answer's cross-entropy for a positive reward and unlikelihood (`-log(1 - p)`) for a negative one; the
//! backward pass goes through the head, RMSNorm, causal attention, RoPE (the rotation's transpose), SwiGLU and the frozen
//! projections (`dy·W`) to the adapter's `A` and `Bᵀ`. Because that forward pass is smooth in the adapter's weights, the
//! unit tests check the gradient against finite differences of the same loss (llama and qwen2 tiny models, every
//! projection); the other architectures are refused (their extra norms are not in the backward pass). The update is Adam
//! on the clipped gradient plus an EWC penalty `λ·F·(θ - θ*)`: `protect` estimates `F` from text the model should keep
//! predicting, `consolidate` (the slow loop) folds the session's squared gradients into `F` and moves the anchor `θ*` to
//! the current weights. `adapter()` gives a `LoraAdapter` of the weights as they are (its digest is the weights', so a
//! trained adapter is a new set to a session's cache); `to_gguf` writes llama.cpp's adapter file with `gguf::write_f32`;
//! `to_bytes`/`from_bytes` are the whole training state (options, weights, anchor, Fisher, Adam's moments) with the
//! model's id, in the frame every persisted record has (`record::Kind`: magic, version, CRC-32), for the package's stores (the `lora_adapter` fuzz target edits saved
//! states past their checksum). The frozen layers' output need not be computed again for an answer the model just
//! generated: a session keeps the base model's residual stream below the adapter's layers when asked
//! (`Session::keep_residuals`; `RunState::keep_after` copies it in `forward`), for the positions the CPU evaluates in
//! order while no adapter touches those layers (positions restored from the prefix cache have none), and
//! `Session::frozen_residuals` gives it for an example, evaluating only the positions it lacks (the end-of-turn token);
//! `MicroLora::use_frozen` takes it. The wasm engine keeps it for the MicroLoRA opened last. The fast path of a step
//! (the default) runs the forward products on the int8 kernels and `dy·W` on Q8_0 transposed copies of the trained
//! layers' weights; the f32 path is what the finite-difference tests differentiate, and a test holds the two together.
//! `benches/microlora.rs` measures a step and what 20 steps teach.

use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use super::adapter::LoraAdapter;

use crate::error::{Error, Result};
use crate::model::Model;
use crate::parallel::for_each_row_chunk;
use crate::simd::{axpy, dot};

/// The projections of a layer that an adapter may adapt (Phi-3's fused tensors are split into these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Proj {
    pub const ALL: [Proj; 7] = [Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down];
}

/// Where in the forward pass an adapter applies: a layer's projection, or the output head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    Layer(usize, Proj),
    Output,
}

/// The adapters one request runs with, in order, each with its scale (llama.cpp's per-request
/// `lora` list). Empty: the base model.
#[derive(Clone, Debug, Default)]
pub struct AdapterSet(Vec<(Arc<LoraAdapter>, f32)>);

impl AdapterSet {
    pub fn new(adapters: Vec<(Arc<LoraAdapter>, f32)>) -> AdapterSet {
        AdapterSet(adapters)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn adapters(&self) -> &[(Arc<LoraAdapter>, f32)] {
        &self.0
    }

    /// What tells this set's keys and values apart from another's: SHA-256 of its adapters' digests and scales,
    /// in order (the prefix cache of its sessions is keyed by it).
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for (adapter, scale) in &self.0 {
            h.update(adapter.digest());
            h.update(scale.to_bits().to_le_bytes());
        }
        h.finalize().into()
    }

    /// Whether an adapter of the set adapts a layer below `layer` (the output of those layers is then not the base
    /// model's).
    pub fn adapts_below(&self, layer: usize) -> bool {
        self.0.iter().any(|(a, _)| (0..layer).any(|l| Proj::ALL.iter().any(|&p| a.pair(Site::Layer(l, p)).is_some())))
    }

    /// Every adapter was read for `model` (an adapter's shapes were checked against one model only).
    pub fn check(&self, model: &Model) -> Result<()> {
        match self.0.iter().find(|(a, _)| a.model_id() != model.id()) {
            Some((a, _)) => {
                Err(Error::Adapter(format!("adapter {} was loaded for another model", a.name().unwrap_or("(unnamed)"))))
            }
            None => Ok(()),
        }
    }

    /// `y += s·B·(A·x)` for each adapter of the set that adapts `site`: `x` is `n` rows of the
    /// projection's input, `y` its `n` output rows. Each token's row is `y += (s·(A_j·x))·Bᵀ_j` for
    /// `j` in `0..rank`, in f32; the rows of a batch are shared among the threads.
    pub(crate) fn add_to(&self, site: Site, x: &[f32], n: usize, y: &mut [f32]) {
        let (n_in, n_out) = (x.len() / n, y.len() / n);
        for (adapter, scale) in &self.0 {
            let Some(pair) = adapter.pair(site) else { continue };
            let s = adapter.effective_scale(*scale, pair.rank);
            if s == 0.0 {
                continue; // the base model's outputs, bit for bit
            }
            for_each_row_chunk(y, n_out, |t0, rows| {
                for (y, x) in rows.chunks_exact_mut(n_out).zip(x[t0 * n_in..].chunks_exact(n_in)) {
                    for (a, bt) in pair.a.chunks_exact(n_in).zip(pair.bt.chunks_exact(n_out)) {
                        axpy(y, s * dot(a, x), bt);
                    }
                }
            });
        }
    }
}

/// Two sets are the same when they hold the same adapter files in the same order at the same scales
/// (the order is that of the sums, so it is part of the result).
impl PartialEq for AdapterSet {
    fn eq(&self, other: &AdapterSet) -> bool {
        let key = |(a, s): &(Arc<LoraAdapter>, f32)| (*a.digest(), s.to_bits());
        self.0.len() == other.0.len() && self.0.iter().map(key).eq(other.0.iter().map(key))
    }
}
