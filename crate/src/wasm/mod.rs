//! The JavaScript binding (wasm32 only): one `Engine` = a model and its session.
//!
//! The surface is deliberately small and JSON-shaped; the TypeScript package (`npm/`) builds the
//! user-facing API on it. Errors become JS `Error`s with a stable `code` property (see `Error::code`).
//! Generation is stepwise (`start`, then `nextStep` per prefill batch or token), so JS can yield
//! and abort between steps, also during the prefill of a long prompt.
//! The model file is streamed into a [`ModelBuffer`] inside wasm memory, so loading never holds two
//! copies of it, and running out of the 4 GiB wasm32 address space is an error, not a trap; a split model's shards
//! come one after another (`nextShard`). [`Sha256`] hashes the files the package's model store downloads.
//! An encoder model (`bert`) has no session: it answers `embed` (and `tokenize`, `info`) only.
//! LoRA adapters are read for the model by `loadAdapter` and chosen per generation by id (`adapters` in `start`'s
//! options); they run on the CPU. MicroLoRAs, trained here from feedback, are adapters of the same kind (`wasm/lora.rs`).
//! In the threaded build (feature `threads`) the forward passes (`start`, `nextStep`, `score`, `embed`) run on
//! the thread pool and return Promises (see `crate::wasm::threads`); in the plain build they return values.
//!
//! # Design
//!
//! `wasm/mod.rs` exports `Engine` (a model and its `Session`) with a small JSON-shaped, stepwise API that the npm package
//! wraps; errors become JS `Error`s with a `code`. Bytes from outside (saved states, stored records, adapter files) come
//! in as `Uint8Array`s and are copied by `bytes_from_js`: refused unread beyond the largest valid size, copied into
//! fallibly allocated memory, since wasm-bindgen's own copy of a `Vec<u8>` argument allocates first and traps. An encoder model's `Engine` has no session: it answers `embed`
//! (`Model::embed`, a pool job in the threaded build like the forward passes) and `E_MODEL` to the session calls. The model file is streamed into a `ModelBuffer` inside wasm memory,
//! so loading never holds two copies. `wasm/threads.rs` (feature `threads`) is the threaded build: a browser's main
//! thread may not block (`memory.atomic.wait32` traps there) and a rayon loop blocks its caller, so each forward pass
//! (`start`, `nextStep`, `score`) runs as a job on a pool worker and returns a Promise; the main thread only uses
//! `try_lock`. `wasm/gpu.rs` (feature `gpu`) exports `GpuEngine`, the same surface with loading, steps, scoring and
//! `saveState` as Promises (a browser cannot block on the GPU); it steps the same `Generation` over its `Evaluator`, so
//! prefill, abort, the prefix cache and the CPU fallback behave as natively. Its last `nextStep` puts the conversation
//! in the prefix cache (a readback), which the CPU engine's `finish` does, so that `finish` stays synchronous.
//! It reads LoRA adapter files as `Engine` does (`Adapters` in `wasm/mod.rs`), and its `Evaluator` runs them on the GPU; it
//! trains no MicroLoRA (that is `Engine`'s, below).
//! `wasm/lora.rs` adds MicroLoRA to `Engine`: a MicroLoRA has an adapter id beside the loaded files' (`Adapters` in
//! `wasm/mod.rs`), and a request naming it takes its weights as they are when it starts; a training step is a pool job in the
//! threaded build, as a forward pass is.
//! `wasm/text.rs` exports `TextEngine`, a model's text side made from its GGUF header alone (`TextModel`), and holds the
//! text calls (`tokenize`, `tokenizePrompt`, `detokenize`, `applyChatTemplate`, `chatPrompt`, the text facts of `info`)
//! that `Engine`, `GpuEngine` and `TextEngine` all answer through the same functions, so the three agree.

#[cfg(feature = "bench")]
mod bench;
mod chat;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod index;
pub mod lora;
pub mod text;
#[cfg(feature = "threads")]
pub mod threads;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::constraint::GrammarSource;
use crate::error::Error;
use crate::gguf::bytes::{ModelBytes, ModelBytesBuilder, MAX_PIECE_BYTES};
use crate::kv::cache::{KvCacheOptions, DEFAULT_HOT_TOKENS};
use crate::model::config::Arch;
use crate::model::forward::RunState;
use crate::model::lora::{AdapterSet, LoraAdapter};
use crate::training::MicroLora;
use crate::{EmbedOptions, GenerateOptions, Model, Pooling, SamplerConfig, Session, SessionOptions, Step};

pub(crate) fn js_error(e: Error) -> JsValue {
    coded_error(e.code(), &e.to_string())
}

fn coded_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    let _ = js_sys::Reflect::set(&err, &"code".into(), &code.into());
    err.into()
}

fn out_of_memory(bytes: usize, what: &str) -> JsValue {
    js_error(Error::OutOfMemory { bytes, what: what.into() })
}

