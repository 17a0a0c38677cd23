//! A session: one conversation's KV cache and run state over a shared [`Model`].
//!
//! `eval` appends tokens to the cache (prefill in batches of `n_batch`) and returns logits.
//! The token history is kept, so a new prompt that extends the previous one reuses its cached prefix.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Backend, Engine, GpuOptions};
use crate::kv_cache::KvCache;
use crate::model::forward::{forward, LogitsFor, RunState};
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
    model: Arc<Model>,
    n_ctx: usize,
    n_batch: usize,
    backend: Backend,
    /// The GPU engine, when the session runs there.
    gpu: Option<Engine>,
    /// CPU KV cache and scratch: allocated when the CPU runs (from the start, or after a GPU failure).
    cpu: Option<(KvCache, RunState)>,
    /// Tokens whose keys/values are in the cache, in order.
    tokens: Vec<u32>,
    /// Logits returned by the last `eval` (all rows or the last one).
    logits: Vec<f32>,
    pub(crate) generation: Option<crate::generate::Generation>,
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
        let c = &model.config;
        let n_ctx = if opts.n_ctx == 0 { c.context_length.min(4096) } else { opts.n_ctx };
        if n_ctx > c.context_length {
            return Err(Error::InvalidArgument(format!(
                "n_ctx {n_ctx} exceeds the model's context length {}",
                c.context_length
            )));
        }
        if opts.n_batch == 0 || opts.n_batch > 4096 {
            return Err(Error::InvalidArgument(format!("n_batch {} must be in 1..=4096", opts.n_batch)));
        }
        let n_batch = opts.n_batch.min(n_ctx);
        let gpu = Engine::open(&model, n_ctx, n_batch, backend, gpu)?;
        let cpu = gpu.is_none().then(|| (KvCache::new(c, n_ctx), RunState::new(&model, n_batch, n_ctx)));
        Ok(Session {
            model,
            n_ctx,
            n_batch,
            backend,
            gpu,
            cpu,
            tokens: Vec::new(),
            logits: Vec::new(),
            generation: None,
        })
    }

    /// Whether the forward passes run on the GPU (false after a fallback to the CPU).
    pub fn on_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Most tokens per forward call (a prefill runs in batches of this many).
    pub fn n_batch(&self) -> usize {
        self.n_batch
    }

    /// Tokens currently in the KV cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forget cached positions from `n` on.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
    }

    pub fn reset(&mut self) {
        self.tokens.clear();
        self.generation = None;
    }

    /// Logits from the last `eval`.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Bytes of the KV cache.
    pub fn kv_cache_bytes(&self) -> usize {
        match (&self.gpu, &self.cpu) {
            (Some(gpu), _) => gpu.kv_cache_bytes(),
            (None, Some((kv, _))) => kv.bytes(),
            (None, None) => 0,
        }
    }

    /// Append `tokens` to the cache and return logits: `tokens.len() × vocab` when `all_logits`,
    /// else the last token's `vocab` logits.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<&[f32]> {
        self.check_eval(tokens)?;
        self.logits.clear();
        if let Some(gpu) = self.gpu.as_mut() {
            match gpu.eval(tokens, self.tokens.len(), all_logits, &mut self.logits) {
                Ok(()) => {
                    self.tokens.extend_from_slice(tokens);
                    return Ok(&self.logits);
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        let start = self.tokens.len();
        self.forward_cpu(tokens, start, all_logits);
        Ok(&self.logits)
    }

    /// Append `tokens` to the cache and return the most likely next token (the argmax of the last
    /// logits, lowest id on ties). On the GPU only the id is read back, not the logits; `logits()`
    /// is then empty.
    pub fn eval_argmax(&mut self, tokens: &[u32]) -> Result<u32> {
        self.check_eval(tokens)?;
        self.logits.clear();
        if let Some(gpu) = self.gpu.as_mut() {
            match gpu.eval_argmax(tokens, self.tokens.len()) {
                Ok(id) => {
                    self.tokens.extend_from_slice(tokens);
                    return Ok(id);
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        let start = self.tokens.len();
        self.forward_cpu(tokens, start, false);
        let best =
            self.logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        Ok(best.0 as u32)
    }

    /// Lose the GPU device on purpose, as a driver reset would (tests of the CPU fallback).
    #[doc(hidden)]
    pub fn simulate_gpu_loss(&mut self) {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            gpu.destroy_device();
        }
    }

    fn check_eval(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.model.config.vocab_size;
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("eval needs at least one token".into()));
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab_size: vocab });
        }
        let needed = self.tokens.len() + tokens.len();
        if needed > self.n_ctx {
            return Err(Error::ContextOverflow { needed, context: self.n_ctx });
        }
        Ok(())
    }

    /// After a GPU error: under `Auto`, continue on the CPU (replaying the cached tokens to rebuild
    /// the KV cache there); otherwise return the error.
    fn gpu_failed(&mut self, e: Error) -> Result<()> {
        if self.backend != Backend::Auto {
            return Err(e);
        }
        self.gpu = None;
        let history = std::mem::take(&mut self.tokens);
        if !history.is_empty() {
            self.forward_cpu(&history, 0, false);
        }
        self.logits.clear();
        Ok(())
    }

    /// Run `tokens` at positions `start..` on the CPU, appending them to the history, and leave
    /// their logits (all rows, or the last) in `self.logits`.
    fn forward_cpu(&mut self, tokens: &[u32], start: usize, all_logits: bool) {
        let (kv, state) = self.cpu.get_or_insert_with(|| {
            (KvCache::new(&self.model.config, self.n_ctx), RunState::new(&self.model, self.n_batch, self.n_ctx))
        });
        let chunks = tokens.chunks(self.n_batch);
        let n_chunks = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            let last_chunk = i + 1 == n_chunks;
            let want = match (all_logits, last_chunk) {
                (true, _) => LogitsFor::All,
                (false, true) => LogitsFor::Last,
                (false, false) => LogitsFor::None,
            };
            forward(&self.model, kv, state, chunk, start + i * self.n_batch, want);
            self.tokens.extend_from_slice(chunk);
            if want != LogitsFor::None {
                self.logits.extend_from_slice(&state.logits);
            }
        }
    }
}
