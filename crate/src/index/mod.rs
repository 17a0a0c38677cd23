//! A vector index: HNSW over f32 vectors under cosine, inner product or L2, for retrieval and routing over
//! embeddings (issue 22). [`Hnsw`] is the graph (insert, update, delete, search with `ef` and a filter);
//! [`distance`] its metrics and SIMD kernels; `records` its persisted form, as byte records a store keeps
//! under keys (written incrementally) or as one blob. [`Collection`] gives each vector an entry (a text, a
//! label, a last use): the semantic router and the long-term memory are collections. The index knows no storage
//! and no JavaScript.
//!
//! # Design
//!
//! Nearest neighbours over f32 embeddings for retrieval and routing, in the core so that natively and in wasm the
//! same code answers. `hnsw.rs` is `Hnsw`, built and searched as hnswlib (the reference for recall and speed): `M`
//! links a node on the upper levels and `2M` on level 0, levels drawn with multiplier `1/ln(M)` from the index's own
//! seeded generator (a build is the same everywhere, and the generator's state is persisted so a reloaded index builds
//! on the same), `ef_construction` candidates per insert and hnswlib's neighbour-selection heuristic, `search` over
//! `max(ef, k)` candidates on level 0. Callers name vectors by `u64` ids mapped to slots. A delete marks the slot (it
//! still routes searches, never is a result) and the next insert reuses it as an update moves a vector, by hnswlib's
//! `updatePoint` (the old neighbours re-link among their two-hop neighbourhood, then the slot links anew); a filter on
//! ids is applied as deletion is. A search walks the graph on int8 copies of the vectors (one scale a vector, derived
//! from the f32 vectors on insert, update and load; never persisted) against the query quantized to i16, then rescores
//! its `max(ef, k)` candidates with the f32 vectors, skipping those that `dot_i8_error` (the quantization's bound)
//! shows cannot be among the nearest `k`: returned distances are exact, the graph is built on f32 as before, and
//! `set_quantized(false)` walks on f32 (the copies cost `dims + 12` bytes a vector). At each node the walk asks for
//! its unvisited neighbours' rows (a prefetch on x86_64), computes their distances, then updates its heaps, so the
//! reads overlap; a search reuses its scratch (visited marks by generation, heaps, query buffers) from a pool.
//! `benches/README.md` has the measurements behind these choices. `distance.rs` has the metrics (`Metric`: cosine,
//! inner product, L2; smaller is closer; cosine stores vectors normalized so it is one dot product) over three
//! kernels, `dot` and `l2_squared` on f32 and `dot_i8` (int8 by i16, summed in i32: the query's range shrinks with
//! `dims` so no sum overflows), each a scalar reference and AVX2+FMA (run time), simd128 and NEON versions picked as
//! `quant`'s are and tested against it (the integer one for equality).
//! `records.rs` is the persisted form, for the same stores as the prefix cache's pages: a header record and, per
//! segment of `SEGMENT_SLOTS` slots, a vectors record and a links record (apart, because an insert changes one
//! slot's vector but the links of dozens of nodes), each framed as every persisted record is (`record::Kind`: magic,
//! version, CRC-32) and carrying the index's `uid`. Commits are versioned (format version 2): `commit` hands over one generation,
//! the segments changed since the last one under keys that carry the generation, and a header that names each segment's
//! record by generation; the header is the commit point, written last, and the only record a commit rewrites that the
//! state before needs (LevelDB's `CURRENT` file), so a write cut short anywhere leaves the last complete state, and
//! `stale` lists what to delete once the header is stored. `from_records` reads exactly what its header names and
//! ignores other records (garbage of a cut write); `to_bytes`/`from_bytes` frame all records as one blob. Version 1
//! overwrote segments in place, which a cut write turned into an unreadable store: the collection still reads it and
//! writes it anew at its next commit (refusing it would strand every router and memory already stored). The reader
//! checks every count against the bytes present, and that every record the header names is there, before it sizes
//! anything by them, allocates fallibly (`try_reserve`: `E_OUT_OF_MEMORY`, not a trap), checks every f32 finite (a pass
//! without branches per segment: 0.45 ms per 16 MiB of vectors natively, one and a half times the CRC's) and every link
//! against the slots and levels: bad bytes are an `IndexError` (`Error::Index`, `E_INDEX`). `tests/rust/index.rs` checks recall, deletes, updates and filters
//! against brute force, every truncation and bit flip of a blob, and a commit cut after each of its records; the fuzz
//! target `hnsw_index` fuzzes the reader; `benches/hnsw.rs` measures it (and `benches/hnsw_vs_hnswlib.sh` hnswlib beside
//! it). Change the graph in `hnsw.rs`, the record format (and its `VERSION`) in `records.rs`.
//!
//! `collection.rs` is `Collection`: an `Hnsw` whose vectors each stand for an `Entry` (a text, a label, a last use),
//! the shape the semantic router and the long-term memory share, so neither needs storage or JavaScript of its own.
//! `route` scores each label by its best entry among the `k` nearest and answers the best label unless it is below
//! that label's threshold (or the collection's); `recall` searches and marks entries used; a byte budget drops the least
//! recently used entries when an `add` goes over it. Its records sit beside the index's under string keys (`h` + the
//! index record's key, `e` + an entry id, `meta`), each framed and carrying the index's `uid`; `meta` holds the settings,
//! the ids taken and the index's header, so it is the collection's one commit point. `take_changes` gives the records to
//! write (index segments, entries, `meta` last) and the keys to delete after them (what the last state needed and this
//! one does not, and garbage found on reading: index records no header names, entries of ids the index does not hold);
//! `confirm` or `abort` says whether the store took them, and `take_all` gives every record for a store that lost track.
//! Two writers of one store stay apart: each takes ids from a lease (`lease`: the next `LEASE` ids past any taken, kept
//! in `meta`), and a writer whose view is stale replays its own changes since its last confirmed commit on the store's
//! newer state (`rebase`), the later commit winning where both changed one thing. On reading, a live vector without an
//! entry is an error. `wasm/index.rs` binds it for the package (`npm/src/vectors/`), and copies records in only after
//! checking each against `max_record_bytes` (its largest valid size) and allocating fallibly; the `hnsw_index` fuzz target
//! edits collection records too.
//!
//! `clusters.rs` groups a label's entries for the deep learning loop's pattern bank: k-means seeded by k-means++
//! (`Collection::clusters`) and the pairs so alike that one is redundant (`Collection::near_pairs`).

mod clusters;
mod collection;
pub mod distance;
mod hnsw;
mod records;

pub use clusters::{kmeans, Cluster, NearPair};
pub use collection::{
    max_record_bytes, Changes, Collection, Decision, Entry, Found, LabelScore, MAX_LABEL_BYTES, MAX_TEXT_BYTES,
};
pub use distance::Metric;
pub use hnsw::{Hit, Hnsw, HnswParams};
pub use records::{Commit, IndexError, RecordKey, SEGMENT_SLOTS};
