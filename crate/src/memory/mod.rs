//! Memory that outlives a request: KV states of token prefixes, kept for any session of the model.

pub mod prefix_cache;
pub mod radix;

pub use prefix_cache::{PrefixCache, PrefixCacheStats, PAGE_TOKENS};
