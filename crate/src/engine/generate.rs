//! Streaming generation: prefill the prompt, then sample one token at a time.
//!
//! [`Generation`] is the one driver: a state machine that says what to evaluate next and takes the
//! results back, so the synchronous [`Session`](crate::Session) (`start`, then `next_step` until
//! `None`, or `generate`) and the browser's asynchronous WebGPU engine run the same steps: each
//! evaluates one prefill batch of the prompt or produces one token, and a caller can yield and
//! cancel between them.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use crate::clock::now_ms;
use crate::constraint::{Constraint, GrammarSource};
use crate::engine::evaluator::{Evaluator, Out};
use crate::engine::sampler::{Sampler, SamplerConfig};
use crate::engine::stop::StopMatcher;
use crate::error::{Error, Result};
use crate::model::eval::Want;
use crate::model::lora::AdapterSet;
use crate::model::Model;
use crate::tokenizer::StreamDecoder;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate (the end-of-generation token counts). 0 evaluates the prompt into the cache
    /// and stops without a token: a conversation reopened from the prefix cache is made ready while its user
    /// types, so the next turn prefills only its own tokens.
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation ends when the text contains one of these; the stop string is not returned.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks, reference runs).
    pub ignore_eog: bool,
    /// The LoRA adapters this request runs with, each with its scale (empty: the base model). The
    /// session's cached conversation is kept only when the set is the one it was computed with.
    pub adapters: AdapterSet,
    /// The grammar the output must follow (`constraint`): compiled when the generation is created, so a bad
    /// one is an error before any token; then every token is sampled from the logits it allows.
    pub grammar: Option<GrammarSource>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerConfig::default(),
            stop: Vec::new(),
            ignore_eog: false,
            adapters: AdapterSet::default(),
            grammar: None,
        }
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
    /// Generated tokens a grammar forced: appended without sampling, evaluated with the next sampled one.
    pub forced_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Time spent before the prefill moving keys and values between the session's cache and the model's
    /// prefix cache (putting what the session held there, copying the longest cached prefix in).
    pub restore_ms: f64,
    /// Time compiling the request's grammar (its first step included), before the prefill.
    pub grammar_compile_ms: f64,
    /// Time in the grammar per token: computing its masks, applying them, taking the tokens chosen and forced.
    pub grammar_ms: f64,
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

/// What a [`Generation`] needs next.
pub(crate) enum Next<'a> {
    /// Evaluate `tokens` at positions `pos..` and [`feed`](Generation::feed) back what `want` asks for.
    Eval { tokens: &'a [u32], pos: usize, want: Want },
    /// The next token, needing no evaluation (it was sampled from the last one fed).
    Token(Token),
    /// The generation has finished.
    Done,
}

/// The evaluation a [`Generation`] handed out and waits to be fed.
#[derive(Clone, Copy)]
enum Awaiting {
    /// The prompt up to position `end`.
    Prefill { end: usize },
    /// The tokens emitted since the last evaluation, up to `end`, for the next one.
    Decode { end: usize },
}

/// The driver of one generation: a state machine that evaluates nothing itself. It owns the
/// prompt checks, the reuse of the cached prefix, sampling, stops and stats, and tells its caller
/// what to evaluate next ([`Generation::next`]); the caller feeds the result back
/// ([`Generation::feed`]). [`Generation::step`] is that loop over an [`Evaluator`], awaited by
/// the browser's WebGPU engine and run to completion by the synchronous [`Session`](crate::Session).
pub(crate) struct Generation {
    /// The prompt, then the tokens emitted: what the cache holds once the prefill is over (but the
    /// tokens emitted since the last evaluation, until they are fed back).
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Prompt tokens in the KV cache so far; the prefill is over when this reaches `prompt_len`.
    prefilled: usize,
    /// Tokens in the KV cache once the prefill is over: the next decode evaluates `tokens[evaluated..]`.
    evaluated: usize,
    n_ctx: usize,
    n_batch: usize,
    vocab_size: usize,
    model: Arc<Model>,
    opts: GenerateOptions,
    sampler: Sampler,
    /// The request's grammar, and the logits it masks (scratch, one row).
    constraint: Option<Constraint>,
    masked: Vec<f32>,
    decoder: StreamDecoder,
    stop: StopMatcher,
    /// All text released so far.
    text: String,
    stats: Stats,
    finish: Option<FinishReason>,
    /// The tokens chosen (sampled after the prefill or from the last tokens fed, then those the grammar
    /// forces, marked `true`) but not yet emitted.
    pending: VecDeque<(u32, bool)>,
    awaiting: Option<Awaiting>,
    /// When the evaluation awaited was handed out.
    t0: f64,
}

