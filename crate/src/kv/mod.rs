//! Keys and values: a conversation's KV cache (`cache.rs`: f16, or two tiers with a quantized cold one), and what
//! outlives a request: pages of token prefixes kept for any session of the model (`prefix_cache.rs` over the radix
//! tree of `radix.rs`), their persisted records (`page.rs`), and saved conversations (`state.rs`). The cold tier's
//! block kernels stay with the quantized formats whose per-ISA pieces they share (`quant/kv.rs`).

pub mod cache;
pub mod page;
pub mod prefix_cache;
pub mod radix;
pub mod state;

pub use cache::{KvCache, KvCacheOptions, KvType, DEFAULT_HOT_TOKENS};
pub use page::PageKey;
pub use prefix_cache::{Loaded, PrefixCache, PrefixCacheStats, PAGE_TOKENS};
