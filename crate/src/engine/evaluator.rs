//! The evaluator: one conversation's KV cache on the backend that runs it (the CPU's cache and run
//! state, or a [`GpuSession`](crate::gpu::GpuSession)), with the one `eval` every driver uses: the
//! token checks of a call, its split into forward calls of `n_batch` tokens, and the one fallback
//! rule (under [`Backend::Auto`] a GPU fault moves the work to the CPU, which replays the cached
//! tokens). It knows nothing of prompts or sampling: [`Generation`](crate::engine::generate::Generation)
//! says what to evaluate.
//!
//! `eval` is async because the GPU's is; on the CPU its future is ready at the first poll, and
//! natively the GPU's completes while [`wait`] polls it, so the synchronous [`Session`](crate::Session)
//! drives the same evaluator through `wait`.
//!
//! # Design
//!
//! The one evaluator: a conversation's KV cache on the backend that runs it (CPU cache and `RunState`, or a
//! `GpuRunner`), its token history and last logits. One async `eval(tokens, pos, want)` (`Want`: nothing, the last
//! row, all rows, the argmax) checks the call before the cache changes, splits it with `batches`, and applies the one
//! fallback rule: under `Backend::Auto` a GPU fault (`Error::Gpu`) moves the work to the CPU, which replays the cached
//! tokens. The context size is resolved here (`resolve`) for every binding. `wait` runs the future on the calling
//! thread (ready at once on the CPU; natively the GPU's completes while polled; in the browser a pending one is an
//! error).
//!
//! A model with delta-net layers (Qwen3.5) carries a recurrent state beside its KV cache (`kv::recurrent`), which can
//! go forward only: an eval at a position before the state's own restores the state copied at the end of the last
//! eval of several tokens (a prompt's prefill: `checkpoint`) if it is not past that position, else starts from zeros,
//! and evaluates the cached tokens in between again (`rewind_recurrent`). Such a model takes no prefix cache: a page
//! holds positions' keys and values, and the state belongs to a whole prefix.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::engine::sampler::{argmax, top_k_probs};
use crate::error::{Error, GpuFault, Result};
use crate::gpu::{Backend, GpuOptions, GpuRunner};
use crate::kv::cache::KvCache;
use crate::kv::prefix_cache::{PrefixCache, PAGE_TOKENS};
use crate::kv::recurrent::RecurrentState;
use crate::model::config::Config;
use crate::model::eval::{check_eval, Want};
use crate::model::forward::{batches, forward, LogitsFor, RunState};
use crate::model::lora::AdapterSet;
use crate::model::Model;

/// The result of an eval call.
#[derive(Debug)]
pub(crate) enum Out<'a> {
    Nothing,
    /// `Last`: one row of `vocab` logits; `All`: one per token.
    Logits(&'a [f32]),
    Id(u32),
}

/// The context window and batch size for requested `n_ctx` (0: min(the model's training context, 4096))
/// and `n_batch` (at most `n_ctx`). Every engine resolves them here.
pub(crate) fn resolve(c: &Config, n_ctx: usize, n_batch: usize) -> Result<(usize, usize)> {
    if c.arch == crate::model::config::Arch::Bert {
        return Err(Error::Model("a bert model is an encoder: it computes embeddings (Model::embed), not text".into()));
    }
    let n_ctx = if n_ctx == 0 { c.context_length.min(4096) } else { n_ctx };
    if n_ctx > c.context_length {
        return Err(Error::InvalidArgument(format!(
            "n_ctx {n_ctx} exceeds the model's context length {}",
            c.context_length
        )));
    }
    if n_batch == 0 || n_batch > 4096 {
        return Err(Error::InvalidArgument(format!("n_batch {n_batch} must be in 1..=4096")));
    }
    Ok((n_ctx, n_batch.min(n_ctx)))
}