/// Bytes from outside (a saved state, an adapter file, a stored record) copied into wasm memory, checked first:
/// longer than `max`, the largest valid `what`, they are refused unread (`Error::InvalidArgument`); memory that
/// cannot be had is an `Error::OutOfMemory`. wasm-bindgen's own copy of a `Vec<u8>` or `&[u8]` argument would
/// allocate first, and trap when it cannot.
pub(crate) fn bytes_from_js(array: &js_sys::Uint8Array, max: usize, what: &str) -> crate::Result<Vec<u8>> {
    // `byteLength` as JS has it: js_sys reads it as a u32, which wraps for arrays beyond 4 GiB.
    let length = js_sys::Reflect::get(array, &"byteLength".into()).ok().and_then(|n| n.as_f64()).unwrap_or(f64::MAX);
    if length > max as f64 {
        return Err(Error::InvalidArgument(format!("{what} of {length} bytes, more than any valid one ({max})")));
    }
    let n = length as usize;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(n).map_err(|_| Error::OutOfMemory { bytes: n, what: what.into() })?;
    bytes.resize(n, 0);
    array.copy_to(&mut bytes);
    Ok(bytes)
}

/// The longest saved state a session of `model` with a context of `n_ctx` restores.
pub(crate) fn max_state_bytes(model: &Model, n_ctx: usize) -> usize {
    let c = &model.config;
    crate::kv::state::max_bytes(c.kv_layers(), c.kv_dim(), n_ctx, c.recurrent_state_bytes())
}

thread_local! {
    /// The message of the last panic, so that JS can report it instead of a bare `unreachable` trap.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

#[wasm_bindgen(start)]
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        #[cfg(feature = "threads")]
        crate::wasm::threads::fail_running_job(&info.to_string());
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()))
    }));
}

/// Take the message of the last Rust panic (the engine is unusable after one), if any.
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.with(|p| p.borrow_mut().take())
}

pub(crate) fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serializes")
}

pub(crate) fn parse<'a, T: Deserialize<'a>>(s: &'a str, what: &str) -> Result<T, JsValue> {
    serde_json::from_str(s).map_err(|e| js_error(Error::InvalidArgument(format!("{what}: {e}"))))
}

/// The KV cache option as the JS side sends it: `{cold: "f16" | "q8_0" | "q4_0", hotTokens?}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct JsKvCache {
    cold: String,
    #[serde(default)]
    hot_tokens: Option<usize>,
}

impl JsKvCache {
    /// The model's KV cache option (absent: the default f16 cache).
    pub(crate) fn options(kv: Option<JsKvCache>) -> Result<KvCacheOptions, JsValue> {
        let Some(kv) = kv else { return Ok(KvCacheOptions::default()) };
        let cold = kv.cold.parse().map_err(js_error)?;
        Ok(KvCacheOptions { cold, hot_tokens: kv.hot_tokens.unwrap_or(DEFAULT_HOT_TOKENS) })
    }
}

/// The CPU engine's load options.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct JsEngineOptions {
    kv_cache: Option<JsKvCache>,
    chat_template: JsChatTemplate,
}

/// A chat template to use instead of the model file's (`Model::with_chat_template`, `TextModel::with_chat_template`).
#[derive(Deserialize, Default)]
#[serde(transparent)]
pub(crate) struct JsChatTemplate(Option<String>);

impl JsChatTemplate {
    /// `model` (a `Model` or a `TextModel`) with this template, through its `with_chat_template`; as it is without one.
    pub(crate) fn apply<T>(self, model: T, with: impl FnOnce(T, &str) -> crate::Result<T>) -> Result<T, JsValue> {
        match self.0 {
            Some(source) => with(model, &source).map_err(js_error),
            None => Ok(model),
        }
    }
}

/// Generation options as the JS side sends them (camelCase; every field optional).
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct JsGenerateOptions {
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    penalty_last_n: Option<usize>,
    seed: Option<u64>,
    stop: Vec<String>,
    ignore_eos: bool,
    /// LoRA adapters loaded by `loadAdapter`, each with its scale (1 when absent).
    adapters: Vec<JsAdapter>,
    /// The grammar the output follows (`constraint::GrammarSource`).
    grammar: Option<JsGrammar>,
}

/// A grammar as the package sends it: `{ type, ... }`.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum JsGrammar {
    JsonSchema { schema: serde_json::Value },
    JsonObject,
    Gbnf { grammar: String },
    Regex { pattern: String },
    Lark { grammar: String },
}

