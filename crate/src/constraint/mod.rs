//! Constrained decoding: a request's grammar (a JSON Schema, any JSON object, a GBNF grammar, a regular
//! expression or a Lark grammar) compiled by llguidance against the model's vocabulary. Per generated token,
//! [`Constraint::mask_logits`] sets every logit the grammar forbids to -inf before any sampler runs, and
//! [`Constraint::commit`] takes the token chosen and returns the tokens the grammar then forces, which the
//! generation appends without sampling.
//!
//! Flow: `GrammarSource` -> [`GrammarCompiler::compile`] (one per model: the vocabulary's trie is built once)
//! -> [`Constraint`] (one per generation) -> mask, commit, mask, ... Every error is [`Error::Grammar`], and
//! compiling happens when a generation is created, before its first token.
//!
//! # Design
//!
//! Structured output on llguidance (MIT; llama.cpp's choice too), not a grammar engine of our own. A request's
//! `GrammarSource` (a JSON Schema, any JSON object, GBNF, a regular expression, Lark) is compiled by the model's one
//! `GrammarCompiler` (`TextModel::grammar_compiler`: the vocabulary's token trie is built once, control tokens marked
//! special so text never spells them; `vocab.rs`) into a `Constraint` when the `Generation` is created, first step
//! included, so a bad grammar is `Error::Grammar` (`E_GRAMMAR`) before any token. GBNF is translated to llguidance's
//! Lark by `gbnf.rs`. Per token, `Generation::choose` copies the last row of logits, `mask_logits` sets what the grammar
//! forbids to -inf (every end-of-generation token counts as llguidance's one end token), and the sampler runs as usual,
//! so every sampler setting holds; `commit` returns the tokens the grammar then forces, which are emitted without
//! sampling and evaluated in one batch with the next (`Stats::forced_tokens`), and an end token once the grammar is
//! complete. JSON is written as `", "` and `": "` with no free whitespace unless the schema's `x-guidance` says
//! otherwise. Cost bounds are llguidance's per-step limits (lexer fuel, Earley items, lexer states, grammar size) and
//! `MAX_GRAMMAR_BYTES`; a grammar that outgrows them mid-way ends its generation with `E_GRAMMAR`. llguidance compiles
//! recursively along subschemas, `$ref` hops and Lark rule references, so `depth.rs` measures the longest such chain
//! first (iteratively, cycles cut) and refuses more than `MAX_COMPILE_DEPTH`, which compiles within wasm32's 1 MiB
//! stack; `gbnf.rs` bounds the chains of what it writes the same way. On the GPU a
//! constrained step asks for `Want::Last` instead of `Want::Argmax`: the row of logits is read back (4 bytes a
//! vocabulary entry, 196 KB for the default model) and masked on the CPU, as for any sampler but greedy.
//! `llguidance`'s `referencing` feature (remote `$ref`s) is off: it needs a random source wasm32 lacks.

mod depth;
pub mod gbnf;
mod vocab;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What a request constrains its output to.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSource {
    /// A JSON Schema (drafts 4 to 2020-12, as llguidance reads them; `$ref` within the document). Output is JSON
    /// with `", "` and `": "` between items and keys and no other whitespace, and `oneOf` is read as `anyOf`,
    /// unless the schema's `x-guidance` object says otherwise.
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `response_format: { type: 'json_object' }`).
    JsonObject,
    /// A grammar in llama.cpp's GBNF (`root ::= ...`).
    Gbnf(String),
    /// A regular expression the whole output matches.
    Regex(String),
    /// A grammar in llguidance's Lark dialect (`start: ...`), which can inline JSON Schemas (`%json { ... }`).
    Lark(String),
}

/// The deepest chain of nested subschemas, `$ref` hops and Lark rule references accepted (`depth.rs` measures
/// them): llguidance compiles along such chains recursively, and a chain of this depth compiles within a 1 MiB
/// stack, wasm32's, on every target.
pub const MAX_COMPILE_DEPTH: usize = 128;

