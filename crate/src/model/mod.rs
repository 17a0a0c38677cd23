//! A loaded model: the file's bytes, its config, weights (views into the bytes), and its text side (`text.rs`:
//! tokenizer, chat template, prompts).
//!
//! # Design
//!
//! `config.rs` reads hyper-parameters from `<arch>.*` metadata (`Arch` lists the architectures and what differs;
//! `Config::layer_window` / `layer_rope_base` say which layers attend within a sliding window; Phi-3's fused q/k/v and
//! gate/up tensors become `MatrixRef` row ranges, so the forward pass never sees them). Where layers differ in shape
//! (Gemma 4: `LayerShapes`), the forward pass asks the config per layer (`layer_head_dim`, `layer_kv_dim`,
//! `layer_ffn_dim`, `kv_layer`); the KV cache keeps one row width for every layer (`Config::kv_dim`, the widest; a
//! narrower layer's rows padded), so the prefix cache, saved states and the cold tier see one shape, and holds only the
//! layers that store keys and values (`Config::kv_layers`: Gemma 4's last layers read earlier ones'). `weights.rs` holds `MatrixRef`s
//! (type, shape, byte offset) viewed as `QuantMatrix`es of the file, and norms/biases as small f32 vectors; `mod.rs` is
//! `Model`: the bytes (memory-mapped natively), config, weights, the text side and the prefix cache. `text.rs` is
//! `TextModel`, the text side (tokenizer, chat template, chat prompts with tools, the grammar compiler), which needs
//! only the file's header: a `Model` holds one, and one is read alone from a header for token counting and for a
//! page whose weights live in a worker.
//! `forward.rs` is one top-to-bottom `forward()` over a batch of tokens into a preallocated `RunState`, and
//! `batches`, the one rule that splits an eval into forward calls (also used by the GPU). A new architecture starts
//! in `config.rs` and `forward.rs`. `experts.rs` is a mixture of experts' feed-forward block (`Config::experts`:
//! qwen3moe): the router's top-k choice per token, each expert's block on the batch's tokens that chose it, whose
//! matrices are row ranges of the 3-D expert tensors (`Weights` holds every expert's rows in w_gate/w_up/w_down).
//!
//! `bert.rs` is the encoder (llama.cpp's `bert` architecture: all-MiniLM, bge): `BertWeights` (a model's `encoder`;
//! its decoder `weights` are empty and `Evaluator::open` refuses it, since an encoder does not generate) and `encode()`,
//! the forward pass to the last hidden states over a batch of whole sequences: every matrix is multiplied for all the
//! batch's tokens at once through `forward::project` (the decoders' matmul and quantized kernels), attention stays
//! within each sequence, norms come after each block. `embed.rs` is `Model::embed`: texts tokenized with [CLS] and
//! [SEP], packed into batches of up to `BATCH_TOKENS`, pooled (`Pooling`: mean, CLS, last; the GGUF's
//! `bert.pooling_type` by default) and L2-normalized. A decoder's embeddings are the same pooling over its final norm's
//! outputs (`forward::hidden_states`, the forward pass without the output head), one text at a time from an empty cache. The GGUF is ours (`scripts/convert_bert_gguf.py`, the keys and
//! names llama.cpp's converter writes); `tests/rust/embed.rs` checks token ids and vectors against llama.cpp's
//! (`benches/embed_reference.mjs` recorded them with node-llama-cpp into `tests/fixtures/`).

pub mod adapter;
pub mod bert;
pub mod config;
pub(crate) mod eval;
pub(crate) mod experts;
pub mod forward;
pub mod lora;
pub mod text;
pub mod weights;

use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::chat_template::ChatTemplate;
use crate::error::{Error, Result};
use crate::gguf::bytes::ModelBytes;
use crate::gguf::id::ModelId;
use crate::kernels::rope::Rope;
use crate::kv::cache::{KvCache, KvCacheOptions, KvType};
use crate::kv::PrefixCache;
use crate::model::lora::AdapterSet;
use crate::tokenizer::Tokenizer;
use bert::BertWeights;
use config::Config;
use text::TextModel;
use weights::Weights;

pub struct Model {
    bytes: ModelBytes,
    pub config: Config,
    /// The decoder's weights (none for an encoder: [`Weights::encoder_only`]).
    pub weights: Weights,
    /// The encoder's weights, for `bert` models only.
    pub encoder: Option<BertWeights>,
    /// The tokenizer, the chat template and what is made of them (prompts, the grammar compiler).
    text: TextModel,
    /// Milliseconds from the bytes being available (or the file opened) to a ready model.
    load_ms: f64,
    /// KV of token prefixes that any session of this model starts from (`memory::prefix_cache`).
    prefix_cache: Arc<PrefixCache>,
    /// The prefix cache of the adapter set used last (its digest, the cache): keys and values computed under a
    /// set are another model's, so they get a cache of their own, kept in memory for one set at a time.
    adapter_cache: Mutex<Option<([u8; 32], Arc<PrefixCache>)>>,
    /// The KV cache's format, for every session and the prefix cache (`with_kv_cache`).
    kv_cache: KvCacheOptions,
    /// What persisted records and saved states of this model carry (`memory::record`).
    id: ModelId,
}

