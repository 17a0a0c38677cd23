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
//! Persisted as records under string keys, beside the index's own (`records.rs`): `h` + the index record's key in
//! hex, `e` + an entry's id in 16 hex digits, and `meta` (thresholds, budget, the next id). `take_changes` hands over
//! what changed since it was last called: records to write in order (index segments, entries, the index's
//! header, then `meta`) and keys to delete after them (removed entries). `from_records` reads a set back, checking
//! every record against the index's identity. An entry whose id the index no longer holds (its delete was cut
//! short) is dropped and deleted at the next write; a live vector without its entry is an error.
//! ```text
//! meta   magic "RVCOLLM\0" | version u32 | uid u64 | next id u64 | budget u64 (u64::MAX: none)
//!        | threshold f32 (NaN: none) | tag length u16, UTF-8 | labels u32 | per label: length u16, UTF-8,
//!        threshold f32 | CRC-32
//! entry  magic "RVCOLLE\0" | version u32 | uid u64 | id u64 | used u64 | label length u16, UTF-8
//!        | text length u32, UTF-8 | CRC-32
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::distance::Metric;
use super::hnsw::{Hnsw, HnswParams};
use super::records::{begin, format, push_u32, push_u64, seal, unseal, IndexError, Reader, RecordKey};
use crate::error::{Error, Result};

const META_MAGIC: [u8; 8] = *b"RVCOLLM\0";
const ENTRY_MAGIC: [u8; 8] = *b"RVCOLLE\0";
pub const META_KEY: &str = "meta";
/// The longest label (a route's name, a conversation's id) in bytes.
pub const MAX_LABEL_BYTES: usize = 1024;
/// The longest entry text in bytes.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

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
    next_id: u64,
    changed: BTreeSet<u64>,
    removed: BTreeSet<u64>,
    meta_changed: bool,
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
            changed: BTreeSet::new(),
            removed: BTreeSet::new(),
            meta_changed: true,
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
        }
        Ok(())
    }

    pub fn budget(&self) -> Option<usize> {
        self.budget
    }

    /// Keep the entries within `bytes` (none: no limit), dropping the least recently used; the ids dropped.
    pub fn set_budget(&mut self, bytes: Option<usize>) -> Vec<u64> {
        self.meta_changed |= self.budget != bytes;
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
        self.meta_changed |= own != threshold;
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
        let next = id.checked_add(1).ok_or_else(|| Error::InvalidArgument("the collection's ids ran out".into()))?;
        self.index.insert(id, vector)?;
        self.next_id = next;
        self.meta_changed = true;
        self.put_entry(id, entry);
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
            let Some(entry) = self.entries.get_mut(&f.id) else { continue };
            if entry.used != now {
                self.by_use.remove(&(entry.used, f.id));
                entry.used = now;
                self.by_use.insert((now, f.id));
                self.changed.insert(f.id);
            }
        }
        Ok(found)
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
    Entry(u64),
}

