//! MicroLoRA: a small LoRA adapter (rank 1-16) on chosen projections of a model's last `K` layers, trained on the
//! device from feedback, with the model's weights frozen.
//!
//! One training step on an example (a prompt and a response, as token ids):
//! 1. the base model's first `n_layers - K` layers run on the quantized fast path (they hold no adapter, so
//!    their output depends on the tokens only and is kept for the next step on the same example);
//! 2. the last `K` layers and the output head run again in f32 (weights dequantized a row at a time, no
//!    activation quantization, exact exp), keeping what the backward pass needs: the function of the adapter's
//!    weights is then smooth, and the tests check the gradient against finite differences of this very loss;
//! 3. the loss over the response tokens: cross-entropy for a positive reward, unlikelihood (`-log(1 - p)`) for
//!    a negative one, times |reward|;
//! 4. the backward pass through the head, the norms, attention, RoPE, SwiGLU and the frozen projections (`Wᵀ·dy`)
//!    to the adapter's `A` and `B`;
//! 5. an Adam step on the gradient plus an EWC penalty `λ·F·(θ - θ*)` toward the consolidated weights `θ*`.
//!
//! [`MicroLora::consolidate`] is the slow loop: it folds the session's updates into the consolidated weights
//! and the Fisher estimate (`F`, a running mean of squared gradients, as online EWC does), so later
//! updates keep what earlier sessions taught. [`MicroLora::adapter`] gives the weights as a [`LoraAdapter`]
//! that generation applies like any other; [`MicroLora::to_gguf`] writes llama.cpp's adapter file.
//!
//! Architectures: llama and qwen2 (the others add norms or fused weights the backward pass does not model).

use std::collections::VecDeque;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::gguf::{self, Value};
use crate::kernels::rmsnorm::inv_rms;
use crate::kernels::rope::Rope;
use crate::kv::cache::KvCache;
use crate::model::adapter::{to_f32, Pair};
use crate::model::config::{Arch, Config};
use crate::model::forward::{self, residual_after, RunState};
use crate::model::lora::{LoraAdapter, Proj, Site};
use crate::model::weights::{LayerWeights, MatrixRef};
use crate::model::Model;
use crate::parallel::{for_each_row_chunk, in_pool};
use crate::quant::{dequantize_row, quantize_row, Activations, GgmlType, QuantMatrix};
use crate::record::{f32_at, seal, u32_at, u64_at, Kind};
use crate::simd::{axpy, dot};

const STATE_HEADER_BYTES: usize = 96;
/// The saved training state's frame (`crate::record`).
const STATE_KIND: Kind =
    Kind { what: "a saved MicroLoRA state", magic: *b"RVMLORA\0", version: 1, oldest: 1, header: STATE_HEADER_BYTES };
/// The largest rank a MicroLoRA takes.
const MAX_RANK: usize = 16;

/// Most tokens of one example (attention keeps `heads × T²` probabilities per trained layer).
pub const MAX_EXAMPLE_TOKENS: usize = 1024;
/// Examples whose frozen-layer output is kept for their next step.
const KEPT_PREFIXES: usize = 32;

#[derive(Clone, Debug, PartialEq)]
pub struct MicroLoraOptions {
    /// Rank of each adapted projection, 1..=16.
    pub rank: usize,
    /// How many of the last layers are adapted.
    pub layers: usize,
    /// Which projections of those layers.
    pub projections: Vec<Proj>,
    /// `B·A` is scaled by `alpha / rank` (llama.cpp's rule, written into an exported file).
    pub alpha: f32,
    pub learning_rate: f32,
    /// Weight of the EWC penalty toward the consolidated weights.
    pub ewc_lambda: f32,
    /// How much of the old Fisher estimate a consolidation keeps (online EWC's decay).
    pub fisher_decay: f32,
    /// Seed of `A`'s initial values (`B` starts at 0: the adapter starts as the base model).
    pub seed: u64,
}

impl Default for MicroLoraOptions {
    fn default() -> Self {
        MicroLoraOptions {
            rank: 2,
            layers: 4,
            projections: vec![Proj::Q, Proj::V],
            alpha: 2.0,
            learning_rate: 1e-2,
            ewc_lambda: 1e6,
            fisher_decay: 0.9,
            seed: 0,
        }
    }
}

/// One adapted projection: where its `A` (`rank × n_in`) and `Bᵀ` (`rank × n_out`) lie in the parameter vector.
#[derive(Clone, Debug)]
struct TrainedSite {
    layer: usize,
    proj: Proj,
    n_in: usize,
    n_out: usize,
    a: usize,
    bt: usize,
}

/// What a step did: its loss before the update and where its time went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// The objective on the example before the update (cross-entropy, or unlikelihood for a negative reward,
    /// times |reward|, per response token).
    pub loss: f32,
    /// Response tokens the loss is over.
    pub tokens: usize,
    /// Milliseconds: the frozen layers (0 when kept from an earlier step), the trained layers and the head
    /// forward, the backward pass, the optimizer.
    pub frozen_ms: f64,
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub update_ms: f64,
}

/// A MicroLoRA and its training state.
pub struct MicroLora {
    options: MicroLoraOptions,
    first_layer: usize,
    sites: Vec<TrainedSite>,
    /// Every site's `A` then `Bᵀ`, one after the other.
    theta: Vec<f32>,
    /// The consolidated weights (the EWC anchor), the Fisher estimate, and this session's sum of squared
    /// gradients with its step count.
    anchor: Vec<f32>,
    fisher: Vec<f32>,
    session_sq: Vec<f32>,
    session_steps: u32,
    /// Adam's moments and step count.
    m: Vec<f32>,
    v: Vec<f32>,
    steps: u64,
    /// The frozen layers' output for the latest examples (their tokens, their `[T × d_model]` residuals).
    prefixes: VecDeque<(Vec<u32>, Arc<Vec<f32>>)>,
    /// The trained layers' weights transposed, for the backward pass (made at the first step).
    transposed: Option<Arc<Vec<Transposed>>>,
}

impl MicroLora {
    /// A fresh adapter for `model`: `B = 0`, so it starts as the base model.
    pub fn new(model: &Model, options: MicroLoraOptions) -> Result<MicroLora> {
        let c = &model.config;
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if !matches!(c.arch, Arch::Llama | Arch::Qwen2) {
            return Err(Error::Adapter(format!("MicroLoRA trains llama and qwen2 models, not {}", c.arch.name())));
        }
        if !(1..=MAX_RANK).contains(&options.rank) {
            return bad(format!("rank {} is not in 1..={MAX_RANK}", options.rank));
        }
        if options.layers == 0 || options.layers > c.n_layers {
            return bad(format!("layers {} is not in 1..={}", options.layers, c.n_layers));
        }
        if options.projections.is_empty() {
            return bad("no projections to adapt".into());
        }
        let finite = [options.alpha, options.learning_rate, options.ewc_lambda, options.fisher_decay];
        if finite.iter().any(|v| !v.is_finite() || *v < 0.0) || options.alpha == 0.0 || options.fisher_decay > 1.0 {
            return bad(format!(
                "alpha ({}) must be > 0; learning rate ({}), EWC lambda ({}) >= 0; fisher decay ({}) in 0..=1",
                options.alpha, options.learning_rate, options.ewc_lambda, options.fisher_decay
            ));
        }
        let first_layer = c.n_layers - options.layers;
        let r = options.rank;
        let mut sites = Vec::new();
        let mut len = 0;
        for layer in first_layer..c.n_layers {
            for &proj in Proj::ALL.iter().filter(|p| options.projections.contains(p)) {
                let (n_in, n_out) = proj_shape(c, proj);
                sites.push(TrainedSite { layer, proj, n_in, n_out, a: len, bt: len + r * n_in });
                len += r * (n_in + n_out);
            }
        }
        // A: uniform in ±1/sqrt(n_in) (PyTorch's LoRA default, Kaiming-uniform with a = sqrt(5)).
        let mut theta = vec![0.0; len];
        let mut state = options.seed ^ 0x9e37_79b9_7f4a_7c15;
        for s in &sites {
            let bound = 1.0 / (s.n_in as f32).sqrt();
            for v in &mut theta[s.a..s.a + r * s.n_in] {
                *v = (uniform(&mut state) * 2.0 - 1.0) * bound;
            }
        }
        Ok(MicroLora {
            first_layer,
            anchor: theta.clone(),
            fisher: vec![0.0; len],
            session_sq: vec![0.0; len],
            session_steps: 0,
            m: vec![0.0; len],
            v: vec![0.0; len],
            steps: 0,
            theta,
            sites,
            options,
            prefixes: VecDeque::new(),
            transposed: None,
        })
    }

