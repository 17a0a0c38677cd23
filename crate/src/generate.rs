//! Streaming generation on a [`Session`]: prefill the prompt, then sample one token at a time.
//!
//! The step API (`start` then `next_step` until `None`) lets a caller yield and cancel between
//! steps (the JavaScript binding does, so a page never freezes): each step evaluates one prefill
//! batch of the prompt or produces one token. `generate` is the same loop with a callback and a
//! cancel flag.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::sampler::{Sampler, SamplerConfig};
use crate::session::Session;
use crate::stop::StopMatcher;
use crate::tokenizer::StreamDecoder;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate (the end-of-generation token counts).
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation ends when the text contains one of these; the stop string is not returned.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks, reference runs).
    pub ignore_eog: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_tokens: 256, sampler: SamplerConfig::default(), stop: Vec::new(), ignore_eog: false }
    }
}

/// What one [`Session::next_step`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// One batch of the prompt was evaluated: `done` of its `total` tokens are in the KV cache
    /// (cached ones included). No token yet.
    Prefill {
        done: usize,
        total: usize,
    },
    Token(Token),
}

/// One generated token and the text it releases (possibly empty while UTF-8 or a stop string is pending).
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub id: u32,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context window is full.
    Length,
    /// The caller's cancel flag was set.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// How long the model took to load (the same for every request on it).
    pub load_ms: f64,
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys/values were reused from the session's cache.
    pub cached_tokens: usize,
    /// Prompt tokens the prefill evaluated: `prompt_tokens - cached_tokens`, or fewer where the generation
    /// was cancelled during the prefill.
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl Stats {
    /// Prompt tokens evaluated per second.
    pub fn prefill_tok_s(&self) -> f64 {
        rate(self.prefilled_tokens, self.prefill_ms)
    }

    /// Tokens per second after the first generated one (each needs one forward pass).
    pub fn decode_tok_s(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_ms)
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1e3 / ms
    } else {
        0.0
    }
}

/// The result of a whole generation.
#[derive(Clone, Debug)]
pub struct Output {
    pub ids: Vec<u32>,
    pub text: String,
    pub finish: FinishReason,
    pub stats: Stats,
}

/// State of the generation in progress on a session.
pub(crate) struct Generation {
    prompt: Vec<u32>,
    /// Prompt tokens in the KV cache so far; the prefill is over when this reaches `prompt.len()`.
    prefilled: usize,
    opts: GenerateOptions,
    sampler: Sampler,
    decoder: StreamDecoder,
    stop: StopMatcher,
    ids: Vec<u32>,
    /// All text released so far.
    text: String,
    stats: Stats,
    finish: Option<FinishReason>,
    /// The token sampled (after the prefill, or the previous token) but not yet fed back through the model.
    pending: Option<u32>,
}

impl Generation {
    /// A generation of `opts` for `prompt`, whose first `cached_tokens` are already in the cache.
    pub(crate) fn new(
        model: &Model,
        opts: GenerateOptions,
        prompt: &[u32],
        cached_tokens: usize,
    ) -> Result<Generation> {
        if opts.max_tokens == 0 {
            return Err(Error::InvalidArgument("max_tokens must be at least 1".into()));
        }
        Ok(Generation {
            prompt: prompt.to_vec(),
            prefilled: cached_tokens,
            decoder: model.tokenizer().decoder(),
            stop: StopMatcher::new(&opts.stop),
            sampler: Sampler::new(opts.sampler.clone())?,
            opts,
            ids: Vec::new(),
            text: String::new(),
            stats: Stats { load_ms: model.load_ms(), prompt_tokens: prompt.len(), cached_tokens, ..Stats::default() },
            finish: None,
            pending: None,
        })
    }

    pub(crate) fn sampler(&mut self) -> &mut Sampler {
        &mut self.sampler
    }

    pub(crate) fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// The prompt positions to evaluate next (at most `n_batch`), or `None` once the prompt is in the
    /// cache (or the generation has finished).
    pub(crate) fn next_prefill_batch(&self, n_batch: usize) -> Option<Range<usize>> {
        (self.finish.is_none() && self.prefilled < self.prompt.len())
            .then(|| self.prefilled..self.prompt.len().min(self.prefilled + n_batch))
    }

    /// The prompt is in the cache up to position `end` (after another `ms` of prefill); `first`, the
    /// first token to emit, comes with the last batch.
    pub(crate) fn prefilled(&mut self, end: usize, ms: f64, first: Option<u32>) {
        self.stats.prefilled_tokens += end - self.prefilled;
        self.prefilled = end;
        self.stats.prefill_ms += ms;
        if first.is_some() {
            self.pending = first;
        }
    }

    /// The token fed back after the last emitted one gave `next` (after `decode_ms`).
    pub(crate) fn set_pending(&mut self, next: u32, decode_ms: f64) {
        self.pending = Some(next);
        self.stats.decode_ms += decode_ms;
    }

