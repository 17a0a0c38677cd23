//! A collection: an HNSW index whose vectors each stand for an entry (a text, a label, when it was last used),
//! the shape the semantic router and the long-term memory share.
//!
//! - The router labels each example utterance with its route: `route` searches the utterances nearest a query,
//!   scores each route by its best one, and answers the best route unless its score is below the route's threshold
//!   (or the collection's).
//! - The memory labels each remembered turn with its conversation: `recall` searches the turns nearest a message
//!   and marks them used; a byte budget drops the least recently used entries when an `add` goes over it.
//!
//! Scores are similarities, larger is closer: `1 - distance` under cosine and inner product (the cosine itself
//! under cosine), `-distance` under L2.
//!
//! Persisted as records under string keys, beside the index's own (`records.rs`): `h` + an index segment record's
//! key in hex, `e` + an entry's id in 16 hex digits, and `meta` (thresholds, budget, the ids taken, and the index's
//! header). `meta` is the commit point, the one record a commit rewrites that the state before it needs: a commit
//! puts new index segments under keys of its generation and new entries, then `meta`, then deletes what the state
//! before it needed and this one does not (`take_changes`). A write cut short anywhere before `meta` leaves the
//! previous state whole, and what it wrote is garbage: index records the header does not name, entries whose id
//! the index does not hold. `from_records` reads exactly the state `meta` names and hands the garbage to the next
//! commit to delete. Entry records are rewritten in place only to move their last use (`recall`), one record in one
//! put; their text and label never change.
//!
//! Two writers of one store (two tabs, two processes) each hold a collection. Ids do not collide: each writer takes
//! its ids from a lease (`lease`: `LEASE` ids past the last one any writer took, which `meta` keeps). A writer
//! commits under the store's lock, on the store's current state: when another writer committed since its own last
//! commit, it reads the store again and replays its own changes since then (`rebase`: adds, removes, uses and
//! settings) before it commits. Where both changed the same thing, the later commit wins: a setting (a threshold,
//! the budget, the tag) or an entry's last use is the later writer's; a removed entry stays removed.
//! ```text
//! meta   magic "RVCOLLM\0" | version u32 (2) | uid u64 | ids taken u64 | budget u64 (u64::MAX: none)
//!        | threshold: u8 (0: none, 1: one), f32 | tag length u16, UTF-8 | labels u32 | per label: length u16,
//!        UTF-8, threshold f32 | index header length u32, the index's header record | CRC-32
//! entry  magic "RVCOLLE\0" | version u32 | uid u64 | id u64 | used u64 | label length u16, UTF-8
//!        | text length u32, UTF-8 | CRC-32
//! ```
//! Both are framed by `crate::record` (magic number, version, CRC-32), as the index's records are.
//! Version 1 (before issue 36): `meta` had no index header (the threshold was NaN for none) and the index kept its
//! own under `h` keys of 5 bytes. `from_records` reads such a store, and its next commit writes the index anew as
//! version 2 and deletes the version-1 index records (entries keep their format: both versions read).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::distance::Metric;
use super::hnsw::{Hnsw, HnswParams};
use super::records::{format, kind, open, push_u32, push_u64, IndexError, Reader, RecordKey, V1};
use crate::error::{Error, Result};
use crate::record::{f32_at, seal, Kind};

const META_KIND: Kind = kind(*b"RVCOLLM\0", "an index collection meta");
const ENTRY_KIND: Kind = kind(*b"RVCOLLE\0", "an index collection entry");
pub const META_KEY: &str = "meta";
/// The longest label (a route's name, a conversation's id) in bytes.
pub const MAX_LABEL_BYTES: usize = 1024;
/// The longest entry text in bytes.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Ids stay below 2^53, so JavaScript numbers hold them exactly.
const ID_LIMIT: u64 = 1 << 53;
/// Ids a writer takes at a time (see `lease`): more than fit in wasm32's memory between two writes, and 2^29
/// leases before the ids run out.
const LEASE: u64 = 1 << 24;
/// The largest meta record read: its index header names 2^24 segments (2^30 slots) with room for the labels.
const MAX_META_BYTES: usize = 256 << 20;
const MAX_ENTRY_BYTES: usize = 12 + 24 + 2 + MAX_LABEL_BYTES + 4 + MAX_TEXT_BYTES + 4;

/// What a vector stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub text: String,
    pub label: String,
    /// When it was added or last recalled, in the caller's clock (milliseconds since the epoch in the package).
    pub used: u64,
}

/// A search result: an entry's id and its similarity to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Found {
    pub id: u64,
    pub score: f32,
}

/// A label's best score for a query.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

/// What `route` decided: the best label if its score reached its threshold, and every label found with its best
/// score, best first (the runners-up, and the best one even when it fell short).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub route: Option<LabelScore>,
    pub candidates: Vec<LabelScore>,
}

/// Records to write, in order, then keys to delete.
#[derive(Debug, Default)]
pub struct Changes {
    pub put: Vec<(String, Vec<u8>)>,
    pub delete: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
    }
}

pub struct Collection {
    index: Hnsw,
    entries: HashMap<u64, Entry>,
    /// `(used, id)` of every entry, the least recently used first: the order the budget drops them in.
    by_use: BTreeSet<(u64, u64)>,
    /// Thresholds of labels that have their own.
    thresholds: BTreeMap<String, f32>,
    threshold: Option<f32>,
    budget: Option<usize>,
    /// What the vectors are, in the caller's words (the package: the embedding model's name and dims).
    tag: String,
    /// The entries' bytes, as `entry_bytes` counts them.
    bytes: usize,
    /// The id the next `add` takes, and the end of the ids it may take (of its lease, if `leased`).
    next_id: u64,
    lease_end: u64,
    leased: bool,
    /// The first id no writer of the store has taken (the meta record's "ids taken").
    reserved: u64,
    /// Entry records to write at the next commit, and to delete after it; other keys to delete after it.
    changed: BTreeSet<u64>,
    removed: BTreeSet<u64>,
    garbage: BTreeSet<String>,
    meta_changed: bool,
    /// What changed since the last commit that the store took (for `rebase`): since the last `take_changes`, and
    /// what that one took until `confirm` or `abort`.
    log: Log,
    in_flight: Option<Log>,
}

/// A collection's own changes since a commit, to replay on a newer state of its store (`rebase`). Ids only: what
/// they stand for is read from the collection when replayed.
#[derive(Default)]
struct Log {
    added: BTreeSet<u64>,
    /// Entries whose last use moved.
    touched: BTreeSet<u64>,
    removed: BTreeSet<u64>,
    /// Settings in the order they were made.
    settings: Vec<Setting>,
}

enum Setting {
    Threshold(Option<String>, Option<f32>),
    Budget(Option<usize>),
    Tag(String),
}

impl Log {
    /// This log, then `later`.
    fn then(mut self, later: Log) -> Log {
        for id in later.removed {
            self.added.remove(&id);
            self.touched.remove(&id);
            self.removed.insert(id);
        }
        self.added.extend(later.added);
        self.touched.extend(later.touched);
        self.settings.extend(later.settings);
        self
    }
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("index", &self.index)
            .field("bytes", &self.bytes)
            .field("budget", &self.budget)
            .field("labels", &self.thresholds.len())
            .finish()
    }
}

impl Collection {
    pub fn new(metric: Metric, dims: usize, params: HnswParams) -> Result<Collection> {
        Ok(Collection::around(Hnsw::new(metric, dims, params)?))
    }

