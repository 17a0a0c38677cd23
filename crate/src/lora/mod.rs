//! LoRA adapters at run time: llama.cpp's GGUF adapter files ([`LoraAdapter`], `adapter.rs`), applied in
//! the CPU forward pass to the projections they adapt, each with a scale chosen per request
//! ([`AdapterSet`]), without touching the model's weights.
//!
//! A projection `y = W·x` with an adapter of rank `r` becomes `y = W·x + s·B·(A·x)`, where `A` is
//! `r × n_in`, `B` is `n_out × r` and `s` is the request's scale times `alpha / r` (llama.cpp's rule).
//! `A·x` is `r` values per token, so an adapter costs two thin matmuls beside the weight's, through the
//! same kernels ([`crate::kernels::matmul`]) as the weights.
//!
//! Keys and values computed under one set of adapters are not those of another: a session's cache is
//! forgotten when its set changes, and the model's prefix cache holds pages of the base model only.

mod adapter;

use std::sync::Arc;

pub use adapter::LoraAdapter;

use crate::error::{Error, Result};
use crate::model::forward::{add, project};
use crate::model::Model;
use crate::quant::Activations;

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
    /// projection's input, `y` its `n` output rows.
    pub(crate) fn add_to(
        &self,
        site: Site,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        acts: &mut Activations,
        scratch: &mut LoraScratch,
    ) {
        for (adapter, scale) in &self.0 {
            let Some((pair, bytes)) = adapter.pair(site) else { continue };
            let (rank, n_out) = (pair.a.rows, pair.b.rows);
            let t = grown(&mut scratch.t, n * rank);
            project(acts, x, n, &mut [(pair.a.view(bytes), &mut t[..])]);
            let s = adapter.effective_scale(*scale, rank);
            t.iter_mut().for_each(|v| *v *= s);
            let out = grown(&mut scratch.out, n * n_out);
            project(acts, t, n, &mut [(pair.b.view(bytes), &mut out[..])]);
            add(y, out, n_out);
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

/// The forward pass's buffers for adapters: `A·x` and `B·(A·x)` of one projection, grown to the
/// largest asked for (they stay empty while no adapter is used).
#[derive(Default)]
pub(crate) struct LoraScratch {
    t: Vec<f32>,
    out: Vec<f32>,
}

/// The first `len` values of `buf`, grown to hold them.
fn grown(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    &mut buf[..len]
}