/// Run `f` to completion on this thread. CPU work is ready at the first poll; natively GPU work
/// completes while polled. In the browser nothing may block: a future that is not ready at once
/// is an error there (the async engines await instead).
pub(crate) fn wait<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    #[cfg(target_arch = "wasm32")]
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => Err(crate::gpu::gpu_error(
            crate::error::GpuFault::NoAdapter,
            "the synchronous Session cannot wait for WebGPU in the browser; use the async gpu::GpuSession API",
        )),
    }
    #[cfg(not(target_arch = "wasm32"))]
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// The GPU keeps an f16 KV cache: a model with a quantized cold tier is a GPU fault of its own (so
/// `Backend::Auto` runs it on the CPU, and `Backend::WebGpu` reports it).
fn gpu_kv_cache(model: &Model) -> Result<()> {
    match model.kv_cache().is_tiered() {
        false => Ok(()),
        true => Err(crate::gpu::gpu_error(
            GpuFault::Unsupported,
            format!(
                "the two-tier KV cache ({} cold tier) runs on the CPU backend only; the WebGPU backend keeps an f16 KV cache",
                model.kv_cache().cold.name()
            ),
        )),
    }
}

pub(crate) struct Evaluator {
    model: Arc<Model>,
    n_ctx: usize,
    n_batch: usize,
    backend: Backend,
    /// The GPU, until a fault under `Auto` hands the work to the CPU.
    gpu: Option<GpuRunner>,
    /// CPU KV cache and scratch: allocated when the CPU first runs.
    cpu: Option<(KvCache, RunState)>,
    /// Tokens whose keys/values are in the cache, in order.
    tokens: Vec<u32>,
    /// Logits of the last eval call (all rows or the last; empty after a GPU argmax).
    logits: Vec<f32>,
    /// Why the GPU was given up under `Auto` (at opening or later).
    fallback: Option<Error>,
    /// Whether to start from and add to the model's prefix cache.
    use_prefix_cache: bool,
    /// The LoRA adapters the cache's keys and values were computed with (`set_adapters`).
    lora: AdapterSet,
    /// The residual stream after the first layers at each position the CPU evaluated (`keep_residuals`).
    residuals: Option<Residuals>,
    /// A copy of the recurrent state (Qwen3.5's delta nets) at the end of the last eval of more than one token (a
    /// prompt), valid while `tokens` keeps its first `len`: going back to a position before the state's own
    /// restarts from here (or from the start), as a recurrent state cannot drop tokens.
    checkpoint: Option<RecurrentState>,
}

/// What a MicroLoRA of the layers from `layer` on starts its training step from (`training`): the base model's
/// residual stream after its first `layer` layers, `[positions × d_model]`, for the first `valid` cached positions.
struct Residuals {
    layer: usize,
    rows: Vec<f32>,
    valid: usize,
}

impl Evaluator {
    /// The GPU options `backend` implies: under `WebGpu` any adapter will do; under `Auto` a software
    /// one would be slower than the CPU.
    fn gpu_options(backend: Backend, opts: &GpuOptions) -> GpuOptions {
        GpuOptions { allow_software: opts.allow_software || backend == Backend::WebGpu, ..opts.clone() }
    }

    /// An evaluator on `backend`, blocking while the GPU opens (natively; in the browser the GPU
    /// cannot be waited for: `Auto` then runs on the CPU, `WebGpu` is an error).
    pub(crate) fn open_blocking(
        model: Arc<Model>,
        n_ctx: usize,
        n_batch: usize,
        backend: Backend,
        opts: &GpuOptions,
    ) -> Result<Evaluator> {
        let (n_ctx, n_batch) = resolve(&model.config, n_ctx, n_batch)?;
        let opts = Evaluator::gpu_options(backend, opts);
        let gpu = (backend != Backend::Cpu)
            .then(|| gpu_kv_cache(&model).and_then(|()| wait(GpuRunner::open(&model, n_ctx, n_batch, &opts))));
        Evaluator::with_gpu(model, n_ctx, n_batch, backend, gpu)
    }

