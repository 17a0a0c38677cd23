//! The HNSW graph (Malkov & Yashunin, "Efficient and robust approximate nearest neighbor search using
//! Hierarchical Navigable Small World graphs"), built and searched as hnswlib does it:
//!
//! - every vector gets a random level `floor(-ln(u) / ln(M))` from the index's own seeded generator, so a
//!   build is the same on every run and target; level 0 keeps up to `M0 = 2M` neighbours a node, the
//!   levels above up to `M`;
//! - an insert descends greedily to its level, then on each level below searches `ef_construction`
//!   candidates and links to at most `M` of them chosen by hnswlib's heuristic (a candidate is kept only
//!   if it is closer to the new vector than to every one kept before: links spread out instead of
//!   clustering); a neighbour whose list overflows re-chooses its own list by the same heuristic;
//! - a search descends greedily, then searches level 0 with `max(ef, k)` candidates.
//!
//! Vectors live in slots; callers name them by a `u64` id. A delete marks its slot deleted, as hnswlib's
//! `markDelete`: the slot stays in the graph (searches walk through it, so the graph stays connected) but is
//! never a result, and the next insert reuses it (hnswlib's `replace_deleted`) the way an update moves a
//! vector: the old neighbours of the slot re-choose their links among their two-hop neighbourhood, then the
//! slot links anew from a search for its new vector (`updatePoint`). A filter works as deletion does: nodes
//! it refuses are walked through but never returned.
//!
//! A search can walk the graph on int8 copies of the vectors (`set_quantized`, on by default): each distance
//! on the walk is an integer dot product over a quarter of the bytes, and the `max(ef, k)` candidates it ends
//! with are rescored with the f32 vectors, so the distances returned are exact and only the walk is approximate.
//! Inserts and updates build the graph on the f32 vectors either way, so the graph is the same with or without.
//! The copies are derived from the f32 vectors (on insert, and on load): records hold only those.
//!
//! The index knows no storage: `records.rs` turns it into byte records (and tracks which changed since the
//! last `commit`, for a store that persists incrementally).

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Mutex;

use super::distance::{dot_i8, dot_i8_error, normalize, quantize, quantize_query, Metric};
use crate::error::{Error, Result};
use crate::simd::dot;

/// Levels are capped here (a level above it has probability `M^-16`); persisted records are checked against it.
pub(crate) const MAX_LEVEL: usize = 16;
/// The largest `M` (so `M0 = 2M` neighbours fit the records' u16 counts with room to spare).
pub(crate) const MAX_M: usize = 256;
/// The largest vector the index takes (records check dims against it before believing a length).
pub(crate) const MAX_DIMS: usize = 1 << 16;

/// How the graph is built. `Default` is hnswlib's: `M` 16, `ef_construction` 200.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HnswParams {
    /// Links a node keeps on each level above 0 (level 0 keeps `2 * m`); 2..=256.
    pub m: usize,
    /// Candidates an insert searches on each level: more gives a better graph and slower inserts.
    pub ef_construction: usize,
    /// Seeds the levels' generator: the same seed and inserts give the same graph.
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams { m: 16, ef_construction: 200, seed: 0x5EED_4E53 }
    }
}

/// One search result: the caller's id and its distance to the query (smaller is closer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub distance: f32,
}

