//! The WebGPU engine for JavaScript (wasm32, feature `gpu`): `GpuEngine`, the asynchronous twin
//! of [`Engine`](crate::wasm::Engine). A browser cannot block on GPU work, so loading, prefill,
//! decode steps and scoring return Promises; tokenizing and templates stay synchronous.
//!
//! Greedy decoding reads back only the sampled id (`eval_argmax`); other sampling reads back the
//! last logits and uses the CPU sampler. Under `backend: "auto"` a GPU fault (no adapter, limits,
//! shader, out of memory, lost device) moves the work to a CPU [`Session`] in the same wasm
//! instance: the model bytes are already here, and the tokens cached so far are replayed. `info()`
//! says which backend runs and why the GPU was given up.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::generate::{Generation, Token};
use crate::gpu::{AdapterSummary, Backend, GpuModel, GpuOptions, GpuSession};
use crate::wasm::{js_error, json, model_info, parse, probe_session_memory, JsGenerateOptions, JsOutput, ModelBuffer};
use crate::{ChatMessage, Model, Session, SessionOptions};

/// Load options as the JS side sends them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsLoadOptions {
    backend: String,
    /// Use at most this many bytes per storage binding (tests of the too-small-limits path).
    #[serde(default)]
    max_binding_bytes: Option<u64>,
    /// Let "auto" use a software adapter (SwiftShader) too, as "webgpu" does.
    #[serde(default)]
    allow_software: bool,
}

/// Why the CPU runs a request that asked for the GPU.
#[derive(Clone, serde::Serialize)]
struct Fallback {
    code: &'static str,
    message: String,
}

impl From<&Error> for Fallback {
    fn from(e: &Error) -> Self {
        Fallback { code: e.code(), message: e.to_string() }
    }
}

#[wasm_bindgen]
pub struct GpuEngine {
    inner: Rc<RefCell<Inner>>,
}

struct Inner {
    model: Arc<Model>,
    n_ctx: usize,
    n_batch: usize,
    backend: Backend,
    /// The GPU session, until a fault under `auto` hands the work to `cpu`.
    gpu: Option<GpuSession>,
    adapter: Option<AdapterSummary>,
    /// Tokens in the GPU's KV cache.
    gpu_tokens: Vec<u32>,
    /// The CPU session: from the start when the GPU was not usable, or after a fallback.
    cpu: Option<Session>,
    fallback: Option<Fallback>,
    generation: Option<Generation>,
}

#[wasm_bindgen]
impl GpuEngine {
    /// Load the GGUF file in `buffer` (consumed) onto the GPU. `options_json`: `{backend: "auto" |
    /// "webgpu" | "cpu", maxBindingBytes?, allowSoftware?}`. Under "webgpu" a GPU failure rejects with its `E_GPU_*`
    /// code; under "auto" the engine runs on the CPU instead.
    pub async fn load(
        buffer: ModelBuffer,
        n_ctx: usize,
        options_json: String,
    ) -> std::result::Result<GpuEngine, JsValue> {
        let opts: JsLoadOptions = parse(&options_json, "load options")?;
        let backend: Backend = opts.backend.parse().map_err(js_error)?;
        let model = Arc::new(Model::from_bytes(buffer.bytes).map_err(js_error)?);
        let n_ctx = resolve_n_ctx(&model, n_ctx).map_err(js_error)?;
        let mut inner = Inner {
            model: model.clone(),
            n_ctx,
            n_batch: SessionOptions::default().n_batch.min(n_ctx),
            backend,
            gpu: None,
            adapter: None,
            gpu_tokens: Vec::new(),
            cpu: None,
            fallback: None,
            generation: None,
        };
        if backend != Backend::Cpu {
            // Under WebGpu any adapter will do; under Auto a software one would be slower than the CPU.
            let gpu_opts = GpuOptions {
                allow_software: opts.allow_software || backend == Backend::WebGpu,
                max_binding_bytes: opts.max_binding_bytes,
                ..GpuOptions::default()
            };
            match open_gpu(model.clone(), n_ctx, inner.n_batch, &gpu_opts).await {
                Ok(session) => {
                    inner.adapter = Some(session.model().adapter().clone());
                    inner.gpu = Some(session);
                }
                Err(e) if backend == Backend::Auto => inner.fallback = Some(Fallback::from(&e)),
                Err(e) => return Err(js_error(e)),
            }
        }
        if inner.gpu.is_none() {
            probe_session_memory(&model, n_ctx)?;
            inner.cpu = Some(inner.cpu_session().map_err(js_error)?);
        }
        Ok(GpuEngine { inner: Rc::new(RefCell::new(inner)) })
    }