    pub fn options(&self) -> &MicroLoraOptions {
        &self.options
    }

    /// The first adapted layer: the layers below it are frozen (`Session::keep_residuals` keeps their output).
    pub fn first_layer(&self) -> usize {
        self.first_layer
    }

    /// Take `rows`, the base model's residual stream after the first [`MicroLora::first_layer`] layers at each
    /// position of `tokens` (`Session::frozen_residuals`), as the frozen layers' output for a step on `tokens`, so
    /// that the step does not run those layers.
    pub fn use_frozen(&mut self, model: &Model, tokens: &[u32], rows: Vec<f32>) -> Result<()> {
        if rows.len() != tokens.len() * model.config.d_model {
            return Err(Error::InvalidArgument(format!(
                "{} residual values for {} tokens of width {}",
                rows.len(),
                tokens.len(),
                model.config.d_model
            )));
        }
        self.keep_prefix(tokens, Arc::new(rows));
        Ok(())
    }

    /// Optimizer steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Trainable weights.
    pub fn n_params(&self) -> usize {
        self.theta.len()
    }

    /// One step on `tokens` (a prompt then its response from `first_target` on): the loss of the response
    /// under the adapter as it is, its gradient, and an Adam update. `reward > 0` teaches the response
    /// (cross-entropy), `reward < 0` pushes away from it (unlikelihood); either is weighted by |reward|.
    pub fn train_step(
        &mut self,
        model: &Model,
        tokens: &[u32],
        first_target: usize,
        reward: f32,
    ) -> Result<StepReport> {
        check_example(model, tokens, first_target)?;
        if !reward.is_finite() || reward == 0.0 {
            return Err(Error::InvalidArgument(format!("reward {reward} must be finite and not 0")));
        }
        let t0 = now_ms();
        let (x0, kept) = self.frozen(model, tokens);
        let fast = self.fast_path(model);
        let t1 = now_ms();
        let mut grad = vec![0.0; self.theta.len()];
        let mut report = in_pool(|| {
            let pass = Pass { model, lora: self, tokens, first_target, fast: Some(&fast) };
            pass.run(&x0, reward, Some(&mut grad))
        });
        report.frozen_ms = if kept { 0.0 } else { t1 - t0 };
        let t2 = now_ms();
        self.update(&grad);
        report.update_ms = now_ms() - t2;
        Ok(report)
    }

    /// The mean cross-entropy of the response tokens (from `first_target` on) under the adapter as it is, by the
    /// same f32 forward pass the training steps take.
    pub fn loss(&mut self, model: &Model, tokens: &[u32], first_target: usize) -> Result<f32> {
        check_example(model, tokens, first_target)?;
        let (x0, _) = self.frozen(model, tokens);
        let fast = self.fast_path(model);
        Ok(in_pool(|| Pass { model, lora: self, tokens, first_target, fast: Some(&fast) }.run(&x0, 1.0, None)).loss)
    }

    /// Estimate which weights matter to what the model already does, from `examples` of text it should keep
    /// predicting (each its tokens and where the predicted part starts), and make that the EWC penalty's Fisher
    /// estimate around the current weights: later updates then move those weights less. Takes no step.
    pub fn protect(&mut self, model: &Model, examples: &[(Vec<u32>, usize)]) -> Result<()> {
        let mut sq = vec![0.0; self.theta.len()];
        let fast = self.fast_path(model);
        for (tokens, first) in examples {
            check_example(model, tokens, *first)?;
            let (x0, _) = self.frozen(model, tokens);
            let mut grad = vec![0.0; self.theta.len()];
            let pass = Pass { model, lora: self, tokens, first_target: *first, fast: Some(&fast) };
            in_pool(|| pass.run(&x0, 1.0, Some(&mut grad)));
            sq.iter_mut().zip(&grad).for_each(|(s, g)| *s += g * g);
        }
        let n = examples.len().max(1) as f32;
        self.fisher.iter_mut().zip(&sq).for_each(|(f, s)| *f += s / n);
        self.anchor.copy_from_slice(&self.theta);
        Ok(())
    }

    /// Fold the updates since the last consolidation into the consolidated weights (the EWC anchor) and the
    /// Fisher estimate; returns how many steps were folded.
    pub fn consolidate(&mut self) -> u32 {
        let n = self.session_steps;
        if n > 0 {
            let keep = self.options.fisher_decay;
            for (f, sq) in self.fisher.iter_mut().zip(&mut self.session_sq) {
                *f = keep * *f + (1.0 - keep) * *sq / n as f32;
                *sq = 0.0;
            }
        }
        self.anchor.copy_from_slice(&self.theta);
        self.session_steps = 0;
        n
    }

    /// The adapter as it is now, for generation (its digest is that of its weights, so a changed adapter is
    /// another adapter to the session's cache).
    pub fn adapter(&self, model: &Model, name: &str) -> LoraAdapter {
        let r = self.options.rank;
        let pairs = self.sites.iter().map(|s| {
            let pair = Pair {
                rank: r,
                a: self.theta[s.a..s.a + r * s.n_in].to_vec(),
                bt: self.theta[s.bt..s.bt + r * s.n_out].to_vec(),
            };
            (Site::Layer(s.layer, s.proj), pair)
        });
        let mut h = Sha256::new();
        h.update(b"ruvllm microlora");
        self.theta.iter().for_each(|v| h.update(v.to_le_bytes()));
        LoraAdapter::trained(model, name, self.options.alpha, h.finalize().into(), pairs.collect())
    }

    /// llama.cpp's GGUF LoRA adapter file of the weights as they are (`general.type = "adapter"`, `lora_a`
    /// `[n_in, rank]`, `lora_b` `[rank, n_out]`, f32), which `LoraAdapter::from_bytes` and llama.cpp read.
    pub fn to_gguf(&self, model: &Model, name: &str) -> Vec<u8> {
        let r = self.options.rank;
        // lora_b is B (n_out rows of `rank`); we keep Bᵀ.
        let bs: Vec<Vec<f32>> = self
            .sites
            .iter()
            .map(|s| {
                let bt = &self.theta[s.bt..s.bt + r * s.n_out];
                (0..s.n_out).flat_map(|i| (0..r).map(move |j| bt[j * s.n_out + i])).collect()
            })
            .collect();
        let mut tensors = Vec::new();
        for (s, b) in self.sites.iter().zip(&bs) {
            let weight = format!("blk.{}.{}.weight", s.layer, weight_name(s.proj));
            tensors.push((format!("{weight}.lora_a"), vec![s.n_in, r], &self.theta[s.a..s.a + r * s.n_in]));
            tensors.push((format!("{weight}.lora_b"), vec![r, s.n_out], &b[..]));
        }
        let metadata = [
            ("general.architecture", Value::String(model.config.arch.name().into())),
            ("general.type", Value::String("adapter".into())),
            ("general.name", Value::String(name.into())),
            ("adapter.type", Value::String("lora".into())),
            ("adapter.lora.alpha", Value::F32(self.options.alpha)),
        ];
        gguf::write_f32(&metadata, &tensors)
    }