impl From<JsGrammar> for GrammarSource {
    fn from(g: JsGrammar) -> GrammarSource {
        match g {
            JsGrammar::JsonSchema { schema } => GrammarSource::JsonSchema(schema),
            JsGrammar::JsonObject => GrammarSource::JsonObject,
            JsGrammar::Gbnf { grammar } => GrammarSource::Gbnf(grammar),
            JsGrammar::Regex { pattern } => GrammarSource::Regex(pattern),
            JsGrammar::Lark { grammar } => GrammarSource::Lark(grammar),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JsAdapter {
    id: u32,
    scale: Option<f32>,
}

/// The LoRA adapters an engine holds for its model, by the ids it gave them: files `loadAdapter` read, and
/// MicroLoRAs it trains (`wasm/lora.rs`), whose weights a request takes as they are when it starts.
#[derive(Default)]
pub(crate) struct Adapters {
    next_id: u32,
    loaded: BTreeMap<u32, Arc<LoraAdapter>>,
    pub(crate) trained: BTreeMap<u32, Arc<Mutex<MicroLora>>>,
}

impl Adapters {
    /// Read the adapter file `bytes` (a JS Uint8Array) for `model`: its id.
    pub(crate) fn load(&mut self, model: &Model, bytes: &js_sys::Uint8Array) -> crate::Result<u32> {
        // No size bound but memory's: an adapter's rank is checked against each weight it adapts once it is read.
        let bytes = bytes_from_js(bytes, usize::MAX, "a LoRA adapter file")?;
        let adapter = LoraAdapter::from_bytes(model, bytes)?;
        self.next_id += 1;
        self.loaded.insert(self.next_id, Arc::new(adapter));
        Ok(self.next_id)
    }

    /// Forget the adapter `id`; whether there was one.
    pub(crate) fn unload(&mut self, id: u32) -> bool {
        self.loaded.remove(&id).is_some() || self.trained.remove(&id).is_some()
    }

    /// Keep a MicroLoRA under a new id.
    pub(crate) fn train(&mut self, lora: MicroLora) -> u32 {
        self.next_id += 1;
        self.trained.insert(self.next_id, Arc::new(Mutex::new(lora)));
        self.next_id
    }

    /// The set a request names; an id never loaded (or unloaded) is an `Error::Adapter`.
    fn set(&self, model: &Model, chosen: &[JsAdapter]) -> crate::Result<AdapterSet> {
        let adapters = chosen.iter().map(|a| {
            let adapter = match (self.loaded.get(&a.id), self.trained.get(&a.id)) {
                (Some(adapter), _) => adapter.clone(),
                (None, Some(lora)) => Arc::new(idle(lora)?.adapter(model, &format!("microlora-{}", a.id))),
                (None, None) => return Err(Error::Adapter(format!("no adapter has id {}", a.id))),
            };
            Ok((adapter, a.scale.unwrap_or(1.0)))
        });
        adapters.collect::<crate::Result<_>>().map(AdapterSet::new)
    }
}

/// A MicroLoRA no training step holds: the calls that read one here run on the page's thread, which must not
/// wait (the package runs one call at a time, so a held one is a caller's mistake, said as such).
pub(crate) fn idle(lora: &Mutex<MicroLora>) -> crate::Result<MutexGuard<'_, MicroLora>> {
    match lora.try_lock() {
        Ok(guard) => Ok(guard),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(Error::Adapter("the MicroLoRA is training: wait for its step".into())),
    }
}

impl JsGenerateOptions {
    /// The options, with the adapters they name taken from `adapters`.
    pub(crate) fn into_options(self, model: &Model, adapters: &Adapters) -> Result<GenerateOptions, JsValue> {
        let d = SamplerConfig::default();
        Ok(GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(GenerateOptions::default().max_tokens),
            sampler: SamplerConfig {
                temperature: self.temperature.unwrap_or(d.temperature),
                top_k: self.top_k.unwrap_or(d.top_k),
                top_p: self.top_p.unwrap_or(d.top_p),
                min_p: self.min_p.unwrap_or(d.min_p),
                repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
                presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
                frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
                penalty_last_n: self.penalty_last_n.unwrap_or(d.penalty_last_n),
                seed: self.seed.unwrap_or(d.seed),
            },
            stop: self.stop,
            ignore_eog: self.ignore_eos,
            adapters: adapters.set(model, &self.adapters).map_err(js_error)?,
            grammar: self.grammar.map(GrammarSource::from),
        })
    }
}

#[derive(Serialize)]
pub(crate) struct JsOutput {
    ids: Vec<u32>,
    text: String,
    finish_reason: &'static str,
    load_ms: f64,
    prompt_tokens: usize,
    cached_tokens: usize,
    generated_tokens: usize,
    forced_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
    restore_ms: f64,
    grammar_compile_ms: f64,
    grammar_ms: f64,
    prefill_tok_s: f64,
    decode_tok_s: f64,
}

impl From<crate::Output> for JsOutput {
    fn from(o: crate::Output) -> Self {
        let s = &o.stats;
        JsOutput {
            finish_reason: o.finish.as_str(),
            load_ms: s.load_ms,
            prompt_tokens: s.prompt_tokens,
            cached_tokens: s.cached_tokens,
            generated_tokens: s.generated_tokens,
            forced_tokens: s.forced_tokens,
            prefill_ms: s.prefill_ms,
            decode_ms: s.decode_ms,
            restore_ms: s.restore_ms,
            grammar_compile_ms: s.grammar_compile_ms,
            grammar_ms: s.grammar_ms,
            prefill_tok_s: s.prefill_tok_s(),
            decode_tok_s: s.decode_tok_s(),
            ids: o.ids,
            text: o.text,
        }
    }
}

/// A GGUF file being received in chunks, held in wasm memory; or a split model's shards, one after the other.
/// Allocation failures are errors.
#[wasm_bindgen]
pub struct ModelBuffer {
    builder: ModelBytesBuilder,
    /// The shards received before the one `builder` receives (a split model).
    shards: Vec<ModelBytes>,
}

#[wasm_bindgen]
impl ModelBuffer {
    /// An empty buffer for a file of `capacity` bytes (the file size, when known; 0 otherwise). A file above 2 GiB
    /// is held in pieces cut between tensors, as wasm32 holds no one object that large.
    #[wasm_bindgen(constructor)]
    pub fn new(capacity: usize) -> Result<ModelBuffer, JsValue> {
        Ok(ModelBuffer { builder: ModelBuffer::builder(capacity)?, shards: Vec::new() })
    }