fn parse_key(key: &str) -> Option<Key> {
    if key == META_KEY {
        return Some(Key::Meta);
    }
    let hex = key.get(1..).filter(|h| h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))?;
    match key.as_bytes()[0] {
        b'e' if hex.len() == 16 => u64::from_str_radix(hex, 16).ok().map(Key::Entry),
        b'h' if hex.len() == 10 => {
            let bytes: Option<Vec<u8>> = (0..5).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect();
            RecordKey::from_bytes(&bytes?).map(Key::Index)
        }
        _ => None,
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
    /// What changed since the last call (or since the collection was made or read); empty if nothing did.
    pub fn take_changes(&mut self) -> Changes {
        let mut index = self.index.take_changed_records();
        let header = index.pop_if(|(k, _)| *k == RecordKey::Header);
        if index.is_empty()
            && header.is_none()
            && self.changed.is_empty()
            && self.removed.is_empty()
            && !self.meta_changed
        {
            return Changes::default();
        }
        let mut put: Vec<(String, Vec<u8>)> = index.into_iter().map(|(k, v)| (index_key(k), v)).collect();
        for id in std::mem::take(&mut self.changed) {
            put.push((entry_key(id), self.entry_record(id)));
        }
        put.extend(header.map(|(k, v)| (index_key(k), v)));
        put.push((META_KEY.to_string(), self.meta_record()));
        self.meta_changed = false;
        let delete = std::mem::take(&mut self.removed).into_iter().map(entry_key).collect();
        Changes { put, delete }
    }

    /// Every record (in `take_changes`' order), for a store that lost track: it should delete the keys it holds that
    /// are not among them. Pending changes are taken with it.
    pub fn take_all(&mut self) -> Changes {
        self.take_changes();
        let index = self.index.records();
        let (header, segments) = index.split_last().expect("an index has a header record");
        let mut put: Vec<(String, Vec<u8>)> = segments.iter().map(|(k, v)| (index_key(*k), v.clone())).collect();
        put.extend(self.entries().map(|(id, _)| (entry_key(id), self.entry_record(id))).collect::<Vec<_>>());
        put.push((index_key(header.0), header.1.clone()));
        put.push((META_KEY.to_string(), self.meta_record()));
        Changes { put, delete: Vec::new() }
    }

    fn meta_record(&self) -> Vec<u8> {
        let mut out = begin(&META_MAGIC);
        push_u64(&mut out, self.index.uid());
        push_u64(&mut out, self.next_id);
        push_u64(&mut out, self.budget.map_or(NO_BUDGET, |b| b as u64));
        out.extend_from_slice(&self.threshold.unwrap_or(f32::NAN).to_le_bytes());
        push_str(&mut out, &self.tag, false);
        push_u32(&mut out, self.thresholds.len() as u32);
        for (label, t) in &self.thresholds {
            push_str(&mut out, label, false);
            out.extend_from_slice(&t.to_le_bytes());
        }
        seal(out)
    }

    fn entry_record(&self, id: u64) -> Vec<u8> {
        let e = &self.entries[&id];
        let mut out = begin(&ENTRY_MAGIC);
        for x in [self.index.uid(), id, e.used] {
            push_u64(&mut out, x);
        }
        push_str(&mut out, &e.label, false);
        push_str(&mut out, &e.text, true);
        seal(out)
    }

    /// Read a collection from its records (each key once), checking each against the index's identity.
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> std::result::Result<Collection, IndexError> {
        let (mut meta, mut index, mut entries) = (None, Vec::new(), Vec::new());
        let mut keys = BTreeSet::new();
        for (key, bytes) in records {
            if !keys.insert(key) {
                return Err(format(format!("two records under the key {key:?}")));
            }
            match parse_key(key) {
                Some(Key::Meta) => meta = Some(bytes),
                Some(Key::Index(k)) => index.push((k, bytes)),
                Some(Key::Entry(id)) => entries.push((id, bytes)),
                None => return Err(format(format!("a record under the key {key:?}, not a collection's"))),
            }
        }
        let mut c = Collection::around(Hnsw::from_records(index)?);
        let uid = c.index.uid();
        let meta = meta.ok_or_else(|| format("the collection's meta record is missing".into()))?;
        let mut r = unseal(meta, &META_MAGIC, "collection meta")?;
        if r.u64()? != uid {
            return Err(IndexError::Foreign("a collection's meta record of another index".into()));
        }
        c.next_id = r.u64()?;
        c.budget = match r.u64()? {
            NO_BUDGET => None,
            b => Some(usize::try_from(b).unwrap_or(usize::MAX)),
        };
        let threshold = |r: &mut Reader| -> std::result::Result<Option<f32>, IndexError> {
            let t = f32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
            Ok((!t.is_nan()).then_some(t)).and_then(|t| match t {
                Some(t) if t.is_infinite() => Err(format(format!("a threshold of {t}"))),
                t => Ok(t),
            })
        };
        c.threshold = threshold(&mut r)?;
        c.tag = read_str(&mut r, false, MAX_LABEL_BYTES, "tag")?;
        for _ in 0..r.u32()? {
            let label = read_str(&mut r, false, MAX_LABEL_BYTES, "label")?;
            let t = threshold(&mut r)?.ok_or_else(|| format(format!("no threshold for label {label:?}")))?;
            if c.thresholds.insert(label, t).is_some() {
                return Err(format("a label's threshold twice".into()));
            }
        }
        if r.left() != 0 {
            return Err(format(format!("{} bytes after the collection's meta record", r.left())));
        }
        for (id, bytes) in entries {
            let mut r = unseal(bytes, &ENTRY_MAGIC, "collection entry")?;
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
            // The meta record is written last: if a write stopped before it, ids past its `next_id` are taken.
            c.next_id = c.next_id.max(id.saturating_add(1));
            if c.index.contains(id) {
                c.put_entry(id, Entry { text, label, used });
            } else {
                c.removed.insert(id); // its delete was cut short: finish it at the next write
            }
        }
        c.changed.clear();
        if let Some(id) = c.index.slot_of.keys().find(|id| !c.entries.contains_key(id)) {
            return Err(format(format!("the index holds id {id} but no entry for it")));
        }
        c.next_id = c.index.ids.iter().map(|&id| id.saturating_add(1)).fold(c.next_id, u64::max);
        c.meta_changed = false;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(i: u64, dims: usize) -> Vec<f32> {
        (0..dims).map(|d| ((i * 31 + d as u64 * 7) % 17) as f32 - 8.0 + (i as f32 * 0.1).sin()).collect()
    }

    fn store(c: &mut Collection, into: &mut BTreeMap<String, Vec<u8>>) {
        let changes = c.take_changes();
        for (k, v) in changes.put {
            into.insert(k, v);
        }
        for k in changes.delete {
            into.remove(&k);
        }
    }

    fn reload(from: &BTreeMap<String, Vec<u8>>) -> std::result::Result<Collection, IndexError> {
        Collection::from_records(from.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
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
        assert_eq!(back.tag(), "all-MiniLM-L6-v2 384");
        assert_eq!((back.budget(), back.bytes(), back.next_id), (c.budget(), c.bytes(), c.next_id));
        let q = vector(77, 8);
        assert_eq!(back.route(&q, 10, 32).unwrap(), c.route(&q, 10, 32).unwrap());
        // One recall rewrites only the entries it marked, the meta record, and nothing of the index.
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

    #[test]
    fn a_cut_delete_is_finished_and_a_missing_entry_refused() {
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
        let mut back = reload(&stored).unwrap();
        assert!(back.entry(2).is_none());
        assert_eq!(back.take_changes().delete, vec![entry_key(2)]);
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

    #[test]
    fn keys_parse_back() {
        for key in [RecordKey::Header, RecordKey::Vectors(3), RecordKey::Links(u32::MAX)] {
            assert!(matches!(parse_key(&index_key(key)), Some(Key::Index(k)) if k == key));
        }
        assert!(matches!(parse_key(&entry_key(u64::MAX)), Some(Key::Entry(u64::MAX))));
        for bad in ["", "e", "eFFFFFFFFFFFFFFFF", "h00", "hzz00000000", "e+fffffffffffffff", "metadata"] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }
}