/// An HNSW index of f32 vectors of `dims` values under one metric.
pub struct Hnsw {
    pub(super) metric: Metric,
    pub(super) dims: usize,
    pub(super) params: HnswParams,
    /// Slot `s`'s vector is `vectors[s * dims..][..dims]` (normalized under cosine).
    pub(super) vectors: Vec<f32>,
    /// The caller's id of each slot (of a deleted slot: the id it had).
    pub(super) ids: Vec<u64>,
    pub(super) levels: Vec<u8>,
    pub(super) deleted: Vec<bool>,
    /// Level 0 links: slot `s` has `links0[s * (1 + m0)]` neighbours, listed after that count.
    pub(super) links0: Vec<u32>,
    /// Levels 1..=level of a slot: level `l` at `[(l - 1) * (1 + m)..]`, a count then the neighbours.
    pub(super) upper: Vec<Vec<u32>>,
    pub(super) entry: Option<u32>,
    pub(super) max_level: usize,
    /// The levels' generator (xorshift64*), persisted so that a reloaded index builds on as the original.
    pub(super) rng: u64,
    pub(super) slot_of: HashMap<u64, u32>,
    /// Deleted slots, the lowest reused first (so the order survives a reload).
    pub(super) free: BTreeSet<u32>,
    /// What changed since the last commit (see `records.rs`), and how many commits there were.
    pub(super) changed: Changes,
    pub(super) generation: u64,
    /// Per segment, the generations of the vectors and links records the last commit (or read) stored it in (0:
    /// not stored).
    pub(super) stored: Vec<[u64; 2]>,
    /// The int8 copies searches walk the graph with, while `set_quantized` keeps them.
    int8: Option<Int8>,
    /// Reusable search state for searches on `&self` (one per concurrent search), so a search allocates little.
    scratch_pool: Mutex<Vec<Scratch>>,
}

/// Int8 copies of the vectors: slot `s`'s vector is about `values[s * dims..][..dims] * rows[s].scale`.
#[derive(Default)]
struct Int8 {
    values: Vec<i8>,
    rows: Vec<Int8Row>,
}

#[derive(Clone, Copy, Default)]
struct Int8Row {
    scale: f32,
    /// The sum of the int8 values' magnitudes, for the error bound (`dot_i8_error`).
    l1: f32,
    /// The f32 vector's squared length: L2 is `|q|² + |x|² - 2 q·x`, of which only the dot is approximate.
    norm: f32,
}

impl Int8 {
    /// Set slot `slot`'s copy from its f32 `vector` (a new slot is pushed).
    fn set(&mut self, slot: u32, vector: &[f32]) {
        let (dims, slot) = (vector.len(), slot as usize);
        if slot == self.rows.len() {
            self.values.resize(self.values.len() + dims, 0);
            self.rows.push(Int8Row::default());
        }
        let values = &mut self.values[slot * dims..][..dims];
        let scale = quantize(vector, values);
        let l1 = values.iter().map(|v| v.unsigned_abs() as f32).sum();
        self.rows[slot] = Int8Row { scale, l1, norm: dot(vector, vector) };
    }

    /// Start loading slot `slot`'s values into the cache (a walk past the caches' size waits on memory otherwise).
    /// x86_64 only: aarch64's prefetch intrinsic is not stable Rust, and wasm has none.
    #[inline]
    fn prefetch(&self, slot: u32, dims: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let row = self.values[slot as usize * dims..][..dims].as_ptr();
            for line in (0..dims).step_by(64) {
                // SAFETY: the address is inside the row; a prefetch reads nothing the program sees.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(row.add(line)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (slot, dims);
    }
}

/// What one search reuses: its visited marks, its heaps, its query in f32 and quantized, and its candidates.
#[derive(Default)]
struct Scratch {
    visited: Visited,
    candidates: BinaryHeap<Reverse<Near>>,
    found: BinaryHeap<Near>,
    query: Vec<f32>,
    query_i16: Vec<i16>,
    /// The distances to a node's neighbours not visited before.
    fresh: Vec<Near>,
    out: Vec<Near>,
}

impl std::fmt::Debug for Hnsw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hnsw")
            .field("metric", &self.metric)
            .field("dims", &self.dims)
            .field("params", &self.params)
            .field("live", &self.len())
            .field("slots", &self.ids.len())
            .finish()
    }
}

/// Slots whose vectors or links changed since the last commit; the header changes with any.
#[derive(Default)]
pub(super) struct Changes {
    pub vectors: BTreeSet<u32>,
    pub links: BTreeSet<u32>,
}