    /// An empty collection of the same shape (metric, dims, graph parameters): what a store that was cleared holds.
    pub fn empty_like(&self) -> Collection {
        let index = &self.index;
        Collection::around(Hnsw::new(index.metric(), index.dims(), index.params()).expect("the parameters of an index"))
    }

    fn around(index: Hnsw) -> Collection {
        Collection {
            index,
            entries: HashMap::new(),
            by_use: BTreeSet::new(),
            thresholds: BTreeMap::new(),
            threshold: None,
            budget: None,
            tag: String::new(),
            bytes: 0,
            next_id: 0,
            lease_end: ID_LIMIT,
            leased: false,
            reserved: 0,
            changed: BTreeSet::new(),
            removed: BTreeSet::new(),
            garbage: BTreeSet::new(),
            meta_changed: true,
            log: Log::default(),
            in_flight: None,
        }
    }

    pub fn index(&self) -> &Hnsw {
        &self.index
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entry(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// Every entry, by id.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> {
        let mut ids: Vec<u64> = self.entries.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().map(|id| (id, &self.entries[&id]))
    }

    /// Entries per label.
    pub fn label_counts(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for e in self.entries.values() {
            *counts.entry(e.label.as_str()).or_default() += 1;
        }
        counts
    }

    /// The entries' bytes: text, label, vector and level-0 links, what a store holds of them about.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn entry_bytes(&self, e: &Entry) -> usize {
        e.text.len() + e.label.len() + 4 * self.index.dims() + 8 * self.index.params().m
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn set_tag(&mut self, tag: &str) -> Result<()> {
        check_label(tag)?;
        if self.tag != tag {
            self.tag = tag.to_string();
            self.meta_changed = true;
            self.log.settings.push(Setting::Tag(tag.to_string()));
        }
        Ok(())
    }

    pub fn budget(&self) -> Option<usize> {
        self.budget
    }

    /// Keep the entries within `bytes` (none: no limit), dropping the least recently used; the ids dropped.
    pub fn set_budget(&mut self, bytes: Option<usize>) -> Vec<u64> {
        if self.budget != bytes {
            self.meta_changed = true;
            self.log.settings.push(Setting::Budget(bytes));
        }
        self.budget = bytes;
        self.enforce_budget()
    }

    /// The threshold of `label`, or the collection's when `label` is `None`; `None` removes it.
    pub fn set_threshold(&mut self, label: Option<&str>, threshold: Option<f32>) -> Result<()> {
        if threshold.is_some_and(|t| !t.is_finite()) {
            return Err(Error::InvalidArgument(format!("a threshold of {threshold:?}")));
        }
        let own = match label {
            None => self.threshold,
            Some(l) => self.thresholds.get(l).copied(),
        };
        match (label, threshold) {
            (None, t) => self.threshold = t,
            (Some(l), Some(t)) => {
                check_label(l)?;
                self.thresholds.insert(l.to_string(), t);
            }
            (Some(l), None) => {
                self.thresholds.remove(l);
            }
        }
        // A caller that sets what is there already (a router reopened with its routes) writes nothing.
        if own != threshold {
            self.meta_changed = true;
            self.log.settings.push(Setting::Threshold(label.map(str::to_string), threshold));
        }
        Ok(())
    }

    /// The threshold `label`'s score must reach: its own, else the collection's.
    pub fn threshold(&self, label: Option<&str>) -> Option<f32> {
        label.and_then(|l| self.thresholds.get(l).copied()).or(self.threshold)
    }

    /// Labels with a threshold of their own.
    pub fn thresholds(&self) -> &BTreeMap<String, f32> {
        &self.thresholds
    }

    /// Add `vector` standing for `text` under `label`, used at `now`; its id, and the ids the budget dropped for it.
    pub fn add(&mut self, vector: &[f32], text: &str, label: &str, now: u64) -> Result<(u64, Vec<u64>)> {
        check_label(label)?;
        if text.len() > MAX_TEXT_BYTES {
            return Err(Error::InvalidArgument(format!("an entry of {} bytes (at most {MAX_TEXT_BYTES})", text.len())));
        }
        let entry = Entry { text: text.to_string(), label: label.to_string(), used: now };
        let cost = self.entry_bytes(&entry);
        if let Some(budget) = self.budget.filter(|&b| cost > b) {
            return Err(Error::InvalidArgument(format!("an entry of {cost} bytes over the budget of {budget}")));
        }
        let id = self.next_id;
        if id >= self.lease_end {
            return Err(Error::InvalidArgument(match self.leased {
                true => format!("{LEASE} entries added since this collection last wrote its store: flush first"),
                false => "the collection's ids ran out".into(),
            }));
        }
        self.index.insert(id, vector)?;
        self.next_id = id + 1;
        self.meta_changed = true;
        self.put_entry(id, entry);
        self.log.added.insert(id);
        let dropped = self.enforce_budget();
        Ok((id, dropped))
    }

    fn put_entry(&mut self, id: u64, entry: Entry) {
        self.bytes += self.entry_bytes(&entry);
        self.by_use.insert((entry.used, id));
        self.entries.insert(id, entry);
        self.changed.insert(id);
        self.removed.remove(&id);
    }

    /// Remove entry `id`; whether it was there.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(entry) = self.entries.remove(&id) else { return false };
        self.bytes -= self.entry_bytes(&entry);
        self.by_use.remove(&(entry.used, id));
        self.index.delete(id);
        self.changed.remove(&id);
        self.removed.insert(id);
        self.log.added.remove(&id);
        self.log.touched.remove(&id);
        self.log.removed.insert(id);
        true
    }

    /// Remove every entry of `label` and its threshold; how many entries there were.
    pub fn remove_label(&mut self, label: &str) -> usize {
        let ids: Vec<u64> = self.entries.iter().filter(|(_, e)| e.label == label).map(|(&id, _)| id).collect();
        for &id in &ids {
            self.remove(id);
        }
        if self.thresholds.remove(label).is_some() {
            self.meta_changed = true;
            self.log.settings.push(Setting::Threshold(Some(label.to_string()), None));
        }
        ids.len()
    }

    fn enforce_budget(&mut self) -> Vec<u64> {
        let mut dropped = Vec::new();
        while self.budget.is_some_and(|b| self.bytes > b) {
            let Some(&(_, id)) = self.by_use.first() else { break };
            self.remove(id);
            dropped.push(id);
        }
        dropped
    }

    fn score(&self, distance: f32) -> f32 {
        match self.index.metric() {
            Metric::Cosine | Metric::Dot => 1.0 - distance,
            Metric::L2 => -distance,
        }
    }