    /// Emit the pending token (once the prompt is in the cache), and whether generation goes on (then the caller feeds
    /// its id through the model and calls `set_pending`). `None` once generation has finished.
    /// `cached` is the number of tokens in the cache, `n_ctx` the context window.
    pub(crate) fn emit(&mut self, model: &Model, cached: usize, n_ctx: usize) -> Result<Option<(Token, bool)>> {
        if self.finish.is_some() {
            return Ok(None);
        }
        let Some(id) = self.pending.take() else {
            return Ok(None);
        };
        self.ids.push(id);
        self.stats.generated_tokens += 1;
        let mut text = String::new();
        let mut hit_stop_string = false;
        if model.tokenizer().is_eog(id) && !self.opts.ignore_eog {
            self.finish = Some(FinishReason::Stop);
        } else {
            let piece = self.decoder.push(id)?;
            let (released, stopped) = self.stop.push(&piece);
            text = released;
            if stopped {
                hit_stop_string = true;
                self.finish = Some(FinishReason::Stop);
            } else if self.ids.len() >= self.opts.max_tokens || cached + 1 >= n_ctx {
                self.finish = Some(FinishReason::Length);
            }
        }
        if self.finish.is_some() && !hit_stop_string {
            text.push_str(&self.flush());
        }
        self.text.push_str(&text);
        Ok(Some((Token { id, text }, self.finish.is_none())))
    }

    /// Mark the generation cancelled (unless it has finished).
    pub(crate) fn cancel(&mut self) {
        if self.finish.is_none() {
            self.finish = Some(FinishReason::Cancelled);
            let rest = self.flush();
            self.text.push_str(&rest);
        }
    }

    /// The generation's ids, text and stats.
    pub(crate) fn output(self) -> Output {
        Output {
            ids: self.ids,
            text: self.text,
            finish: self.finish.unwrap_or(FinishReason::Cancelled),
            stats: self.stats,
        }
    }

    /// Release text still held for an incomplete UTF-8 sequence or a possible stop string.
    fn flush(&mut self) -> String {
        let rest = self.decoder.finish();
        let (mut text, _) = self.stop.push(&rest);
        text.push_str(&self.stop.finish());
        text
    }
}

impl Session {
    /// Prepare to generate from `prompt`, reusing the cached prefix it shares with the session. The
    /// rest of the prompt is evaluated by the first `next_step` calls, one prefill batch each.
    pub fn start(&mut self, prompt: &[u32], opts: GenerateOptions) -> Result<()> {
        self.generation = None;
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt has no tokens".into()));
        }
        if prompt.len() >= self.n_ctx() {
            return Err(Error::ContextOverflow { needed: prompt.len() + 1, context: self.n_ctx() });
        }
        // Bad ids are the caller's error now, not halfway through the prefill.
        let vocab_size = self.model().config.vocab_size;
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        // Keep the longest cached prefix, but always evaluate at least the last prompt token for its logits.
        let common = self.tokens().iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        let g = Generation::new(self.model(), opts, prompt, common)?;
        self.truncate(common);
        self.generation = Some(g);
        Ok(())
    }

    /// Evaluate the next prefill batch of the prompt or produce the next token; `None` once
    /// generation has finished (see [`Session::finish`]).
    pub fn next_step(&mut self) -> Result<Option<Step>> {
        let Some(mut g) = self.generation.take() else {
            return Err(Error::InvalidArgument("no generation in progress: call start first".into()));
        };
        let result = self.advance(&mut g);
        self.generation = Some(g);
        result
    }

    fn advance(&mut self, g: &mut Generation) -> Result<Option<Step>> {
        if let Some(batch) = g.next_prefill_batch(self.n_batch()) {
            return self.prefill_batch(g, batch).map(Some);
        }
        let Some((token, goes_on)) = g.emit(self.model(), self.tokens().len(), self.n_ctx())? else {
            return Ok(None);
        };
        if goes_on {
            // Feed the token back and sample the next one (returned by the next call).
            let t0 = now_ms();
            let next = self.next_token(&[token.id], g)?;
            g.set_pending(next, now_ms() - t0);
        }
        Ok(Some(Step::Token(token)))
    }

    /// Evaluate one batch of the prompt (`n_batch` tokens, what one forward call takes, so a prefill
    /// in steps runs the same batches as one `eval` of the whole prompt); after the last, sample the
    /// first token.
    fn prefill_batch(&mut self, g: &mut Generation, batch: Range<usize>) -> Result<Step> {
        let t0 = now_ms();
        let tokens = g.prompt()[batch.clone()].to_vec();
        let done = batch.end == g.prompt().len();
        let first = if done {
            Some(self.next_token(&tokens, g)?)
        } else {
            self.eval(&tokens, false)?;
            None
        };
        g.prefilled(batch.end, now_ms() - t0, first);
        Ok(Step::Prefill { done: batch.end, total: g.prompt().len() })
    }

    /// Stop the generation in progress (if any) as cancelled and return its result.
    pub fn cancel(&mut self) -> Option<Output> {
        if let Some(g) = self.generation.as_mut() {
            g.cancel();
        }
        self.finish()
    }

    /// The finished (or cancelled) generation's ids, text and stats; `None` if none was started.
    pub fn finish(&mut self) -> Option<Output> {
        self.generation.take().map(Generation::output)
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

    /// Evaluate `tokens` and pick the token after them with `g`'s sampler. A plain argmax on the
    /// GPU is computed there, and only the id is read back; anything else samples the logits.
    fn next_token(&mut self, tokens: &[u32], g: &mut Generation) -> Result<u32> {
        if self.on_gpu() && g.sampler().config().is_argmax() {
            return self.eval_argmax(tokens);
        }
        self.eval(tokens, false)?;
        Ok(g.sampler().sample(self.last_logits(), self.tokens()))
    }

    fn last_logits(&self) -> &[f32] {
        let v = self.model().config.vocab_size;
        let l = self.logits();
        &l[l.len() - v..]
    }
}
