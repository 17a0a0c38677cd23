//! The WebGPU engine for JavaScript (wasm32, feature `gpu`): `GpuEngine`, the asynchronous twin
//! of [`Engine`](crate::wasm::Engine). A browser cannot block on GPU work, so loading, prefill,
//! decode steps and scoring return Promises; tokenizing and templates stay synchronous.
//!
//! It runs the same driver as [`Session`](crate::Session): a [`Generation`] stepped over an
//! [`Evaluator`], awaited here instead of waited for. Each `nextStep` evaluates at most one prefill
//! batch or one token, so an abort between steps stops a long prefill too. Greedy decoding reads
//! back only the sampled id; other sampling reads back the last logits and uses the CPU sampler.
//! Under `backend: "auto"` a GPU fault (no adapter, limits, shader, out of memory, lost device)
//! moves the work to the CPU in the same wasm instance (the evaluator's one fallback rule): the
//! model bytes are already here, and the tokens cached so far are replayed. `info()` says which
//! backend runs and why the GPU was given up.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::engine::evaluator::Evaluator;
use crate::engine::generate::Generation;
use crate::error::{Error, Result};
use crate::gpu::{AdapterSummary, Backend, GpuModelStream, GpuOptions};
use crate::wasm::{
    bytes_from_js, js_error, json, max_state_bytes, model_info, parse, persist, probe_score_memory,
    probe_session_memory, scores_json, step_to_js, text, Adapters, JsChatTemplate, JsGenerateOptions, JsKvCache,
    JsOutput, ModelBuffer,
};
use crate::{Model, SessionOptions, Step};

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
    /// The KV cache's format (`JsKvCache`): a quantized cold tier runs on the CPU.
    #[serde(default)]
    kv_cache: Option<JsKvCache>,
    /// A chat template to use instead of the file's.
    #[serde(default)]
    chat_template: JsChatTemplate,
}

impl JsLoadOptions {
    /// The options in `json`, and the backend they name.
    fn parse(json: &str) -> std::result::Result<(JsLoadOptions, Backend), JsValue> {
        let opts: JsLoadOptions = parse(json, "load options")?;
        let backend = opts.backend.parse().map_err(js_error)?;
        Ok((opts, backend))
    }

    /// `model` with the KV cache format and chat template the options ask for.
    fn prepare(self, model: Model) -> std::result::Result<Model, JsValue> {
        let model = model.with_kv_cache(JsKvCache::options(self.kv_cache)?).map_err(js_error)?;
        self.chat_template.apply(model, Model::with_chat_template)
    }
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
    /// The GPU session, or the CPU's cache after a fallback (or from the start).
    ev: Evaluator,
    adapter: Option<AdapterSummary>,
    /// LoRA adapter files `loadAdapter` read, by id.
    adapters: Adapters,
    generation: Option<Generation>,
}

#[wasm_bindgen]
impl GpuEngine {
    /// Load the GGUF file in `buffer` (consumed) onto the GPU. `options_json`: `{backend: "auto" |
    /// "webgpu" | "cpu", maxBindingBytes?, allowSoftware?, kvCache?, chatTemplate?}`. Under "webgpu" a GPU failure rejects with its
    /// `E_GPU_*` code (a two-tier `kvCache` is one: the GPU keeps f16); under "auto" the engine runs on the CPU instead.
    pub async fn load(
        buffer: ModelBuffer,
        n_ctx: usize,
        options_json: String,
    ) -> std::result::Result<GpuEngine, JsValue> {
        let (opts, backend) = JsLoadOptions::parse(&options_json)?;
        let gpu_opts = GpuOptions {
            allow_software: opts.allow_software,
            max_binding_bytes: opts.max_binding_bytes,
            ..GpuOptions::default()
        };
        let model = Arc::new(opts.prepare(Model::from_bytes(buffer.finish()).map_err(js_error)?)?);
        let n_batch = SessionOptions::default().n_batch;
        let ev = Evaluator::open(model.clone(), n_ctx, n_batch, backend, &gpu_opts).await.map_err(js_error)?;
        if !ev.on_gpu() {
            probe_session_memory(&model, n_ctx)?;
        }
        Ok(GpuEngine::running(model, ev))
    }