impl Generation {
    /// A generation of `opts` for `prompt` in a context of `n_ctx`, prefilling `n_batch` tokens per
    /// evaluation. Every check comes first: an error changes no cache. The caller then calls
    /// [`reuse_cache`](Self::reuse_cache) with its evaluator.
    pub(crate) fn new(
        model: &Arc<Model>,
        opts: GenerateOptions,
        prompt: &[u32],
        n_ctx: usize,
        n_batch: usize,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt has no tokens".into()));
        }
        if prompt.len() >= n_ctx {
            return Err(Error::ContextOverflow { needed: prompt.len() + 1, context: n_ctx });
        }
        // Bad ids are the caller's error now, not halfway through the prefill.
        let vocab_size = model.config.vocab_size;
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::TokenOutOfRange { id, vocab_size });
        }
        opts.adapters.check(model)?;
        let sampler = Sampler::new(opts.sampler.clone())?;
        let t0 = now_ms();
        let constraint = match &opts.grammar {
            Some(grammar) => Some(model.text().grammar_compiler()?.compile(grammar)?),
            None => None,
        };
        let grammar_compile_ms = if constraint.is_some() { now_ms() - t0 } else { 0.0 };
        Ok(Generation {
            tokens: prompt.to_vec(),
            prompt_len: prompt.len(),
            prefilled: 0,
            evaluated: 0,
            n_ctx,
            n_batch,
            vocab_size,
            model: model.clone(),
            decoder: model.tokenizer().decoder(),
            stop: StopMatcher::new(&opts.stop),
            sampler,
            constraint,
            masked: Vec::new(),
            opts,
            text: String::new(),
            stats: Stats {
                load_ms: model.load_ms(),
                prompt_tokens: prompt.len(),
                grammar_compile_ms,
                ..Stats::default()
            },
            finish: None,
            pending: VecDeque::new(),
            awaiting: None,
            t0: 0.0,
        })
    }

    /// Make `ev`'s cache hold the longest cached prefix of the prompt (but its last token, which is
    /// evaluated for its logits): what `ev` already shares with it, or more from the model's prefix
    /// cache, after putting what `ev` held there. The prefill starts after it. Async because on the
    /// GPU putting it there is a readback; on the CPU the future is ready at once. What `ev` holds
    /// under other adapters than this request's is put away, then forgotten.
    pub(crate) async fn reuse_cache(&mut self, ev: &mut Evaluator) -> Result<()> {
        let t0 = now_ms();
        ev.remember().await?;
        ev.set_adapters(&self.opts.adapters)?;
        let held = ev.recall(&self.tokens[..self.prompt_len - 1])?;
        ev.truncate(held);
        self.prefilled = held;
        self.stats.cached_tokens = held;
        self.stats.restore_ms = now_ms() - t0;
        Ok(())
    }

    /// What to do next: evaluate one prefill batch (at most `n_batch` prompt tokens), emit the
    /// token sampled last, or evaluate that token for the next one.
    pub(crate) fn next(&mut self) -> Result<Next<'_>> {
        if self.finish.is_some() {
            return Ok(Next::Done);
        }
        if self.prefilled < self.prompt_len {
            let (pos, end) = (self.prefilled, self.prompt_len.min(self.prefilled + self.n_batch));
            let sample = end == self.prompt_len && self.opts.max_tokens > 0;
            let want = if sample { self.sample_want() } else { Want::Nothing };
            return Ok(self.eval(Awaiting::Prefill { end }, pos..end, want));
        }
        if let Some((id, forced)) = self.pending.pop_front() {
            self.stats.forced_tokens += usize::from(forced);
            return Ok(Next::Token(self.emit(id)?));
        }
        let (pos, end) = (self.evaluated, self.tokens.len());
        let want = self.sample_want();
        Ok(self.eval(Awaiting::Decode { end }, pos..end, want))
    }

    fn eval(&mut self, awaiting: Awaiting, range: Range<usize>, want: Want) -> Next<'_> {
        self.awaiting = Some(awaiting);
        self.t0 = now_ms();
        Next::Eval { pos: range.start, tokens: &self.tokens[range], want }
    }

    /// A plain argmax is computed where the model runs (on the GPU only the id is read back);
    /// anything else samples the logits, and a grammar masks them first.
    fn sample_want(&self) -> Want {
        if self.sampler.config().is_argmax() && self.constraint.is_none() {
            Want::Argmax
        } else {
            Want::Last
        }
    }

    /// The result of the evaluation [`next`](Self::next) handed out; the prefill's progress once
    /// a batch of the prompt is in the cache.
    pub(crate) fn feed(&mut self, out: Out<'_>) -> Result<Option<Step>> {
        let ms = now_ms() - self.t0;
        let Some(awaiting) = self.awaiting.take() else { return Ok(None) };
        match awaiting {
            Awaiting::Prefill { end } => {
                self.stats.prefilled_tokens += end - self.prefilled;
                self.stats.prefill_ms += ms;
                self.prefilled = end;
                if end == self.prompt_len {
                    self.evaluated = end;
                    if self.opts.max_tokens == 0 {
                        self.finish = Some(FinishReason::Length);
                    } else {
                        self.choose(out)?;
                    }
                }
                Ok(Some(Step::Prefill { done: end, total: self.prompt_len }))
            }
            Awaiting::Decode { end } => {
                self.evaluated = end;
                self.choose(out)?;
                self.stats.decode_ms += ms;
                Ok(None)
            }
        }
    }

    /// Choose the next token from an evaluation's result, and queue it with the tokens the grammar forces
    /// after it.
    fn choose(&mut self, out: Out<'_>) -> Result<()> {
        let t0 = now_ms();
        if let Some(constraint) = self.constraint.as_mut() {
            // Only at the start can tokens be forced before a sample (later ones come with each commit).
            let forced = constraint.forced()?;
            if !forced.is_empty() {
                self.pending.extend(forced.into_iter().map(|id| (id, true)));
                self.stats.grammar_ms += now_ms() - t0;
                return Ok(());
            }
        }
        let id = match out {
            Out::Id(id) => id,
            Out::Logits(logits) => {
                let row = &logits[logits.len() - self.vocab_size..];
                // The history the penalties look at: everything in the cache.
                match self.constraint.as_mut() {
                    Some(constraint) => {
                        self.masked.clear();
                        self.masked.extend_from_slice(row);
                        constraint.mask_logits(&mut self.masked)?;
                        self.stats.grammar_ms += now_ms() - t0;
                        self.sampler.sample(&self.masked, &self.tokens)
                    }
                    None => self.sampler.sample(row, &self.tokens),
                }
            }
            Out::Nothing => unreachable!("a sampling evaluation returns logits or an id"),
        };
        self.pending.push_back((id, false));
        if let Some(constraint) = self.constraint.as_mut() {
            let t1 = now_ms();
            self.pending.extend(constraint.commit(id)?.into_iter().map(|id| (id, true)));
            self.stats.grammar_ms += now_ms() - t1;
        }
        Ok(())
    }

    /// Drive the generation on `ev` up to its next step: a prefill batch or a token (`None` once it
    /// has finished). Each step evaluates at most one batch, so a caller can yield and cancel
    /// between steps, also during a long prefill.
    pub(crate) async fn step(&mut self, ev: &mut Evaluator) -> Result<Option<Step>> {
        loop {
            match self.next()? {
                Next::Eval { tokens, pos, want } => {
                    let out = ev.eval(tokens, pos, want).await?;
                    if let Some(step) = self.feed(out)? {
                        return Ok(Some(step));
                    }
                }
                Next::Token(token) => return Ok(Some(Step::Token(token))),
                Next::Done => return Ok(None),
            }
        }
    }

    /// Emit `id` and decide whether generation goes on.
    fn emit(&mut self, id: u32) -> Result<Token> {
        // Tokens in the cache: the prompt and every token emitted before this one.
        let cached = self.tokens.len();
        self.tokens.push(id);
        self.stats.generated_tokens += 1;
        let mut text = String::new();
        let mut hit_stop_string = false;
        if self.model.tokenizer().is_eog(id) && !self.opts.ignore_eog {
            self.finish = Some(FinishReason::Stop);
        } else {
            let piece = self.decoder.push(id)?;
            let (released, stopped) = self.stop.push(&piece);
            text = released;
            if stopped {
                hit_stop_string = true;
                self.finish = Some(FinishReason::Stop);
            } else if self.tokens.len() - self.prompt_len >= self.opts.max_tokens || cached + 1 >= self.n_ctx {
                self.finish = Some(FinishReason::Length);
            }
        }
        if self.finish.is_some() && !hit_stop_string {
            text.push_str(&self.flush());
        }
        self.text.push_str(&text);
        Ok(Token { id, text })
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
    pub(crate) fn output(mut self) -> Output {
        Output {
            ids: self.tokens.split_off(self.prompt_len),
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