    /// Model facts as JSON, with `backend` ("webgpu" or "cpu"), `adapter` and `fallback` ({code, message}).
    pub fn info(&self) -> std::result::Result<String, JsValue> {
        let inner = self.borrow()?;
        let kv = match (&inner.gpu, &inner.cpu) {
            (Some(gpu), _) => gpu.kv_cache_bytes(),
            (None, Some(cpu)) => cpu.kv_cache_bytes(),
            (None, None) => 0,
        };
        let mut info = model_info(&inner.model, inner.n_ctx, kv);
        info["backend"] = if inner.gpu.is_some() { "webgpu" } else { "cpu" }.into();
        info["adapter"] = match &inner.adapter {
            Some(a) => serde_json::json!({ "name": a.name, "backend": a.backend, "device_type": a.device_type }),
            None => serde_json::Value::Null,
        };
        info["fallback"] = serde_json::to_value(&inner.fallback).expect("plain data");
        Ok(json(&info))
    }

    pub fn tokenize(&self, text: &str, parse_special: bool) -> std::result::Result<Vec<u32>, JsValue> {
        self.borrow()?.model.tokenizer().encode(text, parse_special).map_err(js_error)
    }

    #[wasm_bindgen(js_name = tokenizePrompt)]
    pub fn tokenize_prompt(&self, text: &str) -> std::result::Result<Vec<u32>, JsValue> {
        self.borrow()?.model.tokenizer().encode_with_special(text, true).map_err(js_error)
    }

    pub fn detokenize(&self, ids: Vec<u32>) -> std::result::Result<String, JsValue> {
        self.borrow()?.model.tokenizer().decode(&ids).map_err(js_error)
    }

    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(
        &self,
        messages_json: &str,
        add_generation_prompt: bool,
    ) -> std::result::Result<String, JsValue> {
        let messages: Vec<ChatMessage> = parse(messages_json, "messages")?;
        let inner = self.borrow()?;
        let template = inner.model.chat_template().map_err(js_error)?;
        template.render(&messages, add_generation_prompt).map_err(js_error)
    }

    /// Prefill `prompt_ids` and prepare to generate (a Promise).
    pub fn start(&self, prompt_ids: Vec<u32>, options_json: &str) -> js_sys::Promise {
        let opts = parse::<JsGenerateOptions>(options_json, "options").map(JsGenerateOptions::into_options);
        let cell = self.inner.clone();
        future_to_promise(async move {
            lock(&cell)?.start(&prompt_ids, opts?).await.map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// A Promise of the next token as `{id, text}`, or of `undefined` when generation has finished.
    #[wasm_bindgen(js_name = nextStep)]
    pub fn next_step(&self) -> js_sys::Promise {
        let cell = self.inner.clone();
        future_to_promise(async move {
            match lock(&cell)?.next_step().await.map_err(js_error)? {
                None => Ok(JsValue::UNDEFINED),
                Some(token) => {
                    let o = js_sys::Object::new();
                    js_sys::Reflect::set(&o, &"id".into(), &token.id.into())?;
                    js_sys::Reflect::set(&o, &"text".into(), &token.text.into())?;
                    Ok(o.into())
                }
            }
        })
    }

    /// The finished generation as JSON (see `Engine::finish`); `cancel` marks it cancelled.
    pub fn finish(&self, cancel: bool) -> std::result::Result<Option<String>, JsValue> {
        let mut inner = self.borrow()?;
        let Some(mut g) = inner.generation.take() else { return Ok(None) };
        if cancel {
            g.cancel();
        }
        Ok(Some(json(&JsOutput::from(g.output()))))
    }

    /// Teacher-forced scoring (a Promise of the JSON of `Engine::score`).
    pub fn score(&self, ids: Vec<u32>, k: usize) -> js_sys::Promise {
        let cell = self.inner.clone();
        future_to_promise(async move {
            let mut inner = lock(&cell)?;
            inner.reset();
            let vocab = inner.model.config.vocab_size;
            let logits = inner.eval_logits(&ids, true).await;
            inner.reset();
            let logits = logits.map_err(js_error)?;
            let positions: Vec<_> = logits.chunks_exact(vocab).map(|row| crate::sampler::top_k_probs(row, k)).collect();
            Ok(json(&serde_json::json!({ "positions": positions })).into())
        })
    }

    /// Forget the conversation (the KV cache).
    pub fn reset(&self) -> std::result::Result<(), JsValue> {
        self.borrow()?.reset();
        Ok(())
    }
}

impl GpuEngine {
    fn borrow(&self) -> std::result::Result<std::cell::RefMut<'_, Inner>, JsValue> {
        self.inner.try_borrow_mut().map_err(|_| busy())
    }
}

/// The engine's state for an async call. Calls must not overlap (the npm package queues them).
fn lock(cell: &Rc<RefCell<Inner>>) -> std::result::Result<std::cell::RefMut<'_, Inner>, JsValue> {
    cell.try_borrow_mut().map_err(|_| busy())
}

fn busy() -> JsValue {
    js_error(Error::InvalidArgument("the engine is busy: await the previous call first".into()))
}

/// The context window `Session` would use for `n_ctx` (0 = min(the model's, 4096)).
fn resolve_n_ctx(model: &Model, n_ctx: usize) -> Result<usize> {
    let trained = model.config.context_length;
    let n_ctx = if n_ctx == 0 { trained.min(4096) } else { n_ctx };
    if n_ctx > trained {
        return Err(Error::InvalidArgument(format!("n_ctx {n_ctx} exceeds the model's context length {trained}")));
    }
    Ok(n_ctx)
}

async fn open_gpu(model: Arc<Model>, n_ctx: usize, n_batch: usize, opts: &GpuOptions) -> Result<GpuSession> {
    let gm = Arc::new(GpuModel::new(model, opts).await?);
    GpuSession::new(gm, n_ctx, n_batch).await
}

impl Inner {
    fn cpu_session(&self) -> Result<Session> {
        let opts = SessionOptions { n_ctx: self.n_ctx, n_batch: self.n_batch };
        Session::with_options(self.model.clone(), &opts)
    }