/// The longest grammar or schema text accepted. llguidance bounds what compiling one may take (grammar size,
/// lexer states, fuel); this bounds the text before it is parsed at all.
pub const MAX_GRAMMAR_BYTES: usize = 1 << 20;

impl GrammarSource {
    fn text_len(&self) -> usize {
        match self {
            GrammarSource::JsonSchema(v) => serde_json::to_string(v).map_or(usize::MAX, |s| s.len()),
            GrammarSource::JsonObject => 0,
            GrammarSource::Gbnf(s) | GrammarSource::Regex(s) | GrammarSource::Lark(s) => s.len(),
        }
    }

    fn to_llguidance(&self) -> Result<TopLevelGrammar> {
        let len = self.text_len();
        if len > MAX_GRAMMAR_BYTES {
            return Err(Error::Grammar(format!(
                "the grammar is {len} bytes, more than the {MAX_GRAMMAR_BYTES} allowed"
            )));
        }
        let depth = match self {
            GrammarSource::JsonSchema(schema) => depth::json_schema_depth(schema),
            GrammarSource::Lark(src) => depth::lark_depth(src),
            // GBNF: gbnf.rs bounds the chains of what it writes.
            GrammarSource::JsonObject | GrammarSource::Gbnf(_) | GrammarSource::Regex(_) => 0,
        };
        if depth > MAX_COMPILE_DEPTH {
            return Err(Error::Grammar(format!(
                "the grammar nests {depth} levels deep (subschemas, $refs or rule references), more than the {MAX_COMPILE_DEPTH} allowed"
            )));
        }
        Ok(match self {
            GrammarSource::JsonSchema(schema) => TopLevelGrammar::from_json_schema(with_json_layout(schema)?),
            GrammarSource::JsonObject => {
                TopLevelGrammar::from_json_schema(with_json_layout(&serde_json::json!({ "type": "object" }))?)
            }
            GrammarSource::Gbnf(src) => {
                let lark = gbnf::gbnf_to_lark(src).map_err(|e| Error::Grammar(format!("GBNF: {e}")))?;
                TopLevelGrammar::from_lark(lark)
            }
            GrammarSource::Regex(rx) => TopLevelGrammar::from_regex(rx),
            GrammarSource::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        })
    }
}

/// `schema` with our JSON layout (`", "`, `": "`, no free whitespace) unless it sets its own: free whitespace
/// lets a small model spend its tokens on newlines, and this layout is the one models see most
/// (Python's `json.dumps`). `oneOf` is read as `anyOf`, as llama.cpp does: llguidance cannot hold "exactly one"
/// and otherwise refuses it, while in real schemas its branches are mostly disjoint (`string` or `integer`), where
/// the two are the same.
pub(crate) fn with_json_layout(schema: &Value) -> Result<Value> {
    match schema {
        Value::Object(map) if !map.contains_key("x-guidance") => {
            let mut map = map.clone();
            map.insert(
                "x-guidance".into(),
                serde_json::json!({
                    "whitespace_flexible": false,
                    "item_separator": ", ",
                    "key_separator": ": ",
                    "coerce_one_of": true
                }),
            );
            Ok(Value::Object(map))
        }
        Value::Object(_) | Value::Bool(_) => Ok(schema.clone()),
        other => Err(Error::Grammar(format!("a JSON Schema is an object or a boolean, not {other}"))),
    }
}

/// Compiles grammars for one vocabulary. Building it makes the vocabulary's token trie (once per model:
/// `TextModel::grammar_compiler`).
pub struct GrammarCompiler {
    factory: ParserFactory,
    /// The end-of-generation ids: any of them ends a constrained generation where the grammar may end.
    eog: Arc<[u32]>,
    /// The one of them llguidance knows as its end token.
    eos: u32,
}