    /// The `k` entries nearest `query` that `filter` accepts (all without one), best first, searching `max(ef, k)`
    /// candidates.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&dyn Fn(&Entry) -> bool>,
    ) -> Result<Vec<Found>> {
        let accept = |id: u64| self.entries.get(&id).is_some_and(|e| filter.is_none_or(|f| f(e)));
        let hits =
            self.index.search_filtered(query, k, ef, filter.is_some().then_some(&accept as &dyn Fn(u64) -> bool))?;
        Ok(hits.into_iter().map(|h| Found { id: h.id, score: self.score(h.distance) }).collect())
    }

    /// `search`, keeping only entries scoring at least `min_score`, and marking those used at `now`.
    pub fn recall(
        &mut self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&dyn Fn(&Entry) -> bool>,
        min_score: f32,
        now: u64,
    ) -> Result<Vec<Found>> {
        let mut found = self.search(query, k, ef, filter)?;
        found.retain(|f| f.score >= min_score);
        for f in &found {
            self.touch(f.id, now);
        }
        Ok(found)
    }

    /// Mark entry `id` used at `used`.
    fn touch(&mut self, id: u64, used: u64) {
        let Some(entry) = self.entries.get_mut(&id) else { return };
        if entry.used != used {
            self.by_use.remove(&(entry.used, id));
            entry.used = used;
            self.by_use.insert((used, id));
            self.changed.insert(id);
            self.log.touched.insert(id);
        }
    }

    /// The label of the entries nearest `query`: each label found among the `k` nearest scores its best entry.
    pub fn route(&self, query: &[f32], k: usize, ef: usize) -> Result<Decision> {
        let mut best: BTreeMap<&str, f32> = BTreeMap::new();
        for f in self.search(query, k, ef, None)? {
            let label = self.entries[&f.id].label.as_str();
            let score = best.entry(label).or_insert(f.score);
            *score = score.max(f.score);
        }
        let mut candidates: Vec<LabelScore> =
            best.into_iter().map(|(label, score)| LabelScore { label: label.to_string(), score }).collect();
        // Stable: equal scores keep the labels' order.
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
        let route = candidates.first().filter(|c| self.threshold(Some(&c.label)).is_none_or(|t| c.score >= t)).cloned();
        Ok(Decision { route, candidates })
    }
}

fn check_label(label: &str) -> Result<()> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(Error::InvalidArgument(format!("a label of {} bytes (at most {MAX_LABEL_BYTES})", label.len())));
    }
    Ok(())
}

/// The store key of index record `key`.
fn index_key(key: RecordKey) -> String {
    let mut out = String::from("h");
    for b in key.to_bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn entry_key(id: u64) -> String {
    format!("e{id:016x}")
}

enum Key {
    Meta,
    Index(RecordKey),
    /// A version-1 index record (a 5-byte key).
    IndexV1(RecordKey),
    Entry(u64),
}

fn parse_key(key: &str) -> Option<Key> {
    if key == META_KEY {
        return Some(Key::Meta);
    }
    let hex = key.get(1..).filter(|h| h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))?;
    let bytes = || -> Option<Vec<u8>> {
        (0..hex.len() / 2).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect()
    };
    match key.as_bytes()[0] {
        b'e' if hex.len() == 16 => u64::from_str_radix(hex, 16).ok().map(Key::Entry),
        b'h' if hex.len() == 2 * RecordKey::BYTES => RecordKey::from_bytes(&bytes()?).map(Key::Index),
        b'h' if hex.len() == 10 => RecordKey::from_v1_bytes(&bytes()?).map(Key::IndexV1),
        _ => None,
    }
}

/// The largest record a collection may hold under `key` (0: a key no collection uses), what a store's reader checks
/// before it copies a record in.
pub fn max_record_bytes(key: &str) -> usize {
    match parse_key(key) {
        None => 0,
        Some(Key::Meta) => MAX_META_BYTES,
        Some(Key::Entry(_)) => MAX_ENTRY_BYTES,
        Some(Key::Index(RecordKey::Header)) => 0,
        Some(Key::Index(k) | Key::IndexV1(k)) => k.max_bytes(),
    }
}