    /// The whole training state as bytes (options, weights, the EWC anchor and Fisher estimate, Adam's moments),
    /// for a store to keep; [`MicroLora::from_bytes`] reads it back for the same model.
    ///
    /// ```text
    /// 0   magic "RVMLORA\0", version u32, model id (32 bytes)
    /// 44  rank, layers, projections (bit i: Proj::ALL[i]) u32 ×3; alpha, learning rate, EWC lambda,
    ///     Fisher decay f32 ×4; seed u64; steps u64; session steps u32; parameters u32
    /// 96  weights, anchor, Fisher, session squares, Adam m, Adam v: parameters × f32 each
    /// end CRC-32 of all the above
    /// ```
    /// The frame (magic, version, CRC-32) is `crate::record`'s.
    pub fn to_bytes(&self, model: &Model) -> Vec<u8> {
        let o = &self.options;
        let mut out = STATE_KIND.begin();
        out.extend(model.id().0);
        let mask =
            Proj::ALL.iter().enumerate().filter(|(_, p)| o.projections.contains(p)).fold(0u32, |m, (i, _)| m | 1 << i);
        for v in [o.rank as u32, o.layers as u32, mask] {
            out.extend(v.to_le_bytes());
        }
        for v in [o.alpha, o.learning_rate, o.ewc_lambda, o.fisher_decay] {
            out.extend(v.to_le_bytes());
        }
        out.extend(o.seed.to_le_bytes());
        out.extend(self.steps.to_le_bytes());
        out.extend(self.session_steps.to_le_bytes());
        out.extend((self.theta.len() as u32).to_le_bytes());
        for vs in [&self.theta, &self.anchor, &self.fisher, &self.session_sq, &self.m, &self.v] {
            vs.iter().for_each(|v| out.extend(v.to_le_bytes()));
        }
        seal(out)
    }

    /// The largest state [`MicroLora::to_bytes`] writes for `model` (the largest rank on every projection of
    /// every layer): longer bytes are refused before they are read.
    pub fn largest_state_bytes(model: &Model) -> usize {
        let c = &model.config;
        let layer: usize = Proj::ALL.iter().map(|&p| proj_shape(c, p)).map(|(n_in, n_out)| n_in + n_out).sum();
        let parameters = c.n_layers.saturating_mul(MAX_RANK).saturating_mul(layer);
        parameters.saturating_mul(6 * 4).saturating_add(STATE_HEADER_BYTES + 4)
    }

    /// Read a state [`MicroLora::to_bytes`] wrote, for `model`. Bytes from outside: a damaged, foreign or
    /// other model's state is `Error::Adapter`, and nothing is believed before the checksum and the layout hold.
    pub fn from_bytes(model: &Model, bytes: &[u8]) -> Result<MicroLora> {
        let bad = |m: &str| Error::Adapter(format!("saved MicroLoRA: {m}"));
        let (_, body) = STATE_KIND.open(bytes).map_err(|e| Error::Adapter(e.to_string()))?;
        if body[12..44] != model.id().0 {
            return Err(bad("it was trained for another model"));
        }
        let mask = u32_at(body, 52);
        let options = MicroLoraOptions {
            rank: u32_at(body, 44) as usize,
            layers: u32_at(body, 48) as usize,
            projections: Proj::ALL.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, &p)| p).collect(),
            alpha: f32_at(body, 56),
            learning_rate: f32_at(body, 60),
            ewc_lambda: f32_at(body, 64),
            fisher_decay: f32_at(body, 68),
            seed: u64_at(body, 72),
        };
        if mask >> Proj::ALL.len() != 0 {
            return Err(bad(&format!("unknown projections in mask {mask:#x}")));
        }
        let mut lora = MicroLora::new(model, options).map_err(|e| bad(&e.to_string()))?;
        let n = lora.theta.len();
        if u32_at(body, 92) as usize != n || body.len() != STATE_HEADER_BYTES + 6 * 4 * n {
            return Err(bad(&format!("{} bytes do not hold {n} parameters six times", body.len())));
        }
        let mut floats = body[STATE_HEADER_BYTES..].chunks_exact(4).map(|b| f32_at(b, 0));
        for vs in [&mut lora.theta, &mut lora.anchor, &mut lora.fisher, &mut lora.session_sq, &mut lora.m, &mut lora.v]
        {
            vs.iter_mut().for_each(|v| *v = floats.next().expect("sized above"));
        }
        let all = [&lora.theta, &lora.anchor, &lora.fisher, &lora.session_sq, &lora.m, &lora.v];
        if all.iter().any(|vs| vs.iter().any(|v| !v.is_finite())) {
            return Err(bad("a weight or moment is not finite"));
        }
        if [&lora.fisher, &lora.session_sq, &lora.v].iter().any(|vs| vs.iter().any(|&v| v < 0.0)) {
            return Err(bad("a squared quantity is negative"));
        }
        lora.steps = u64_at(body, 80);
        lora.session_steps = u32_at(body, 88);
        Ok(lora)
    }

    /// What the fast path needs: the trained layers' weights transposed (made at the first call).
    fn fast_path(&mut self, model: &Model) -> Arc<Vec<Transposed>> {
        let layers = self.first_layer..model.config.n_layers;
        self.transposed.get_or_insert_with(|| Arc::new(layers.map(|l| Transposed::of(model, l)).collect())).clone()
    }

    /// The frozen layers' output for `tokens`, `[T × d_model]`, and whether it was kept from an earlier step.
    fn frozen(&mut self, model: &Model, tokens: &[u32]) -> (Arc<Vec<f32>>, bool) {
        if let Some((_, x)) = self.prefixes.iter().find(|(t, _)| t == tokens) {
            return (x.clone(), true);
        }
        let c = &model.config;
        let n = tokens.len();
        let mut kv = KvCache::new(c.n_layers, c.kv_dim(), n);
        let mut s = RunState::new(model, n, n);
        let mut x = vec![0.0; n * c.d_model];
        residual_after(model, &mut kv, &mut s, tokens, 0, self.first_layer, &mut x);
        let x = Arc::new(x);
        self.keep_prefix(tokens, x.clone());
        (x, false)
    }

    fn keep_prefix(&mut self, tokens: &[u32], x: Arc<Vec<f32>>) {
        self.prefixes.retain(|(t, _)| t != tokens);
        if self.prefixes.len() == KEPT_PREFIXES {
            self.prefixes.pop_front();
        }
        self.prefixes.push_back((tokens.to_vec(), x));
    }

    /// Adam on `grad` (clipped to a norm of 1) plus the EWC penalty's gradient `λ·F·(θ - θ*)`.
    fn update(&mut self, grad: &[f32]) {
        const BETA1: f32 = 0.9;
        const BETA2: f32 = 0.999;
        const EPS: f32 = 1e-8;
        let norm = grad.iter().map(|g| g * g).sum::<f32>().sqrt();
        let clip = if norm > 1.0 { 1.0 / norm } else { 1.0 };
        // A stored state may carry any count: the counters saturate, and the bias correction's power is taken
        // of at most 2^20 steps (by then it is 1 in f32), so no count turns it negative or into a NaN.
        self.steps = self.steps.saturating_add(1);
        self.session_steps = self.session_steps.saturating_add(1);
        let t = self.steps.min(1 << 20) as i32;
        let (b1, b2) = (1.0 - BETA1.powi(t), 1.0 - BETA2.powi(t));
        let (lr, lambda) = (self.options.learning_rate, self.options.ewc_lambda);
        // One index over six parallel vectors: the loop says it more plainly than a six-way zip.
        #[allow(clippy::needless_range_loop)]
        for i in 0..self.theta.len() {
            let data = grad[i] * clip;
            self.session_sq[i] += data * data;
            let g = data + lambda * self.fisher[i] * (self.theta[i] - self.anchor[i]);
            self.m[i] = BETA1 * self.m[i] + (1.0 - BETA1) * g;
            self.v[i] = BETA2 * self.v[i] + (1.0 - BETA2) * g * g;
            self.theta[i] -= lr * (self.m[i] / b1) / ((self.v[i] / b2).sqrt() + EPS);
        }
    }
}