    /// The model `stream` has received whole onto its GPU (`GpuStream`: its matrices are there only, so the engine
    /// never moves to the CPU: under "auto" too, a GPU failure rejects). `options_json` as `load`'s (the GPU's options
    /// were `GpuStream.open`'s).
    #[wasm_bindgen(js_name = fromStream)]
    pub async fn from_stream(
        stream: GpuStream,
        n_ctx: usize,
        options_json: String,
    ) -> std::result::Result<GpuEngine, JsValue> {
        let (opts, backend) = JsLoadOptions::parse(&options_json)?;
        let mut streamed = stream.inner.finish().map_err(js_error)?;
        streamed.model = opts.prepare(streamed.model)?;
        let gm = Arc::new(streamed.into_gpu_model().await.map_err(js_error)?);
        let model = gm.model().clone();
        let n_batch = SessionOptions::default().n_batch;
        let ev = Evaluator::on_gpu_model(gm, n_ctx, n_batch, backend).await.map_err(js_error)?;
        Ok(GpuEngine::running(model, ev))
    }

    /// Model facts as JSON, with `backend` ("webgpu" or "cpu"), `adapter` and `fallback` ({code, message}).
    pub fn info(&self) -> std::result::Result<String, JsValue> {
        let inner = self.borrow()?;
        let mut info = model_info(&inner.model, inner.ev.n_ctx(), inner.ev.kv_cache_bytes());
        info["backend"] = if inner.ev.on_gpu() { "webgpu" } else { "cpu" }.into();
        info["adapter"] = match &inner.adapter {
            Some(a) => serde_json::json!({ "name": a.name, "backend": a.backend, "device_type": a.device_type }),
            None => serde_json::Value::Null,
        };
        info["fallback"] = serde_json::to_value(inner.ev.fallback().map(Fallback::from)).expect("plain data");
        Ok(json(&info))
    }

    pub fn tokenize(&self, text: &str, parse_special: bool) -> std::result::Result<Vec<u32>, JsValue> {
        text::tokenize(self.borrow()?.model.text(), text, parse_special)
    }

    #[wasm_bindgen(js_name = tokenizePrompt)]
    pub fn tokenize_prompt(&self, text: &str) -> std::result::Result<Vec<u32>, JsValue> {
        text::tokenize_prompt(self.borrow()?.model.text(), text)
    }

    pub fn detokenize(&self, ids: Vec<u32>) -> std::result::Result<String, JsValue> {
        text::detokenize(self.borrow()?.model.text(), &ids)
    }

    /// As [`Engine::apply_chat_template`](crate::wasm::Engine::apply_chat_template).
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(&self, request_json: &str) -> std::result::Result<String, JsValue> {
        crate::wasm::chat::apply_chat_template(self.borrow()?.model.text(), request_json)
    }

    /// As [`Engine::chat_prompt`](crate::wasm::Engine::chat_prompt).
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(
        &self,
        request_json: &str,
        parse_special_in_messages: bool,
    ) -> std::result::Result<String, JsValue> {
        crate::wasm::chat::chat_prompt(self.borrow()?.model.text(), request_json, parse_special_in_messages)
    }

    /// As [`Engine::load_adapter`](crate::wasm::Engine::load_adapter): the adapter runs on the GPU (or on the CPU
    /// after a fallback).
    #[wasm_bindgen(js_name = loadAdapter)]
    pub fn load_adapter(&self, bytes: js_sys::Uint8Array) -> std::result::Result<u32, JsValue> {
        let inner = &mut *self.borrow()?;
        inner.adapters.load(&inner.model, &bytes).map_err(js_error)
    }

    /// As [`Engine::unload_adapter`](crate::wasm::Engine::unload_adapter).
    #[wasm_bindgen(js_name = unloadAdapter)]
    pub fn unload_adapter(&self, id: u32) -> std::result::Result<bool, JsValue> {
        Ok(self.borrow()?.adapters.unload(id))
    }