    /// Append the next chunk of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        self.builder.push(chunk).map_err(js_error)
    }

    /// The next chunks are the next shard of a split model, a file of `capacity` bytes (0: unknown); the shards
    /// come in order, the first one's first (`gguf::Gguf::parse_shards`).
    #[wasm_bindgen(js_name = nextShard)]
    pub fn next_shard(&mut self, capacity: usize) -> Result<(), JsValue> {
        let done = std::mem::replace(&mut self.builder, ModelBuffer::builder(capacity)?);
        self.shards.push(done.finish());
        Ok(())
    }
}

impl ModelBuffer {
    fn builder(capacity: usize) -> Result<ModelBytesBuilder, JsValue> {
        let total = (capacity > 0).then_some(capacity);
        ModelBytesBuilder::new(total, MAX_PIECE_BYTES).map_err(js_error)
    }

    pub(crate) fn finish(mut self) -> ModelBytes {
        let last = self.builder.finish();
        if self.shards.is_empty() {
            return last;
        }
        self.shards.push(last);
        ModelBytes::from_shards(self.shards)
    }
}

/// SHA-256 over bytes that come in chunks (WebCrypto hashes only whole buffers): what the npm package computes and
/// checks of each model file it downloads into its store.
#[wasm_bindgen]
pub struct Sha256 {
    hasher: sha2::Sha256,
}

#[wasm_bindgen]
impl Sha256 {
    #[wasm_bindgen(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Sha256 {
        Sha256 { hasher: <sha2::Sha256 as sha2::Digest>::new() }
    }

    /// Hash the next chunk.
    pub fn update(&mut self, chunk: &[u8]) {
        sha2::Digest::update(&mut self.hasher, chunk);
    }

    /// The hash of every chunk so far, as 64 lowercase hex digits (the hasher is then empty again).
    pub fn digest(&mut self) -> String {
        crate::gguf::id::hex(&sha2::Digest::finalize_reset(&mut self.hasher))
    }
}

#[wasm_bindgen]
pub struct Engine {
    pub(crate) model: Arc<Model>,
    /// Shared with the pool job that runs a forward pass (threaded build); one job at a time.
    /// None for an encoder model, which does not generate.
    session: Option<Arc<Mutex<Session>>>,
    n_ctx: usize,
    kv_cache_bytes: usize,
    pub(crate) adapters: RefCell<Adapters>,
}

/// Run `work` and convert its result with `to_js`: as a pool job whose Promise this returns in the threaded build.
#[cfg(feature = "threads")]
pub(crate) fn run_job<T: Send + 'static>(
    work: impl FnOnce() -> crate::Result<T> + Send + 'static,
    to_js: impl FnOnce(T) -> Result<JsValue, JsValue> + 'static,
) -> Result<JsValue, JsValue> {
    Ok(crate::wasm::threads::on_pool(work, to_js).into())
}

/// Run `work` here and convert its result with `to_js` (the plain and WebGPU builds, whose session need not be
/// `Send`).
#[cfg(not(feature = "threads"))]
pub(crate) fn run_job<T>(
    work: impl FnOnce() -> crate::Result<T>,
    to_js: impl FnOnce(T) -> Result<JsValue, JsValue>,
) -> Result<JsValue, JsValue> {
    to_js(work().map_err(js_error)?)
}

/// `embed`'s options.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsEmbedOptions {
    pooling: Option<String>,
    normalize: Option<bool>,
}

impl JsEmbedOptions {
    fn into_options(self) -> Result<EmbedOptions, JsValue> {
        let pooling = match self.pooling.as_deref() {
            None => None,
            Some("mean") => Some(Pooling::Mean),
            Some("cls") => Some(Pooling::Cls),
            Some("last") => Some(Pooling::Last),
            Some(other) => {
                return Err(js_error(Error::InvalidArgument(format!(
                    "pooling must be 'mean', 'cls' or 'last', not '{other}'"
                ))))
            }
        };
        Ok(EmbedOptions { pooling, normalize: self.normalize.unwrap_or(true) })
    }
}