fn check_example(model: &Model, tokens: &[u32], first_target: usize) -> Result<()> {
    let n = tokens.len();
    if n > MAX_EXAMPLE_TOKENS {
        return Err(Error::InvalidArgument(format!("an example of {n} tokens is longer than {MAX_EXAMPLE_TOKENS}")));
    }
    if first_target == 0 || first_target >= n {
        return Err(Error::InvalidArgument(format!(
            "the response must start after the first token and before the end ({first_target} of {n} tokens)"
        )));
    }
    let vocab = model.config.vocab_size;
    match tokens.iter().find(|&&t| t as usize >= vocab) {
        Some(t) => Err(Error::InvalidArgument(format!("token id {t} is outside the vocabulary ({vocab})"))),
        None => Ok(()),
    }
}

/// The GGUF name of a layer's projection weight (`blk.N.<name>.weight`).
fn weight_name(p: Proj) -> &'static str {
    match p {
        Proj::Q => "attn_q",
        Proj::K => "attn_k",
        Proj::V => "attn_v",
        Proj::O => "attn_output",
        Proj::Gate => "ffn_gate",
        Proj::Up => "ffn_up",
        Proj::Down => "ffn_down",
    }
}

/// splitmix64, as a float in [0, 1).
fn uniform(state: &mut u64) -> f32 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
}

/// What one trained layer's forward pass keeps for its backward pass (`T` tokens).
struct LayerSaves {
    x0: Vec<f32>,    // [T × d] residual in
    inv1: Vec<f32>,  // [T] 1/rms of x0
    xb1: Vec<f32>,   // [T × d] attention norm's output
    q: Vec<f32>,     // [T × q_dim] after RoPE
    k: Vec<f32>,     // [T × kv_dim] after RoPE
    v: Vec<f32>,     // [T × kv_dim]
    probs: Vec<f32>, // [heads × T × T] attention weights (0 above the diagonal)
    att: Vec<f32>,   // [T × q_dim]
    x1: Vec<f32>,    // [T × d] residual after attention
    inv2: Vec<f32>,  // [T]
    xb2: Vec<f32>,   // [T × d]
    gate: Vec<f32>,  // [T × ffn] before SiLU
    up: Vec<f32>,    // [T × ffn]
    h: Vec<f32>,     // [T × ffn] silu(gate) * up
    /// Per adapted projection of the layer (indexed by `Proj as usize`): `A·x`, `[T × rank]`.
    u: [Vec<f32>; Proj::ALL.len()],
}

/// One forward (and backward) pass of the trained layers and the head on an example.
struct Pass<'a> {
    model: &'a Model,
    lora: &'a MicroLora,
    tokens: &'a [u32],
    first_target: usize,
    /// The fast path: the forward products on the int8 kernels, `dy·W` as products with these transposed copies of
    /// the trained layers' weights, and the head's backward pass over the probabilities that carry the gradient.
    /// `None`: everything in f32 from the weights as they are, so that the loss is smooth in the adapter's weights
    /// (what the finite-difference tests check).
    fast: Option<&'a [Transposed]>,
}

/// A projection's input and output widths: the shape of its weight, `n_out` rows of `n_in`.
fn proj_shape(c: &Config, proj: Proj) -> (usize, usize) {
    let (d, q, kv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim);
    match proj {
        Proj::Q => (d, q),
        Proj::K | Proj::V => (d, kv),
        Proj::O => (q, d),
        Proj::Gate | Proj::Up => (d, ff),
        Proj::Down => (ff, d),
    }
}

/// A trained layer's seven weights transposed (`n_in` rows of `n_out`), in Q8_0, indexed by `Proj as usize`; `None`
/// where `n_out` is not a whole number of Q8_0 blocks (tiny test models), which the f32 path then serves.
pub(crate) struct Transposed([Option<(Vec<u8>, usize, usize)>; Proj::ALL.len()]);

impl Transposed {
    fn of(model: &Model, layer: usize) -> Transposed {
        let (lw, file) = (&model.weights.layers[layer], model.file());
        Transposed(Proj::ALL.map(|p| {
            let w = *weight(lw, p);
            let (rows, cols) = (w.rows, w.cols);
            if rows % GgmlType::Q8_0.block_size() != 0 {
                return None;
            }
            let wf = to_f32(file, w);
            let trb = GgmlType::Q8_0.row_bytes(rows);
            let mut bytes = vec![0u8; cols * trb];
            let mut col = vec![0.0; rows];
            for (k, out) in bytes.chunks_exact_mut(trb).enumerate() {
                col.iter_mut().enumerate().for_each(|(i, v)| *v = wf[i * cols + k]);
                quantize_row(GgmlType::Q8_0, &col, out);
            }
            Some((bytes, cols, rows))
        }))
    }

    fn view(&self, p: Proj) -> Option<QuantMatrix<'_>> {
        let (bytes, rows, cols) = self.0[p as usize].as_ref()?;
        Some(QuantMatrix { ty: GgmlType::Q8_0, rows: *rows, cols: *cols, bytes })
    }
}

/// A layer's weight of projection `p`.
fn weight(lw: &LayerWeights, p: Proj) -> &MatrixRef {
    match p {
        Proj::Q => &lw.wq,
        Proj::K => &lw.wk,
        Proj::V => &lw.wv,
        Proj::O => &lw.wo,
        Proj::Gate => &lw.w_gate,
        Proj::Up => &lw.w_up,
        Proj::Down => &lw.w_down,
    }
}

