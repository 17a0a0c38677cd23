//! A vector index: HNSW over f32 vectors under cosine, inner product or L2, for retrieval and routing over
//! embeddings (issue 22). [`Hnsw`] is the graph (insert, update, delete, search with `ef` and a filter);
//! [`distance`] its metrics and SIMD kernels; `records` its persisted form, as byte records a store keeps
//! under keys (written incrementally) or as one blob. [`Collection`] gives each vector an entry (a text, a
//! label, a last use): the semantic router and the long-term memory are collections. The index knows no storage
//! and no JavaScript.

mod collection;
pub mod distance;
mod hnsw;
mod records;

pub use collection::{
    max_record_bytes, Changes, Collection, Decision, Entry, Found, LabelScore, MAX_LABEL_BYTES, MAX_TEXT_BYTES,
};
pub use distance::Metric;
pub use hnsw::{Hit, Hnsw, HnswParams};
pub use records::{Commit, IndexError, RecordKey, SEGMENT_SLOTS};