/// Visited marks by generation, so that a search clears nothing: slot `s` is visited when `marks[s] == epoch`.
#[derive(Default)]
struct Visited {
    marks: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn start(&mut self, slots: usize) {
        self.marks.resize(slots, 0);
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    /// Mark `s`; whether it was new.
    #[inline]
    fn insert(&mut self, s: u32) -> bool {
        let mark = &mut self.marks[s as usize];
        let new = *mark != self.epoch;
        *mark = self.epoch;
        new
    }
}

/// A distance and a slot, ordered by distance (then slot, so ties break the same everywhere). NaN-safe.
#[derive(Clone, Copy, Debug)]
struct Near(f32, u32);

impl PartialEq for Near {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Near {}
impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Near {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl Hnsw {
    pub fn new(metric: Metric, dims: usize, params: HnswParams) -> Result<Hnsw> {
        if dims == 0 || dims > MAX_DIMS {
            return Err(Error::InvalidArgument(format!("an index of {dims} dimensions (1..={MAX_DIMS})")));
        }
        if !(2..=MAX_M).contains(&params.m) || params.ef_construction == 0 {
            return Err(Error::InvalidArgument(format!(
                "HNSW M {} (2..={MAX_M}) and ef_construction {} (at least 1)",
                params.m, params.ef_construction
            )));
        }
        Ok(Hnsw {
            metric,
            dims,
            params,
            vectors: Vec::new(),
            ids: Vec::new(),
            levels: Vec::new(),
            deleted: Vec::new(),
            links0: Vec::new(),
            upper: Vec::new(),
            entry: None,
            max_level: 0,
            rng: params.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            slot_of: HashMap::new(),
            free: BTreeSet::new(),
            changed: Changes::default(),
            generation: 0,
            stored: Vec::new(),
            int8: Some(Int8::default()),
            scratch_pool: Mutex::new(Vec::new()),
        })
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn params(&self) -> HnswParams {
        self.params
    }

    /// Live vectors.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// The stored vector of `id` (normalized under cosine).
    pub fn vector(&self, id: u64) -> Option<&[f32]> {
        self.slot_of.get(&id).map(|&s| self.vector_of(s))
    }

    /// Whether searches walk the graph on int8 copies of the vectors (see the module's notes).
    pub fn quantized(&self) -> bool {
        self.int8.is_some()
    }

    /// Keep int8 copies of the vectors for searches to walk the graph with (`dims` + 12 bytes a vector), or drop
    /// them and walk on the f32 vectors. On by default; a loaded index derives them again.
    pub fn set_quantized(&mut self, on: bool) {
        if on == self.int8.is_some() {
            return;
        }
        self.int8 = on.then(|| {
            let mut int8 = Int8::default();
            for slot in 0..self.ids.len() as u32 {
                int8.set(slot, self.vector_of(slot));
            }
            int8
        });
    }

    /// Derive the int8 copies (where kept) from the f32 vectors anew, as a reader that filled those in must.
    pub(super) fn requantize(&mut self) {
        if self.int8.take().is_some() {
            self.set_quantized(true);
        }
    }

    /// Bytes the index holds in vectors and links (not counting the id map).
    pub fn memory_bytes(&self) -> usize {
        self.vectors.len() * 4
            + self.int8.as_ref().map_or(0, |q| q.values.len() + q.rows.len() * std::mem::size_of::<Int8Row>())
            + self.links0.len() * 4
            + self.upper.iter().map(|u| u.len() * 4).sum::<usize>()
            + self.ids.len() * (8 + 1 + 1)
    }

    pub(super) fn m0(&self) -> usize {
        2 * self.params.m
    }

    /// Add `vector` under a new `id` (an id already present is an error: use `update`).
    pub fn insert(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        let vector = self.prepare(vector)?;
        if self.slot_of.contains_key(&id) {
            return Err(Error::InvalidArgument(format!("the index already holds id {id}")));
        }
        if let Some(slot) = self.free.pop_first() {
            self.deleted[slot as usize] = false;
            self.ids[slot as usize] = id;
            self.slot_of.insert(id, slot);
            self.move_slot(slot, &vector);
            return Ok(());
        }
        let slot = u32::try_from(self.ids.len()).map_err(|_| Error::InvalidArgument("the index is full".into()))?;
        let level = self.random_level();
        self.vectors.extend_from_slice(&vector);
        if let Some(int8) = &mut self.int8 {
            int8.set(slot, &vector);
        }
        self.ids.push(id);
        self.levels.push(level as u8);
        self.deleted.push(false);
        self.links0.resize(self.links0.len() + 1 + self.m0(), 0);
        self.upper.push(vec![0; level * (1 + self.params.m)]);
        self.slot_of.insert(id, slot);
        self.changed.vectors.insert(slot);
        self.changed.links.insert(slot);
        let Some(entry) = self.entry else {
            self.entry = Some(slot);
            self.max_level = level;
            return Ok(());
        };
        self.link(slot, level, entry);
        if level > self.max_level {
            self.entry = Some(slot);
            self.max_level = level;
        }
        Ok(())
    }

    /// Replace the vector of `id` (an unknown id is an error).
    pub fn update(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        let vector = self.prepare(vector)?;
        let slot = *self.slot_of.get(&id).ok_or_else(|| Error::InvalidArgument(format!("no id {id} in the index")))?;
        self.move_slot(slot, &vector);
        Ok(())
    }

    /// Remove `id` from results (its slot stays in the graph until an insert reuses it); whether it was there.
    pub fn delete(&mut self, id: u64) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else { return false };
        self.deleted[slot as usize] = true;
        self.free.insert(slot);
        self.changed.links.insert(slot);
        true
    }

    /// The `k` nearest live vectors to `query`, nearest first, searching `max(ef, k)` candidates on level 0.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Hit>> {
        self.search_filtered(query, k, ef, None)
    }

    /// As `search`, returning only ids `filter` accepts (others are walked through, as deleted ones are).
    pub fn search_filtered(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&dyn Fn(u64) -> bool>,
    ) -> Result<Vec<Hit>> {
        let mut scratch = self.take_scratch();
        let mut prepared = std::mem::take(&mut scratch.query);
        self.prepare_into(query, &mut prepared)?;
        let found = match self.entry.filter(|_| k > 0 && !self.is_empty()) {
            None => Vec::new(),
            Some(entry) => self.search_from(entry, &prepared, k, ef.max(k), filter, &mut scratch),
        };
        scratch.query = prepared;
        self.scratch_pool.lock().unwrap_or_else(|e| e.into_inner()).push(scratch);
        Ok(found)
    }

    /// `search_filtered` below its checks: descend greedily from `entry`, search level 0 for `ef` candidates,
    /// and answer the nearest `k`. On the int8 copies the candidates are rescored with the f32 vectors first.
    fn search_from(
        &self,
        entry: u32,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&dyn Fn(u64) -> bool>,
        scratch: &mut Scratch,
    ) -> Vec<Hit> {
        let accept = |s: u32| !self.deleted[s as usize] && filter.is_none_or(|f| f(self.ids[s as usize]));
        let hit = |&Near(distance, s): &Near| Hit { id: self.ids[s as usize], distance };
        let Some(int8) = &self.int8 else {
            let exact = |s: u32| self.distance_to(query, s);
            let cur = (1..=self.max_level).rev().fold(entry, |cur, level| self.greedy(&exact, cur, level));
            self.search_level(&exact, &|_| {}, cur, 0, ef, &accept, scratch);
            return scratch.out.iter().take(k).map(hit).collect();
        };
        let mut q = std::mem::take(&mut scratch.query_i16);
        q.resize(self.dims, 0);
        let query_scale = quantize_query(query, &mut q);
        let query_l1: f32 = q.iter().map(|v| v.unsigned_abs() as f32).sum();
        let query_norm = if self.metric == Metric::L2 { dot(query, query) } else { 0.0 };
        let approx = |s: u32| {
            let x = &int8.values[s as usize * self.dims..][..self.dims];
            let d = query_scale * int8.rows[s as usize].scale * dot_i8(x, &q) as f32;
            match self.metric {
                Metric::Cosine | Metric::Dot => 1.0 - d,
                Metric::L2 => query_norm + int8.rows[s as usize].norm - 2.0 * d,
            }
        };
        let cur = (1..=self.max_level).rev().fold(entry, |cur, level| self.greedy(&approx, cur, level));
        self.search_level(&approx, &|s| int8.prefetch(s, self.dims), cur, 0, ef, &accept, scratch);
        scratch.query_i16 = q;

        // The nearest k of the candidates by their f32 distances. A candidate whose walk distance is farther than
        // its error bound (doubled, which also covers f32 rounding) beyond the k-th f32 distance so far cannot be
        // among them, so most of the candidates are never read in f32: the answer is that of rescoring them all.
        let Scratch { found: nearest, out: candidates, .. } = scratch;
        nearest.clear(); // farthest first
        for &Near(walk, s) in candidates.iter() {
            let row = int8.rows[s as usize];
            let error = dot_i8_error(row.scale, row.l1, query_scale, query_l1, self.dims);
            let error = if self.metric == Metric::L2 { 2.0 * error } else { error };
            let beyond = nearest.peek().filter(|_| nearest.len() == k).map_or(f32::INFINITY, |f| f.0);
            if walk - 2.0 * error - 1e-5 * (1.0 + walk.abs()) > beyond {
                continue;
            }
            nearest.push(Near(self.distance_to(query, s), s));
            if nearest.len() > k {
                nearest.pop();
            }
        }
        candidates.clear();
        candidates.extend(nearest.drain());
        candidates.sort_unstable();
        candidates.iter().map(hit).collect()
    }

    /// The exact `k` nearest live vectors by a scan of all of them (for checks and small indexes).
    pub fn search_exact(&self, query: &[f32], k: usize, filter: Option<&dyn Fn(u64) -> bool>) -> Result<Vec<Hit>> {
        let query = self.prepare(query)?;
        let mut all: Vec<Near> = self
            .slot_of
            .iter()
            .filter(|(&id, _)| filter.is_none_or(|f| f(id)))
            .map(|(_, &s)| Near(self.distance_to(&query, s), s))
            .collect();
        all.sort_unstable();
        Ok(all.into_iter().take(k).map(|Near(distance, s)| Hit { id: self.ids[s as usize], distance }).collect())
    }

    /// `vector` checked (its length, finite values) and normalized under cosine.
    fn prepare(&self, vector: &[f32]) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        self.prepare_into(vector, &mut v)?;
        Ok(v)
    }