impl Pass<'_> {
    fn site(&self, layer: usize, proj: Proj) -> Option<&TrainedSite> {
        self.lora.sites.iter().find(|s| s.layer == layer && s.proj == proj)
    }

    fn scale(&self) -> f32 {
        self.lora.options.alpha / self.lora.options.rank as f32
    }

    /// The weight of projection `at` (layer, proj).
    fn weight(&self, at: (usize, Proj)) -> QuantMatrix<'_> {
        weight(&self.model.weights.layers[at.0], at.1).view(self.model.file())
    }

    /// `y = x·Wᵀ` for projection `at` (layer, proj) and the adapter's `s·B·(A·x)` where it adapts it, keeping
    /// `A·x` in `u`.
    fn project(&self, at: (usize, Proj), x: &[f32], n: usize, y: &mut [f32], u: &mut Vec<f32>) {
        self.product(self.weight(at), x, n, y);
        let Some(site) = self.site(at.0, at.1) else { return };
        let (r, theta, s) = (self.lora.options.rank, &self.lora.theta, self.scale());
        *u = vec![0.0; n * r];
        for ((x, y), u) in x.chunks_exact(site.n_in).zip(y.chunks_exact_mut(site.n_out)).zip(u.chunks_exact_mut(r)) {
            for j in 0..r {
                u[j] = dot(&theta[site.a + j * site.n_in..][..site.n_in], x);
                axpy(y, s * u[j], &theta[site.bt + j * site.n_out..][..site.n_out]);
            }
        }
    }

    /// `y = x·Wᵀ` for `n` rows of `x`: on the int8 kernels on the fast path, else in f32.
    fn product(&self, w: QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) {
        if self.fast.is_some() {
            forward::project(&mut Activations::new(), x, n, &mut [(w, y)]);
        } else {
            matmul_f32(&w, x, n, y);
        }
    }

    /// The backward pass of [`Pass::project`] of `at` on input `x` (its layer's saves `sv` hold `A·x`): adds `dy·W`
    /// (and the adapter's part) to `dx` when there is one, and the adapter's gradient to `grad`.
    #[allow(clippy::too_many_arguments)]
    fn project_back(
        &self,
        at: (usize, Proj),
        sv: &LayerSaves,
        x: &[f32],
        dy: &[f32],
        n: usize,
        dx: Option<&mut [f32]>,
        grad: &mut [f32],
    ) {
        let site = self.site(at.0, at.1);
        let u = &sv.u[at.1 as usize];
        let mut dx = dx;
        if let Some(dx) = dx.as_deref_mut() {
            match self.fast.and_then(|t| t[at.0 - self.lora.first_layer].view(at.1)) {
                Some(wt) => {
                    let mut prod = vec![0.0; dx.len()];
                    forward::project(&mut Activations::new(), dy, n, &mut [(wt, &mut prod)]);
                    dx.iter_mut().zip(&prod).for_each(|(d, p)| *d += p);
                }
                None => matmul_t_f32(&self.weight(at), dy, n, dx),
            }
        }
        let Some(site) = site else { return };
        let (r, theta, s) = (self.lora.options.rank, &self.lora.theta, self.scale());
        let mut du = vec![0.0; r];
        for t in 0..n {
            let (x, dy, u) = (&x[t * site.n_in..][..site.n_in], &dy[t * site.n_out..][..site.n_out], &u[t * r..][..r]);
            for j in 0..r {
                du[j] = s * dot(&theta[site.bt + j * site.n_out..][..site.n_out], dy);
                axpy(&mut grad[site.bt + j * site.n_out..][..site.n_out], s * u[j], dy);
                axpy(&mut grad[site.a + j * site.n_in..][..site.n_in], du[j], x);
            }
            if let Some(dx) = dx.as_deref_mut() {
                let dx = &mut dx[t * site.n_in..][..site.n_in];
                for j in 0..r {
                    axpy(dx, du[j], &theta[site.a + j * site.n_in..][..site.n_in]);
                }
            }
        }
    }

    /// The forward pass from the frozen layers' output `x0`, the loss, and (with `grad`) the backward pass.
    fn run(&self, x0: &[f32], reward: f32, grad: Option<&mut [f32]>) -> StepReport {
        let t_start = now_ms();
        let (c, w, file) = (&self.model.config, &self.model.weights, self.model.file());
        let n = self.tokens.len();
        let (d, qd, kvd, ff, eps) = (c.d_model, c.q_dim(), c.kv_dim(), c.ffn_dim, c.rms_eps);
        let rope = self.model.rope(n);
        let pairs = rope.pairs();
        let mut angles = vec![(0.0, 0.0); n * pairs];
        for (t, a) in angles.chunks_exact_mut(pairs).enumerate() {
            rope.angles(t, a);
        }

        let mut x = x0.to_vec();
        let mut saves = Vec::new();
        for l in self.lora.first_layer..c.n_layers {
            let lw = &w.layers[l];
            let mut sv = LayerSaves {
                x0: x.clone(),
                inv1: vec![0.0; n],
                xb1: vec![0.0; n * d],
                q: vec![0.0; n * qd],
                k: vec![0.0; n * kvd],
                v: vec![0.0; n * kvd],
                probs: vec![0.0; c.n_heads * n * n],
                att: vec![0.0; n * qd],
                x1: vec![0.0; n * d],
                inv2: vec![0.0; n],
                xb2: vec![0.0; n * d],
                gate: vec![0.0; n * ff],
                up: vec![0.0; n * ff],
                h: vec![0.0; n * ff],
                u: Default::default(),
            };
            norm_saving(&sv.x0, &lw.attn_norm, eps, &mut sv.xb1, &mut sv.inv1);
            let [uq, uk, uv, uo, ug, uu, ud] = &mut sv.u;
            self.project((l, Proj::Q), &sv.xb1, n, &mut sv.q, uq);
            self.project((l, Proj::K), &sv.xb1, n, &mut sv.k, uk);
            self.project((l, Proj::V), &sv.xb1, n, &mut sv.v, uv);
            for (buf, bias, dim) in [(&mut sv.q, &lw.bq, qd), (&mut sv.k, &lw.bk, kvd), (&mut sv.v, &lw.bv, kvd)] {
                if let Some(b) = bias {
                    buf.chunks_exact_mut(dim).for_each(|row| row.iter_mut().zip(b).for_each(|(x, b)| *x += b));
                }
            }
            rotate(&rope, &mut sv.q, qd, &angles, false);
            rotate(&rope, &mut sv.k, kvd, &angles, false);
            attention_forward(c.n_heads, c.n_kv_heads, c.head_dim, n, &sv.q, &sv.k, &sv.v, &mut sv.probs, &mut sv.att);
            let mut proj = vec![0.0; n * d];
            self.project((l, Proj::O), &sv.att, n, &mut proj, uo);
            sv.x1.iter_mut().zip(&sv.x0).zip(&proj).for_each(|((x1, x0), p)| *x1 = x0 + p);

            norm_saving(&sv.x1, &lw.ffn_norm, eps, &mut sv.xb2, &mut sv.inv2);
            self.project((l, Proj::Gate), &sv.xb2, n, &mut sv.gate, ug);
            self.project((l, Proj::Up), &sv.xb2, n, &mut sv.up, uu);
            for ((h, &g), &u) in sv.h.iter_mut().zip(&sv.gate).zip(&sv.up) {
                *h = silu(g) * u;
            }
            self.project((l, Proj::Down), &sv.h, n, &mut proj, ud);
            x.iter_mut().zip(&sv.x1).zip(&proj).for_each(|((x, x1), p)| *x = x1 + p);
            saves.push(sv);
        }

        // The head, on the rows that predict a response token: row t predicts tokens[t + 1].
        let rows = self.first_target - 1..n - 1;
        let nl = rows.len();
        let xl = &x[rows.start * d..rows.end * d];
        let (mut xf, mut invf) = (vec![0.0; nl * d], vec![0.0; nl]);
        norm_saving(xl, &w.output_norm, eps, &mut xf, &mut invf);
        let vocab = c.vocab_size;
        let mut logits = vec![0.0; nl * vocab];
        self.product(w.output.view(file), &xf, nl, &mut logits);
        // Softmax, the loss, and (in place) its gradient with respect to the logits.
        let weight = reward.abs() / nl as f32;
        let mut loss = 0.0f64;
        for (row, &target) in logits.chunks_exact_mut(vocab).zip(&self.tokens[self.first_target..]) {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f32 = row
                .iter_mut()
                .map(|v| {
                    *v = (*v - max).exp();
                    *v
                })
                .sum();
            row.iter_mut().for_each(|v| *v /= sum);
            let p = row[target as usize];
            if reward > 0.0 {
                // d(-log p_y)/dz = p - onehot(y)
                loss -= (p.max(f32::MIN_POSITIVE) as f64).ln();
                row[target as usize] -= 1.0;
                row.iter_mut().for_each(|g| *g *= weight);
            } else {
                // d(-log(1 - p_y))/dz_j = p_y/(1 - p_y) · (onehot(y)_j - p_j)
                let rest = (1.0 - p).max(1e-6);
                loss -= (rest as f64).ln();
                let k = weight * p / rest;
                row.iter_mut().for_each(|g| *g *= -k);
                row[target as usize] += k;
            }
        }
        let mut report = StepReport { loss: (loss as f32) * weight, tokens: nl, ..StepReport::default() };
        let t_forward = now_ms();
        report.forward_ms = t_forward - t_start;
        let Some(grad) = grad else { return report };

        // Backward: the head, then the layers from the last.
        let mut dxf = vec![0.0; nl * d];
        if self.fast.is_some() {
            sparse_matmul_t(&w.output.view(file), &logits, nl, &mut dxf);
        } else {
            matmul_t_f32(&w.output.view(file), &logits, nl, &mut dxf);
        }
        let mut dx = vec![0.0; n * d];
        norm_back(xl, &invf, &w.output_norm, &dxf, &mut dx[rows.start * d..rows.end * d]);
        for (i, sv) in saves.iter().enumerate().rev() {
            let l = self.lora.first_layer + i;
            let lw = &w.layers[l];
            let first = i == 0;
            // Feed-forward block: dx is the gradient of x = x1 + Wd·h.
            let mut dh = vec![0.0; n * ff];
            self.project_back((l, Proj::Down), sv, &sv.h, &dx, n, Some(&mut dh), grad);
            let (mut dgate, mut dup) = (vec![0.0; n * ff], vec![0.0; n * ff]);
            for i in 0..n * ff {
                let (g, sig) = (sv.gate[i], sigmoid(sv.gate[i]));
                dup[i] = dh[i] * g * sig;
                dgate[i] = dh[i] * sv.up[i] * sig * (1.0 + g * (1.0 - sig));
            }
            let mut dxb2 = vec![0.0; n * d];
            self.project_back((l, Proj::Gate), sv, &sv.xb2, &dgate, n, Some(&mut dxb2), grad);
            self.project_back((l, Proj::Up), sv, &sv.xb2, &dup, n, Some(&mut dxb2), grad);
            norm_back(&sv.x1, &sv.inv2, &lw.ffn_norm, &dxb2, &mut dx);
            // Attention block: dx is now the gradient of x1 = x0 + Wo·att.
            let mut datt = vec![0.0; n * qd];
            self.project_back((l, Proj::O), sv, &sv.att, &dx, n, Some(&mut datt), grad);
            let (mut dq, mut dk, mut dv) = (vec![0.0; n * qd], vec![0.0; n * kvd], vec![0.0; n * kvd]);
            attention_backward(c.n_heads, c.n_kv_heads, c.head_dim, n, sv, &datt, &mut dq, &mut dk, &mut dv);
            rotate(&rope, &mut dq, qd, &angles, true);
            rotate(&rope, &mut dk, kvd, &angles, true);
            // The first trained layer's input takes no gradient: only its adapters' weights do.
            let mut dxb1 = (!first).then(|| vec![0.0; n * d]);
            for (p, dy) in [(Proj::Q, &dq), (Proj::K, &dk), (Proj::V, &dv)] {
                self.project_back((l, p), sv, &sv.xb1, dy, n, dxb1.as_deref_mut(), grad);
            }
            if let Some(dxb1) = dxb1 {
                norm_back(&sv.x0, &sv.inv1, &lw.attn_norm, &dxb1, &mut dx);
            }
        }
        report.backward_ms = now_ms() - t_forward;
        report
    }
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// RMSNorm of each row of `x` into `out`, keeping each row's `1/rms` in `inv`.
fn norm_saving(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32], inv: &mut [f32]) {
    let d = weight.len();
    for ((x, out), inv) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)).zip(inv.iter_mut()) {
        *inv = inv_rms(x, eps);
        for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
            *o = v * *inv * w;
        }
    }
}

