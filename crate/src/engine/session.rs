//! A session: one conversation's KV cache and run state over a shared [`Model`], and the
//! synchronous driver of its generations.
//!
//! `eval` appends tokens to the cache (prefill in batches of `n_batch`) and returns logits.
//! The token history is kept, so a new prompt that extends the previous one reuses its cached prefix.
//! `start`, `next_step` and `generate` run a [`Generation`] (the one generation loop) on the
//! session's [`Evaluator`] (CPU or GPU, with the fallback between them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::engine::evaluator::{wait, Evaluator, Out};
use crate::engine::generate::{GenerateOptions, Generation, Output, Step, Token};
use crate::error::{Error, Result};
use crate::gpu::{Backend, GpuOptions};
use crate::model::eval::Want;
use crate::model::lora::AdapterSet;
use crate::model::Model;

#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Context window in tokens; 0 means min(the model's training context, 4096).
    pub n_ctx: usize,
    /// Tokens per forward call during prefill.
    pub n_batch: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { n_ctx: 0, n_batch: 64 }
    }
}

pub struct Session {
    ev: Evaluator,
    generation: Option<Generation>,
}

impl Session {
    pub fn new(model: Arc<Model>) -> Session {
        Session::with_options(model, &SessionOptions::default()).expect("default session options are valid")
    }

    pub fn with_options(model: Arc<Model>, opts: &SessionOptions) -> Result<Session> {
        Session::with_backend(model, opts, Backend::Cpu)
    }

    /// A session on `backend`: under `Auto` the GPU when there is a usable one, else the CPU;
    /// under `WebGpu` a GPU failure is an error (`Error::Gpu`).
    pub fn with_backend(model: Arc<Model>, opts: &SessionOptions, backend: Backend) -> Result<Session> {
        Session::with_gpu_options(model, opts, backend, &GpuOptions::default())
    }

    /// [`with_backend`](Self::with_backend) with device choices (software adapters under `Auto`,
    /// binding size caps, timestamp queries).
    pub fn with_gpu_options(
        model: Arc<Model>,
        opts: &SessionOptions,
        backend: Backend,
        gpu: &GpuOptions,
    ) -> Result<Session> {
        let ev = Evaluator::open_blocking(model, opts.n_ctx, opts.n_batch, backend, gpu)?;
        Ok(Session { ev, generation: None })
    }

    /// A session on `gm`, a model already on the GPU (one streamed there, `gpu::GpuModelStream`, runs there only:
    /// its faults are errors).
    #[cfg(all(feature = "gpu", not(target_arch = "wasm32")))]
    pub fn on_gpu_model(gm: Arc<crate::gpu::GpuModel>, opts: &SessionOptions) -> Result<Session> {
        let ev = crate::engine::evaluator::wait(Evaluator::on_gpu_model(gm, opts.n_ctx, opts.n_batch, Backend::Auto))?;
        Ok(Session { ev, generation: None })
    }

    /// Whether the forward passes run on the GPU (false after a fallback to the CPU).
    pub fn on_gpu(&self) -> bool {
        self.ev.on_gpu()
    }

    pub fn model(&self) -> &Arc<Model> {
        self.ev.model()
    }

    pub fn n_ctx(&self) -> usize {
        self.ev.n_ctx()
    }

    /// Most tokens per forward call (a prefill runs in batches of this many).
    pub fn n_batch(&self) -> usize {
        self.ev.n_batch()
    }

    /// Tokens currently in the KV cache.
    pub fn tokens(&self) -> &[u32] {
        self.ev.tokens()
    }

    /// Forget cached positions from `n` on.
    pub fn truncate(&mut self, n: usize) {
        self.ev.truncate(n);
    }

    pub fn reset(&mut self) {
        self.ev.truncate(0);
        self.generation = None;
    }

    /// Logits from the last `eval`.
    pub fn logits(&self) -> &[f32] {
        self.ev.logits()
    }

    /// Bytes of the KV cache.
    pub fn kv_cache_bytes(&self) -> usize {
        self.ev.kv_cache_bytes()
    }

