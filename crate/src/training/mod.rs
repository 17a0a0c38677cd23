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
//!
//! # Design
//!
//! Split by job. `mod.rs` is [`MicroLora`]: its options, the parameter vector (each adapted projection's `A` and
//! `Bᵀ`, `TrainedSite`), the step driver (the frozen layers' output kept per example, the pass, the update), the
//! Fisher estimate from examples to keep ([`MicroLora::protect`]), consolidation, and the adapter and its GGUF file.
//! `backward.rs` is steps 2 to 4: `Pass`, the trained layers and the head in f32 (or on the int8 kernels with
//! transposed weights: the fast path) keeping their saves, the loss, and the backward pass to the gradient of the
//! parameter vector. `optimizer.rs` is step 5 and the consolidation's arithmetic: `Optimizer`, Adam's moments and
//! the EWC anchor and Fisher estimate, index for index with the parameters. `state.rs` is the saved state:
//! [`MicroLora::to_bytes`] and [`MicroLora::from_bytes`] in `crate::record`'s frame.

mod backward;
mod optimizer;
mod state;

use std::collections::VecDeque;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::gguf::{self, Value};
use crate::kv::cache::KvCache;
use crate::model::adapter::Pair;
use crate::model::config::{Arch, Config};
use crate::model::forward::{residual_after, RunState};
use crate::model::lora::{LoraAdapter, Proj, Site};
use crate::model::Model;
use crate::parallel::in_pool;
use crate::splitmix::SplitMix64;

use backward::{Pass, Transposed};
use optimizer::Optimizer;

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
    /// Adam's and the EWC penalty's state, index for index with `theta`.
    optimizer: Optimizer,
    /// The frozen layers' output for the latest examples (their tokens, their `[T × d_model]` residuals).
    prefixes: VecDeque<(Vec<u32>, Arc<Vec<f32>>)>,
    /// The trained layers' weights transposed, for the backward pass (made at the first step).
    transposed: Option<Arc<Vec<Transposed>>>,
}

impl MicroLora {
    /// A fresh adapter for `model`: `B = 0`, so it starts as the base model.
    pub fn new(model: &Model, options: MicroLoraOptions) -> Result<MicroLora> {
        model.check_weights_held()?;
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
        let mut rng = SplitMix64(options.seed ^ 0x9e37_79b9_7f4a_7c15);
        for s in &sites {
            let bound = 1.0 / (s.n_in as f32).sqrt();
            for v in &mut theta[s.a..s.a + r * s.n_in] {
                *v = (rng.f32() * 2.0 - 1.0) * bound;
            }
        }
        Ok(MicroLora {
            first_layer,
            optimizer: Optimizer::new(&theta),
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
        self.optimizer.steps
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
        let (lr, lambda) = (self.options.learning_rate, self.options.ewc_lambda);
        self.optimizer.step(&mut self.theta, &grad, lr, lambda);
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
        self.optimizer.protect(&self.theta, &sq, examples.len());
        Ok(())
    }

    /// Fold the updates since the last consolidation into the consolidated weights (the EWC anchor) and the
    /// Fisher estimate; returns how many steps were folded.
    pub fn consolidate(&mut self) -> u32 {
        self.optimizer.consolidate(&self.theta, self.options.fisher_decay)
    }

    /// Start again as its options make a fresh one (`B = 0`: the base model): the steps, Adam's state and what
    /// the EWC penalty holds to are gone. The background loop does this to the instant adapter once the base
    /// adapter has learned what it had.
    pub fn reset(&mut self, model: &Model) -> Result<()> {
        *self = MicroLora::new(model, self.options.clone())?;
        Ok(())
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
        let mut kv = KvCache::new(c.kv_layers(), c.kv_dim(), n);
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

// On the tiny models the fixture script writes (natively: the wasm32 suites read no files from here); `tiny` serves
// the other files' tests too.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::test_support::test;

    pub(super) fn tiny(file: &str) -> Model {
        let dir = std::env::var("RUVLLM_FIXTURES").expect("RUVLLM_FIXTURES: the tiny models (scripts/test.sh)");
        Model::from_bytes(std::fs::read(format!("{dir}/{file}")).expect(file)).expect(file)
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
    fn a_reset_adapter_is_a_fresh_one() {
        let model = tiny("tiny-llama-spm.gguf");
        let fresh = MicroLora::new(&model, MicroLoraOptions::default()).unwrap();
        let mut lora = MicroLora::new(&model, MicroLoraOptions::default()).unwrap();
        let tokens: Vec<u32> = (1..20).collect();
        lora.train_step(&model, &tokens, 8, 1.0).unwrap();
        lora.consolidate();
        assert_ne!(lora.theta, fresh.theta);
        lora.reset(&model).unwrap();
        assert_eq!((lora.steps(), &lora.theta), (0, &fresh.theta));
        assert_eq!(lora.to_bytes(&model), fresh.to_bytes(&model));
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