    /// Prepare to generate from `prompt_ids` (a Promise; nothing is evaluated yet: the prefill runs
    /// in the `nextStep` calls, one batch each).
    pub fn start(&self, prompt_ids: Vec<u32>, options_json: &str) -> js_sys::Promise {
        let opts = self.borrow().and_then(|inner| {
            parse::<JsGenerateOptions>(options_json, "options")?.into_options(&inner.model, &inner.adapters)
        });
        let cell = self.inner.clone();
        future_to_promise(async move {
            lock(&cell)?.start(&prompt_ids, opts?).await.map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// A Promise of the next step: `{prefilled, total}` after a batch of the prompt, `{id, text}`
    /// for a token, `undefined` when generation has finished (and the conversation's new pages are
    /// in the prefix cache, as `Engine::finish` puts them there).
    #[wasm_bindgen(js_name = nextStep)]
    pub fn next_step(&self) -> js_sys::Promise {
        let cell = self.inner.clone();
        future_to_promise(async move {
            let step = lock(&cell)?.next_step().await.map_err(js_error)?;
            step_to_js(step)
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
            probe_score_memory(&inner.model, ids.len(), k)?;
            inner.reset();
            let positions = inner.ev.score(&ids, k).await.map_err(js_error)?;
            Ok(scores_json(&positions).into())
        })
    }

    /// As [`Engine::set_prefix_cache_budget`](crate::wasm::Engine::set_prefix_cache_budget).
    #[wasm_bindgen(js_name = setPrefixCacheBudget)]
    pub fn set_prefix_cache_budget(&self, bytes: f64) -> std::result::Result<(), JsValue> {
        self.borrow()?.model.prefix_cache().set_budget(bytes as usize);
        Ok(())
    }

    /// As [`Engine::clear_prefix_cache`](crate::wasm::Engine::clear_prefix_cache).
    #[wasm_bindgen(js_name = clearPrefixCache)]
    pub fn clear_prefix_cache(&self) -> std::result::Result<(), JsValue> {
        self.borrow()?.model.prefix_cache().clear();
        Ok(())
    }

    /// As [`Engine::prefix_cache_persist`](crate::wasm::Engine::prefix_cache_persist).
    #[wasm_bindgen(js_name = prefixCachePersist)]
    pub fn prefix_cache_persist(&self, on: bool) -> std::result::Result<(), JsValue> {
        self.borrow()?.model.prefix_cache().set_persistent(on);
        Ok(())
    }

    /// As [`Engine::prefix_cache_missing`](crate::wasm::Engine::prefix_cache_missing).
    #[wasm_bindgen(js_name = prefixCacheMissing)]
    pub fn prefix_cache_missing(&self, ids: Vec<u32>) -> std::result::Result<Vec<String>, JsValue> {
        Ok(persist::missing(&self.borrow()?.model, &ids))
    }

    /// As [`Engine::prefix_cache_keys`](crate::wasm::Engine::prefix_cache_keys).
    #[wasm_bindgen(js_name = prefixCacheKeys)]
    pub fn prefix_cache_keys(&self, ids: Vec<u32>) -> std::result::Result<Vec<String>, JsValue> {
        Ok(persist::keys(&self.borrow()?.model, &ids))
    }

    /// As [`Engine::prefix_cache_load`](crate::wasm::Engine::prefix_cache_load).
    #[wasm_bindgen(js_name = prefixCacheLoad)]
    pub fn prefix_cache_load(&self, ids: Vec<u32>, records: js_sys::Array) -> std::result::Result<String, JsValue> {
        Ok(persist::load(&self.borrow()?.model, &ids, &records))
    }

    /// As [`Engine::prefix_cache_record_bytes`](crate::wasm::Engine::prefix_cache_record_bytes).
    #[wasm_bindgen(js_name = prefixCacheRecordBytes)]
    pub fn prefix_cache_record_bytes(&self) -> std::result::Result<usize, JsValue> {
        Ok(persist::record_bytes(&self.borrow()?.model))
    }

    /// As [`Engine::prefix_cache_take_unsaved`](crate::wasm::Engine::prefix_cache_take_unsaved).
    #[wasm_bindgen(js_name = prefixCacheTakeUnsaved)]
    pub fn prefix_cache_take_unsaved(&self) -> std::result::Result<js_sys::Array, JsValue> {
        Ok(persist::take_unsaved(&self.borrow()?.model))
    }

    /// As [`Engine::save_state`](crate::wasm::Engine::save_state), a Promise (the GPU's rows are read back).
    #[wasm_bindgen(js_name = saveState)]
    pub fn save_state(&self) -> js_sys::Promise {
        let cell = self.inner.clone();
        future_to_promise(async move {
            let bytes = lock(&cell)?.ev.save_state().await.map_err(js_error)?;
            Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
        })
    }

    /// As [`Engine::restore_state`](crate::wasm::Engine::restore_state).
    #[wasm_bindgen(js_name = restoreState)]
    pub fn restore_state(&self, bytes: js_sys::Uint8Array) -> std::result::Result<(), JsValue> {
        let mut inner = self.borrow()?;
        let max = max_state_bytes(&inner.model, inner.ev.n_ctx());
        let bytes = bytes_from_js(&bytes, max, "a saved state").map_err(js_error)?;
        inner.ev.restore_state(&bytes).map_err(js_error)?;
        inner.generation = None;
        Ok(())
    }

    /// Forget the conversation (the KV cache).
    pub fn reset(&self) -> std::result::Result<(), JsValue> {
        self.borrow()?.reset();
        Ok(())
    }
}

/// A GGUF file on its way to the GPU as it arrives (`gpu::GpuModelStream`): its matrices go from each chunk into
/// GPU buffers, and wasm memory keeps only the header and the small vectors, so a model larger than that memory
/// loads. `GpuEngine.fromStream` makes the engine once every byte is in.
#[wasm_bindgen]
pub struct GpuStream {
    inner: GpuModelStream,
}

#[wasm_bindgen]
impl GpuStream {
    /// Open the GPU (any adapter, as under "webgpu") for a file of `len` bytes. `options_json`: `{maxBindingBytes?}`.
    pub async fn open(len: f64, options_json: String) -> std::result::Result<GpuStream, JsValue> {
        let opts: JsStreamOptions = parse(&options_json, "stream options")?;
        // A length JavaScript holds exactly (2^53 bytes: far past any model).
        if !(len >= 0.0 && len.fract() == 0.0 && len <= 2f64.powi(53)) {
            return Err(js_error(Error::InvalidArgument(format!("a file length of {len} bytes"))));
        }
        let gpu_opts = GpuOptions { max_binding_bytes: opts.max_binding_bytes, ..GpuOptions::default() };
        Ok(GpuStream { inner: GpuModelStream::new(len as u64, &gpu_opts).await.map_err(js_error)? })
    }

    /// Take the file's next chunk (a Promise: the first chunks that complete the header allocate the GPU's
    /// buffers). Pushes must not overlap: await each.
    pub async fn push(&mut self, chunk: js_sys::Uint8Array) -> std::result::Result<(), JsValue> {
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(chunk.length() as usize).map_err(|_| {
            js_error(Error::OutOfMemory { bytes: chunk.length() as usize, what: "a chunk of the model file".into() })
        })?;
        bytes.resize(chunk.length() as usize, 0);
        chunk.copy_to(&mut bytes);
        self.inner.push(&bytes).await.map_err(js_error)
    }
}

/// `GpuStream.open`'s options.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsStreamOptions {
    #[serde(default)]
    max_binding_bytes: Option<u64>,
}

impl GpuEngine {
    /// The engine of `model`, evaluated by `ev`.
    fn running(model: Arc<Model>, ev: Evaluator) -> GpuEngine {
        let adapter = ev.gpu().map(|gpu| gpu.adapter().clone());
        let inner = Inner { model, ev, adapter, adapters: Adapters::default(), generation: None };
        GpuEngine { inner: Rc::new(RefCell::new(inner)) }
    }

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

impl Inner {
    fn reset(&mut self) {
        self.ev.truncate(0);
        self.generation = None;
    }

    /// As [`Session::start`](crate::Session::start): every check before the cache changes.
    async fn start(&mut self, prompt: &[u32], opts: crate::GenerateOptions) -> Result<()> {
        self.generation = None;
        let ev = &self.ev;
        let mut g = Generation::new(ev.model(), opts, prompt, ev.n_ctx(), ev.n_batch())?;
        g.reuse_cache(&mut self.ev).await?;
        self.generation = Some(g);
        Ok(())
    }

    /// As [`Session::next_step`](crate::Session::next_step); once the generation has finished, what the
    /// cache holds goes into the prefix cache here (a readback), as `Session::finish` does, so that
    /// `finish` stays synchronous.
    async fn next_step(&mut self) -> Result<Option<Step>> {
        let Some(g) = self.generation.as_mut() else {
            return Err(Error::InvalidArgument("no generation in progress: call start first".into()));
        };
        let step = g.step(&mut self.ev).await?;
        if step.is_none() {
            // If this fails only the pages are lost (a lost device is the next call's error too).
            let _ = self.ev.remember().await;
        }
        Ok(step)
    }
}