    /// Append `tokens` to the cache and return logits: `tokens.len() × vocab` when `all_logits`,
    /// else the last token's `vocab` logits.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<&[f32]> {
        let pos = self.ev.tokens().len();
        wait(self.ev.eval(tokens, pos, if all_logits { Want::All } else { Want::Last }))?;
        Ok(self.ev.logits())
    }

    /// Keep the base model's residual stream after its first `layer` layers at each position evaluated from now on
    /// (`None`: stop), so that a MicroLoRA of the layers from `layer` on trains on this session's answers without
    /// running those layers again ([`Session::frozen_residuals`]).
    pub fn keep_residuals(&mut self, layer: Option<usize>) {
        self.ev.keep_residuals(layer);
    }

    /// The residual stream after the first `layer` layers at each position of `tokens` (`[T × d_model]`), from what
    /// this session evaluated with [`Session::keep_residuals`], evaluating what it lacks: afterwards the session holds
    /// `tokens`. `None` where it keeps none of that layer, runs on the GPU, or has adapters below `layer`.
    pub fn frozen_residuals(&mut self, tokens: &[u32], layer: usize) -> Result<Option<Vec<f32>>> {
        self.generation = None;
        wait(self.ev.frozen_residuals(tokens, layer))
    }

    /// Teacher-forced scoring: for each position of `tokens` (evaluated from an empty cache), the `k` most
    /// likely next ids with their probabilities, most likely first. The session is reset before and after.
    pub fn score(&mut self, tokens: &[u32], k: usize) -> Result<Vec<Vec<(u32, f64)>>> {
        self.reset();
        wait(self.ev.score(tokens, k))
    }

    /// Append `tokens` to the cache and return the most likely next token (the argmax of the last
    /// logits, lowest id on ties). On the GPU only the id is read back, not the logits; `logits()`
    /// is then empty.
    pub fn eval_argmax(&mut self, tokens: &[u32]) -> Result<u32> {
        let pos = self.ev.tokens().len();
        match wait(self.ev.eval(tokens, pos, Want::Argmax))? {
            Out::Id(id) => Ok(id),
            other => unreachable!("an argmax eval returned {other:?}"),
        }
    }

    /// Lose the GPU device on purpose, as a driver reset would (tests of the CPU fallback).
    #[doc(hidden)]
    pub fn simulate_gpu_loss(&mut self) {
        self.ev.simulate_gpu_loss();
    }

    /// Prepare to generate from `prompt`, reusing the cached prefix it shares with the session. The
    /// rest of the prompt is evaluated by the first `next_step` calls, one prefill batch each.
    /// An error (an empty or too long prompt, a bad token id or option) leaves the cache as it was.
    pub fn start(&mut self, prompt: &[u32], opts: GenerateOptions) -> Result<()> {
        self.generation = None;
        let mut g = Generation::new(self.ev.model(), opts, prompt, self.n_ctx(), self.n_batch())?;
        wait(g.reuse_cache(&mut self.ev))?;
        self.generation = Some(g);
        Ok(())
    }

    /// Evaluate the next prefill batch of the prompt or produce the next token; `None` once
    /// generation has finished (see [`Session::finish`]).
    pub fn next_step(&mut self) -> Result<Option<Step>> {
        let Some(g) = self.generation.as_mut() else {
            return Err(Error::InvalidArgument("no generation in progress: call start first".into()));
        };
        wait(g.step(&mut self.ev))
    }

    /// Stop the generation in progress (if any) as cancelled and return its result.
    pub fn cancel(&mut self) -> Option<Output> {
        if let Some(g) = self.generation.as_mut() {
            g.cancel();
        }
        self.finish()
    }

    /// The finished (or cancelled) generation's ids, text and stats; `None` if none was started.
    /// What the cache holds goes into the model's prefix cache.
    pub fn finish(&mut self) -> Option<Output> {
        // If this fails only the pages are lost (a lost device is the next call's error too).
        let _ = wait(self.ev.remember());
        self.generation.take().map(Generation::output)
    }

    /// The conversation the cache holds (its tokens and their keys and values) as bytes that
    /// `restore_state` takes back, in this process or another, for a session of the same model
    /// on either backend.
    pub fn save_state(&mut self) -> Result<Vec<u8>> {
        wait(self.ev.save_state())
    }

    /// Continue a conversation `save_state` saved; a bad or foreign state is an error and changes nothing.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.ev.restore_state(bytes)?;
        self.generation = None;
        Ok(())
    }

    /// Run `eval`, `score` and `eval_argmax` with the LoRA adapters `adapters` (each read for this
    /// session's model); a generation runs with its options' `adapters` and leaves them set. The cached
    /// conversation is forgotten when the set changes: its keys and values were computed with the old one.
    /// A generation in progress ends.
    pub fn set_adapters(&mut self, adapters: &AdapterSet) -> Result<()> {
        self.generation = None;
        self.ev.set_adapters(adapters)
    }

    /// Whether this session starts from and adds to the model's prefix cache (on by default).
    pub fn set_prefix_cache(&mut self, on: bool) {
        self.ev.set_prefix_cache(on);
    }

    /// Generate from `prompt`, calling `on_token` for each token as it is produced. Setting `cancel`
    /// stops after the current step (a prefill batch or a token), and the session stays usable.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: GenerateOptions,
        cancel: Option<&AtomicBool>,
        mut on_token: impl FnMut(&Token),
    ) -> Result<Output> {
        self.start(prompt, opts)?;
        loop {
            if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Ok(self.cancel().expect("generation was started"));
            }
            match self.next_step()? {
                Some(Step::Token(token)) => on_token(&token),
                Some(Step::Prefill { .. }) => {}
                None => break,
            }
        }
        Ok(self.finish().expect("generation was started"))
    }
}
