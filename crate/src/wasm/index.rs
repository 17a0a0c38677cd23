//! The JavaScript binding of a [`Collection`] (wasm32 only): the vector index with its entries, which the package's
//! `VectorIndex`, `Router` and `Memory` wrap (npm/src/index/). JSON-shaped like `wasm/mod.rs`; ids are JS numbers
//! (a collection numbers its entries from 0, far below 2^53). The package reads and writes the records in its store.

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::error::Error;
use crate::index::{
    max_record_bytes, Changes, Collection as Inner, Entry, Found, HnswParams, IndexError, LabelScore, Metric,
};
use crate::wasm::{bytes_from_js, js_error, json, parse};

/// `new Collection(options)`'s options: `{metric: "cosine" | "dot" | "l2", dims, m?, efConstruction?, seed?}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewOptions {
    metric: String,
    dims: usize,
    m: Option<usize>,
    ef_construction: Option<usize>,
    seed: Option<u64>,
}

/// One search result as JS sees it.
#[derive(Serialize)]
struct Hit<'a> {
    id: u64,
    score: f32,
    text: &'a str,
    label: &'a str,
    used: u64,
}

impl<'a> Hit<'a> {
    fn of(id: u64, score: f32, e: &'a Entry) -> Hit<'a> {
        Hit { id, score, text: &e.text, label: &e.label, used: e.used }
    }
}

#[derive(Serialize)]
struct Decision<'a> {
    route: Option<&'a LabelScore>,
    candidates: &'a [LabelScore],
}

fn metric(name: &str) -> Result<Metric, JsValue> {
    match name {
        "cosine" => Ok(Metric::Cosine),
        "dot" => Ok(Metric::Dot),
        "l2" => Ok(Metric::L2),
        _ => Err(js_error(Error::InvalidArgument(format!("metric {name:?}: 'cosine', 'dot' or 'l2'")))),
    }
}

fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Cosine => "cosine",
        Metric::Dot => "dot",
        Metric::L2 => "l2",
    }
}

/// An f32 as the decimal it was written as (0.3, not 0.30000001192092896): thresholds come from JS numbers.
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

/// A JS number as an entry id or a time (a non-negative integer); others match nothing.
fn whole(x: f64) -> Option<u64> {
    (x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(64)).then_some(x as u64)
}

fn time(now: f64) -> Result<u64, JsValue> {
    whole(now).ok_or_else(|| js_error(Error::InvalidArgument(format!("a time of {now}"))))
}

#[wasm_bindgen]
pub struct Collection {
    inner: Inner,
}

#[wasm_bindgen]
impl Collection {
    #[wasm_bindgen(constructor)]
    pub fn new(options_json: &str) -> Result<Collection, JsValue> {
        let o: NewOptions = parse(options_json, "collection options")?;
        let d = HnswParams::default();
        let params = HnswParams {
            m: o.m.unwrap_or(d.m),
            ef_construction: o.ef_construction.unwrap_or(d.ef_construction),
            seed: o.seed.unwrap_or(d.seed),
        };
        let inner = Inner::new(metric(&o.metric)?, o.dims, params).map_err(js_error)?;
        Ok(Collection { inner })
    }

    /// A collection from its records (`keys[i]` names `records[i]`, plain `Uint8Array`s); `E_INDEX` if they are not
    /// one, `E_OUT_OF_MEMORY` if they do not fit. Each record is refused unread if it is longer than any valid record
    /// under its key (`maxRecordBytes`), and copied into wasm memory fallibly.
    #[wasm_bindgen(js_name = fromRecords)]
    pub fn from_records(keys: Vec<String>, records: Vec<js_sys::Uint8Array>) -> Result<Collection, JsValue> {
        if keys.len() != records.len() {
            return Err(js_error(Error::InvalidArgument(format!("{} keys for {} records", keys.len(), records.len()))));
        }
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(records.len()).map_err(|_| js_error(oom(records.len() * 12, "the records")))?;
        for (key, record) in keys.iter().zip(&records) {
            bytes.push(copy_in(key, record)?);
        }
        let inner = Inner::from_records(keys.iter().map(String::as_str).zip(bytes.iter().map(Vec::as_slice)))
            .map_err(|e| js_error(e.into()))?;
        Ok(Collection { inner })
    }

    /// The largest valid record under `key` (0 for a key no collection uses): a store's reader refuses a longer one
    /// unread.
    #[wasm_bindgen(js_name = maxRecordBytes)]
    pub fn max_record_bytes(key: &str) -> f64 {
        max_record_bytes(key) as f64
    }