    /// `prepare` into `v`'s memory.
    fn prepare_into(&self, vector: &[f32], v: &mut Vec<f32>) -> Result<()> {
        if vector.len() != self.dims {
            return Err(Error::InvalidArgument(format!(
                "a vector of {} values for an index of {} dimensions",
                vector.len(),
                self.dims
            )));
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(Error::InvalidArgument("a vector with a NaN or infinite value".into()));
        }
        v.clear();
        v.extend_from_slice(vector);
        if self.metric == Metric::Cosine {
            normalize(v);
        }
        Ok(())
    }

    fn random_level(&mut self) -> usize {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64; // (0, 1]
        let level = -uniform.ln() / (self.params.m as f64).ln();
        (level as usize).min(MAX_LEVEL)
    }

    pub(super) fn vector_of(&self, slot: u32) -> &[f32] {
        &self.vectors[slot as usize * self.dims..][..self.dims]
    }

    #[inline]
    fn distance_to(&self, query: &[f32], slot: u32) -> f32 {
        self.metric.distance(query, self.vector_of(slot))
    }

    #[inline]
    fn distance_between(&self, a: u32, b: u32) -> f32 {
        self.metric.distance(self.vector_of(a), self.vector_of(b))
    }

    /// The neighbours of `slot` on `level` (which must be at most its level).
    #[inline]
    pub(super) fn neighbours(&self, slot: u32, level: usize) -> &[u32] {
        let list = match level {
            0 => &self.links0[slot as usize * (1 + self.m0())..][..1 + self.m0()],
            _ => &self.upper[slot as usize][(level - 1) * (1 + self.params.m)..][..1 + self.params.m],
        };
        &list[1..1 + list[0] as usize]
    }