/// Check that the session's buffers can be allocated, so that a context window too large for wasm
/// memory is an error rather than an allocation-failure trap: the KV cache and the run state of one
/// prefill batch (`RunState::bytes`; its activations matter only for a model whose widths are out of
/// proportion, such as a hostile file's). The probe is sized to exactly what the session allocates next
/// (wasm memory never shrinks, so a larger probe would raise the peak).
pub(crate) fn probe_session_memory(model: &Model, n_ctx: usize) -> Result<(), JsValue> {
    let c = &model.config;
    let Ok((n_ctx, n_batch)) = crate::engine::evaluator::resolve(c, n_ctx, SessionOptions::default().n_batch) else {
        return Ok(()); // opening the session names this error
    };
    // A recurrent state (Qwen3.5's) is held twice: the session's and its checkpoint (`Evaluator`).
    let recurrent = c.recurrent_state_bytes().saturating_mul(2);
    let kv = model.kv_cache().bytes(c.kv_layers(), c.kv_dim(), n_ctx).saturating_add(recurrent);
    let bytes = kv.saturating_add(RunState::bytes(c, n_batch, n_ctx));
    probe(bytes, &format!("a context window of {n_ctx} tokens"))
}

/// Check that wasm memory can hold the answer of a `score` call, `k` ids and probabilities for each of
/// `positions` (as values, then as JSON), before the forward passes run: a large `k` times a long
/// sequence is an error, not an allocation-failure trap halfway.
pub(crate) fn probe_score_memory(model: &Model, positions: usize, k: usize) -> Result<(), JsValue> {
    /// An entry as a value (`(u32, f64)`) and, at most, as JSON (`[49151,0.12345678901234567],`).
    const VALUE_BYTES: usize = 16;
    const JSON_BYTES: usize = 32;
    /// V8's longest string (2^29 - 24 characters): the JSON must fit one.
    const MAX_JSON_BYTES: usize = (1 << 29) - 24;
    let entries = positions.saturating_mul(k.min(model.config.vocab_size));
    let what = format!("the top {k} of {positions} scored positions");
    if entries.saturating_mul(JSON_BYTES) > MAX_JSON_BYTES {
        return Err(coded_error(
            "E_OUT_OF_MEMORY",
            &format!(
                "{what} would take up to {} bytes of JSON, more than a JS string holds",
                entries.saturating_mul(JSON_BYTES)
            ),
        ));
    }
    probe(entries.saturating_mul(VALUE_BYTES + JSON_BYTES), &what)
}

/// The JSON of a `score` call (both engines): `{"positions": [[[id, p], ...], ...]}`.
pub(crate) fn scores_json(positions: &[Vec<(u32, f64)>]) -> String {
    #[derive(Serialize)]
    struct Scores<'a> {
        positions: &'a [Vec<(u32, f64)>],
    }
    json(&Scores { positions })
}

/// Reserve `bytes` of wasm memory and give them back: an `E_OUT_OF_MEMORY` error now if they cannot be had.
fn probe(bytes: usize, what: &str) -> Result<(), JsValue> {
    let mut probe: Vec<u8> = Vec::new();
    probe.try_reserve_exact(bytes).map_err(|_| out_of_memory(bytes, what))
}

/// A step as `nextStep` returns it (both engines): `{prefilled, total}` after a batch of the prompt,
/// `{id, text}` for a token, `undefined` once generation has finished.
pub(crate) fn step_to_js(step: Option<Step>) -> Result<JsValue, JsValue> {
    let fields: [(&str, JsValue); 2] = match step {
        None => return Ok(JsValue::UNDEFINED),
        Some(Step::Prefill { done, total }) => [("prefilled", done.into()), ("total", total.into())],
        Some(Step::Token(token)) => [("id", token.id.into()), ("text", token.text.into())],
    };
    let o = js_sys::Object::new();
    for (name, value) in fields {
        js_sys::Reflect::set(&o, &name.into(), &value)?;
    }
    Ok(o.into())
}

/// The persistence calls of both engines on `model`'s prefix cache (the npm package's stores drive them).
pub(crate) mod persist {
    use super::*;

    /// Keys (hex) of the stored pages that could extend what memory holds of `ids`, in order.
    pub(crate) fn missing(model: &Model, ids: &[u32]) -> Vec<String> {
        model.prefix_cache().missing(ids).iter().map(|k| k.hex()).collect()
    }

    /// Keys (hex) of every whole page of `ids`, from the first.
    pub(crate) fn keys(model: &Model, ids: &[u32]) -> Vec<String> {
        model.prefix_cache().keys(ids).iter().map(|k| k.hex()).collect()
    }

    /// Bytes of every record of the model's prefix cache: the sizes a store lists tell which to skip unread.
    pub(crate) fn record_bytes(model: &Model) -> usize {
        model.prefix_cache().record_bytes()
    }

    /// Load `records` (an Array of Uint8Array, what the store held under the first keys `missing` gave)
    /// after the pages of `ids` in memory: JSON `{tokens, refused: [{index, reason}]}`. Records are copied in
    /// up to the first that is not a record's size (refused unread) or that memory cannot hold.
    pub(crate) fn load(model: &Model, ids: &[u32], records: &js_sys::Array) -> String {
        let size = record_bytes(model);
        let mut bytes = Vec::new();
        // The first record not copied in (and why): the cache takes the ones before it.
        let mut unread = None;
        for (index, r) in records.iter().enumerate() {
            let copied = match r.dyn_into::<js_sys::Uint8Array>() {
                Ok(r) => bytes_from_js(&r, size, "a prefix-cache record").map_err(|e| e.to_string()),
                Err(_) => Err("not a Uint8Array".to_string()),
            };
            match copied {
                Ok(r) => bytes.push(r),
                Err(reason) => {
                    unread = Some((index, reason));
                    break;
                }
            }
        }
        let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let loaded = model.prefix_cache().load(ids, &slices);
        let refused: Vec<_> = (loaded.refused.iter().map(|(index, e)| (*index, e.to_string())).chain(unread))
            .map(|(index, reason)| serde_json::json!({ "index": index, "reason": reason }))
            .collect();
        json(&serde_json::json!({ "tokens": loaded.tokens, "refused": refused }))
    }