impl GrammarCompiler {
    pub fn new(tokenizer: &Tokenizer) -> Result<GrammarCompiler> {
        let eog: Arc<[u32]> = tokenizer.eog_ids().into();
        let eos = match tokenizer.eos() {
            Some(id) if tokenizer.is_eog(id) => id,
            _ => *eog.first().ok_or_else(|| {
                Error::Grammar("the vocabulary has no end-of-generation token to end a grammar".into())
            })?,
        };
        let env = vocab::tok_env(tokenizer, eos)?;
        let mut factory = ParserFactory::new_simple(&env).map_err(grammar_error)?;
        // Warnings are not printed (no stderr in a browser); a grammar that cannot work fails to compile.
        factory.set_stderr_log_level(0);
        // llguidance's default limits bound each step (lexer fuel, Earley items, lexer states, grammar size);
        // its errors name the rule or keyword without dumping the parser's state and the tokens so far.
        factory.limits_mut().verbose_errors = false;
        Ok(GrammarCompiler { factory, eog, eos })
    }

    /// Compile `source` into a constraint for one generation.
    pub fn compile(&self, source: &GrammarSource) -> Result<Constraint> {
        let grammar = source.to_llguidance()?;
        let parser = self.factory.create_parser(grammar).map_err(grammar_error)?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first step now, so that a grammar that cannot start, or starts beyond the limits, fails before
        // any token (its lexer is built lazily, step by step).
        matcher.compute_mask().map_err(grammar_error)?;
        Ok(Constraint { matcher, eog: self.eog.clone(), eos: self.eos, eog_logits: Vec::new() })
    }
}

fn grammar_error(e: impl std::fmt::Display) -> Error {
    Error::Grammar(e.to_string())
}

/// One generation's place in its grammar.
pub struct Constraint {
    matcher: Matcher,
    eog: Arc<[u32]>,
    eos: u32,
    /// Scratch: the end tokens' logits while the mask is applied.
    eog_logits: Vec<Option<f32>>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("stopped", &self.matcher.is_stopped()).finish()
    }
}

impl Constraint {
    /// Set to -inf the logit of every token that cannot come next. The end-of-generation tokens stay where the
    /// grammar may end here; when it must end, they are all that stays. Logits past the vocabulary (a padded
    /// output layer) are never allowed.
    pub fn mask_logits(&mut self, logits: &mut [f32]) -> Result<()> {
        let mask = self.matcher.compute_mask_or_eos().map_err(grammar_error)?;
        let may_end = mask.is_allowed(self.eos);
        // The mask allows only llguidance's one end token; the others are ours to allow alike.
        self.eog_logits.clear();
        self.eog_logits.extend(self.eog.iter().map(|&id| logits.get(id as usize).copied()));
        let words = mask.as_slice();
        let mut any = false;
        for (word_index, chunk) in logits.chunks_mut(32).enumerate() {
            let word = words.get(word_index).copied().unwrap_or(0);
            any |= word != 0;
            if word != u32::MAX {
                for (bit, logit) in chunk.iter_mut().enumerate() {
                    if word >> bit & 1 == 0 {
                        *logit = f32::NEG_INFINITY;
                    }
                }
            }
        }
        for (&id, &saved) in self.eog.iter().zip(&self.eog_logits) {
            if let (Some(logit), Some(saved)) = (logits.get_mut(id as usize), saved) {
                *logit = if may_end { saved } else { f32::NEG_INFINITY };
            }
        }
        if !any {
            return Err(Error::Grammar("no token can continue the output".into()));
        }
        Ok(())
    }

    /// The tokens the grammar forces now, before anything is sampled (at the start, a grammar may fix the
    /// first tokens), ending with an end token where it is complete and cannot go on.
    pub fn forced(&mut self) -> Result<Vec<u32>> {
        let mut forced = self.matcher.consume_ff_tokens();
        if let Some(e) = self.matcher.get_error() {
            return Err(Error::Grammar(e));
        }
        if self.matcher.is_stopped() {
            forced.push(self.eos);
        }
        Ok(forced)
    }

    /// Take `id`, the token chosen from the masked logits, and return the tokens the grammar forces after it
    /// ([`forced`](Self::forced)). An end-of-generation token ends the generation and forces nothing.
    pub fn commit(&mut self, id: u32) -> Result<Vec<u32>> {
        if self.eog.contains(&id) {
            return Ok(Vec::new());
        }
        self.matcher.consume_token(id).map_err(grammar_error)?;
        self.forced()
    }
}