    /// JSON `{metric, dims, m, efConstruction, entries, bytes, budget, threshold, labels: {name: {entries,
    /// threshold}}}` (`threshold`: the label's own, or null).
    pub fn info(&self) -> String {
        let index = self.inner.index();
        let mut labels = serde_json::Map::new();
        for (label, count) in self.inner.label_counts() {
            let own = self.inner.thresholds().get(label).copied().map(decimal);
            labels.insert(label.to_string(), serde_json::json!({ "entries": count, "threshold": own }));
        }
        for (label, t) in self.inner.thresholds() {
            labels
                .entry(label.clone())
                .or_insert_with(|| serde_json::json!({ "entries": 0, "threshold": decimal(*t) }));
        }
        json(&serde_json::json!({
            "metric": metric_name(index.metric()),
            "dims": index.dims(),
            "m": index.params().m,
            "efConstruction": index.params().ef_construction,
            "entries": self.inner.len(),
            "bytes": self.inner.bytes(),
            "budget": self.inner.budget(),
            "threshold": self.inner.threshold(None).map(decimal),
            "labels": labels,
        }))
    }

    /// Add an entry; JSON `{id, dropped: [ids the budget dropped]}`.
    pub fn add(&mut self, vector: &[f32], text: &str, label: &str, now: f64) -> Result<String, JsValue> {
        let (id, dropped) = self.inner.add(vector, text, label, time(now)?).map_err(js_error)?;
        Ok(json(&serde_json::json!({ "id": id, "dropped": dropped })))
    }

    /// Remove entry `id`; whether it was there.
    pub fn remove(&mut self, id: f64) -> bool {
        whole(id).is_some_and(|id| self.inner.remove(id))
    }

    /// Remove a label's entries and threshold; how many entries it had.
    #[wasm_bindgen(js_name = removeLabel)]
    pub fn remove_label(&mut self, label: &str) -> u32 {
        self.inner.remove_label(label) as u32
    }

    /// `label`'s threshold (the collection's when `label` is undefined); undefined removes it.
    #[wasm_bindgen(js_name = setThreshold)]
    pub fn set_threshold(&mut self, label: Option<String>, threshold: Option<f32>) -> Result<(), JsValue> {
        self.inner.set_threshold(label.as_deref(), threshold).map_err(js_error)
    }

    /// The byte budget (undefined: none); JSON of the ids it dropped.
    #[wasm_bindgen(js_name = setBudget)]
    pub fn set_budget(&mut self, bytes: Option<f64>) -> Result<String, JsValue> {
        let bytes = match bytes {
            None => None,
            Some(b) => Some(
                whole(b)
                    .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
                    .ok_or_else(|| js_error(Error::InvalidArgument(format!("a budget of {b} bytes"))))?,
            ),
        };
        Ok(json(&self.inner.set_budget(bytes)))
    }

    /// JSON of the entry `id`, or undefined.
    pub fn entry(&self, id: f64) -> Option<String> {
        let id = whole(id)?;
        let e = self.inner.entry(id)?;
        Some(json(&Hit::of(id, 1.0, e)))
    }

    /// Entry `id`'s vector as the index holds it (normalized under cosine), or undefined.
    pub fn vector(&self, id: f64) -> Option<Vec<f32>> {
        Some(self.inner.index().vector(whole(id)?)?.to_vec())
    }

    /// JSON of every entry (of `label` only, if given), by id; `score` is 1.
    pub fn entries(&self, label: Option<String>) -> String {
        let all = self.inner.entries().filter(|(_, e)| label.as_ref().is_none_or(|l| e.label == *l));
        let hits: Vec<Hit> = all.map(|(id, e)| Hit::of(id, 1.0, e)).collect();
        json(&hits)
    }

    /// JSON of the `k` entries nearest `query`, best first: of `label` only if given, else of any label but
    /// `except_label`.
    pub fn search(
        &self,
        query: &[f32],
        k: u32,
        ef: u32,
        label: Option<String>,
        except_label: Option<String>,
    ) -> Result<String, JsValue> {
        let filter = label_filter(&label, &except_label);
        let found = self.inner.search(query, k as usize, ef as usize, filter.as_deref()).map_err(js_error)?;
        Ok(self.hits(&found))
    }

    /// JSON `[{members, medoid}]`: `label`'s entries (every entry's without one) in at most `k` clusters by
    /// k-means++ seeded with `seed`, largest first.
    pub fn clusters(&self, label: Option<String>, k: u32, seed: f64) -> Result<String, JsValue> {
        let clusters = self.inner.clusters(label.as_deref(), k as usize, seed as u64).map_err(js_error)?;
        let out: Vec<_> =
            clusters.iter().map(|c| serde_json::json!({ "members": c.members, "medoid": c.medoid })).collect();
        Ok(json(&out))
    }

    /// JSON `[{a, b, score}]`: pairs of `label`'s entries scoring at least `min_score` against each other.
    #[wasm_bindgen(js_name = nearPairs)]
    pub fn near_pairs(&self, label: &str, min_score: f32) -> Result<String, JsValue> {
        Ok(json(&self.inner.near_pairs(label, min_score, 8).map_err(js_error)?))
    }