    pub(super) fn set_neighbours(&mut self, slot: u32, level: usize, neighbours: impl IntoIterator<Item = u32>) {
        let (m0, m) = (self.m0(), self.params.m);
        let list = match level {
            0 => &mut self.links0[slot as usize * (1 + m0)..][..1 + m0],
            _ => &mut self.upper[slot as usize][(level - 1) * (1 + m)..][..1 + m],
        };
        let mut count = 0;
        for (to, n) in list[1..].iter_mut().zip(neighbours) {
            *to = n;
            count += 1;
        }
        list[0] = count;
        self.changed.links.insert(slot);
    }

    fn take_scratch(&self) -> Scratch {
        let mut scratch = self.scratch_pool.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        scratch.visited.start(self.ids.len());
        scratch
    }

    /// Walk `level` from `from` to the nearest node (by `distance`) that no neighbour improves on.
    fn greedy(&self, distance: &impl Fn(u32) -> f32, from: u32, level: usize) -> u32 {
        let (mut cur, mut best) = (from, distance(from));
        loop {
            let mut moved = false;
            for &n in self.neighbours(cur, level) {
                let d = distance(n);
                if d < best {
                    (cur, best, moved) = (n, d, true);
                }
            }
            if !moved {
                return cur;
            }
        }
    }