    /// [`open_blocking`](Self::open_blocking), awaiting the GPU (the browser's engine).
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "gpu")), allow(dead_code))]
    pub(crate) async fn open(
        model: Arc<Model>,
        n_ctx: usize,
        n_batch: usize,
        backend: Backend,
        opts: &GpuOptions,
    ) -> Result<Evaluator> {
        let (n_ctx, n_batch) = resolve(&model.config, n_ctx, n_batch)?;
        let opts = Evaluator::gpu_options(backend, opts);
        let gpu = match (backend, gpu_kv_cache(&model)) {
            (Backend::Cpu, _) => None,
            (_, Err(e)) => Some(Err(e)),
            _ => Some(GpuRunner::open(&model, n_ctx, n_batch, &opts).await),
        };
        Evaluator::with_gpu(model, n_ctx, n_batch, backend, gpu)
    }

    /// An evaluator on `gm`, a model already on the GPU, which it never leaves when the model's matrices are not held
    /// in memory (a streamed model: `gpu::GpuModelStream`); the GPU's faults are then errors, under any backend.
    #[cfg(feature = "gpu")]
    pub(crate) async fn on_gpu_model(
        gm: Arc<crate::gpu::GpuModel>,
        n_ctx: usize,
        n_batch: usize,
        backend: Backend,
    ) -> Result<Evaluator> {
        let model = gm.model().clone();
        let (n_ctx, n_batch) = resolve(&model.config, n_ctx, n_batch)?;
        let gpu = match gpu_kv_cache(&model) {
            Ok(()) => GpuRunner::on_model(gm, n_ctx, n_batch).await,
            Err(e) => Err(e),
        };
        Evaluator::with_gpu(model, n_ctx, n_batch, backend, Some(gpu))
    }

    /// The one rule for a GPU that failed to open: under `Auto` the CPU runs (and `fallback` says
    /// why) where the model's weights are in memory, under `WebGpu` it is an error.
    fn with_gpu(
        model: Arc<Model>,
        n_ctx: usize,
        n_batch: usize,
        backend: Backend,
        gpu: Option<Result<GpuRunner>>,
    ) -> Result<Evaluator> {
        let (gpu, fallback) = match gpu {
            None => (None, None),
            Some(Ok(engine)) => (Some(engine), None),
            Some(Err(e)) if backend == Backend::Auto && model.file().is_whole() => (None, Some(e)),
            Some(Err(e)) => return Err(e),
        };
        if gpu.is_none() {
            model.check_weights_held()?;
        }
        Ok(Evaluator {
            model,
            n_ctx,
            n_batch,
            backend,
            gpu,
            cpu: None,
            tokens: Vec::new(),
            logits: Vec::new(),
            fallback,
            use_prefix_cache: true,
            lora: AdapterSet::default(),
            residuals: None,
            checkpoint: None,
        })
    }

    pub(crate) fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub(crate) fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub(crate) fn n_batch(&self) -> usize {
        self.n_batch
    }

    pub(crate) fn on_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    #[cfg_attr(not(all(target_arch = "wasm32", feature = "gpu")), allow(dead_code))]
    pub(crate) fn gpu(&self) -> Option<&GpuRunner> {
        self.gpu.as_ref()
    }

    /// Why the GPU is not used under `Auto`, if it is not.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "gpu")), allow(dead_code))]
    pub(crate) fn fallback(&self) -> Option<&Error> {
        self.fallback.as_ref()
    }

    pub(crate) fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub(crate) fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Forget cached positions from `n` on.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.forget_from(n);
    }

    /// What was kept of positions from `n` on (residuals, a recurrent checkpoint past `n`) is no longer of `tokens`.
    fn forget_from(&mut self, n: usize) {
        if let Some(r) = &mut self.residuals {
            r.valid = r.valid.min(n);
        }
        if self.checkpoint.as_ref().is_some_and(|c| c.len > n) {
            self.checkpoint = None;
        }
        if let Some(gpu) = self.gpu.as_mut() {
            gpu.forget_recurrent_from(n);
        }
    }

    /// From now on keep the base model's residual stream after its first `layer` layers at each position the
    /// CPU evaluates (`None`: stop), for [`Evaluator::frozen_residuals`].
    pub(crate) fn keep_residuals(&mut self, layer: Option<usize>) {
        self.residuals = layer.map(|layer| Residuals { layer, rows: Vec::new(), valid: 0 });
    }

    /// The base model's residual stream after its first `layer` layers at each position of `tokens`, `[T × d_model]`,
    /// from what this session evaluated: it keeps the prefix it shares with `tokens` that it kept residuals of, and
    /// evaluates the rest (no logits), so that afterwards it holds `tokens`. `None` where it cannot: it keeps no
    /// residuals or another layer's, runs on the GPU, has adapters on the layers below `layer` (then the stream is
    /// not the base model's), or `tokens` do not fit its context.
    pub(crate) async fn frozen_residuals(&mut self, tokens: &[u32], layer: usize) -> Result<Option<Vec<f32>>> {
        let kept = matches!(&self.residuals, Some(r) if r.layer == layer);
        if !kept || self.gpu.is_some() || self.lora.adapts_below(layer) || tokens.len() > self.n_ctx {
            return Ok(None);
        }
        let shared = self.tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let from = shared.min(self.residuals.as_ref().map_or(0, |r| r.valid));
        if from < tokens.len() {
            self.eval(&tokens[from..], from, Want::Nothing).await?;
        }
        let d = self.model.config.d_model;
        Ok(self.residuals.as_ref().filter(|r| r.valid >= tokens.len()).map(|r| r.rows[..tokens.len() * d].to_vec()))
    }

    /// Bytes of the KV cache (keys and values of every layer and position, in the model's KV format; and a recurrent
    /// state where the model has one).
    pub(crate) fn kv_cache_bytes(&self) -> usize {
        match &self.gpu {
            Some(gpu) => gpu.kv_cache_bytes(),
            None => {
                let c = &self.model.config;
                self.model.kv_cache().bytes(c.kv_layers(), c.kv_dim(), self.n_ctx) + c.recurrent_state_bytes()
            }
        }
    }

    /// Evaluate `tokens` at positions `pos..` (the cache keeps its first `pos` tokens; the call is
    /// checked before anything changes) in batches of `n_batch`, and return what `want` asks for.
    pub(crate) async fn eval(&mut self, tokens: &[u32], pos: usize, want: Want) -> Result<Out<'_>> {
        check_eval(tokens, pos, self.n_ctx, self.model.config.vocab_size)?;
        if pos > self.tokens.len() {
            return Err(Error::InvalidArgument(format!("eval at {pos} after {} cached tokens", self.tokens.len())));
        }
        self.tokens.truncate(pos);
        self.forget_from(pos);
        self.logits.clear();
        let mut id = None;
        for (range, rows) in batches(tokens.len(), self.n_batch, want.rows()) {
            let batch_want = match rows {
                LogitsFor::None => Want::Nothing,
                LogitsFor::Last => want,
                LogitsFor::All => Want::All,
            };
            id = self.eval_batch(&tokens[range], batch_want).await?;
        }
        if tokens.len() > 1 {
            self.take_checkpoint();
        }
        Ok(match (want, id) {
            (Want::Nothing, _) => Out::Nothing,
            (Want::Argmax, Some(id)) => Out::Id(id),
            (Want::Argmax, None) => unreachable!("the last batch returns the argmax"),
            (Want::Last | Want::All, _) => Out::Logits(&self.logits),
        })
    }

    /// Take the longest prefix of `tokens` the model's prefix cache holds, if it is longer than what
    /// this cache already shares with them (on the GPU its pages go up through a host window). How
    /// many leading tokens of `tokens` the cache now holds.
    pub(crate) fn recall(&mut self, tokens: &[u32]) -> Result<usize> {
        let held = self.tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        if !self.shares_prefix_cache() {
            return Ok(held);
        }
        self.truncate(held);
        if let Some(gpu) = &self.gpu {
            let cache = self.model.prefix_cache_for(&self.lora);
            match upload_prefix(gpu, &self.model, &cache, tokens, held) {
                Ok(n) => {
                    self.tokens.extend_from_slice(&tokens[held..n]);
                    return Ok(n);
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        let model = self.model.clone();
        let cache = model.prefix_cache_for(&self.lora);
        let (_, kv, _) = self.cpu_state();
        let n = cache.restore(tokens, held, kv);
        self.tokens.extend_from_slice(&tokens[held..n]);
        Ok(n)
    }

    pub(crate) fn set_prefix_cache(&mut self, on: bool) {
        self.use_prefix_cache = on;
    }

    /// Whether a prefix cache may be used (the model's, or under adapters their set's: keys and values computed
    /// under one set never go to another's). Not by a model with a recurrent state: its pages hold keys and values,
    /// and the state is not per position.
    fn shares_prefix_cache(&self) -> bool {
        self.use_prefix_cache && self.model.config.delta_net.is_none()
    }

    /// Run the next evals with the adapters `lora` (checked against the model). The cache's keys and values
    /// are those of the set they were computed with, so another set forgets them. Either backend runs them
    /// (the GPU builds the set's ops at its next eval; a fault there falls back to the CPU under `Auto`).
    pub(crate) fn set_adapters(&mut self, lora: &AdapterSet) -> Result<()> {
        lora.check(&self.model)?;
        if *lora == self.lora {
            return Ok(());
        }
        self.truncate(0);
        if let Some(gpu) = self.gpu.as_mut() {
            gpu.set_adapters(lora)?;
        }
        self.lora = lora.clone();
        Ok(())
    }

    /// Put what this cache holds into the model's prefix cache, for any session to start from. On
    /// the GPU only the rows of pages the prefix cache lacks come down (async: a readback).
    pub(crate) async fn remember(&mut self) -> Result<()> {
        if !self.shares_prefix_cache() {
            return Ok(());
        }
        if let Some(gpu) = &self.gpu {
            let cache = self.model.prefix_cache_for(&self.lora);
            match download_new_pages(gpu, &self.model, &cache, &self.tokens).await {
                Ok(()) => return Ok(()),
                Err(e) => self.gpu_failed(e)?,
            }
        }
        if let Some((kv, _)) = &self.cpu {
            self.model.prefix_cache_for(&self.lora).insert(&self.tokens, kv);
        }
        Ok(())
    }

    /// The conversation this cache holds as bytes (`memory::state`); on the GPU its rows come down first.
    pub(crate) async fn save_state(&mut self) -> Result<Vec<u8>> {
        self.base_model_only("save_state")?;
        let id = self.model.id();
        let n = self.tokens.len();
        if let Some(gpu) = self.gpu.as_mut() {
            let c = &self.model.config;
            let mut kv = KvCache::new(c.kv_layers(), c.kv_dim(), n);
            kv.recurrent = c.recurrent_state();
            let downloaded = match rewind_gpu_recurrent(gpu, &self.tokens, n, self.n_batch).await {
                Ok(()) => gpu.download_kv(&mut kv, 0..n).await,
                Err(e) => Err(e),
            };
            let downloaded = match (downloaded, kv.recurrent.as_mut()) {
                (Ok(()), Some(state)) => gpu.download_recurrent(state).await,
                (result, _) => result,
            };
            match downloaded {
                Ok(()) => return Ok(crate::kv::state::encode(&id, &self.tokens, &kv)),
                Err(e) => self.gpu_failed(e)?,
            }
        }
        self.cpu_state();
        self.rewind_recurrent(n);
        let (kv, _) = self.cpu.as_ref().expect("allocated above");
        Ok(crate::kv::state::encode(&id, &self.tokens, kv))
    }

    /// Restore a conversation saved by `save_state` (of this model, fitting this context; saved on
    /// either backend): an error leaves the cache as it was.
    pub(crate) fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.base_model_only("restore_state")?;
        let id = self.model.id();
        if let Some(gpu) = self.gpu.as_mut() {
            let c = &self.model.config;
            let (tokens, kv) = crate::kv::state::decode(
                bytes,
                &id,
                c.vocab_size,
                c.kv_layers(),
                c.kv_dim(),
                self.n_ctx,
                c.recurrent_state(),
            )?;
            let uploaded = match (gpu.upload_kv(&kv, 0..tokens.len()), &kv.recurrent) {
                (Ok(()), Some(state)) => gpu.upload_recurrent(state),
                (result, _) => result,
            };
            match uploaded {
                Ok(()) => {
                    self.tokens = tokens;
                    self.forget_from(0);
                    return Ok(());
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        let vocab = self.model.config.vocab_size;
        let (_, kv, _) = self.cpu_state();
        self.tokens = crate::kv::state::decode_into(bytes, &id, vocab, kv)?;
        self.forget_from(0);
        Ok(())
    }

    /// A saved state names its model but not adapters: states are of the base model only.
    fn base_model_only(&self, what: &str) -> Result<()> {
        match self.lora.is_empty() {
            true => Ok(()),
            false => Err(Error::Adapter(format!("{what} needs a session without LoRA adapters"))),
        }
    }

    /// Teacher-forced scoring of `tokens` from position 0: for each position, the `k` most likely next
    /// ids with their probabilities (`sampler::top_k_probs`). Batch by batch, so that one batch's logits
    /// are held at a time, not the whole sequence's. The cache is left empty.
    pub(crate) async fn score(&mut self, tokens: &[u32], k: usize) -> Result<Vec<Vec<(u32, f64)>>> {
        let vocab = self.model.config.vocab_size;
        check_eval(tokens, 0, self.n_ctx, vocab)?;
        let mut positions = Vec::with_capacity(tokens.len());
        let mut result = Ok(());
        for (i, batch) in tokens.chunks(self.n_batch).enumerate() {
            match self.eval(batch, i * self.n_batch, Want::All).await {
                Ok(Out::Logits(logits)) => positions.extend(logits.chunks_exact(vocab).map(|row| top_k_probs(row, k))),
                Ok(other) => unreachable!("an all-logits eval returned {other:?}"),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.truncate(0);
        result.map(|()| positions)
    }

    /// One forward call of at most `n_batch` tokens after the cached ones.
    async fn eval_batch(&mut self, tokens: &[u32], want: Want) -> Result<Option<u32>> {
        let pos = self.tokens.len();
        if let Some(gpu) = self.gpu.as_mut() {
            let rows = self.logits.len();
            let result = match rewind_gpu_recurrent(gpu, &self.tokens, pos, self.n_batch).await {
                Ok(()) => gpu.eval(tokens, pos, want, &mut self.logits).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(id) => {
                    self.tokens.extend_from_slice(tokens);
                    return Ok(id);
                }
                Err(e) => {
                    self.logits.truncate(rows);
                    self.gpu_failed(e)?;
                }
            }
        }
        let rows = want.rows();
        self.cpu_state();
        self.rewind_recurrent(pos);
        let (kv, state) = self.cpu.as_mut().expect("allocated above");
        // Residuals are kept of the base model's stream only, and of positions that continue the kept ones.
        let keep = self.residuals.as_ref().filter(|r| r.valid == pos && !self.lora.adapts_below(r.layer));
        state.keep_after = keep.map(|r| r.layer);
        forward(&self.model, &self.lora, kv, state, tokens, pos, rows);
        self.tokens.extend_from_slice(tokens);
        if let (Some(r), true) = (&mut self.residuals, state.keep_after.is_some()) {
            let d = self.model.config.d_model;
            r.rows.resize(r.rows.len().max((pos + tokens.len()) * d), 0.0);
            r.rows[pos * d..(pos + tokens.len()) * d].copy_from_slice(&state.kept);
            r.valid = pos + tokens.len();
        }
        if rows == LogitsFor::None {
            return Ok(None);
        }
        let (_, state) = self.cpu.as_ref().expect("allocated above");
        self.logits.extend_from_slice(&state.logits);
        Ok((want == Want::Argmax).then(|| argmax(&state.logits)))
    }

    /// The CPU's cache and scratch, allocated on first use.
    fn cpu_state(&mut self) -> (&Model, &mut KvCache, &mut RunState) {
        let (model, n_ctx, n_batch) = (&self.model, self.n_ctx, self.n_batch);
        let (kv, state) =
            self.cpu.get_or_insert_with(|| (model.conversation_cache(n_ctx), RunState::new(model, n_batch, n_ctx)));
        (model, kv, state)
    }

    /// Bring the CPU's recurrent state (if the model has one) to position `pos`, where the next forward call
    /// starts: where it is past `pos`, from the checkpoint if that is not, else from the start, evaluating the cached
    /// tokens in between again (their keys and values come out the same).
    fn rewind_recurrent(&mut self, pos: usize) {
        let Some((kv, state)) = self.cpu.as_mut() else { return };
        let Some(recurrent) = kv.recurrent.as_mut() else { return };
        if recurrent.len <= pos {
            return;
        }
        match &self.checkpoint {
            Some(checkpoint) if checkpoint.len <= pos => recurrent.clone_from(checkpoint),
            _ => recurrent.reset(),
        }
        let from = recurrent.len;
        for (range, rows) in batches(pos - from, state.n_batch, LogitsFor::None) {
            let (a, b) = (from + range.start, from + range.end);
            forward(&self.model, &self.lora, kv, state, &self.tokens[a..b], a, rows);
        }
    }

    /// Keep a copy of the CPU's recurrent state, if the model has one, as it is now.
    fn take_checkpoint(&mut self) {
        let Some(recurrent) = self.cpu.as_ref().and_then(|(kv, _)| kv.recurrent.as_ref()) else { return };
        match &mut self.checkpoint {
            Some(checkpoint) => checkpoint.clone_from(recurrent),
            None => self.checkpoint = Some(recurrent.clone()),
        }
    }

    /// The one fallback rule: under `Auto` a GPU fault moves the work to the CPU, which replays the
    /// cached tokens to rebuild the cache there; any other error (or backend) is returned.
    fn gpu_failed(&mut self, e: Error) -> Result<()> {
        if self.backend != Backend::Auto || !matches!(e, Error::Gpu { .. }) || !self.model.file().is_whole() {
            return Err(e);
        }
        self.gpu = None;
        self.fallback = Some(e);
        self.forget_from(0);
        let history = std::mem::take(&mut self.tokens);
        self.cpu_state();
        let (kv, state) = self.cpu.as_mut().expect("allocated above");
        if let Some(recurrent) = &mut kv.recurrent {
            recurrent.reset();
        }
        for (range, rows) in batches(history.len(), state.n_batch, LogitsFor::None) {
            forward(&self.model, &self.lora, kv, state, &history[range.clone()], range.start, rows);
        }
        self.tokens = history;
        Ok(())
    }

    /// Lose the GPU device on purpose, as a driver reset would (tests of the fallback).
    pub(crate) fn simulate_gpu_loss(&mut self) {
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            gpu.destroy_device();
        }
    }
}

/// [`Evaluator::rewind_recurrent`] on the GPU: bring its recurrent state (if the model has one) to position `pos` of
/// the cached `tokens`, from its checkpoint or the start, evaluating the tokens in between again.
async fn rewind_gpu_recurrent(gpu: &mut GpuRunner, tokens: &[u32], pos: usize, n_batch: usize) -> Result<()> {
    let from = gpu.rewind_recurrent(pos);
    for (range, _) in batches(pos - from, n_batch, LogitsFor::None) {
        let (a, b) = (from + range.start, from + range.end);
        gpu.eval(&tokens[a..b], a, Want::Nothing, &mut Vec::new()).await?;
    }
    Ok(())
}

/// Bytes of the host window a prefix-cache transfer to or from the GPU goes through at a time: the
/// whole cache of a long conversation is never copied to the host at once (wasm memory does not shrink).
const STAGING_BYTES: usize = 8 << 20;

/// Positions of one transfer window: whole pages within `STAGING_BYTES` (at least one).
fn window_positions(c: &Config) -> usize {
    let per_position = 2 * c.kv_layers() * c.kv_dim() * 2;
    (STAGING_BYTES / per_position / PAGE_TOKENS).max(1) * PAGE_TOKENS
}

/// `recall` on the GPU: the pages of the longest prefix of `tokens` in `cache` after the `held` tokens
/// the GPU's cache shares with them, restored into a host window and written up, window by window.
/// How many leading tokens of `tokens` the GPU's cache now holds.
fn upload_prefix(gpu: &GpuRunner, model: &Model, cache: &PrefixCache, tokens: &[u32], held: usize) -> Result<usize> {
    let c = &model.config;
    let step = window_positions(c);
    let mut n = held;
    loop {
        // `restore` writes from the page holding position `n` on.
        let start = n / PAGE_TOKENS * PAGE_TOKENS;
        let end = (start + step).min(tokens.len());
        let mut window = KvCache::window(c.kv_layers(), c.kv_dim(), start..end);
        let got = cache.restore(&tokens[..end], n, &mut window);
        if got > n {
            gpu.upload_kv(&window, start..got)?;
            n = got;
        }
        if got < end || end == tokens.len() {
            return Ok(n);
        }
    }
}

/// `remember` on the GPU: the rows of the whole pages of `tokens` that `cache` lacks, read into a
/// host window and inserted, window by window.
async fn download_new_pages(gpu: &GpuRunner, model: &Model, cache: &PrefixCache, tokens: &[u32]) -> Result<()> {
    let c = &model.config;
    let step = window_positions(c);
    let missing = cache.uncached(tokens);
    let mut start = missing.start;
    while start < missing.end {
        let end = (start + step).min(missing.end);
        let mut window = KvCache::window(c.kv_layers(), c.kv_dim(), start..end);
        gpu.download_kv(&mut window, start..end).await?;
        cache.insert(&tokens[..end], &window);
        // The cache took fewer pages (every page in use by other sessions), or lost some before
        // `start` meanwhile: the next window would not join on.
        if end < missing.end && cache.uncached(&tokens[..end]).start < end {
            break;
        }
        start = end;
    }
    Ok(())
}