fn push_str(out: &mut Vec<u8>, s: &str, wide: bool) {
    if wide {
        push_u32(out, s.len() as u32);
    } else {
        out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn read_str(r: &mut Reader, wide: bool, most: usize, what: &str) -> std::result::Result<String, IndexError> {
    let len = if wide { r.u32()? as usize } else { r.u16()? as usize };
    if len > most {
        return Err(format(format!("a {what} of {len} bytes (at most {most})")));
    }
    let bytes = r.take(len)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| format(format!("a {what} that is not UTF-8")))
}

const NO_BUDGET: u64 = u64::MAX;

impl Collection {
    /// The records of the next commit, or none if nothing changed since the last: index segments and entries to
    /// put, then `meta` (the commit point), then the keys to delete once `meta` is stored (what the previous state
    /// needed and this one does not, and garbage found when read). Call `confirm` once the store holds the puts,
    /// or `abort` if it may not.
    pub fn take_changes(&mut self) -> Changes {
        let index = &self.index.changed;
        let dirty = !index.vectors.is_empty()
            || !index.links.is_empty()
            || !self.changed.is_empty()
            || !self.removed.is_empty()
            || !self.garbage.is_empty()
            || self.meta_changed;
        if !dirty {
            return Changes::default();
        }
        self.take(false)
    }

    /// Every record, as `take_changes` orders them (index segments all under keys of a new generation), for a store
    /// that lost track of what it holds: once it holds them, it should delete every other key it has.
    pub fn take_all(&mut self) -> Changes {
        self.take(true)
    }

    fn take(&mut self, all: bool) -> Changes {
        let commit = if all { self.index.commit_all() } else { self.index.commit() };
        let mut put: Vec<(String, Vec<u8>)> = commit.segments.into_iter().map(|(k, v)| (index_key(k), v)).collect();
        let changed = std::mem::take(&mut self.changed);
        let ids: Vec<u64> =
            if all { self.entries().map(|(id, _)| id).collect() } else { changed.into_iter().collect() };
        put.extend(ids.into_iter().map(|id| (entry_key(id), self.entry_record(id))));
        put.push((META_KEY.to_string(), self.meta_record(&commit.header)));
        self.meta_changed = false;
        let mut delete: Vec<String> = commit.stale.into_iter().map(index_key).collect();
        delete.extend(std::mem::take(&mut self.removed).into_iter().map(entry_key));
        delete.extend(std::mem::take(&mut self.garbage));
        if all {
            delete.clear();
        }
        let log = std::mem::take(&mut self.log);
        self.in_flight = Some(match self.in_flight.take() {
            Some(before) => before.then(log),
            None => log,
        });
        Changes { put, delete }
    }

    /// The store holds the records the last `take_changes` (or `take_all`) gave.
    pub fn confirm(&mut self) {
        self.in_flight = None;
    }

    /// The store may not hold the records the last `take_changes` gave: their changes are kept for `rebase`. (The
    /// next write should be `take_all`, or a `rebase` on what the store holds.)
    pub fn abort(&mut self) {
        if let Some(before) = self.in_flight.take() {
            self.log = before.then(std::mem::take(&mut self.log));
        }
    }

    /// Ids for `add` that no other writer of the store takes: the next `LEASE` ids past the last one any writer took,
    /// recorded in `meta` when the next commit is stored. Only while this collection holds the store's current state
    /// (under the store's lock, before that commit). A lease with half its ids left is kept; whether one was taken.
    pub fn lease(&mut self) -> bool {
        if self.leased && self.lease_end - self.next_id >= LEASE / 2 {
            return false;
        }
        let first = self.reserved.max(self.next_id);
        self.next_id = first;
        self.lease_end = first.saturating_add(LEASE).min(ID_LIMIT);
        self.reserved = self.lease_end;
        self.leased = true;
        self.meta_changed = true;
        true
    }

    /// Become `fresh` (the store's state as another writer committed it) with this collection's changes since its
    /// last confirmed commit replayed on it: its settings, its removes (of entries `fresh` still holds), its adds
    /// under the same ids (its lease's), and its entries' last uses. Where both changed one thing, these changes
    /// (the later commit's) win; an entry `fresh` removed stays removed. The ids this collection took keep their
    /// entries, unless its lease never reached the store (its first commit failed) and another writer's entry
    /// took the same id: then its entry gets a new id.
    pub fn rebase(&mut self, mut fresh: Collection) -> Result<()> {
        if fresh.index.uid() != self.index.uid() || fresh.index.metric() != self.index.metric() {
            return Err(IndexError::Foreign("the store now holds an index of another shape".into()).into());
        }
        let log = match self.in_flight.take() {
            Some(before) => before.then(std::mem::take(&mut self.log)),
            None => std::mem::take(&mut self.log),
        };
        for setting in log.settings {
            match setting {
                Setting::Threshold(label, t) => fresh.set_threshold(label.as_deref(), t)?,
                Setting::Budget(b) => drop(fresh.set_budget(b)),
                Setting::Tag(tag) => fresh.set_tag(&tag)?,
            }
        }
        for &id in &log.removed {
            fresh.remove(id);
        }
        // An id this collection took stays its entry's if it came from its lease, which no other writer takes.
        let mut renumber = Vec::new();
        for &id in &log.added {
            let (Some(entry), Some(vector)) = (self.entries.get(&id), self.index.vector(id)) else { continue };
            match fresh.entries.get(&id) {
                // This collection's own commit reached the store before it lost track (a failed write).
                Some(theirs) if theirs.text == entry.text && theirs.label == entry.label => {}
                Some(_) => renumber.push(id),
                None if !self.leased && id < fresh.reserved => renumber.push(id),
                None => {
                    fresh.index.insert(id, vector)?;
                    fresh.put_entry(id, entry.clone());
                    fresh.log.added.insert(id);
                }
            }
        }
        for &id in &log.touched {
            if let Some(entry) = self.entries.get(&id) {
                fresh.touch(id, entry.used);
            }
        }
        if self.leased {
            fresh.reserved = fresh.reserved.max(self.lease_end);
            (fresh.next_id, fresh.lease_end, fresh.leased) = (self.next_id, self.lease_end, true);
        }
        if !renumber.is_empty() {
            fresh.leased = false;
            fresh.lease();
            for id in renumber {
                let (entry, vector) = (&self.entries[&id], self.index.vector(id).expect("a live entry"));
                fresh.add(vector, &entry.text, &entry.label, entry.used)?;
            }
        }
        fresh.enforce_budget();
        *self = fresh;
        Ok(())
    }

    /// Records a store holds that no state needs (a commit cut short before it stored `meta`): delete them at the
    /// next commit. Keys that are not a collection's are an error (the store holds something else).
    pub fn discard(&mut self, keys: &[&str]) -> std::result::Result<(), IndexError> {
        if let Some(key) = keys.iter().find(|k| parse_key(k).is_none_or(|k| matches!(k, Key::Meta))) {
            return Err(format(format!("a record under the key {key:?}, not a collection's garbage")));
        }
        self.garbage.extend(keys.iter().map(|k| k.to_string()));
        Ok(())
    }

    fn meta_record(&self, index_header: &[u8]) -> Vec<u8> {
        let mut out = META_KIND.begin();
        push_u64(&mut out, self.index.uid());
        push_u64(&mut out, self.reserved.max(self.next_id));
        push_u64(&mut out, self.budget.map_or(NO_BUDGET, |b| b as u64));
        out.push(self.threshold.is_some() as u8);
        out.extend_from_slice(&self.threshold.unwrap_or(0.0).to_le_bytes());
        push_str(&mut out, &self.tag, false);
        push_u32(&mut out, self.thresholds.len() as u32);
        for (label, t) in &self.thresholds {
            push_str(&mut out, label, false);
            out.extend_from_slice(&t.to_le_bytes());
        }
        push_u32(&mut out, index_header.len() as u32);
        out.extend_from_slice(index_header);
        seal(out)
    }

    fn entry_record(&self, id: u64) -> Vec<u8> {
        let e = &self.entries[&id];
        let mut out = ENTRY_KIND.begin();
        for x in [self.index.uid(), id, e.used] {
            push_u64(&mut out, x);
        }
        push_str(&mut out, &e.label, false);
        push_str(&mut out, &e.text, true);
        seal(out)
    }

    /// Read the collection `meta` names from a store's records (each key once), checking each against the index's
    /// identity. Records no state needs (garbage of a commit cut short, or records not deleted yet) are not used and
    /// are deleted at the next commit; a record larger than any valid one is refused unread.
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> std::result::Result<Collection, IndexError> {
        let (mut meta, mut index, mut v1, mut entries) = (None, BTreeMap::new(), BTreeMap::new(), Vec::new());
        let mut keys = BTreeSet::new();
        for (key, bytes) in records {
            if !keys.insert(key) {
                return Err(format(format!("two records under the key {key:?}")));
            }
            if bytes.len() > max_record_bytes(key) {
                return Err(match parse_key(key) {
                    None => format(format!("a record under the key {key:?}, not a collection's")),
                    Some(_) => format(format!(
                        "the record {key} has {} bytes, more than any valid one ({})",
                        bytes.len(),
                        max_record_bytes(key)
                    )),
                });
            }
            match parse_key(key) {
                Some(Key::Meta) => meta = Some(bytes),
                Some(Key::Index(k)) => drop(index.insert(k, (key, bytes))),
                Some(Key::IndexV1(k)) => drop(v1.insert(k, (key, bytes))),
                Some(Key::Entry(id)) => entries.push((id, key, bytes)),
                None => return Err(format(format!("a record under the key {key:?}, not a collection's"))),
            }
        }
        let meta = meta.ok_or_else(|| format("the collection's meta record is missing".into()))?;
        let (version, mut r) = open(&META_KIND, meta)?;
        let uid = r.u64()?;
        let reserved = r.u64()?;
        let budget = match r.u64()? {
            NO_BUDGET => None,
            b => Some(usize::try_from(b).unwrap_or(usize::MAX)),
        };
        // Every float read is checked finite (version 1 wrote NaN for "none").
        let threshold = if version == V1 {
            let t = f32_at(r.take(4)?, 0);
            match t {
                t if t.is_nan() => None,
                t if t.is_infinite() => return Err(format(format!("the collection's threshold is {t}"))),
                t => Some(t),
            }
        } else {
            let present = r.u8()?;
            let t = r.finite(&"the collection's threshold")?;
            match present {
                0 => None,
                1 => Some(t),
                flag => return Err(format(format!("a threshold flag {flag}"))),
            }
        };
        let tag = read_str(&mut r, false, MAX_LABEL_BYTES, "tag")?;
        let mut thresholds = BTreeMap::new();
        for _ in 0..r.u32()? {
            let label = read_str(&mut r, false, MAX_LABEL_BYTES, "label")?;
            let t = r.finite(&format_args!("the threshold of label {label:?}"))?;
            if thresholds.insert(label, t).is_some() {
                return Err(format("a label's threshold twice".into()));
            }
        }
        let hnsw = if version == V1 {
            let by_key: BTreeMap<RecordKey, &[u8]> = v1.iter().map(|(k, (_, b))| (*k, *b)).collect();
            let header = by_key.get(&RecordKey::Header).ok_or(IndexError::Missing(RecordKey::Header))?;
            Hnsw::read_v1(header, &by_key)?
        } else {
            let len = r.u32()? as usize;
            let header = r.take(len)?;
            let by_key: BTreeMap<RecordKey, &[u8]> = index.iter().map(|(k, (_, b))| (*k, *b)).collect();
            Hnsw::from_header(header, &by_key)?
        };
        if r.left() != 0 {
            return Err(format(format!("{} bytes after the collection's meta record", r.left())));
        }
        let mut c = Collection::around(hnsw);
        if c.index.uid() != uid {
            return Err(IndexError::Foreign("a collection's meta record of another index".into()));
        }
        (c.threshold, c.thresholds, c.tag, c.budget) = (threshold, thresholds, tag, budget);
        // What no state needs: index records the header does not name, version 1's (which the next commit writes
        // anew), entries of ids the index does not hold (a commit cut short before `meta`, or after it but before its
        // deletes). Not read: garbage cannot stop a read.
        let needed: BTreeSet<RecordKey> = c.index.segment_keys().into_iter().collect();
        let unneeded = index.iter().filter(|(k, _)| version == V1 || !needed.contains(k));
        c.garbage.extend(unneeded.map(|(_, (key, _))| key.to_string()));
        c.garbage.extend(v1.values().map(|(key, _)| key.to_string()));
        c.entries.try_reserve(entries.len()).map_err(|_| IndexError::OutOfMemory {
            bytes: entries.len().saturating_mul(64),
            what: "the collection's entries".into(),
        })?;
        let mut taken = reserved;
        for (id, key, bytes) in entries {
            taken = taken.max(id.saturating_add(1));
            if !c.index.contains(id) {
                c.garbage.insert(key.to_string());
                continue;
            }
            let (_, mut r) = open(&ENTRY_KIND, bytes)?;
            if r.u64()? != uid {
                return Err(IndexError::Foreign(format!("entry {id} of another index")));
            }
            if r.u64()? != id {
                return Err(format(format!("the entry under key {id:016x} names another id")));
            }
            let used = r.u64()?;
            let label = read_str(&mut r, false, MAX_LABEL_BYTES, "label")?;
            let text = read_str(&mut r, true, MAX_TEXT_BYTES, "text")?;
            if r.left() != 0 {
                return Err(format(format!("{} bytes after entry {id}", r.left())));
            }
            c.put_entry(id, Entry { text, label, used });
        }
        c.changed.clear();
        if let Some(id) = c.index.slot_of.keys().find(|id| !c.entries.contains_key(id)) {
            return Err(format(format!("the index holds id {id} but no entry for it")));
        }
        c.reserved = c.index.ids.iter().map(|&id| id.saturating_add(1)).fold(taken, u64::max);
        c.next_id = c.reserved;
        // A version-1 store is written anew by the next commit (its index segments are stored nowhere yet).
        c.meta_changed = version == V1;
        c.log = Log::default();
        Ok(c)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    fn vector(i: u64, dims: usize) -> Vec<f32> {
        (0..dims).map(|d| ((i * 31 + d as u64 * 7) % 17) as f32 - 8.0 + (i as f32 * 0.1).sin()).collect()
    }

    type Store = BTreeMap<String, Vec<u8>>;

    /// A store's put (in order), then its deletes.
    fn apply(changes: &Changes, into: &mut Store) {
        for (k, v) in &changes.put {
            into.insert(k.clone(), v.clone());
        }
        for k in &changes.delete {
            into.remove(k);
        }
    }

    fn store(c: &mut Collection, into: &mut Store) {
        let changes = c.take_changes();
        apply(&changes, into);
        c.confirm();
    }

    fn reload(from: &Store) -> std::result::Result<Collection, IndexError> {
        Collection::from_records(from.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
    }

    /// One writer of a shared store, as the package's `StoredCollection` is: it remembers the meta record it last
    /// read or wrote, and commits under the store's lock (here: exclusively), reading the store again and replaying
    /// its own changes when another writer committed since.
    struct Writer {
        c: Collection,
        seen: Option<Vec<u8>>,
    }

    impl Writer {
        fn open(store: &mut Store) -> Writer {
            let c = match store.is_empty() {
                true => Collection::new(Metric::L2, 3, HnswParams::default()).unwrap(),
                false => reload(store).unwrap(),
            };
            let mut w = Writer { c, seen: store.get(META_KEY).cloned() };
            w.commit(store);
            w
        }

        fn commit(&mut self, store: &mut Store) {
            if store.get(META_KEY) != self.seen.as_ref() {
                self.c.rebase(reload(store).unwrap()).unwrap();
            }
            self.c.lease();
            store_and_see(&mut self.c, store, &mut self.seen);
        }
    }

    fn store_and_see(c: &mut Collection, store: &mut Store, seen: &mut Option<Vec<u8>>) {
        let changes = c.take_changes();
        apply(&changes, store);
        c.confirm();
        *seen = store.get(META_KEY).cloned();
    }

    fn texts(c: &Collection) -> Vec<(u64, String)> {
        c.entries().map(|(id, e)| (id, e.text.clone())).collect()
    }

    #[test]
    fn routes_by_the_best_utterance_and_its_threshold() {
        let mut c = Collection::new(Metric::Cosine, 2, HnswParams::default()).unwrap();
        c.add(&[1.0, 0.0], "hi", "greet", 1).unwrap();
        c.add(&[0.9, 0.1], "hello", "greet", 1).unwrap();
        c.add(&[0.0, 1.0], "weather?", "weather", 1).unwrap();
        let d = c.route(&[0.95, 0.05], 10, 16).unwrap();
        assert_eq!(d.route.as_ref().unwrap().label, "greet");
        assert_eq!(d.candidates.len(), 2);
        assert_eq!(d.candidates[1].label, "weather");
        assert!(d.candidates[0].score > 0.99 && d.candidates[1].score < 0.2);
        c.set_threshold(Some("greet"), Some(0.999)).unwrap();
        let d = c.route(&[0.95, 0.05], 10, 16).unwrap();
        assert_eq!(d.route, None);
        assert_eq!(d.candidates[0].label, "greet");
        c.set_threshold(None, Some(0.5)).unwrap();
        assert_eq!(c.route(&[0.1, 1.0], 10, 16).unwrap().route.unwrap().label, "weather");
        assert_eq!(c.route(&[1.0, -1.0], 10, 16).unwrap().route, None);
    }

    #[test]
    fn the_budget_drops_the_least_recently_used() {
        let mut c = Collection::new(Metric::Cosine, 4, HnswParams::default()).unwrap();
        let per = c.entry_bytes(&Entry { text: "turn 0".into(), label: "c".into(), used: 0 });
        c.set_budget(Some(per * 3));
        let ids: Vec<u64> = (0..3).map(|i| c.add(&vector(i, 4), &format!("turn {i}"), "c", i).unwrap().0).collect();
        // Recalling the oldest makes it the newest: the next add drops the second.
        let found = c.recall(&vector(0, 4), 1, 16, None, -1.0, 10).unwrap();
        assert_eq!(found[0].id, ids[0]);
        let (_, dropped) = c.add(&vector(3, 4), "turn 3", "c", 11).unwrap();
        assert_eq!(dropped, vec![ids[1]]);
        assert_eq!(c.len(), 3);
        assert!(c.bytes() <= per * 3);
        assert!(c.entry(ids[1]).is_none() && !c.index().contains(ids[1]));
        assert!(c.add(&vector(9, 4), &"x".repeat(per * 3), "c", 12).is_err());
        assert_eq!(c.set_budget(Some(per)).len(), 2);
    }

    #[test]
    fn records_round_trip_incrementally() {
        let mut c = Collection::new(Metric::Cosine, 8, HnswParams::default()).unwrap();
        let mut stored = BTreeMap::new();
        for i in 0..150 {
            c.add(&vector(i, 8), &format!("utterance {i} é"), ["a", "b", "c"][i as usize % 3], i).unwrap();
            if i % 40 == 39 {
                store(&mut c, &mut stored);
            }
        }
        c.set_threshold(Some("b"), Some(0.25)).unwrap();
        c.set_threshold(None, Some(-0.5)).unwrap();
        c.set_budget(Some(1 << 20));
        c.set_tag("all-MiniLM-L6-v2 384").unwrap();
        assert!(c.remove(4) && !c.remove(4));
        assert_eq!(c.remove_label("c"), 50);
        store(&mut c, &mut stored);
        assert!(c.take_changes().is_empty());
        // Setting what is there already changes nothing to write.
        c.set_threshold(Some("b"), Some(0.25)).unwrap();
        c.set_tag("all-MiniLM-L6-v2 384").unwrap();
        assert!(c.set_budget(Some(1 << 20)).is_empty());
        assert!(c.take_changes().is_empty());
        let back = reload(&stored).unwrap();
        assert_eq!(back.entries().collect::<Vec<_>>(), c.entries().collect::<Vec<_>>());
        assert_eq!(back.thresholds(), c.thresholds());
        assert_eq!(back.threshold(None), Some(-0.5));
        assert_eq!(back.tag(), "all-MiniLM-L6-v2 384");
        assert_eq!((back.budget(), back.bytes(), back.next_id), (c.budget(), c.bytes(), c.next_id));
        let q = vector(77, 8);
        assert_eq!(back.route(&q, 10, 32).unwrap(), c.route(&q, 10, 32).unwrap());
        // The store holds what the last commit needs and nothing else: old generations were deleted after it.
        let mut needed: BTreeSet<String> = back.index.segment_keys().into_iter().map(index_key).collect();
        needed.extend(back.entries().map(|(id, _)| entry_key(id)));
        needed.insert(META_KEY.into());
        assert_eq!(stored.keys().cloned().collect::<BTreeSet<_>>(), needed);
        // One recall rewrites only the entries it marked, the meta record, and no index segment.
        let mut back = back;
        let found = back.recall(&q, 2, 32, None, -1.0, 1000).unwrap();
        let changes = back.take_changes();
        let keys: Vec<&str> = changes.put.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys.len(), found.len() + 1, "{keys:?}");
        assert!(keys.iter().all(|k| k.starts_with('e') || *k == META_KEY));
        // Every record, taken whole, reads back as the same collection.
        let all: BTreeMap<String, Vec<u8>> = back.take_all().put.into_iter().collect();
        assert_eq!(reload(&all).unwrap().entries().collect::<Vec<_>>(), back.entries().collect::<Vec<_>>());
    }

    /// A commit cut short after any of its puts or deletes (a killed process, a closed tab) leaves the state before
    /// it whole until its meta record is stored, and the state after it from then on; the next commit of a writer
    /// that reads it deletes what the cut one left behind.
    #[test]
    fn a_commit_cut_at_any_record_reads_back_the_last_complete_state() {
        let mut c = Collection::new(Metric::Cosine, 6, HnswParams { m: 4, ef_construction: 32, seed: 3 }).unwrap();
        let mut before = Store::new();
        for i in 0..300 {
            c.add(&vector(i, 6), &format!("t{i}"), ["x", "y"][i as usize % 2], i).unwrap();
        }
        c.set_threshold(Some("x"), Some(0.1)).unwrap();
        store(&mut c, &mut before);
        let old = reload(&before).unwrap();
        // The next commit: adds (new segments and changed ones), removes, a recall, settings.
        for i in 300..420 {
            c.add(&vector(i, 6), &format!("t{i}"), "z", i).unwrap();
        }
        for id in [0, 5, 64, 299] {
            c.remove(id);
        }
        c.recall(&vector(7, 6), 3, 16, None, -1.0, 5000).unwrap();
        c.set_threshold(Some("x"), None).unwrap();
        c.set_budget(Some(1 << 24));
        let changes = c.take_changes();
        c.confirm();
        let steps: Vec<Option<&(String, Vec<u8>)>> =
            changes.put.iter().map(Some).chain(changes.delete.iter().map(|_| None)).collect();
        let meta_at = changes.put.iter().position(|(k, _)| k == META_KEY).unwrap();
        assert_eq!(meta_at, changes.put.len() - 1, "meta goes last");
        assert!(changes.delete.len() > 4, "old segments and removed entries: {:?}", changes.delete);
        let q = vector(100, 6);
        for cut in 0..=steps.len() {
            let mut torn = before.clone();
            for (i, step) in steps[..cut].iter().enumerate() {
                match step {
                    Some((k, v)) => drop(torn.insert(k.clone(), v.clone())),
                    None => drop(torn.remove(&changes.delete[i - changes.put.len()])),
                }
            }
            let back = reload(&torn).unwrap_or_else(|e| panic!("cut after {cut} of {}: {e}", steps.len()));
            let want = if cut <= meta_at { &old } else { &c };
            assert_eq!(texts(&back), texts(want), "cut after {cut}");
            assert_eq!(back.thresholds(), want.thresholds());
            assert_eq!(back.budget(), want.budget());
            assert_eq!(back.search(&q, 5, 32, None).unwrap(), want.search(&q, 5, 32, None).unwrap());
            // A writer that reads the torn store commits on it and leaves nothing behind.
            let mut w = Writer::open(&mut torn);
            w.c.add(&vector(999, 6), "after", "x", 9999).unwrap();
            w.commit(&mut torn);
            let again = reload(&torn).unwrap();
            assert_eq!(texts(&again), texts(&w.c));
            let mut needed: BTreeSet<String> = again.index.segment_keys().into_iter().map(index_key).collect();
            needed.extend(again.entries().map(|(id, _)| entry_key(id)));
            needed.insert(META_KEY.into());
            assert_eq!(torn.keys().cloned().collect::<BTreeSet<_>>(), needed, "cut after {cut}: garbage left");
        }
    }

    /// The issue's case: A adds and commits, a stale B removes an entry and commits (and the other order). Each
    /// commits on the store's current state, so A's additions and B's removal both stay, and the ids of the two
    /// writers' additions never collide.
    #[test]
    fn two_writers_lose_nothing_in_either_order() {
        for a_first in [true, false] {
            let mut shared = Store::new();
            let mut seed = Collection::new(Metric::L2, 4, HnswParams::default()).unwrap();
            for i in 0..1000 {
                seed.add(&vector(i, 4), &format!("seed {i}"), "s", i).unwrap();
            }
            store(&mut seed, &mut shared);
            let mut a = Writer::open(&mut shared);
            let mut b = Writer::open(&mut shared);
            let added: Vec<u64> = (0..50).map(|i| a.c.add(&vector(2000 + i, 4), "a", "a", 7).unwrap().0).collect();
            let b_added = b.c.add(&vector(3000, 4), "b", "b", 8).unwrap().0;
            assert!(!added.contains(&b_added), "leases keep the writers' ids apart");
            assert!(b.c.remove(17));
            b.c.set_threshold(Some("s"), Some(0.5)).unwrap();
            if a_first {
                a.commit(&mut shared);
                b.commit(&mut shared);
            } else {
                b.commit(&mut shared);
                a.commit(&mut shared);
            }
            let back = reload(&shared).unwrap();
            assert_eq!(back.len(), 1000 + 50 + 1 - 1, "a first: {a_first}");
            assert!(back.entry(17).is_none());
            assert!(added.iter().all(|&id| back.entry(id).is_some_and(|e| e.text == "a")));
            assert_eq!(back.entry(b_added).unwrap().text, "b");
            assert_eq!(back.threshold(Some("s")), Some(0.5));
            let last = if a_first { &b } else { &a };
            assert_eq!(texts(&back), texts(&last.c), "the later writer holds the store's state");
            assert!(back.search(&vector(2010, 4), 1, 32, None).unwrap()[0].id == added[10]);
        }
    }

    /// A write the store refused: its changes stay for the next one (whole, or replayed on what another writer
    /// committed meanwhile).
    #[test]
    fn an_aborted_commit_keeps_its_changes() {
        let mut shared = Store::new();
        let mut a = Writer::open(&mut shared);
        let mut b = Writer::open(&mut shared);
        let id = a.c.add(&vector(1, 3), "kept", "l", 1).unwrap().0;
        a.c.lease();
        let _lost = a.c.take_changes(); // the store was full
        a.c.abort();
        b.c.add(&vector(2, 3), "b", "l", 2).unwrap();
        b.commit(&mut shared);
        a.commit(&mut shared);
        let back = reload(&shared).unwrap();
        assert_eq!(back.entry(id).unwrap().text, "kept");
        assert_eq!(back.len(), 2);
        // A failed write whose puts all landed (its deletes failed): the replay finds its own adds already there.
        let more = a.c.add(&vector(3, 3), "landed", "l", 3).unwrap().0;
        a.c.lease();
        let changes = a.c.take_changes();
        for (k, v) in &changes.put {
            shared.insert(k.clone(), v.clone());
        }
        a.c.abort();
        a.commit(&mut shared);
        let back = reload(&shared).unwrap();
        assert_eq!((back.len(), back.entry(more).unwrap().text.as_str()), (3, "landed"));
    }

    /// A writer reads the store, another commits before the first one's own first commit (its lease): that commit
    /// replays on the newer state and takes ids past every lease.
    #[test]
    fn a_lease_is_taken_on_the_current_state() {
        let mut shared = Store::new();
        let mut a = Writer::open(&mut shared);
        let mut late = Writer { c: reload(&shared).unwrap(), seen: shared.get(META_KEY).cloned() };
        let first = a.c.add(&vector(1, 3), "a", "l", 1).unwrap().0;
        a.commit(&mut shared);
        late.commit(&mut shared);
        assert!(late.c.leased && late.c.lease_end < ID_LIMIT && late.c.next_id >= a.c.lease_end);
        let id = late.c.add(&vector(2, 3), "late", "l", 2).unwrap().0;
        assert!(id != first && !a.c.index.contains(id));
        late.commit(&mut shared);
        a.commit(&mut shared);
        assert_eq!(texts(&reload(&shared).unwrap()), vec![(first, "a".into()), (id, "late".into())]);
    }

    #[test]
    fn garbage_entries_are_deleted_and_a_missing_entry_refused() {
        let mut c = Collection::new(Metric::L2, 3, HnswParams::default()).unwrap();
        let mut stored = BTreeMap::new();
        for i in 0..5 {
            c.add(&vector(i, 3), "t", "l", i).unwrap();
        }
        store(&mut c, &mut stored);
        let old_entry = stored[&entry_key(2)].clone();
        c.remove(2);
        store(&mut c, &mut stored);
        // The write stopped before its delete: the entry is back in the store, its vector deleted in the index.
        stored.insert(entry_key(2), old_entry);
        // A damaged record nothing needs is not read.
        stored.insert(entry_key(77), b"not a record".to_vec());
        let mut back = reload(&stored).unwrap();
        assert!(back.entry(2).is_none());
        let changes = back.take_changes();
        assert_eq!(changes.delete, vec![entry_key(2), entry_key(77)]);
        stored.remove(&entry_key(3));
        assert!(matches!(reload(&stored), Err(IndexError::Format(m)) if m.contains("no entry")));
    }

    #[test]
    fn foreign_and_damaged_records_are_typed_errors() {
        let mut a = Collection::new(Metric::Cosine, 4, HnswParams::default()).unwrap();
        let mut b = Collection::new(Metric::Cosine, 4, HnswParams { seed: 7, ..HnswParams::default() }).unwrap();
        let (mut sa, mut sb) = (BTreeMap::new(), BTreeMap::new());
        for i in 0..3 {
            a.add(&vector(i, 4), "a", "x", 0).unwrap();
            b.add(&vector(i, 4), "b", "x", 0).unwrap();
        }
        store(&mut a, &mut sa);
        store(&mut b, &mut sb);
        let mut mixed = sa.clone();
        mixed.insert(entry_key(1), sb[&entry_key(1)].clone());
        assert!(matches!(reload(&mixed), Err(IndexError::Foreign(_))));
        let mut mixed = sa.clone();
        mixed.insert(META_KEY.into(), sb[META_KEY].clone());
        assert!(matches!(reload(&mixed), Err(IndexError::Foreign(_))));
        let mut damaged = sa.clone();
        damaged.get_mut(&entry_key(0)).unwrap()[30] ^= 1;
        assert_eq!(reload(&damaged).unwrap_err(), IndexError::Checksum);
        let mut odd = sa.clone();
        odd.insert("x123".into(), vec![]);
        assert!(matches!(reload(&odd), Err(IndexError::Format(_))));
        sa.remove(META_KEY);
        assert!(matches!(reload(&sa), Err(IndexError::Format(m)) if m.contains("meta")));
    }

    /// Re-seal a record after an edit (its CRC recomputed, as a forger would).
    fn resealed(record: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut body = record[..record.len() - 4].to_vec();
        edit(&mut body);
        seal(body)
    }

    #[test]
    fn a_nan_in_any_record_is_refused_naming_it() {
        let mut c = Collection::new(Metric::Dot, 4, HnswParams::default()).unwrap();
        let mut stored = Store::new();
        for i in 0..70 {
            c.add(&vector(i, 4), "t", "l", i).unwrap();
        }
        c.set_threshold(Some("l"), Some(0.5)).unwrap();
        store(&mut c, &mut stored);
        let key = c.index.segment_keys()[2]; // segment 1's vectors
        assert!(matches!(key, RecordKey::Vectors(1, _)));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut poisoned = stored.clone();
            let record =
                resealed(&stored[&index_key(key)], |b| b[40 + 4 * 9..][..4].copy_from_slice(&bad.to_le_bytes()));
            poisoned.insert(index_key(key), record);
            let err = reload(&poisoned).unwrap_err();
            assert!(
                matches!(&err, IndexError::Format(m) if m.contains("segment 1 vectors") && m.contains(&bad.to_string())),
                "{err}"
            );
            // The label's threshold is the meta record's last f32 before the index header.
            let meta = &stored[META_KEY];
            let header_len = u32::from_le_bytes(
                meta[meta.len() - 4 - c.index.commit_all().header.len() - 4..][..4].try_into().unwrap(),
            );
            let at = meta.len() - 4 - header_len as usize - 4 - 4;
            let mut poisoned = stored.clone();
            poisoned.insert(META_KEY.into(), resealed(meta, |b| b[at..at + 4].copy_from_slice(&bad.to_le_bytes())));
            let err = reload(&poisoned).unwrap_err();
            assert!(matches!(&err, IndexError::Format(m) if m.contains("threshold of label")), "{err}");
        }
    }

    /// Counts and lengths past the bytes present are refused before anything is sized by them, and records longer
    /// than any valid one are refused unread.
    #[test]
    fn oversized_counts_and_records_are_refused_without_allocating() {
        let mut c = Collection::new(Metric::Cosine, 4, HnswParams::default()).unwrap();
        let mut stored = Store::new();
        c.add(&vector(1, 4), "t", "l", 1).unwrap();
        store(&mut c, &mut stored);
        let meta = stored[META_KEY].clone();
        let header = c.index.records().pop().unwrap().1;
        let header_at = meta.len() - 4 - header.len();
        // The meta record with its index header edited (both re-sealed).
        let forge = |edit: &dyn Fn(&mut Vec<u8>)| {
            let header = resealed(&header, |b| edit(b));
            let mut body = meta[..header_at - 4].to_vec();
            push_u32(&mut body, header.len() as u32);
            body.extend_from_slice(&header);
            let mut forged = stored.clone();
            forged.insert(META_KEY.into(), seal(body));
            reload(&forged)
        };
        // A header of 2^32 - 2 slots would name 2^26 segments (1 TB of vectors at 4 dims, if believed): it must
        // hold their 2^30 bytes of generations, so without them it is a format error before anything is read.
        let err = forge(&|b| b[52..56].copy_from_slice(&(u32::MAX - 1).to_le_bytes())).unwrap_err();
        assert!(matches!(&err, IndexError::Format(m) if m.contains("a header of")), "{err}");
        // A segment's generation that was never stored, or one past the header's own.
        let err = forge(&|b| b[72..80].copy_from_slice(&0u64.to_le_bytes())).unwrap_err();
        assert_eq!(err, IndexError::Missing(RecordKey::Vectors(0, 0)));
        let err = forge(&|b| b[72..80].copy_from_slice(&9u64.to_le_bytes())).unwrap_err();
        assert!(matches!(&err, IndexError::Format(m) if m.contains("past the header's")), "{err}");
        // Dims past the limit, and the index header's length past the meta record's bytes.
        assert!(forge(&|b| b[16..20].copy_from_slice(&(1u32 << 20).to_le_bytes())).is_err());
        let mut forged = stored.clone();
        forged.insert(
            META_KEY.into(),
            resealed(&meta, |b| b[header_at - 4..header_at].copy_from_slice(&u32::MAX.to_le_bytes())),
        );
        assert!(matches!(reload(&forged), Err(IndexError::Format(m)) if m.contains("cut short")));
        for (key, most) in [(entry_key(9), MAX_ENTRY_BYTES), (META_KEY.to_string(), MAX_META_BYTES)] {
            assert_eq!(max_record_bytes(&key), most);
            if most <= MAX_ENTRY_BYTES {
                let mut big = stored.clone();
                big.insert(key.clone(), vec![0; most + 1]);
                assert!(matches!(reload(&big), Err(IndexError::Format(m)) if m.contains("more than any valid one")));
            }
        }
        assert_eq!(max_record_bytes(&index_key(RecordKey::Vectors(0, 1))), 40 + 64 * 65536 * 4 + 4);
        assert_eq!(max_record_bytes("x123"), 0);
        assert_eq!(max_record_bytes(&index_key(RecordKey::Header)), 0);
        assert_eq!(max_record_bytes("h4800000000"), 76);
    }

    /// A store of the first format: its records as version 1 wrote them (built here from version 2's).
    fn as_version_1(c: &Collection, v2: &Store) -> Store {
        let mut out = Store::new();
        let v1 = |record: &[u8]| resealed(record, |b| b[8..12].copy_from_slice(&1u32.to_le_bytes()));
        for (key, record) in v2 {
            match parse_key(key) {
                Some(Key::Entry(_)) => drop(out.insert(key.clone(), v1(record))),
                Some(Key::Index(k)) => {
                    let bytes = k.to_bytes();
                    let short = format!("h{}", bytes[..5].iter().map(|b| format!("{b:02x}")).collect::<String>());
                    // Version 1 segments carried the generation that wrote them, no later than the header's.
                    out.insert(short, v1(record));
                }
                _ => {}
            }
        }
        let header = c.index.records().pop().unwrap().1;
        out.insert(
            "h4800000000".into(),
            resealed(&header, |b| {
                b[8..12].copy_from_slice(&1u32.to_le_bytes());
                b.truncate(72);
            }),
        );
        let mut meta = META_KIND.begin();
        meta[8..12].copy_from_slice(&1u32.to_le_bytes());
        push_u64(&mut meta, c.index.uid());
        push_u64(&mut meta, c.next_id);
        push_u64(&mut meta, NO_BUDGET);
        meta.extend_from_slice(&f32::NAN.to_le_bytes());
        push_str(&mut meta, &c.tag, false);
        push_u32(&mut meta, c.thresholds.len() as u32);
        for (label, t) in &c.thresholds {
            push_str(&mut meta, label, false);
            meta.extend_from_slice(&t.to_le_bytes());
        }
        out.insert(META_KEY.into(), seal(meta));
        out
    }

    #[test]
    fn a_version_1_store_is_read_and_written_anew() {
        let mut c = Collection::new(Metric::Cosine, 5, HnswParams::default()).unwrap();
        let mut v2 = Store::new();
        for i in 0..100 {
            c.add(&vector(i, 5), &format!("t{i}"), "l", i).unwrap();
        }
        c.set_tag("all-MiniLM-L6-v2 5").unwrap();
        c.set_threshold(Some("l"), Some(0.3)).unwrap();
        store(&mut c, &mut v2);
        let mut v1 = as_version_1(&c, &v2);
        assert!(v1.keys().any(|k| k.len() == 11) && !v1.keys().any(|k| k.len() == 27));
        let mut w = Writer::open(&mut v1);
        assert_eq!(texts(&w.c), texts(&c));
        assert_eq!((w.c.tag(), w.c.threshold(Some("l")), w.c.threshold(None)), ("all-MiniLM-L6-v2 5", Some(0.3), None));
        assert!(!v1.keys().any(|k| k.len() == 11), "the version-1 index records are gone");
        let back = reload(&v1).unwrap();
        assert_eq!(texts(&back), texts(&c));
        let q = vector(50, 5);
        assert_eq!(back.search(&q, 4, 32, None).unwrap(), c.search(&q, 4, 32, None).unwrap());
        w.c.add(&vector(500, 5), "new", "l", 500).unwrap();
        w.commit(&mut v1);
        assert_eq!(reload(&v1).unwrap().len(), 101);
    }

    #[test]
    fn keys_parse_back() {
        for key in [RecordKey::Vectors(3, 9), RecordKey::Links(u32::MAX, u64::MAX)] {
            assert!(matches!(parse_key(&index_key(key)), Some(Key::Index(k)) if k == key));
        }
        assert!(matches!(parse_key("h4c00000003"), Some(Key::IndexV1(RecordKey::Links(3, 0)))));
        assert!(matches!(parse_key(&entry_key(u64::MAX)), Some(Key::Entry(u64::MAX))));
        for bad in ["", "e", "eFFFFFFFFFFFFFFFF", "h00", "hzz00000000", "e+fffffffffffffff", "metadata"] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }
}
