#![no_main]
//! Any bytes as a persisted HNSW index (`Hnsw::from_bytes`, what a store gives back), and the record reader on
//! records whose checksums are right but whose contents the input edits: a small index is built from the input's
//! first bytes, its records (`Hnsw::records`) are edited at the offsets the rest of the input names and re-sealed,
//! then read back with `Hnsw::from_records`. Either is refused with a typed error, or the index it gives searches,
//! takes inserts, updates and deletes, and writes itself back to the same bytes. The same edits then go to a
//! collection's records (the router's and the memory's: index records, entries, meta; an edit may also drop a
//! record), read back with `Collection::from_records`; a collection read back takes changes, commits them, and
//! replays them (`rebase`) on the store read again, which already holds them: the same entries.

use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

use ruvllm::index::{Collection, Hnsw, HnswParams, Metric};

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = Hnsw::from_bytes(data) {
        exercise(index);
    }
    let Some((shape, edits)) = data.split_first_chunk::<4>() else { return };
    let metric = Metric::from_id(shape[0] % 3).expect("three metrics");
    let dims = 1 + shape[1] as usize % 8;
    let params = HnswParams { m: 2 + shape[2] as usize % 6, ef_construction: 8, seed: shape[0] as u64 };
    let mut index = Hnsw::new(metric, dims, params).expect("valid parameters");
    let mut state = u32::from_le_bytes(*shape) | 1;
    let mut value = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % 2001) as f32 / 1000.0 - 1.0
    };
    for i in 0..shape[3] as u64 % 150 {
        let v: Vec<f32> = (0..dims).map(|_| value()).collect();
        index.insert(i, &v).expect("a valid vector");
        if i % 5 == 4 {
            index.delete(i - 2);
        }
    }
    let blob = index.to_bytes();
    assert_eq!(Hnsw::from_bytes(&blob).expect("its own blob").to_bytes(), blob);

    let mut records = index.records();
    let count = records.len();
    for edit in edits.chunks_exact(4) {
        let (_, bytes) = &mut records[edit[0] as usize % count];
        let body = bytes.len() - 4;
        bytes[u16::from_le_bytes([edit[1], edit[2]]) as usize % body] = edit[3];
    }
    for (_, bytes) in &mut records {
        let body = bytes.len() - 4;
        let crc = crc32(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(index) = Hnsw::from_records(records.iter().map(|(k, v)| (*k, &v[..]))) {
        exercise(index);
    }

    let mut collection = Collection::new(metric, dims, params).expect("valid parameters");
    for i in 0..shape[3] as u64 % 40 {
        let v: Vec<f32> = (0..dims).map(|_| value()).collect();
        let label = ["greet", "weather", "ünïcode"][i as usize % 3];
        collection.add(&v, &format!("text {i}"), label, i).expect("a valid entry");
        if i % 7 == 6 {
            collection.remove(i - 3);
        }
    }
    if shape[2] & 1 == 1 {
        collection.set_tag("embedder 8").expect("a short tag");
        collection.set_threshold(Some("greet"), Some(0.5)).expect("a finite threshold");
        collection.set_budget(Some(4096));
    }
    let mut records: BTreeMap<String, Vec<u8>> = collection.take_changes().put.into_iter().collect();
    let keys: Vec<String> = records.keys().cloned().collect();
    for edit in edits.chunks_exact(4) {
        let key = &keys[edit[0] as usize % keys.len()];
        if edit[1] == 0xFF && edit[2] == 0xFF {
            records.remove(key);
            continue;
        }
        let Some(bytes) = records.get_mut(key) else { continue };
        let body = bytes.len() - 4;
        bytes[u16::from_le_bytes([edit[1], edit[2]]) as usize % body] = edit[3];
        let crc = crc32(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(c) = Collection::from_records(records.iter().map(|(k, v)| (k.as_str(), v.as_slice()))) {
        exercise_collection(c, records);
    }
});

/// Route, recall, add and remove on a collection read from `store`, write its changes there, and read it back.
fn exercise_collection(mut c: Collection, mut store: BTreeMap<String, Vec<u8>>) {
    let query: Vec<f32> = (0..c.index().dims()).map(|i| (i as f32 * 0.61).cos()).collect();
    let decision = c.route(&query, 8, 16).expect("a query of its dims");
    assert!(decision.candidates.windows(2).all(|p| p[0].score >= p[1].score));
    let not_weather = |e: &ruvllm::index::Entry| e.label != "weather";
    let found = c.recall(&query, 3, 16, Some(&not_weather), f32::MIN, u64::MAX).expect("a query of its dims");
    assert!(found.iter().all(|f| c.entry(f.id).is_some()));
    if let Ok((id, dropped)) = c.add(&query, "new", "greet", u64::MAX) {
        assert!(!dropped.contains(&id) && c.entry(id).is_some());
    }
    if let Some(f) = found.first() {
        c.remove(f.id);
    }
    c.lease();
    let changes = c.take_changes();
    for (k, v) in changes.put {
        store.insert(k, v);
    }
    for k in changes.delete {
        store.remove(&k);
    }
    let read = || Collection::from_records(store.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
    let back = read().expect("the records it read, with the changes it wrote");
    assert_eq!(back.entries().collect::<Vec<_>>(), c.entries().collect::<Vec<_>>());
    assert_eq!(back.bytes(), c.bytes());
    // Its changes replayed on a store that holds them already (a write that failed after it was stored).
    c.abort();
    let entries: Vec<_> = c.entries().map(|(id, e)| (id, e.clone())).collect();
    c.rebase(read().expect("read twice")).expect("the same shape");
    assert_eq!(c.entries().map(|(id, e)| (id, e.clone())).collect::<Vec<_>>(), entries);
}
/// Search, write back, then change an index read from outside: nothing may panic, results stay sorted and live.
/// The first round walks on the int8 copies the reader derived, the second on the f32 vectors.
fn exercise(mut index: Hnsw) {
    let bytes = index.to_bytes();
    assert_eq!(Hnsw::from_bytes(&bytes).expect("a blob it wrote").to_bytes(), bytes);
    let query: Vec<f32> = (0..index.dims()).map(|i| (i as f32 * 0.37).sin()).collect();
    for round in 0..2u64 {
        index.set_quantized(round == 0);
        let hits = index.search(&query, 5, 16).expect("a query of its dims");
        assert!(hits.len() <= 5.min(index.len()));
        assert!(hits.windows(2).all(|p| p[0].distance.total_cmp(&p[1].distance).is_le()));
        assert!(hits.iter().all(|h| index.contains(h.id)));
        let _ = index.insert(u64::MAX - round, &query);
        if let Some(hit) = hits.first() {
            index.update(hit.id, &query).expect("a live id");
        }
        if let Some(hit) = hits.last() {
            assert!(index.delete(hit.id));
        }
    }
}

/// CRC-32 (IEEE), bit by bit: the records' checksum, recomputed after an edit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
