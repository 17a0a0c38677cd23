//! A session: one conversation's KV cache and run state over a shared [`Model`].
//!
//! `eval` appends tokens to the cache (prefill in batches of `n_batch`) and returns logits.
//! The token history is kept, so a new prompt that extends the previous one reuses its cached prefix.

use std::sync::Arc;

use crate::error::{Error, Result};
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
    kv: KvCache,
    state: RunState,
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
        let state = RunState::new(&model, n_batch, n_ctx);
        let kv = KvCache::new(c, n_ctx);
        Ok(Session { model, kv, state, tokens: Vec::new(), logits: Vec::new(), generation: None })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn n_ctx(&self) -> usize {
        self.kv.n_ctx
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
        self.kv.bytes()
    }

    /// Append `tokens` to the cache and return logits: `tokens.len() × vocab` when `all_logits`,
    /// else the last token's `vocab` logits.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<&[f32]> {
        let vocab = self.model.config.vocab_size;
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("eval needs at least one token".into()));
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab_size: vocab });
        }
        let needed = self.tokens.len() + tokens.len();
        if needed > self.kv.n_ctx {
            return Err(Error::ContextOverflow { needed, context: self.kv.n_ctx });
        }
        self.logits.clear();
        let n_batch = self.state.n_batch;
        let chunks = tokens.chunks(n_batch);
        let n_chunks = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            let last_chunk = i + 1 == n_chunks;
            let want = match (all_logits, last_chunk) {
                (true, _) => LogitsFor::All,
                (false, true) => LogitsFor::Last,
                (false, false) => LogitsFor::None,
            };
            forward(&self.model, &mut self.kv, &mut self.state, chunk, self.tokens.len(), want);
            self.tokens.extend_from_slice(chunk);
            if want != LogitsFor::None {
                self.logits.extend_from_slice(&self.state.logits);
            }
        }
        Ok(&self.logits)
    }
}
