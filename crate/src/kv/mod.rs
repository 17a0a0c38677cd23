//! Keys and values: a conversation's KV cache (`cache.rs`: f16, or two tiers with a quantized cold one), and what
//! outlives a request: pages of token prefixes kept for any session of the model (`prefix_cache.rs` over the radix
//! tree of `radix.rs`), their persisted records (`page.rs`), and saved conversations (`state.rs`); beside the keys and
//! values, the recurrent state of linear-attention layers (`recurrent.rs`: Qwen3.5's delta nets). The cold tier's
//! block kernels stay with the quantized formats whose per-ISA pieces they share (`quant/kv.rs`).
//!
//! # Design
//!
//! `radix.rs` is a page-aligned radix tree over token ids (SGLang's RadixAttention): longest-prefix match that splits
//! nodes, insert that reports what was cached, lock counts, LRU eviction of unlocked leaf tails; it owns page ids and
//! knows nothing of what a page holds. `prefix_cache.rs` holds the pages: every layer's keys and values for
//! `PAGE_TOKENS` (16) positions in the session cache's row layout and persisted type (f16, or a two-tier cache's cold
//! type: a page then takes that much less memory, and its record that much fewer bytes), within a byte budget
//! (`DEFAULT_PREFIX_CACHE_BYTES`: 256 MiB natively, 64 MiB on wasm32), allocated as it fills and fallibly, so a full
//! wasm memory stops the growth instead of trapping. The model owns one (`Model::prefix_cache`), shared by its
//! sessions through a mutex. A session's cache is one contiguous array per layer (and tier) that attention reads in
//! place, so pages are copied in and out, not shared (restored as a forward call writes positions, each into its tier;
//! a hot row quantized on the way out as it would be on leaving the window): `Generation::reuse_cache` first puts what the evaluator holds into the
//! cache, then takes the longest cached prefix of the new prompt (`Evaluator::recall`) if it is longer than what the
//! evaluator already shares with it; `Session::finish` puts a finished conversation in; `Stats::cached_tokens` counts
//! both. The GPU backend uses it through the same `restore` and `insert`, staged through a host `KvCache::window` of
//! whole pages within a few MB (never the whole context: wasm memory does not shrink), since its cache holds the same
//! f16 rows: `recall` restores into windows and writes them up (`GpuSession::upload_kv`, `queue.write_buffer`);
//! `remember` asks `PrefixCache::uncached` which whole pages the cache lacks and reads only those back
//! (`GpuSession::download_kv`, a staging buffer and `map_async`), so it and `Generation::reuse_cache` are async. Change
//! the page size in `prefix_cache.rs`, the budget in `model/mod.rs`.
//!
//! `record.rs` is a page as bytes for a store: versioned, with the model's id (`ModelId`: SHA-256 of the GGUF header and
//! samples of its tensor data), the KV type (ggml's type id) and page shape (`PageLayout`), the page's key and its
//! parent's (`PageKey`: SHA-256 chained over the model id, the KV type for a quantized one, and every page of tokens
//! before it, so caches of two KV types never ask for each other's records), the tokens and the KV, framed by `record::Kind`
//! (magic, version, CRC-32). `decode` checks all of that
//! before anything is used, and that every key and value is finite (`KvType::rows_finite`: each f16's exponent, or a
//! quantized block's scale; one vectorized pass, several GB/s): a NaN that a checksum-aware writer puts
//! in a record would spread through attention to every prompt that reuses the page. The cache knows no store: with `set_persistent` it lists the pages it inserts and
//! `take_unsaved` hands them over as records; `missing` names the keys a prompt could use beyond what memory holds, and
//! `load` takes records back, checked. Storage is the npm package's (below). `state.rs` is one conversation as bytes
//! (llama.cpp's slot save/restore): its tokens and their keys and values, with the model's id, framed as pages are, from
//! `Session::save_state` to `Session::restore_state` (`llm.saveState()`/`restoreState()`), which checks it all (its
//! tokens against the vocabulary, its keys and values finite) before the cache changes; `state::max_bytes` bounds it, so
//! the bindings refuse longer bytes before copying them. A two-tier cache's state keeps each tier as it is (its cold rows, then its f16 rows), so it
//! restores exactly; a state of another KV type is an `Error::KvCache`. On the GPU the rows come down for `save_state`
//! and go up for `restore_state` as the prefix cache's do (`state::decode` into a cache of just the state's positions),
//! so a state saved on one backend restores on the other; a GPU session's model is never two-tier, so its pages and
//! states are f16.
//!
//! `recurrent.rs` is the state of a model's linear-attention layers (Qwen3.5's delta nets: each one's convolution
//! inputs and delta-rule matrices, f32), held in the `KvCache` (`KvCache::recurrent`) as the conversation's memory
//! besides its keys and values. It is the state after a whole prefix, not per position, so prefix-cache pages never
//! hold it (such a model does not use the prefix cache) and the evaluator rewinds it by evaluating again from a
//! checkpoint; a saved state carries it after the rows.

pub mod cache;
pub mod page;
pub mod prefix_cache;
pub mod radix;
pub mod recurrent;
pub mod state;

pub use cache::{KvCache, KvCacheOptions, KvType, DEFAULT_HOT_TOKENS};
pub use page::PageKey;
pub use prefix_cache::{Loaded, PrefixCache, PrefixCacheStats, PAGE_TOKENS};