    /// hnswlib's `searchBaseLayer`: up to `ef` nodes that `accept` takes, nearest first by `distance`, found on
    /// `level` from `from`, into `scratch.out`. Nodes it refuses still lead on; while fewer than `ef` are accepted
    /// the search goes on until it runs out of candidates (so a selective filter reads much of the graph, but never
    /// misses what it can reach). Nodes `scratch.visited` holds are skipped; `prefetch` starts reading what
    /// `distance` will read of a node.
    #[allow(clippy::too_many_arguments)]
    fn search_level(
        &self,
        distance: &impl Fn(u32) -> f32,
        prefetch: &impl Fn(u32),
        from: u32,
        level: usize,
        ef: usize,
        accept: &dyn Fn(u32) -> bool,
        scratch: &mut Scratch,
    ) {
        let Scratch { visited, candidates, found, fresh, out, .. } = scratch;
        candidates.clear(); // nearest first (Reverse)
        found.clear(); // farthest first
        let d = distance(from);
        visited.insert(from);
        candidates.push(Reverse(Near(d, from)));
        if accept(from) {
            found.push(Near(d, from));
        }
        let mut bound = if found.is_empty() { f32::INFINITY } else { d };
        while let Some(Reverse(Near(d, cur))) = candidates.pop() {
            if d > bound && found.len() >= ef {
                break;
            }
            // The unvisited neighbours' vectors are asked for first, then all their distances computed, then the
            // heaps updated: the reads overlap instead of each waiting on the heaps' branches before it.
            fresh.clear();
            for &n in self.neighbours(cur, level) {
                if visited.insert(n) {
                    prefetch(n);
                    fresh.push(Near(0.0, n));
                }
            }
            for near in fresh.iter_mut() {
                near.0 = distance(near.1);
            }
            for &Near(d, n) in fresh.iter() {
                if found.len() < ef || d < bound {
                    candidates.push(Reverse(Near(d, n)));
                    if accept(n) {
                        found.push(Near(d, n));
                        if found.len() > ef {
                            found.pop();
                        }
                        bound = found.peek().map_or(f32::INFINITY, |f| f.0);
                    }
                }
            }
        }
        out.clear();
        out.extend(found.drain());
        out.sort_unstable();
    }

    /// hnswlib's `getNeighborsByHeuristic2`: from `candidates` (nearest first, distances to the node being
    /// linked), keep each that is nearer to the node than to every one kept before, up to `m`.
    fn select_neighbours(&self, candidates: &[Near], m: usize) -> Vec<Near> {
        if candidates.len() <= m {
            return candidates.to_vec();
        }
        let mut kept: Vec<Near> = Vec::with_capacity(m);
        for &c in candidates {
            if kept.iter().all(|k| self.distance_between(c.1, k.1) >= c.0) {
                kept.push(c);
                if kept.len() == m {
                    break;
                }
            }
        }
        kept
    }

