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

mod adapter;
pub mod train;

use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use adapter::LoraAdapter;
pub use train::{MicroLora, MicroLoraOptions, StepReport};

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