/// `dx += ∂/∂x` of RMSNorm rows `y = x·r·w` given `dy`: `r·w·dy - x·r³·Σ(w·dy·x)/d`.
fn norm_back(x: &[f32], inv: &[f32], weight: &[f32], dy: &[f32], dx: &mut [f32]) {
    let d = weight.len();
    for (((x, &r), dy), dx) in x.chunks_exact(d).zip(inv).zip(dy.chunks_exact(d)).zip(dx.chunks_exact_mut(d)) {
        let dot: f32 = x.iter().zip(dy).zip(weight).map(|((x, dy), w)| x * dy * w).sum();
        let k = r * r * r * dot / d as f32;
        for (((dx, &x), &dy), &w) in dx.iter_mut().zip(x).zip(dy).zip(weight) {
            *dx += r * w * dy - x * k;
        }
    }
}

/// RoPE on every row of `x` (rows of `dim`, token `t` at position `t`), or its transpose (`back`: the
/// rotation by the opposite angle, for gradients).
fn rotate(rope: &Rope, x: &mut [f32], dim: usize, angles: &[(f32, f32)], back: bool) {
    let pairs = rope.pairs();
    let mut conj = vec![(0.0, 0.0); pairs];
    for (t, row) in x.chunks_exact_mut(dim).enumerate() {
        let a = &angles[t * pairs..][..pairs];
        if back {
            conj.iter_mut().zip(a).for_each(|(c, &(cos, sin))| *c = (cos, -sin));
            rope.rotate(row, &conj);
        } else {
            rope.rotate(row, a);
        }
    }
}

/// Causal attention of `n` tokens at positions `0..n` in f32, keeping the softmax weights in `probs`.
#[allow(clippy::too_many_arguments)]
fn attention_forward(
    heads: usize,
    kv_heads: usize,
    hd: usize,
    n: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &mut [f32],
    out: &mut [f32],
) {
    let (qd, kvd, group, scale) = (heads * hd, kv_heads * hd, heads / kv_heads, 1.0 / (hd as f32).sqrt());
    for h in 0..heads {
        let g = h / group;
        for t in 0..n {
            let qt = &q[t * qd + h * hd..][..hd];
            let p = &mut probs[(h * n + t) * n..][..t + 1];
            for (j, p) in p.iter_mut().enumerate() {
                *p = dot(qt, &k[j * kvd + g * hd..][..hd]) * scale;
            }
            let max = p.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f32 = p
                .iter_mut()
                .map(|v| {
                    *v = (*v - max).exp();
                    *v
                })
                .sum();
            let o = &mut out[t * qd + h * hd..][..hd];
            o.fill(0.0);
            for (j, p) in p.iter_mut().enumerate() {
                *p /= sum;
                axpy(o, *p, &v[j * kvd + g * hd..][..hd]);
            }
        }
    }
}

/// The backward pass of [`attention_forward`]: `dq`, `dk`, `dv` from `datt`.
#[allow(clippy::too_many_arguments)]
fn attention_backward(
    heads: usize,
    kv_heads: usize,
    hd: usize,
    n: usize,
    sv: &LayerSaves,
    datt: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (qd, kvd, group, scale) = (heads * hd, kv_heads * hd, heads / kv_heads, 1.0 / (hd as f32).sqrt());
    let mut ds = vec![0.0; n];
    for h in 0..heads {
        let g = h / group;
        for t in 0..n {
            let p = &sv.probs[(h * n + t) * n..][..t + 1];
            let d_o = &datt[t * qd + h * hd..][..hd];
            // dP_j = dO·v_j, dv_j += P_j·dO; dS_j = P_j·(dP_j - Σ P·dP).
            let mut sum = 0.0;
            for (j, &pj) in p.iter().enumerate() {
                let dp = dot(d_o, &sv.v[j * kvd + g * hd..][..hd]);
                axpy(&mut dv[j * kvd + g * hd..][..hd], pj, d_o);
                ds[j] = dp;
                sum += pj * dp;
            }
            let qt = &sv.q[t * qd + h * hd..][..hd];
            for (j, &pj) in p.iter().enumerate() {
                let s = pj * (ds[j] - sum) * scale;
                axpy(&mut dq[t * qd + h * hd..][..hd], s, &sv.k[j * kvd + g * hd..][..hd]);
                axpy(&mut dk[j * kvd + g * hd..][..hd], s, qt);
            }
        }
    }
}

/// `y = x·Wᵀ` for `n` rows of `x`, in f32 with `W` dequantized a row at a time; the threads share `W`'s rows.
fn matmul_f32(w: &QuantMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    let mut yt = vec![0.0; rows * n];
    for_each_row_chunk(&mut yt, n, |i0, out| {
        let mut row = vec![0.0; cols];
        for (i, out) in out.chunks_exact_mut(n).enumerate() {
            dequantize_row(w.ty, &w.bytes[(i0 + i) * rb..][..rb], &mut row);
            for (t, o) in out.iter_mut().enumerate() {
                *o = dot(&row, &x[t * cols..][..cols]);
            }
        }
    });
    for (i, col) in yt.chunks_exact(n).enumerate() {
        for (t, &v) in col.iter().enumerate() {
            y[t * rows + i] = v;
        }
    }
}

/// Of a row of gradients, what the entries below the threshold this returns add up to at most (as a share of the
/// row's absolute sum): the head's gradient is a softmax's, nearly all of whose mass is on a few hundred tokens.
const DROPPED_SHARE: f32 = 1e-3;