    /// Link `slot` (its vector and level set) into the graph from `entry` (hnswlib's insert below the levels'
    /// bookkeeping, and `repairConnectionsForUpdate`): descend greedily to its level, then on each level link it
    /// to the nodes the heuristic picks from `ef_construction` candidates, and them to it.
    fn link(&mut self, slot: u32, level: usize, entry: u32) {
        let query = self.vector_of(slot).to_vec();
        let mut cur = entry;
        for l in (level + 1..=self.max_level).rev() {
            cur = self.greedy(&|s| self.distance_to(&query, s), cur, l);
        }
        let mut scratch = self.take_scratch();
        for l in (0..=level.min(self.max_level)).rev() {
            scratch.visited.start(self.ids.len());
            let deleted = &self.deleted;
            let accept = |s: u32| s != slot && !deleted[s as usize];
            let exact = |s: u32| self.distance_to(&query, s);
            self.search_level(&exact, &|_| {}, cur, l, self.params.ef_construction, &accept, &mut scratch);
            let Some(nearest) = scratch.out.first() else { continue };
            cur = nearest.1;
            self.connect(slot, l, &scratch.out);
        }
        self.scratch_pool.lock().unwrap_or_else(|e| e.into_inner()).push(scratch);
    }

    /// hnswlib's `mutuallyConnectNewElement`: `slot` links on `level` to at most `M` of `found` (nearest first),
    /// and each of those to it, re-choosing its own list by the heuristic where it is full.
    fn connect(&mut self, slot: u32, level: usize, found: &[Near]) {
        let chosen = self.select_neighbours(found, self.params.m);
        self.set_neighbours(slot, level, chosen.iter().map(|n| n.1));
        let cap = if level == 0 { self.m0() } else { self.params.m };
        for Near(d, n) in chosen {
            let theirs = self.neighbours(n, level);
            if theirs.contains(&slot) {
                continue;
            }
            if theirs.len() < cap {
                let with_slot: Vec<u32> = theirs.iter().copied().chain([slot]).collect();
                self.set_neighbours(n, level, with_slot);
                continue;
            }
            let mut candidates: Vec<Near> =
                theirs.iter().map(|&t| Near(self.distance_between(n, t), t)).chain([Near(d, slot)]).collect();
            candidates.sort_unstable();
            let kept = self.select_neighbours(&candidates, cap);
            self.set_neighbours(n, level, kept.into_iter().map(|k| k.1));
        }
    }