    /// `search` keeping entries scoring at least `min_score`, marked used at `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn recall(
        &mut self,
        query: &[f32],
        k: u32,
        ef: u32,
        label: Option<String>,
        except_label: Option<String>,
        min_score: f32,
        now: f64,
    ) -> Result<String, JsValue> {
        let filter = label_filter(&label, &except_label);
        let found = self
            .inner
            .recall(query, k as usize, ef as usize, filter.as_deref(), min_score, time(now)?)
            .map_err(js_error)?;
        Ok(self.hits(&found))
    }

    pub fn tag(&self) -> String {
        self.inner.tag().to_string()
    }

    #[wasm_bindgen(js_name = setTag)]
    pub fn set_tag(&mut self, tag: &str) -> Result<(), JsValue> {
        self.inner.set_tag(tag).map_err(js_error)
    }

    /// JSON `{route: {label, score} | null, candidates: [{label, score}]}` over the `k` nearest entries.
    pub fn route(&self, query: &[f32], k: u32, ef: u32) -> Result<String, JsValue> {
        let d = self.inner.route(query, k as usize, ef as usize).map_err(js_error)?;
        Ok(json(&Decision { route: d.route.as_ref(), candidates: &d.candidates }))
    }

    /// What changed since the last call: `{put: [[key, bytes]], delete: [key]}` (write `put` in order, then delete).
    #[wasm_bindgen(js_name = takeChanges, unchecked_return_type = "{ put: [string, Uint8Array][]; delete: string[] }")]
    pub fn take_changes(&mut self) -> js_sys::Object {
        changes_object(self.inner.take_changes())
    }

    /// Every record, as `takeChanges` gives them (a store that lost track deletes the keys not among them).
    #[wasm_bindgen(js_name = takeAll, unchecked_return_type = "{ put: [string, Uint8Array][]; delete: string[] }")]
    pub fn take_all(&mut self) -> js_sys::Object {
        changes_object(self.inner.take_all())
    }

    /// The store holds the last `takeChanges`' (or `takeAll`'s) puts.
    pub fn confirm(&mut self) {
        self.inner.confirm();
    }

    /// The store may not hold them: their changes are kept for `rebase`.
    pub fn abort(&mut self) {
        self.inner.abort();
    }

    /// Take ids no other writer takes (while this holds the store's current state, before a commit); whether it did.
    pub fn lease(&mut self) -> bool {
        self.inner.lease()
    }

    /// Become `fresh` (the store read again after another writer's commit), with this collection's own changes since
    /// its last confirmed commit replayed on it. `fresh` is consumed.
    pub fn rebase(&mut self, fresh: Collection) -> Result<(), JsValue> {
        self.inner.rebase(fresh.inner).map_err(js_error)
    }

    /// An empty collection of this one's shape (to rebase on when the store holds none).
    #[wasm_bindgen(js_name = emptyLike)]
    pub fn empty_like(&self) -> Collection {
        Collection { inner: self.inner.empty_like() }
    }

    /// Records a store holds without the meta record that would make them a collection (a first commit cut short):
    /// deleted by the next commit. Keys that are not a collection's are `E_INDEX`.
    pub fn discard(&mut self, keys: Vec<String>) -> Result<(), JsValue> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.inner.discard(&keys).map_err(|e| js_error(e.into()))
    }
}

fn oom(bytes: usize, what: &str) -> Error {
    Error::OutOfMemory { bytes, what: what.into() }
}

/// `record`, as stored under `key`, copied into wasm memory (`bytes_from_js`): refused unread when longer than any
/// valid record under that key, and allocated fallibly.
fn copy_in(key: &str, record: &js_sys::Uint8Array) -> Result<Vec<u8>, JsValue> {
    let most = max_record_bytes(key);
    if most == 0 {
        return Err(js_error(IndexError::Format(format!("a record under the key {key:?}, not a collection's")).into()));
    }
    bytes_from_js(record, most, &format!("the index record {key}")).map_err(|e| match e {
        Error::InvalidArgument(m) => js_error(IndexError::Format(m).into()),
        e => js_error(e),
    })
}

fn changes_object(Changes { put, delete }: Changes) -> js_sys::Object {
    let out = js_sys::Object::new();
    let put: js_sys::Array = put
        .into_iter()
        .map(|(key, bytes)| {
            let pair = js_sys::Array::new();
            pair.push(&key.into());
            pair.push(&js_sys::Uint8Array::from(bytes.as_slice()));
            JsValue::from(pair)
        })
        .collect();
    let delete: js_sys::Array = delete.into_iter().map(JsValue::from).collect();
    let _ = js_sys::Reflect::set(&out, &"put".into(), &put);
    let _ = js_sys::Reflect::set(&out, &"delete".into(), &delete);
    out
}

type EntryFilter<'a> = Box<dyn Fn(&Entry) -> bool + 'a>;

/// Entries of `label` only, or of any label but `except`, or all.
fn label_filter<'a>(label: &'a Option<String>, except: &'a Option<String>) -> Option<EntryFilter<'a>> {
    match (label, except) {
        (Some(l), _) => Some(Box::new(move |e: &Entry| e.label == *l)),
        (None, Some(x)) => Some(Box::new(move |e: &Entry| e.label != *x)),
        (None, None) => None,
    }
}

impl Collection {
    fn hits(&self, found: &[Found]) -> String {
        let hits: Vec<Hit> = found
            .iter()
            .filter_map(|f| {
                let e = self.inner.entry(f.id)?;
                Some(Hit::of(f.id, f.score, e))
            })
            .collect();
        json(&hits)
    }
}
