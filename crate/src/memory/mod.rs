//! Memory that outlives a request: cached KV states of token prefixes.

pub mod radix;