    /// Give `slot` a new vector (an update, or a deleted slot reused), as hnswlib's `updatePoint`: its
    /// neighbours on each level re-choose their links among its and their neighbours, then it links anew.
    fn move_slot(&mut self, slot: u32, vector: &[f32]) {
        self.vectors[slot as usize * self.dims..][..self.dims].copy_from_slice(vector);
        if let Some(int8) = &mut self.int8 {
            int8.set(slot, vector);
        }
        self.changed.vectors.insert(slot);
        self.changed.links.insert(slot);
        let entry = self.entry.expect("an index with a slot has an entry");
        if entry == slot && self.ids.len() == 1 {
            return;
        }
        let level = self.levels[slot as usize] as usize;
        for l in 0..=level {
            let neighbours = self.neighbours(slot, l).to_vec();
            let mut around: BTreeSet<u32> = neighbours.iter().copied().collect();
            for &n in &neighbours {
                around.extend(self.neighbours(n, l).iter().copied());
            }
            let cap = if l == 0 { self.m0() } else { self.params.m };
            for &n in &neighbours {
                let mut candidates: Vec<Near> =
                    around.iter().filter(|&&c| c != n).map(|&c| Near(self.distance_between(n, c), c)).collect();
                candidates.sort_unstable();
                candidates.truncate(self.params.ef_construction);
                let kept = self.select_neighbours(&candidates, cap);
                self.set_neighbours(n, l, kept.into_iter().map(|k| k.1));
            }
        }
        self.link(slot, level, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    /// `n` vectors around 20 centres (closer to embeddings than noise), with values of mixed sizes.
    fn clustered(rng: &mut Rng, n: usize, dims: usize) -> Vec<Vec<f32>> {
        let centres: Vec<Vec<f32>> = (0..20).map(|_| (0..dims).map(|_| rng.normal()).collect()).collect();
        (0..n).map(|i| centres[i % 20].iter().map(|c| c + 0.4 * rng.normal()).collect()).collect()
    }

    fn build(metric: Metric, vectors: &[Vec<f32>]) -> Hnsw {
        let mut index = Hnsw::new(metric, vectors[0].len(), HnswParams { m: 8, ..HnswParams::default() }).unwrap();
        for (i, v) in vectors.iter().enumerate() {
            index.insert(i as u64, v).unwrap();
        }
        index
    }

    /// recall@10 of `index`'s searches at `ef` against its exact scan.
    fn recall(index: &Hnsw, queries: &[Vec<f32>], ef: usize) -> f64 {
        let mut hits = 0;
        for q in queries {
            let truth: Vec<u64> = index.search_exact(q, 10, None).unwrap().iter().map(|h| h.id).collect();
            hits += index.search(q, 10, ef).unwrap().iter().filter(|h| truth.contains(&h.id)).count();
        }
        hits as f64 / (10 * queries.len()) as f64
    }

    /// The walk on int8 copies finds what the f32 walk finds (to within a query's worth of recall), and it answers
    /// the nearest of its candidates by their f32 distances, under every metric.
    #[test]
    fn the_int8_walk_keeps_recall_and_answers_exact_distances() {
        let mut rng = Rng::new(3);
        let vectors = clustered(&mut rng, 1500, 48);
        let queries = clustered(&mut rng, 50, 48);
        for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
            let mut index = build(metric, &vectors);
            assert!(index.quantized());
            let with_int8 = recall(&index, &queries, 100);
            for q in &queries {
                let mut prepared = q.clone();
                if metric == Metric::Cosine {
                    normalize(&mut prepared);
                }
                let found = index.search(q, 10, 40).unwrap();
                assert_eq!(found.len(), 10);
                for h in &found {
                    assert_eq!(h.distance, metric.distance(&prepared, index.vector(h.id).unwrap()), "{metric:?}");
                }
                assert!(found.windows(2).all(|w| w[0].distance <= w[1].distance), "{metric:?}: nearest first");
                // With k = ef every candidate is rescored; with k = 10 those that cannot be near enough are not.
                assert_eq!(found, index.search(q, 40, 40).unwrap()[..10], "{metric:?}");
            }
            index.set_quantized(false);
            let with_f32 = recall(&index, &queries, 100);
            // Inner product over vectors of different lengths is no metric, and HNSW finds less of its truth.
            let floor = if metric == Metric::Dot { 0.8 } else { 0.95 };
            assert!(with_int8 >= floor && with_int8 >= with_f32 - 0.02, "{metric:?}: {with_int8} vs {with_f32}");
        }
    }

    /// The copies follow every change of the vectors (insert, update, a reused slot) and come back on load and
    /// when switched on again, so the walk finds each vector where it is now.
    #[test]
    fn the_int8_copies_follow_updates_reloads_and_switches() {
        let mut rng = Rng::new(4);
        let vectors = clustered(&mut rng, 400, 32);
        let mut index = build(Metric::L2, &vectors);
        let moved: Vec<f32> = (0..32).map(|_| 5.0 + rng.normal()).collect();
        index.update(7, &moved).unwrap();
        assert!(index.delete(9));
        let reused: Vec<f32> = (0..32).map(|_| -5.0 + rng.normal()).collect();
        index.insert(1000, &reused).unwrap();
        let finds = |index: &Hnsw| {
            assert_eq!(index.search(&moved, 1, 20).unwrap()[0], Hit { id: 7, distance: 0.0 });
            assert_eq!(index.search(&reused, 1, 20).unwrap()[0], Hit { id: 1000, distance: 0.0 });
        };
        finds(&index);
        let loaded = Hnsw::from_bytes(&index.to_bytes()).unwrap();
        assert!(loaded.quantized());
        finds(&loaded);
        let bytes = index.memory_bytes();
        index.set_quantized(false);
        assert_eq!(index.memory_bytes(), bytes - 400 * (32 + 12));
        finds(&index);
        index.set_quantized(true);
        finds(&index);
        for q in &vectors[..20] {
            assert_eq!(index.search(q, 10, 40).unwrap(), loaded.search(q, 10, 40).unwrap());
        }
    }
}