    /// Tokens in the cache of the backend that runs.
    fn history(&self) -> &[u32] {
        match &self.cpu {
            Some(cpu) => cpu.tokens(),
            None => &self.gpu_tokens,
        }
    }

    fn truncate(&mut self, n: usize) {
        self.gpu_tokens.truncate(n);
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.truncate(n);
        }
    }

    fn reset(&mut self) {
        self.truncate(0);
        self.generation = None;
    }

    async fn start(&mut self, prompt: &[u32], opts: crate::GenerateOptions) -> Result<()> {
        self.generation = None;
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt has no tokens".into()));
        }
        if prompt.len() >= self.n_ctx {
            return Err(Error::ContextOverflow { needed: prompt.len() + 1, context: self.n_ctx });
        }
        // As Session::start: keep the longest cached prefix, evaluate at least the last prompt token.
        let common = self.history().iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        let mut g = Generation::new(&self.model, opts, prompt, common)?;
        self.truncate(common);
        let t0 = now_ms();
        let first = self.next_token(&prompt[common..], &mut g).await?;
        g.prefilled(prompt.len(), now_ms() - t0, Some(first));
        self.generation = Some(g);
        Ok(())
    }

    async fn next_step(&mut self) -> Result<Option<Token>> {
        let Some(mut g) = self.generation.take() else {
            return Err(Error::InvalidArgument("no generation in progress: call start first".into()));
        };
        let result = self.advance(&mut g).await;
        self.generation = Some(g);
        result
    }

    async fn advance(&mut self, g: &mut Generation) -> Result<Option<Token>> {
        let Some((token, goes_on)) = g.emit(&self.model, self.history().len(), self.n_ctx)? else {
            return Ok(None);
        };
        if goes_on {
            let t0 = now_ms();
            let next = self.next_token(&[token.id], g).await?;
            g.set_pending(next, now_ms() - t0);
        }
        Ok(Some(token))
    }

    /// Run `tokens` and pick the token after them with `g`'s sampler: a plain argmax is computed
    /// where the model runs (on the GPU only the id is read back), anything else from the logits.
    async fn next_token(&mut self, tokens: &[u32], g: &mut Generation) -> Result<u32> {
        if g.sampler().config().is_argmax() {
            return self.eval_argmax(tokens).await;
        }
        let logits = self.eval_logits(tokens, false).await?;
        Ok(g.sampler().sample(&logits, self.history()))
    }

    /// Append `tokens` to the cache; their logits (every row when `all`, else the last).
    async fn eval_logits(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>> {
        if let Some(gpu) = self.gpu.as_mut() {
            let mut out = Vec::new();
            match gpu.eval(tokens, self.gpu_tokens.len(), all, &mut out).await {
                Ok(()) => {
                    self.gpu_tokens.extend_from_slice(tokens);
                    return Ok(out);
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        Ok(self.cpu_mut().eval(tokens, all)?.to_vec())
    }

    /// Append `tokens` to the cache; the argmax of the last logits.
    async fn eval_argmax(&mut self, tokens: &[u32]) -> Result<u32> {
        if let Some(gpu) = self.gpu.as_mut() {
            match gpu.eval_argmax(tokens, self.gpu_tokens.len()).await {
                Ok(id) => {
                    self.gpu_tokens.extend_from_slice(tokens);
                    return Ok(id);
                }
                Err(e) => self.gpu_failed(e)?,
            }
        }
        self.cpu_mut().eval_argmax(tokens)
    }

    fn cpu_mut(&mut self) -> &mut Session {
        self.cpu.as_mut().expect("the CPU session exists whenever the GPU one does not")
    }

    /// After a GPU error: under `auto` a GPU fault hands the work to a new CPU session, which
    /// replays the cached tokens; any other error is returned.
    fn gpu_failed(&mut self, e: Error) -> Result<()> {
        if self.backend != Backend::Auto || !matches!(e, Error::Gpu { .. }) {
            return Err(e);
        }
        self.fallback = Some(Fallback::from(&e));
        self.gpu = None;
        let mut cpu = self.cpu_session()?;
        let history = std::mem::take(&mut self.gpu_tokens);
        if !history.is_empty() {
            cpu.eval(&history, false)?;
        }
        self.cpu = Some(cpu);
        Ok(())
    }
}