/// [`matmul_t_f32`] over the entries of each row of `dy` that carry all but [`DROPPED_SHARE`] of its absolute sum
/// (each weight row is dequantized once, if any row needs it).
fn sparse_matmul_t(w: &QuantMatrix, dy: &[f32], n: usize, dx: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    // Per row of dy: a threshold from a histogram of the entries' binary exponents.
    let thresholds: Vec<f32> = dy
        .chunks_exact(rows)
        .map(|g| {
            let mut mass = [0f32; 256];
            let mut total = 0.0;
            for v in g {
                mass[((v.to_bits() >> 23) & 0xff) as usize] += v.abs();
                total += v.abs();
            }
            // The smallest exponents go while what they hold stays under the budget.
            let (mut dropped, mut keep_from) = (0.0, 0);
            for (e, m) in mass.iter().enumerate() {
                if dropped + m > DROPPED_SHARE * total {
                    keep_from = e;
                    break;
                }
                dropped += m;
            }
            f32::from_bits((keep_from as u32) << 23)
        })
        .collect();
    let mut row = vec![0.0; cols];
    for i in 0..rows {
        if !(0..n).any(|t| dy[t * rows + i].abs() >= thresholds[t]) {
            continue;
        }
        dequantize_row(w.ty, &w.bytes[i * rb..][..rb], &mut row);
        for t in 0..n {
            let g = dy[t * rows + i];
            if g.abs() >= thresholds[t] {
                axpy(&mut dx[t * cols..][..cols], g, &row);
            }
        }
    }
}

/// `dx += dy·W` for `n` rows of `dy`, in f32; the threads share the rows of `dx` (each dequantizes all of `W`).
fn matmul_t_f32(w: &QuantMatrix, dy: &[f32], n: usize, dx: &mut [f32]) {
    let (rows, cols, rb) = (w.rows, w.cols, w.row_bytes());
    debug_assert_eq!(dx.len(), n * cols);
    for_each_row_chunk(dx, cols, |t0, dx| {
        let mut row = vec![0.0; cols];
        let nt = dx.len() / cols;
        for i in 0..rows {
            dequantize_row(w.ty, &w.bytes[i * rb..][..rb], &mut row);
            for t in 0..nt {
                let g = dy[(t0 + t) * rows + i];
                if g != 0.0 {
                    axpy(&mut dx[t * cols..][..cols], g, &row);
                }
            }
        }
    });
}

