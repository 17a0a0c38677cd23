//! Memory that outlives a request: KV states of token prefixes, kept for any session of the model.

pub mod prefix_cache;
pub mod radix;
pub mod record;
pub mod state;

pub use prefix_cache::{Loaded, PrefixCache, PrefixCacheStats, PAGE_TOKENS};
pub use record::{ModelId, PageKey};