    /// The pages inserted since the last call: an Array of `[keyHex, Uint8Array]`.
    pub(crate) fn take_unsaved(model: &Model) -> js_sys::Array {
        model
            .prefix_cache()
            .take_unsaved()
            .into_iter()
            .map(|(key, bytes)| {
                let pair = js_sys::Array::new();
                pair.push(&key.hex().into());
                pair.push(&js_sys::Uint8Array::from(bytes.as_slice()));
                JsValue::from(pair)
            })
            .collect()
    }
}

/// The model's prefix cache, as `info()` reports it.
/// `null` while a forward pass on a worker holds the cache (the main thread must not wait for it).
fn prefix_cache_info(model: &Model) -> serde_json::Value {
    let Some(s) = model.prefix_cache().try_stats() else { return serde_json::Value::Null };
    serde_json::json!({
        "budget_bytes": s.budget_bytes, "bytes": s.bytes, "restored_tokens": s.restored_tokens,
        "inserted_tokens": s.inserted_tokens, "evicted_pages": s.evicted_pages, "loaded_tokens": s.loaded_tokens,
    })
}

/// The KV cache's format, as `info()` reports it: `{cold, hot_tokens}` (`hot_tokens` null for one f16 tier).
fn kv_cache_info(kv: KvCacheOptions) -> serde_json::Value {
    serde_json::json!({ "cold": kv.cold.name(), "hot_tokens": kv.is_tiered().then_some(kv.hot_tokens) })
}

/// Model facts (the `info()` JSON of both engines): the text side's (`text::info`: name, architecture, vocabulary,
/// chat template) and the weights' and session's.
pub(crate) fn model_info(model: &Model, n_ctx: usize, kv_cache_bytes: usize) -> serde_json::Value {
    let c = &model.config;
    let mut info = text::info(model.text());
    let serde_json::Value::Object(more) = serde_json::json!({
        "n_layers": c.n_layers, "d_model": c.d_model, "n_heads": c.n_heads, "n_kv_heads": c.n_kv_heads,
        "context_length": c.context_length, "n_ctx": n_ctx, "file_bytes": model.file_size(),
        "weights_in_memory": model.file().is_whole(),
        "kv_cache_bytes": kv_cache_bytes, "simd128": cfg!(target_feature = "simd128"),
        "relaxed_simd": cfg!(target_feature = "relaxed-simd"),
        "kv_cache": kv_cache_info(model.kv_cache()),
        "threads": crate::parallel::threads(),
        "prefix_cache": prefix_cache_info(model),
        "wasm_memory_bytes": core::arch::wasm32::memory_size(0) * 65536,
        "backend": "cpu",
    }) else {
        unreachable!("json! of braces is an object")
    };
    info.extend(more);
    serde_json::Value::Object(info)
}

#[wasm_bindgen]
impl Engine {
    /// Load a GGUF file from its bytes (copied into wasm memory). `n_ctx` 0 = the default context window.
    /// `options_json`: `{kvCache?, chatTemplate?}`: the KV cache's format, `{cold: "q8_0" | "q4_0" | "f16",
    /// hotTokens?}` (absent: f16), and a chat template to use instead of the file's.
    #[wasm_bindgen(constructor)]
    pub fn new(bytes: Vec<u8>, n_ctx: usize, options_json: Option<String>) -> Result<Engine, JsValue> {
        Engine::load(bytes, n_ctx, options_json.as_deref())
    }

    /// Load the GGUF file received in `buffer` (consumed, never copied).
    #[wasm_bindgen(js_name = fromBuffer)]
    pub fn from_buffer(buffer: ModelBuffer, n_ctx: usize, options_json: Option<String>) -> Result<Engine, JsValue> {
        Engine::load(buffer.finish(), n_ctx, options_json.as_deref())
    }

    fn load(bytes: impl Into<ModelBytes>, n_ctx: usize, options_json: Option<&str>) -> Result<Engine, JsValue> {
        let opts: JsEngineOptions =
            options_json.map(|json| parse(json, "load options")).transpose()?.unwrap_or_default();
        let kv = JsKvCache::options(opts.kv_cache)?;
        let model = Model::from_bytes(bytes).and_then(|m| m.with_kv_cache(kv)).map_err(js_error)?;
        let model = Arc::new(opts.chat_template.apply(model, Model::with_chat_template)?);
        if model.config.arch == Arch::Bert {
            let n_ctx = model.config.context_length;
            return Ok(Engine { model, session: None, n_ctx, kv_cache_bytes: 0, adapters: RefCell::default() });
        }
        probe_session_memory(&model, n_ctx)?;
        let session =
            Session::with_options(model.clone(), &SessionOptions { n_ctx, ..Default::default() }).map_err(js_error)?;
        let (n_ctx, kv_cache_bytes) = (session.n_ctx(), session.kv_cache_bytes());
        let session = Some(Arc::new(Mutex::new(session)));
        Ok(Engine { model, session, n_ctx, kv_cache_bytes, adapters: RefCell::default() })
    }