/// The prefix cache's budget until the caller sets one: pages are allocated as they fill, up to this.
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = if cfg!(target_arch = "wasm32") { 64 << 20 } else { 256 << 20 };

impl Model {
    /// Load from a whole GGUF file held in memory (the path wasm32 uses: the caller passes the bytes, in pieces
    /// if the file is larger than one object can be there: [`bytes::ModelBytesBuilder`]).
    pub fn from_bytes(bytes: impl Into<ModelBytes>) -> Result<Model> {
        Model::load(bytes.into(), crate::clock::now_ms())
    }

    /// Load from a file, memory-mapped: the weights are paged in from the file, never copied.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Model> {
        let t0 = crate::clock::now_ms();
        let path = path.as_ref();
        let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every mmap user we rely on the file not being truncated underneath us.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Model::load(ModelBytes::from(map), t0)
    }

    fn load(bytes: ModelBytes, t0: f64) -> Result<Model> {
        let gguf = bytes.gguf()?;
        let config = Config::from_gguf(&gguf)?;
        let (weights, encoder) = if config.arch.is_decoder() {
            (Weights::from_gguf(&gguf, &bytes, &config)?, None)
        } else {
            let encoder = BertWeights::from_gguf(&gguf, &bytes, &config)?;
            (Weights::encoder_only(encoder.token_embd), Some(encoder))
        };
        let text = TextModel::from_gguf(&gguf)?;
        if text.tokenizer().vocab_size() != config.vocab_size {
            return Err(Error::Model(format!(
                "tokenizer has {} tokens but token_embd.weight has {} rows",
                text.tokenizer().vocab_size(),
                config.vocab_size
            )));
        }
        let load_ms = crate::clock::now_ms() - t0;
        let id = ModelId::of_gguf(&bytes, gguf.data_offset);
        let prefix_cache = Arc::new(PrefixCache::new(
            id,
            config.kv_layers(),
            config.kv_dim(),
            KvType::F16,
            DEFAULT_PREFIX_CACHE_BYTES,
        ));
        let kv_cache = KvCacheOptions::default();
        Ok(Model {
            bytes,
            config,
            weights,
            encoder,
            text,
            load_ms,
            prefix_cache,
            adapter_cache: Mutex::new(None),
            kv_cache,
            id,
        })
    }

    /// This model with the KV cache format `kv` for all its sessions and its prefix cache: the one place
    /// that decides it, before any session exists. A quantized cold tier needs heads of whole blocks
    /// (`Error::KvCache` otherwise); the CPU runs it (a GPU session under `Backend::WebGpu` refuses it).
    pub fn with_kv_cache(mut self, kv: KvCacheOptions) -> Result<Model> {
        for l in 0..self.config.n_layers {
            kv.check(self.config.layer_head_dim(l))?;
        }
        let budget = self.prefix_cache.stats().budget_bytes;
        let c = &self.config;
        self.prefix_cache = Arc::new(PrefixCache::new(self.id, c.kv_layers(), c.kv_dim(), kv.persisted(), budget));
        self.kv_cache = kv;
        Ok(self)
    }

    /// This model with `source` as its chat template instead of the one in its file (as llama.cpp's
    /// `--chat-template-file`): for a file with none, or one that renders no tools. A template that does not
    /// compile is `Error::ChatTemplate`.
    pub fn with_chat_template(mut self, source: &str) -> Result<Model> {
        self.text = self.text.with_chat_template(source)?;
        Ok(self)
    }

    /// The KV cache format of this model's sessions.
    pub fn kv_cache(&self) -> KvCacheOptions {
        self.kv_cache
    }

    /// A conversation's cache of `n_ctx` positions on the CPU: keys and values in the model's KV format, and the
    /// recurrent state of its linear-attention layers where it has them.
    pub fn conversation_cache(&self, n_ctx: usize) -> KvCache {
        let c = &self.config;
        let mut kv = KvCache::with_options(c.kv_layers(), c.kv_dim(), n_ctx, self.kv_cache);
        kv.recurrent = c.recurrent_state();
        kv
    }

    /// Whether the matrices are in memory, as the CPU's forward pass needs them: not for a model streamed to a GPU
    /// (`gpu::GpuModelStream`), which runs there only (`Error::Model` here).
    pub fn check_weights_held(&self) -> Result<()> {
        match self.bytes.is_whole() {
            true => Ok(()),
            false => Err(Error::Model(
                "this model's matrices were streamed to a GPU and are not in memory: it runs on that GPU only".into(),
            )),
        }
    }

    /// The whole GGUF file; weights are byte ranges of it.
    pub fn file(&self) -> &ModelBytes {
        &self.bytes
    }

    /// The text side: tokenizer, chat template, and the prompts and grammars made of them alone (`TextModel`).
    pub fn text(&self) -> &TextModel {
        &self.text
    }

    /// The text side's tokenizer (`self.text().tokenizer()`).
    pub fn tokenizer(&self) -> &Tokenizer {
        self.text.tokenizer()
    }

    /// RoPE for a context of `n_ctx` positions, as the config says, with the file's per-pair frequency factors if it
    /// has them: Llama 3.1's `rope_freqs`, or LongRoPE's short ones, long ones past the original context (as llama.cpp
    /// picks them by the context size). The CPU forward and the GPU's angle table both come from it.
    pub fn rope(&self, n_ctx: usize) -> Rope {
        self.rope_with_base(n_ctx, self.config.rope_base)
    }

    /// [`Model::rope`] of the windowed layers where their RoPE is their own: Gemma 3's base, Gemma 4's base, head
    /// size and rotated width (without frequency factors, which are its global layers'); `None` where every layer
    /// uses the model's.
    pub fn local_rope(&self, n_ctx: usize) -> Option<Rope> {
        let c = &self.config;
        let rope_dims = c.local_rope_dims()?;
        let l = (0..c.n_layers).find(|&l| c.layer_window(l) > 0)?;
        Some(match &c.layer_shapes {
            Some(s) => Rope::new(s.local_head_dim, rope_dims, s.local_rope_base, c.rope_freq_scale, c.rope_neox),
            None => self.rope_with_base(n_ctx, c.layer_rope_base(l)),
        })
    }

    fn rope_with_base(&self, n_ctx: usize, base: f32) -> Rope {
        let (c, w) = (&self.config, &self.weights);
        let rope = Rope::new(c.head_dim, c.rope_dims, base, c.rope_freq_scale, c.rope_neox)
            .with_attn_factor(c.rope_attn_factor);
        let long = n_ctx > c.rope_orig_context;
        let factors =
            w.rope_freqs.as_ref().or(if long { w.rope_factors_long.as_ref() } else { w.rope_factors_short.as_ref() });
        match (factors, c.rope_section_factors()) {
            (Some(factors), _) => rope.with_freq_factors(factors),
            (None, Some(sections)) => rope.with_freq_factors(&sections),
            (None, None) => rope,
        }
    }

    /// The text side's chat template (`self.text().chat_template()`): an error naming the problem when the model
    /// has none or it did not compile.
    pub fn chat_template(&self) -> Result<&ChatTemplate> {
        self.text.chat_template()
    }

    /// `general.name` (`self.text().name()`).
    pub fn name(&self) -> Option<&str> {
        self.text.name()
    }

    /// The model's identity in persisted records and saved states: its GGUF header and samples of its weights.
    pub fn id(&self) -> ModelId {
        self.id
    }

    /// The KV of token prefixes shared by this model's sessions (budget, stats, clear).
    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefix_cache
    }

    /// The prefix cache of the sessions under `lora`: the model's for none; for a set, one of its own, whose records
    /// name a model id of their own, so no page moves between it and another set's or the base model's. One set's
    /// cache is kept at a time (the latest; a trained adapter is a new set after each step), with the base cache's
    /// budget, in memory only.
    pub(crate) fn prefix_cache_for(&self, lora: &AdapterSet) -> Arc<PrefixCache> {
        if lora.is_empty() {
            return self.prefix_cache.clone();
        }
        let set = lora.digest();
        let mut slot = self.adapter_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*slot {
            Some((digest, cache)) if *digest == set => cache.clone(),
            _ => {
                let mut h = Sha256::new();
                h.update(b"ruvllm adapter set");
                h.update(self.id.0);
                h.update(set);
                let id = ModelId(h.finalize().into());
                let c = &self.config;
                let base = &self.prefix_cache;
                let cache = Arc::new(PrefixCache::new(
                    id,
                    c.kv_layers(),
                    c.kv_dim(),
                    base.kv_type(),
                    base.stats().budget_bytes,
                ));
                *slot = Some((set, cache.clone()));
                cache
            }
        }
    }

    pub fn load_ms(&self) -> f64 {
        self.load_ms
    }

    pub fn file_size(&self) -> u64 {
        self.bytes.len()
    }
}