// The backward pass against finite differences of the same loss, on the tiny models the fixture script writes
// (natively: the wasm32 suites read no files from here).
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::test_support::Rng;

    fn tiny(file: &str) -> Model {
        let dir = std::env::var("RUVLLM_FIXTURES").expect("RUVLLM_FIXTURES: the tiny models (scripts/test.sh)");
        Model::from_bytes(std::fs::read(format!("{dir}/{file}")).expect(file)).expect(file)
    }

    /// The loss with the weights moved by `step` along `dir`.
    fn loss_at(
        lora: &mut MicroLora,
        model: &Model,
        tokens: &[u32],
        first: usize,
        reward: f32,
        dir: &[f32],
        step: f32,
    ) -> f64 {
        let theta = lora.theta.clone();
        lora.theta.iter_mut().zip(dir).for_each(|(t, d)| *t += step * d);
        let (x0, _) = lora.frozen(model, tokens);
        let loss = Pass { model, lora, tokens, first_target: first, fast: None }.run(&x0, reward, None).loss;
        lora.theta = theta;
        loss as f64
    }

    fn gradient(lora: &mut MicroLora, model: &Model, tokens: &[u32], first: usize, reward: f32) -> Vec<f32> {
        let (x0, _) = lora.frozen(model, tokens);
        let mut grad = vec![0.0; lora.theta.len()];
        Pass { model, lora, tokens, first_target: first, fast: None }.run(&x0, reward, Some(&mut grad));
        grad
    }

    #[test]
    fn the_gradient_is_the_loss_finite_differences() {
        for file in ["tiny-llama-spm.gguf", "tiny-qwen2.gguf"] {
            let model = tiny(file);
            let vocab = model.config.vocab_size as u64;
            let options = MicroLoraOptions {
                rank: 3,
                layers: 2,
                projections: Proj::ALL.to_vec(),
                learning_rate: 2e-2,
                seed: 7,
                ..MicroLoraOptions::default()
            };
            let mut lora = MicroLora::new(&model, options).unwrap();
            let mut rng = Rng::new(3);
            let tokens: Vec<u32> = (0..24).map(|_| (rng.next_u64() % vocab) as u32).collect();
            // B starts at 0, where A's gradient is 0: a few steps first, so that every weight takes part.
            for _ in 0..3 {
                lora.train_step(&model, &tokens, 10, 1.0).unwrap();
            }
            for reward in [1.0, -0.5] {
                let grad = gradient(&mut lora, &model, &tokens, 10, reward);
                // Along a random direction through all weights, and through each site's A and B alone.
                let mut dirs = vec![(0..lora.theta.len()).map(|_| rng.normal()).collect::<Vec<f32>>()];
                for s in &lora.sites {
                    for range in [s.a..s.bt, s.bt..s.bt + lora.options.rank * s.n_out] {
                        let mut d = vec![0.0; lora.theta.len()];
                        d[range.clone()].iter_mut().for_each(|v| *v = rng.normal());
                        dirs.push(d);
                    }
                }
                for (i, dir) in dirs.iter().enumerate() {
                    let norm = dir.iter().map(|v| v * v).sum::<f32>().sqrt();
                    let dir: Vec<f32> = dir.iter().map(|v| v / norm).collect();
                    let analytic: f64 = grad.iter().zip(&dir).map(|(g, d)| (*g as f64) * (*d as f64)).sum();
                    let h = 1e-2;
                    let numeric = (loss_at(&mut lora, &model, &tokens, 10, reward, &dir, h)
                        - loss_at(&mut lora, &model, &tokens, 10, reward, &dir, -h))
                        / (2.0 * h as f64);
                    let err = (analytic - numeric).abs();
                    assert!(
                        err <= 3e-4 + 0.01 * numeric.abs(),
                        "{file}, reward {reward}, direction {i}: backward {analytic:.6}, finite differences {numeric:.6}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_fast_path_gives_the_exact_loss_and_gradient_within_int8_rounding() {
        for file in ["tiny-llama-spm.gguf", "tiny-qwen2.gguf"] {
            let model = tiny(file);
            let vocab = model.config.vocab_size as u64;
            let options =
                MicroLoraOptions { rank: 2, layers: 2, projections: Proj::ALL.to_vec(), ..Default::default() };
            let mut lora = MicroLora::new(&model, options).unwrap();
            let mut rng = Rng::new(5);
            let tokens: Vec<u32> = (0..32).map(|_| (rng.next_u64() % vocab) as u32).collect();
            for _ in 0..3 {
                lora.train_step(&model, &tokens, 12, 1.0).unwrap();
            }
            let exact = gradient(&mut lora, &model, &tokens, 12, 1.0);
            let fast_path = lora.fast_path(&model);
            let (x0, _) = lora.frozen(&model, &tokens);
            let mut fast = vec![0.0; exact.len()];
            let pass = Pass { model: &model, lora: &lora, tokens: &tokens, first_target: 12, fast: Some(&fast_path) };
            let fast_loss = pass.run(&x0, 1.0, Some(&mut fast)).loss;
            let exact_loss = loss_at(&mut lora, &model, &tokens, 12, 1.0, &vec![0.0; exact.len()], 0.0);
            assert!(
                (fast_loss as f64 - exact_loss).abs() < 0.01 * exact_loss,
                "{file}: loss {fast_loss} vs {exact_loss}"
            );
            let dot: f64 = exact.iter().zip(&fast).map(|(a, b)| (*a as f64) * (*b as f64)).sum();
            let norm = |g: &[f32]| g.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
            let cosine = dot / (norm(&exact) * norm(&fast));
            assert!(cosine > 0.99, "{file}: cosine {cosine}, norms {} {}", norm(&exact), norm(&fast));
        }
    }

    #[test]
    fn the_adapter_and_its_gguf_are_the_trained_weights() {
        let model = tiny("tiny-llama-spm.gguf");
        let options =
            MicroLoraOptions { projections: vec![Proj::Q, Proj::V, Proj::Down], ..MicroLoraOptions::default() };
        let mut lora = MicroLora::new(&model, options).unwrap();
        let tokens: Vec<u32> = (1..20).collect();
        for _ in 0..3 {
            lora.train_step(&model, &tokens, 8, 1.0).unwrap();
        }
        let live = lora.adapter(&model, "live");
        let file = LoraAdapter::from_bytes(&model, lora.to_gguf(&model, "exported")).expect("our GGUF reads back");
        assert_eq!(file.name(), Some("exported"));
        assert_eq!(file.alpha(), lora.options.alpha);
        for s in &lora.sites {
            let (a, b) =
                (live.pair(Site::Layer(s.layer, s.proj)).unwrap(), file.pair(Site::Layer(s.layer, s.proj)).unwrap());
            assert_eq!((a.rank, &a.a, &a.bt), (b.rank, &b.a, &b.bt), "layer {} {:?}", s.layer, s.proj);
        }
        // Sites it does not adapt stay empty; another step makes another adapter.
        assert!(live.pair(Site::Layer(model.config.n_layers - 1, Proj::K)).is_none());
        assert!(live.pair(Site::Layer(model.config.n_layers - 5, Proj::Q)).is_none());
        lora.train_step(&model, &tokens, 8, 1.0).unwrap();
        assert_ne!(lora.adapter(&model, "live").digest(), live.digest());
    }

    #[test]
    fn a_saved_state_reads_back_whole_and_damage_is_refused() {
        let model = tiny("tiny-llama-spm.gguf");
        let options = MicroLoraOptions { rank: 3, projections: vec![Proj::K, Proj::Up], ..MicroLoraOptions::default() };
        let mut lora = MicroLora::new(&model, options).unwrap();
        let tokens: Vec<u32> = (1..20).collect();
        lora.train_step(&model, &tokens, 8, 1.0).unwrap();
        lora.consolidate();
        lora.train_step(&model, &tokens, 8, -1.0).unwrap();
        let bytes = lora.to_bytes(&model);
        let mut back = MicroLora::from_bytes(&model, &bytes).unwrap();
        assert_eq!(back.options, lora.options);
        assert_eq!((back.steps, back.session_steps), (lora.steps, lora.session_steps));
        assert_eq!(
            [&back.theta, &back.anchor, &back.fisher, &back.session_sq, &back.m, &back.v],
            [&lora.theta, &lora.anchor, &lora.fisher, &lora.session_sq, &lora.m, &lora.v]
        );
        assert_eq!(back.to_bytes(&model), bytes);
        let c = &model.config;
        let options = MicroLoraOptions {
            rank: MAX_RANK,
            layers: c.n_layers,
            projections: Proj::ALL.to_vec(),
            ..Default::default()
        };
        let largest = MicroLora::new(&model, options).unwrap().to_bytes(&model);
        assert_eq!(largest.len(), MicroLora::largest_state_bytes(&model));
        // The next step is the same step.
        let (a, b) =
            (lora.train_step(&model, &tokens, 8, 1.0).unwrap(), back.train_step(&model, &tokens, 8, 1.0).unwrap());
        assert_eq!(a.loss, b.loss);
        assert_eq!(lora.theta, back.theta);

        let refused = |b: &[u8]| matches!(MicroLora::from_bytes(&model, b), Err(Error::Adapter(_)));
        assert!(refused(&bytes[..bytes.len() - 1]));
        assert!(refused(&bytes[..10]));
        assert!(refused(b""));
        for at in [0, 9, 20, 50, 100, bytes.len() - 2] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(refused(&damaged), "a flipped bit at {at}");
        }
        assert!(refused(
            &MicroLora::new(&model, MicroLoraOptions::default()).unwrap().to_bytes(&tiny("tiny-llama3.gguf"))
        ));
    }

    /// A stored state may carry any step counts (a long life, or bytes made with a fresh checksum): the next
    /// steps keep every weight and moment finite, and the state still reads back.
    #[test]
    fn any_stored_step_count_trains_on_with_finite_weights() {
        let model = tiny("tiny-llama-spm.gguf");
        let tokens: Vec<u32> = (1..20).collect();
        for (steps, session_steps) in [(u32::MAX as u64, u32::MAX), (u64::MAX, 7), ((1 << 31) - 1, 0)] {
            let mut lora = MicroLora::new(&model, MicroLoraOptions::default()).unwrap();
            lora.train_step(&model, &tokens, 8, 1.0).unwrap();
            (lora.steps, lora.session_steps) = (steps, session_steps);
            let mut back = MicroLora::from_bytes(&model, &lora.to_bytes(&model)).unwrap();
            for reward in [1.0, -1.0] {
                back.train_step(&model, &tokens, 8, reward).unwrap();
            }
            back.consolidate();
            let all = [&back.theta, &back.anchor, &back.fisher, &back.session_sq, &back.m, &back.v];
            assert!(all.iter().all(|vs| vs.iter().all(|v| v.is_finite())), "{steps} steps");
            assert!(back.steps >= steps && MicroLora::from_bytes(&model, &back.to_bytes(&model)).is_ok());
        }
    }

    #[test]
    fn protected_text_moves_less_under_training_than_without_protection() {
        let model = tiny("tiny-llama-spm.gguf");
        let vocab = model.config.vocab_size as u64;
        let mut rng = Rng::new(11);
        let mut text = |n: usize| (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect::<Vec<u32>>();
        let (taught, kept) = (text(24), text(24));
        let mut moved = |protect: bool| {
            let options = MicroLoraOptions { learning_rate: 2e-2, ewc_lambda: 1e7, ..MicroLoraOptions::default() };
            let mut lora = MicroLora::new(&model, options).unwrap();
            // B = 0 makes A's gradient 0: one step elsewhere first, so that the estimate covers every weight.
            lora.train_step(&model, &text(24), 4, 1.0).unwrap();
            if protect {
                lora.protect(&model, &[(kept.clone(), 4)]).unwrap();
            } else {
                lora.consolidate();
            }
            let before = lora.loss(&model, &kept, 4).unwrap();
            for _ in 0..10 {
                lora.train_step(&model, &taught, 4, 1.0).unwrap();
            }
            (lora.loss(&model, &kept, 4).unwrap() - before).abs()
        };
        let (with, without) = (moved(true), moved(false));
        assert!(with < 0.5 * without, "the protected text's loss moved {with} with protection, {without} without");
    }

    #[test]
    fn bad_options_and_examples_are_refused() {
        let model = tiny("tiny-llama-spm.gguf");
        let n_layers = model.config.n_layers;
        for options in [
            MicroLoraOptions { rank: 0, ..Default::default() },
            MicroLoraOptions { rank: 17, ..Default::default() },
            MicroLoraOptions { layers: 0, ..Default::default() },
            MicroLoraOptions { layers: n_layers + 1, ..Default::default() },
            MicroLoraOptions { projections: vec![], ..Default::default() },
            MicroLoraOptions { learning_rate: f32::NAN, ..Default::default() },
            MicroLoraOptions { fisher_decay: 1.5, ..Default::default() },
        ] {
            assert!(matches!(MicroLora::new(&model, options.clone()), Err(Error::InvalidArgument(_))), "{options:?}");
        }
        let mut lora = MicroLora::new(&model, MicroLoraOptions::default()).unwrap();
        let vocab = model.config.vocab_size as u32;
        for (tokens, first, reward) in [
            (vec![1, 2, 3], 0, 1.0),
            (vec![1, 2, 3], 3, 1.0),
            (vec![1, vocab, 3], 1, 1.0),
            (vec![1, 2, 3], 1, 0.0),
            (vec![1, 2, 3], 1, f32::INFINITY),
            (vec![1; MAX_EXAMPLE_TOKENS + 1], 1, 1.0),
        ] {
            let r = lora.train_step(&model, &tokens, first, reward);
            assert!(
                matches!(r, Err(Error::InvalidArgument(_))),
                "{:?} from {first}, reward {reward}: {r:?}",
                &tokens[..3]
            );
        }
        assert_eq!(lora.steps(), 0);
        let gemma = tiny("tiny-qwen3.gguf");
        assert!(matches!(MicroLora::new(&gemma, MicroLoraOptions::default()), Err(Error::Adapter(_))));
    }
}