    /// The session, or an error for an encoder model.
    pub(crate) fn session(&self) -> Result<&Arc<Mutex<Session>>, JsValue> {
        self.session.as_ref().ok_or_else(|| {
            js_error(Error::Model("this model is an encoder: it computes embeddings (embed), not text".into()))
        })
    }

    /// The session, for a quick call on this thread. `try_lock`, since a page's main thread must
    /// never block: the npm package runs one call at a time, so a held lock is a caller's bug.
    pub(crate) fn session_now(&self) -> Result<MutexGuard<'_, Session>, JsValue> {
        match self.session()?.try_lock() {
            Ok(s) => Ok(s),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                Err(js_error(Error::InvalidArgument("the engine is busy with another call".into())))
            }
        }
    }

    /// Run a forward-pass call `work` on the session and convert its result with `to_js`: here in the
    /// plain build; as a pool job whose Promise this returns in the threaded build.
    fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Session) -> crate::Result<T> + Send + 'static,
        to_js: impl FnOnce(T) -> Result<JsValue, JsValue> + 'static,
    ) -> Result<JsValue, JsValue> {
        let session = self.session()?.clone();
        run_job(move || work(&mut session.lock().unwrap_or_else(PoisonError::into_inner)), to_js)
    }

    /// Embeddings of `texts_json` (a JSON array of strings) with `options_json` (`{pooling?: "mean" | "cls" |
    /// "last", normalize?: boolean}`): JSON `{embeddings: [[...]], tokens}` (a Promise of it in the threaded build).
    pub fn embed(&self, texts_json: &str, options_json: &str) -> Result<JsValue, JsValue> {
        let texts: Vec<String> = parse(texts_json, "texts")?;
        let opts = parse::<JsEmbedOptions>(options_json, "options")?.into_options()?;
        let tokenizer = self.model.tokenizer();
        let ids = texts.iter().map(|t| tokenizer.encode_with_special(t, false)).collect::<crate::Result<Vec<_>>>();
        let ids = ids.map_err(js_error)?;
        let tokens: usize = ids.iter().map(Vec::len).sum();
        let model = self.model.clone();
        run_job(
            move || model.embed_tokens(&ids, &opts),
            move |embeddings| Ok(json(&serde_json::json!({ "embeddings": embeddings, "tokens": tokens })).into()),
        )
    }

    /// Model facts as JSON.
    pub fn info(&self) -> String {
        json(&model_info(&self.model, self.n_ctx, self.kv_cache_bytes))
    }

    pub fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, JsValue> {
        text::tokenize(self.model.text(), text, parse_special)
    }

    /// Tokenize a prompt as generation does: special tokens parsed, BOS/EOS as the model asks.
    #[wasm_bindgen(js_name = tokenizePrompt)]
    pub fn tokenize_prompt(&self, text: &str) -> Result<Vec<u32>, JsValue> {
        text::tokenize_prompt(self.model.text(), text)
    }

    pub fn detokenize(&self, ids: Vec<u32>) -> Result<String, JsValue> {
        text::detokenize(self.model.text(), &ids)
    }

    /// The prompt text of a chat request (JSON: `{messages, tools?, tool_choice?, chat_template_kwargs?,
    /// add_generation_prompt?}`, `wasm/chat.rs`) in the model's chat template.
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(&self, request_json: &str) -> Result<String, JsValue> {
        crate::wasm::chat::apply_chat_template(self.model.text(), request_json)
    }

    /// A chat request's prompt ids, grammar and tool-call format (`TextModel::chat_prompt`) as JSON: control-token
    /// text in the messages stays text unless `parse_special_in_messages`.
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(&self, request_json: &str, parse_special_in_messages: bool) -> Result<String, JsValue> {
        crate::wasm::chat::chat_prompt(self.model.text(), request_json, parse_special_in_messages)
    }

    /// Read a LoRA adapter file (llama.cpp's GGUF adapter format) for this model: its id, for the `adapters`
    /// option of `start` (`[{id, scale?}]`). A file that is not an adapter of this model is `E_ADAPTER` (or
    /// `E_GGUF` when it is not a whole GGUF).
    #[wasm_bindgen(js_name = loadAdapter)]
    pub fn load_adapter(&self, bytes: js_sys::Uint8Array) -> Result<u32, JsValue> {
        self.adapters.borrow_mut().load(&self.model, &bytes).map_err(js_error)
    }

    /// Forget the adapter `id` (a generation that runs with it keeps it until it ends); whether it was loaded.
    #[wasm_bindgen(js_name = unloadAdapter)]
    pub fn unload_adapter(&self, id: u32) -> bool {
        self.adapters.borrow_mut().unload(id)
    }

    /// Prepare to generate from `prompt_ids` with `options_json` (see `JsGenerateOptions`).
    /// Returns undefined (a Promise of it in the threaded build).
    pub fn start(&self, prompt_ids: Vec<u32>, options_json: &str) -> Result<JsValue, JsValue> {
        let opts =
            parse::<JsGenerateOptions>(options_json, "options")?.into_options(&self.model, &self.adapters.borrow())?;
        self.run(move |s| s.start(&prompt_ids, opts), |()| Ok(JsValue::UNDEFINED))
    }

    /// The next step: `{prefilled, total}` after a batch of the prompt (prompt tokens in the cache so
    /// far), `{id, text}` for a token, `undefined` when generation has finished (a Promise of these
    /// in the threaded build).
    #[wasm_bindgen(js_name = nextStep)]
    pub fn next_step(&self) -> Result<JsValue, JsValue> {
        self.run(|s| s.next_step(), step_to_js)
    }

    /// The finished generation (ids, text, finish_reason, stats) as JSON; `cancel` marks it cancelled.
    pub fn finish(&self, cancel: bool) -> Result<Option<String>, JsValue> {
        let mut session = self.session_now()?;
        let out = if cancel { session.cancel() } else { session.finish() };
        Ok(out.map(|o| json(&JsOutput::from(o))))
    }

    /// Teacher-forced scoring: for each position, the top-`k` next tokens with probabilities, as JSON
    /// (a Promise of it in the threaded build).
    pub fn score(&self, ids: Vec<u32>, k: usize) -> Result<JsValue, JsValue> {
        probe_score_memory(&self.model, ids.len(), k)?;
        self.run(move |s| s.score(&ids, k), |positions| Ok(scores_json(&positions).into()))
    }

    /// Hold at most `bytes` in the model's prefix cache (0: keep nothing).
    #[wasm_bindgen(js_name = setPrefixCacheBudget)]
    pub fn set_prefix_cache_budget(&self, bytes: f64) {
        self.model.prefix_cache().set_budget(bytes as usize);
    }

    /// Forget what the model's prefix cache holds.
    #[wasm_bindgen(js_name = clearPrefixCache)]
    pub fn clear_prefix_cache(&self) {
        self.model.prefix_cache().clear();
    }

    /// Whether a store keeps the prefix cache's pages (then `prefixCacheTakeUnsaved` lists new ones).
    #[wasm_bindgen(js_name = prefixCachePersist)]
    pub fn prefix_cache_persist(&self, on: bool) {
        self.model.prefix_cache().set_persistent(on);
    }

    /// See [`persist::missing`].
    #[wasm_bindgen(js_name = prefixCacheMissing)]
    pub fn prefix_cache_missing(&self, ids: Vec<u32>) -> Vec<String> {
        persist::missing(&self.model, &ids)
    }

    /// See [`persist::keys`].
    #[wasm_bindgen(js_name = prefixCacheKeys)]
    pub fn prefix_cache_keys(&self, ids: Vec<u32>) -> Vec<String> {
        persist::keys(&self.model, &ids)
    }

    /// See [`persist::load`].
    #[wasm_bindgen(js_name = prefixCacheLoad)]
    pub fn prefix_cache_load(&self, ids: Vec<u32>, records: js_sys::Array) -> String {
        persist::load(&self.model, &ids, &records)
    }

    /// See [`persist::record_bytes`].
    #[wasm_bindgen(js_name = prefixCacheRecordBytes)]
    pub fn prefix_cache_record_bytes(&self) -> usize {
        persist::record_bytes(&self.model)
    }

    /// See [`persist::take_unsaved`].
    #[wasm_bindgen(js_name = prefixCacheTakeUnsaved)]
    pub fn prefix_cache_take_unsaved(&self) -> js_sys::Array {
        persist::take_unsaved(&self.model)
    }

    /// The conversation as bytes (`Session::save_state`).
    #[wasm_bindgen(js_name = saveState)]
    pub fn save_state(&self) -> Result<js_sys::Uint8Array, JsValue> {
        let bytes = self.session_now()?.save_state().map_err(js_error)?;
        Ok(js_sys::Uint8Array::from(bytes.as_slice()))
    }

    /// Continue a saved conversation (`Session::restore_state`).
    #[wasm_bindgen(js_name = restoreState)]
    pub fn restore_state(&self, bytes: js_sys::Uint8Array) -> Result<(), JsValue> {
        let mut session = self.session_now()?;
        let bytes =
            bytes_from_js(&bytes, max_state_bytes(&self.model, self.n_ctx), "a saved state").map_err(js_error)?;
        session.restore_state(&bytes).map_err(js_error)
    }

    /// Forget the conversation (the KV cache).
    pub fn reset(&self) -> Result<(), JsValue> {
        self.session_now()?.reset();
        Ok(())
    }

    /// The model's identity in hex: SHA-256 of its GGUF header and samples of its weights (`Model::id`), what
    /// persisted records are bound to (the prefix cache's pages, a vector index's embeddings).
    #[wasm_bindgen(js_name = modelId)]
    pub fn model_id(&self) -> String {
        self.model.id().hex()
    }
}
