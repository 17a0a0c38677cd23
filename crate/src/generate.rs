//! Streaming generation on a [`Session`]: prefill the prompt, then sample one token at a time.
//!
//! The step API (`start` then `next_step` until `None`) lets a caller yield and cancel between
//! steps (the JavaScript binding does, so a page never freezes): each step evaluates one prefill
//! batch of the prompt or produces one token. `generate` is the same loop with a callback and a
//! cancel flag.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::clock::now_ms;
use crate::error::{Error, Result};
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
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl Stats {
    /// Prompt tokens actually evaluated per second.
    pub fn prefill_tok_s(&self) -> f64 {
        rate(self.prompt_tokens - self.cached_tokens, self.prefill_ms)
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
        if opts.max_tokens == 0 {
            return Err(Error::InvalidArgument("max_tokens must be at least 1".into()));
        }
        let sampler = Sampler::new(opts.sampler.clone())?;
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
        self.truncate(common);
        let model = self.model().clone();
        self.generation = Some(Generation {
            prompt: prompt.to_vec(),
            prefilled: common,
            decoder: model.tokenizer().decoder(),
            stop: StopMatcher::new(&opts.stop),
            sampler,
            opts,
            ids: Vec::new(),
            text: String::new(),
            stats: Stats {
                load_ms: model.load_ms(),
                prompt_tokens: prompt.len(),
                cached_tokens: common,
                ..Stats::default()
            },
            finish: None,
            pending: None,
        });
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
        if g.finish.is_some() {
            return Ok(None);
        }
        if g.prefilled < g.prompt.len() {
            return self.prefill_batch(g).map(Some);
        }
        let Some(id) = g.pending.take() else {
            return Ok(None);
        };
        g.ids.push(id);
        g.stats.generated_tokens += 1;
        let mut text = String::new();
        let mut hit_stop_string = false;
        if self.model().tokenizer().is_eog(id) && !g.opts.ignore_eog {
            g.finish = Some(FinishReason::Stop);
        } else {
            let piece = g.decoder.push(id)?;
            let (released, stopped) = g.stop.push(&piece);
            text = released;
            if stopped {
                hit_stop_string = true;
                g.finish = Some(FinishReason::Stop);
            } else if g.ids.len() >= g.opts.max_tokens || self.tokens().len() + 1 >= self.n_ctx() {
                g.finish = Some(FinishReason::Length);
            } else {
                // Feed the token back and sample the next one (returned by the next call).
                let t0 = now_ms();
                self.eval(&[id], false)?;
                g.pending = Some(g.sampler.sample(self.last_logits(), self.tokens()));
                g.stats.decode_ms += now_ms() - t0;
            }
        }
        if g.finish.is_some() && !hit_stop_string {
            text.push_str(&g.flush());
        }
        g.text.push_str(&text);
        Ok(Some(Step::Token(Token { id, text })))
    }

    /// Evaluate the next `n_batch` prompt tokens (what one forward call takes, so a prefill in steps
    /// runs the same batches as one `eval` of the whole prompt); after the last, sample the first token.
    fn prefill_batch(&mut self, g: &mut Generation) -> Result<Step> {
        let end = g.prompt.len().min(g.prefilled + self.n_batch());
        let t0 = now_ms();
        self.eval(&g.prompt[g.prefilled..end], false)?;
        g.prefilled = end;
        g.stats.prefill_ms += now_ms() - t0;
        if end == g.prompt.len() {
            g.pending = Some(g.sampler.sample(self.last_logits(), self.tokens()));
        }
        Ok(Step::Prefill { done: end, total: g.prompt.len() })
    }

    /// Stop the generation in progress (if any) as cancelled and return its result.
    pub fn cancel(&mut self) -> Option<Output> {
        if let Some(g) = self.generation.as_mut() {
            if g.finish.is_none() {
                g.finish = Some(FinishReason::Cancelled);
                let rest = g.flush();
                g.text.push_str(&rest);
            }
        }
        self.finish()
    }

    /// The finished (or cancelled) generation's ids, text and stats; `None` if none was started.
    pub fn finish(&mut self) -> Option<Output> {
        let g = self.generation.take()?;
        Some(Output { ids: g.ids, text: g.text, finish: g.finish.unwrap_or(FinishReason::Cancelled), stats: g.stats })
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

    fn last_logits(&self) -> &[f32] {
        let v = self.model().config.vocab_size;
        let l = self.logits();
        &l[l.len() - v..]
    }
}
