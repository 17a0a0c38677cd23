//! The HNSW index against brute force: recall on small sets under each metric, deletes and updates that stay
//! consistent with a plain model of the index, filters, determinism, and its persisted forms (the blob, and the
//! records a store keeps incrementally): a round trip gives the same searches, and every truncation, bit flip,
//! foreign or hostile record is a typed error. Runs natively and on wasm32 (Node, Chromium).

#[path = "../../crate/src/test_support.rs"]
#[allow(dead_code)]
mod test_support;

use std::collections::BTreeMap;

use ruvllm::index::{Hit, Hnsw, HnswParams, IndexError, Metric, RecordKey};
use ruvllm::simd::{dot_ref, l2_squared_ref};
use test_support::{test, Rng};

fn random_vector(rng: &mut Rng, dims: usize) -> Vec<f32> {
    (0..dims).map(|_| rng.normal()).collect()
}

/// `n` vectors around 20 centres: nearer to real embeddings (clustered) than uniform noise is.
fn clustered(rng: &mut Rng, n: usize, dims: usize) -> Vec<Vec<f32>> {
    let centres: Vec<Vec<f32>> = (0..20).map(|_| random_vector(rng, dims)).collect();
    (0..n).map(|i| centres[i % 20].iter().map(|c| c + 0.5 * rng.normal()).collect()).collect()
}

/// The exact distance, computed apart from the index (in f64 where it sums).
fn exact_distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::L2 => l2_squared_ref(a, b),
        Metric::Dot => 1.0 - dot_ref(a, b),
        Metric::Cosine => {
            let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
            (1.0 - dot / (norm(a) * norm(b))) as f32
        }
    }
}

/// The `k` nearest ids of `model` (id -> vector as inserted) to `query` that `keep` accepts.
fn brute_force(
    metric: Metric,
    model: &BTreeMap<u64, Vec<f32>>,
    query: &[f32],
    k: usize,
    keep: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let mut all: Vec<(f32, u64)> =
        model.iter().filter(|(&id, _)| keep(id)).map(|(&id, v)| (exact_distance(metric, query, v), id)).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(k).map(|(_, id)| id).collect()
}

/// The share of `truth` that `found` holds.
fn recall(found: &[Hit], truth: &[u64]) -> f64 {
    let hits = truth.iter().filter(|id| found.iter().any(|h| h.id == **id)).count();
    hits as f64 / truth.len().max(1) as f64
}

fn build(metric: Metric, vectors: &[Vec<f32>], params: HnswParams) -> (Hnsw, BTreeMap<u64, Vec<f32>>) {
    let mut index = Hnsw::new(metric, vectors[0].len(), params).unwrap();
    let mut model = BTreeMap::new();
    for (i, v) in vectors.iter().enumerate() {
        let id = 1000 + 7 * i as u64;
        index.insert(id, v).unwrap();
        model.insert(id, v.clone());
    }
    (index, model)
}

/// Mean recall@1 and recall@10 of `queries` at `ef`, and that results are sorted with their true distances.
fn measure(index: &Hnsw, model: &BTreeMap<u64, Vec<f32>>, queries: &[Vec<f32>], ef: usize) -> (f64, f64) {
    let (mut at1, mut at10) = (0.0, 0.0);
    for q in queries {
        let found = index.search(q, 10, ef).unwrap();
        assert_eq!(found.len(), 10.min(model.len()));
        for pair in found.windows(2) {
            assert!(pair[0].distance <= pair[1].distance, "sorted: {found:?}");
        }
        for hit in &found {
            let truth = exact_distance(index.metric(), q, &model[&hit.id]);
            assert!((hit.distance - truth).abs() <= 1e-4 * (1.0 + truth.abs()), "{hit:?} vs {truth}");
        }
        let truth = brute_force(index.metric(), model, q, 10, |_| true);
        at1 += recall(&found[..1], &truth[..1]);
        at10 += recall(&found, &truth);
    }
    (at1 / queries.len() as f64, at10 / queries.len() as f64)
}

#[test]
fn recall_against_brute_force_under_each_metric() {
    let mut rng = Rng::new(1);
    for (metric, n, dims) in [(Metric::Cosine, 1500, 32), (Metric::L2, 1500, 24), (Metric::Dot, 800, 16)] {
        let mut vectors = clustered(&mut rng, n, dims);
        if metric == Metric::Dot {
            // Inner product ranks as cosine only on one sphere: give the vectors one length, as embeddings have.
            for v in &mut vectors {
                let norm = dot_ref(v, v).sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
            }
        }
        let (index, model) = build(metric, &vectors, HnswParams::default());
        let queries: Vec<Vec<f32>> =
            (0..100).map(|i| vectors[i * 7].iter().map(|x| x + 0.3 * rng.normal()).collect()).collect();
        let (at1, at10) = measure(&index, &model, &queries, 100);
        assert!(at1 >= 0.99 && at10 >= 0.99, "{metric:?}: recall@1 {at1}, recall@10 {at10} at ef 100");

        // A stored vector finds itself first: the best candidate is never dropped.
        for i in (0..n).step_by(50) {
            let found = index.search(&vectors[i], 1, 10).unwrap();
            let id = 1000 + 7 * i as u64;
            assert_eq!(found[0].id, id, "{metric:?}: vector {i} found {found:?}");
        }
    }
}

#[test]
fn recall_on_uniform_noise_with_small_m() {
    let mut rng = Rng::new(2);
    let vectors: Vec<Vec<f32>> = (0..2000).map(|_| random_vector(&mut rng, 16)).collect();
    let params = HnswParams { m: 8, ef_construction: 100, ..HnswParams::default() };
    let (index, model) = build(Metric::L2, &vectors, params);
    let queries: Vec<Vec<f32>> = (0..100).map(|_| random_vector(&mut rng, 16)).collect();
    let (at1, at10) = measure(&index, &model, &queries, 100);
    assert!(at1 >= 0.97 && at10 >= 0.97, "recall@1 {at1}, recall@10 {at10}");
    let (at1, at10) = measure(&index, &model, &queries, 300);
    assert!(at1 >= 0.99 && at10 >= 0.99, "ef 300: recall@1 {at1}, recall@10 {at10}");
}

#[test]
fn small_and_empty_indexes() {
    let mut index = Hnsw::new(Metric::Cosine, 3, HnswParams::default()).unwrap();
    assert!(index.search(&[1.0, 0.0, 0.0], 5, 10).unwrap().is_empty());
    index.insert(7, &[1.0, 0.0, 0.0]).unwrap();
    assert_eq!(index.search(&[2.0, 0.0, 0.0], 5, 10).unwrap(), vec![Hit { id: 7, distance: 0.0 }]);
    index.insert(8, &[0.0, 1.0, 0.0]).unwrap();
    let found = index.search(&[0.0, 3.0, 0.1], 5, 1).unwrap();
    assert_eq!(found.iter().map(|h| h.id).collect::<Vec<_>>(), [8, 7]);
    assert!(index.search(&[0.0, 3.0, 0.1], 0, 10).unwrap().is_empty());
    assert!(index.delete(7) && !index.delete(7));
    assert_eq!(index.search(&[1.0, 0.0, 0.0], 5, 10).unwrap().iter().map(|h| h.id).collect::<Vec<_>>(), [8]);
    assert!(index.delete(8));
    assert!(index.is_empty() && index.search(&[1.0, 0.0, 0.0], 5, 10).unwrap().is_empty());
    index.insert(9, &[0.0, 0.0, 1.0]).unwrap();
    assert_eq!(index.search(&[0.0, 0.0, 1.0], 5, 10).unwrap().iter().map(|h| h.id).collect::<Vec<_>>(), [9]);

    let code = |e: ruvllm::Error| e.code();
    assert_eq!(index.insert(9, &[1.0, 0.0, 0.0]).map_err(code), Err("E_INVALID_ARGUMENT"));
    assert_eq!(index.update(70, &[1.0, 0.0, 0.0]).map_err(code), Err("E_INVALID_ARGUMENT"));
    assert_eq!(index.insert(10, &[1.0, 0.0]).map_err(code), Err("E_INVALID_ARGUMENT"));
    assert_eq!(index.insert(10, &[1.0, f32::NAN, 0.0]).map_err(code), Err("E_INVALID_ARGUMENT"));
    assert_eq!(index.search(&[1.0; 4], 1, 1).map_err(code), Err("E_INVALID_ARGUMENT"));
    assert!(Hnsw::new(Metric::L2, 0, HnswParams::default()).is_err());
    assert!(Hnsw::new(Metric::L2, 4, HnswParams { m: 1, ..HnswParams::default() }).is_err());
}

/// Random inserts, deletes, updates and re-inserts of deleted ids, checked after each round against a plain map:
/// the live ids, no deleted id ever returned, every updated vector found at its new place, recall held.
#[test]
fn deletes_and_updates_stay_consistent() {
    let dims = 12;
    let mut rng = Rng::new(3);
    let mut index = Hnsw::new(Metric::L2, dims, HnswParams { m: 8, ef_construction: 64, seed: 3 }).unwrap();
    // Ordered, so that the ids picked are the same on every run.
    let mut model: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
    let mut gone: Vec<u64> = Vec::new();
    let mut next_id = 0u64;
    for round in 0..12 {
        let mut moved = Vec::new();
        for _ in 0..150 {
            let op = rng.next_u64() % 10;
            let v = random_vector(&mut rng, dims);
            if op < 5 || model.len() < 20 {
                let id = if !gone.is_empty() && op == 0 {
                    gone.swap_remove(0)
                } else {
                    next_id += 1;
                    next_id
                };
                index.insert(id, &v).unwrap();
                model.insert(id, v);
            } else if op < 8 {
                let id = *model.keys().nth(rng.next_u64() as usize % model.len()).unwrap();
                assert!(index.delete(id));
                model.remove(&id);
                gone.push(id);
            } else {
                let id = *model.keys().nth(rng.next_u64() as usize % model.len()).unwrap();
                index.update(id, &v).unwrap();
                model.insert(id, v);
                moved.push(id);
            }
        }
        assert_eq!(index.len(), model.len(), "round {round}");
        for id in &gone {
            assert!(!index.contains(*id) && !index.delete(*id));
        }
        // An updated vector is found by itself, as a point of an approximate index is: hnswlib's repair of the
        // neighbourhood it left can leave one of a few hundred unreachable at this small ef, among many deletes.
        let live: Vec<u64> = moved.iter().copied().filter(|id| model.contains_key(id)).collect();
        let mut missed = Vec::new();
        for id in &live {
            if index.search(&model[id], 1, 50).unwrap()[0].id != *id {
                missed.push(*id);
            }
            assert_eq!(index.vector(*id).unwrap(), &model[id][..]);
        }
        assert!(
            missed.len() * 50 <= live.len().max(50),
            "round {round}: updated ids {missed:?} of {} not found",
            live.len()
        );
        let queries: Vec<Vec<f32>> = (0..30).map(|_| random_vector(&mut rng, dims)).collect();
        let (_, at10) = measure(&index, &model, &queries, 100);
        assert!(at10 >= 0.98, "round {round}: recall@10 {at10} over {} live", model.len());
        for q in &queries {
            for hit in index.search(q, 50, 50).unwrap() {
                assert!(model.contains_key(&hit.id), "round {round}: a deleted id {} returned", hit.id);
            }
        }
    }
}

#[test]
fn a_filter_is_respected_and_keeps_recall() {
    let mut rng = Rng::new(4);
    let vectors = clustered(&mut rng, 1200, 16);
    let (index, model) = build(Metric::Cosine, &vectors, HnswParams::default());
    for (name, keep) in [
        ("a third", Box::new(|id: u64| id.is_multiple_of(3)) as Box<dyn Fn(u64) -> bool>),
        ("one in 50", Box::new(|id: u64| id % 50 == 3)),
        ("none", Box::new(|_| false)),
    ] {
        let mut total = 0.0;
        for _ in 0..40 {
            let q = random_vector(&mut rng, 16);
            let found = index.search_filtered(&q, 10, 100, Some(&*keep)).unwrap();
            assert!(found.iter().all(|h| keep(h.id)), "{name}: {found:?}");
            let truth = brute_force(Metric::Cosine, &model, &q, 10, &*keep);
            assert_eq!(found.len(), truth.len(), "{name}");
            total += if truth.is_empty() { 1.0 } else { recall(&found, &truth) };
        }
        assert!(total / 40.0 >= 0.99, "{name}: recall@10 {}", total / 40.0);
    }
}

#[test]
fn builds_are_deterministic() {
    let mut rng = Rng::new(5);
    let vectors = clustered(&mut rng, 300, 8);
    let (a, _) = build(Metric::L2, &vectors, HnswParams::default());
    let (b, _) = build(Metric::L2, &vectors, HnswParams::default());
    assert_eq!(a.to_bytes(), b.to_bytes());
    let (c, _) = build(Metric::L2, &vectors, HnswParams { seed: 99, ..HnswParams::default() });
    assert_ne!(a.to_bytes(), c.to_bytes());
}

/// An index with deletes and updates, then its blob read back: the same bytes, the same searches, and inserts
/// after the reload give what they give without it (the levels' generator is persisted).
#[test]
fn the_blob_round_trips() {
    let mut rng = Rng::new(6);
    let vectors = clustered(&mut rng, 700, 20);
    for metric in [Metric::Cosine, Metric::Dot, Metric::L2] {
        let (mut index, _) = build(metric, &vectors, HnswParams { m: 12, ef_construction: 80, seed: 6 });
        for i in 0..50 {
            index.delete(1000 + 7 * 3 * i);
            index.update(1000 + 7 * (3 * i + 1), &random_vector(&mut rng, 20)).unwrap();
        }
        let bytes = index.to_bytes();
        let mut back = Hnsw::from_bytes(&bytes).unwrap();
        assert_eq!(back.to_bytes(), bytes);
        assert_eq!((back.len(), back.metric(), back.dims(), back.params()), (index.len(), metric, 20, index.params()));
        for _ in 0..50 {
            let q = random_vector(&mut rng, 20);
            assert_eq!(back.search(&q, 10, 40).unwrap(), index.search(&q, 10, 40).unwrap());
        }
        for i in 0..100 {
            let v = random_vector(&mut rng, 20);
            index.insert(50_000 + i, &v).unwrap();
            back.insert(50_000 + i, &v).unwrap();
        }
        assert_eq!(back.to_bytes(), index.to_bytes(), "{metric:?}");
    }
}

/// A store fed with each `commit` (segments, header, then its stale records deleted) holds the index: reading its
/// records back gives the same index; a batch of a few inserts rewrites a few segments, not the whole index; a
/// commit cut short at any record reads back the previous commit's index.
#[test]
fn records_persist_incrementally() {
    let dims = 16;
    let mut rng = Rng::new(7);
    let mut index = Hnsw::new(Metric::Cosine, dims, HnswParams::default()).unwrap();
    let mut store: BTreeMap<RecordKey, Vec<u8>> = BTreeMap::new();
    let mut written = Vec::new();
    let read = |store: &BTreeMap<RecordKey, Vec<u8>>| Hnsw::from_records(store.iter().map(|(k, v)| (*k, &v[..])));
    for batch in 0..8 {
        let inserts = if batch == 0 { 1500 } else { 5 };
        for i in 0..inserts {
            index.insert(batch * 100_000 + i, &random_vector(&mut rng, dims)).unwrap();
        }
        if batch % 2 == 1 {
            index.delete(7);
            index.update(batch * 100_000, &random_vector(&mut rng, dims)).unwrap();
        }
        let commit = index.commit();
        assert!(commit
            .segments
            .iter()
            .all(|(k, _)| matches!(k, RecordKey::Vectors(_, g) | RecordKey::Links(_, g) if *g == commit.generation)));
        assert!(commit.segments.iter().all(|(k, _)| !store.contains_key(k)), "a commit overwrites nothing");
        written.push(commit.segments.iter().filter(|(k, _)| matches!(k, RecordKey::Vectors(..))).count());
        let before = store.clone();
        // Cut after each of its records: the index as the last commit left it.
        let steps: Vec<(RecordKey, Vec<u8>)> =
            commit.segments.iter().cloned().chain([(RecordKey::Header, commit.header.clone())]).collect();
        if batch > 0 {
            let previous = read(&before).unwrap().to_bytes();
            for cut in 0..steps.len() {
                let mut torn = before.clone();
                torn.extend(steps[..cut].iter().cloned());
                assert_eq!(read(&torn).unwrap().to_bytes(), previous, "batch {batch}, cut after {cut}");
            }
        }
        store.extend(steps);
        for key in &commit.stale {
            assert!(store.remove(key).is_some(), "{key} was stored");
        }
        assert_eq!(store.len(), 1 + index.segment_keys().len(), "the store holds the last commit only");
        let back = read(&store).unwrap();
        assert_eq!(back.to_bytes(), index.to_bytes(), "batch {batch}");
        // A commit of nothing is a new header alone.
        let empty = index.commit();
        assert!(empty.segments.is_empty() && empty.stale.is_empty());
        store.insert(RecordKey::Header, empty.header);
    }
    // Vectors are most of an index's bytes at embedding sizes: a batch rewrites those of the segments it wrote to.
    assert!(written[1..].iter().all(|&w| w <= 3), "vector records written per batch: {written:?}");

    // A record of an index of another shape, or a missing one, is refused.
    let (other, _) = build(Metric::Cosine, &clustered(&mut rng, 100, 8), HnswParams::default());
    let links0 = index.segment_keys()[1];
    let mut mixed = store.clone();
    mixed.insert(links0, other.records()[1].1.clone());
    assert!(matches!(read(&mixed), Err(IndexError::Foreign(_))));
    let vectors3 = index.segment_keys()[6];
    let mut missing = store.clone();
    missing.remove(&vectors3);
    assert_eq!(read(&missing).unwrap_err(), IndexError::Missing(vectors3));
    // A segment's record under another segment's key.
    let mut swapped = store.clone();
    let links2 = index.segment_keys()[5];
    swapped.insert(links2, store[&index.segment_keys()[3]].clone());
    assert!(matches!(read(&swapped), Err(IndexError::Foreign(_))));
}

/// Frame `body` (magic and version already in it) with its CRC-32, as the writer does.
fn reseal(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast_hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// CRC-32 (IEEE), bit by bit: the tests forge records without depending on the crate's checksum crate.
fn crc32fast_hash(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn every_truncation_and_bit_flip_is_an_error() {
    let mut rng = Rng::new(8);
    let vectors = clustered(&mut rng, 70, 4);
    let (mut index, _) = build(Metric::L2, &vectors, HnswParams { m: 4, ef_construction: 16, seed: 8 });
    index.delete(1000);
    let bytes = index.to_bytes();
    for len in 0..bytes.len() {
        assert!(Hnsw::from_bytes(&bytes[..len]).is_err(), "cut to {len} of {} bytes", bytes.len());
    }
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(Hnsw::from_bytes(&flipped).is_err(), "bit {bit} flipped");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(Hnsw::from_bytes(&longer).is_err());
    for (key, record) in index.records() {
        for len in 0..record.len() {
            let cut = Hnsw::from_records(
                index.records().iter().map(|(k, v)| (*k, if *k == key { &record[..len] } else { &v[..] })),
            );
            assert!(cut.is_err(), "{key:?} cut to {len}");
        }
    }
}

/// Blobs and records whose checksums are right but whose contents are foreign, of another version, or hostile
/// (lengths and counts past the bytes present, links out of range): each a typed error, none a huge allocation.
#[test]
fn foreign_and_hostile_blobs_are_typed_errors() {
    let mut rng = Rng::new(9);
    let (index, _) =
        build(Metric::Cosine, &clustered(&mut rng, 100, 6), HnswParams { m: 4, ef_construction: 16, seed: 9 });
    let bytes = index.to_bytes();
    let body = &bytes[..bytes.len() - 4];
    let forged = |at: usize, value: &[u8]| {
        let mut b = body.to_vec();
        b[at..at + value.len()].copy_from_slice(value);
        Hnsw::from_bytes(&reseal(b))
    };
    assert_eq!(forged(8, &3u32.to_le_bytes()).err(), Some(IndexError::Version(3)));
    assert_eq!(forged(8, &1u32.to_le_bytes()).err(), Some(IndexError::Version(1)), "version-1 blobs are refused");
    assert!(matches!(forged(0, b"RVLLMKV\0"), Err(IndexError::Format(_))));
    assert!(matches!(forged(12, &u32::MAX.to_le_bytes()), Err(IndexError::Format(_))), "a record count past the bytes");
    assert!(
        matches!(forged(16 + RecordKey::BYTES, &u32::MAX.to_le_bytes()), Err(IndexError::Format(_))),
        "a record length past the bytes"
    );
    assert!(matches!(Hnsw::from_bytes(b"RVHNSW\0\0"), Err(IndexError::Format(_))));
    assert!(matches!(Hnsw::from_bytes(&[]), Err(IndexError::Format(_))));

    // Records re-sealed with hostile fields: the header's slots, dims, M, metric, entry; a link out of range.
    let records = index.records();
    let header = &records.last().unwrap().1;
    let forge_header = |at: usize, value: &[u8]| {
        let mut h = header[..header.len() - 4].to_vec();
        h[at..at + value.len()].copy_from_slice(value);
        let h = reseal(h);
        let set: Vec<(RecordKey, &[u8])> =
            records.iter().map(|(k, v)| (*k, if *k == RecordKey::Header { &h[..] } else { &v[..] })).collect();
        Hnsw::from_records(set)
    };
    // Slots the records do not hold: the segment records disagree (the last is not full), or a link points past them.
    for slots in [u32::MAX - 1, 1000, 200, 101, 99] {
        let result = forge_header(52, &slots.to_le_bytes());
        assert!(matches!(result, Err(IndexError::Foreign(_) | IndexError::Format(_))), "{slots} slots: {result:?}");
    }
    for (at, value) in [(12, 7u32), (16, 0), (16, 1 << 30), (20, 0), (20, 1 << 20), (24, 0), (56, 100), (60, 99)] {
        assert!(forge_header(at, &value.to_le_bytes()).is_err(), "header field at {at} = {value}");
    }
    let links0 = &records[1].1;
    assert_eq!(records[1].0, RecordKey::Links(0, 0));
    // A links record's first slot (after the 40 bytes of its fixed part): id, deleted, level, count, links.
    for (at, value) in [
        (40 + 8 + 2, 9u16.to_le_bytes().to_vec()),
        (40 + 8 + 2 + 2, 100u32.to_le_bytes().to_vec()),
        (40 + 8, vec![2u8]),
    ] {
        let mut l = links0[..links0.len() - 4].to_vec();
        l[at..at + value.len()].copy_from_slice(&value);
        let l = reseal(l);
        let set = records.iter().map(|(k, v)| (*k, if *k == RecordKey::Links(0, 0) { &l[..] } else { &v[..] }));
        assert!(matches!(Hnsw::from_records(set), Err(IndexError::Format(_))), "links byte {at}");
    }
    let error: ruvllm::Error = IndexError::Checksum.into();
    assert_eq!(error.code(), "E_INDEX");
}

/// Prints a line natively and in wasm-bindgen-test's output on wasm32.
macro_rules! say {
    ($($arg:tt)*) => {{
        #[cfg(target_arch = "wasm32")]
        wasm_bindgen_test::console_log!($($arg)*);
        #[cfg(not(target_arch = "wasm32"))]
        println!($($arg)*);
    }};
}

/// Speed, not correctness (so ignored by default): 10,000 clustered vectors of 384 dimensions, cosine, M 16,
/// ef_construction 200, the build time and the mean time and recall@10 of 200 queries at several ef, natively or on
/// wasm32 (`cargo test --target wasm32-unknown-unknown -p ruvllm --test index -- --include-ignored speed`), where
/// `std::time::Instant` does not exist: hence `ruvllm::clock` and means over all queries (its wasm32 clock counts
/// whole milliseconds). benches/hnsw.rs is the native bench.
#[test]
#[ignore]
fn speed_at_10k_vectors_of_384() {
    use ruvllm::clock::now_ms;
    let (n, dims) = (10_000, 384);
    let mut rng = Rng::new(10);
    let centres: Vec<Vec<f32>> = (0..100).map(|_| random_vector(&mut rng, dims)).collect();
    let mut vector = |i: usize| -> Vec<f32> { centres[i % 100].iter().map(|c| c + 0.6 * rng.normal()).collect() };
    let vectors: Vec<Vec<f32>> = (0..n).map(&mut vector).collect();
    let queries: Vec<Vec<f32>> = (0..200).map(&mut vector).collect();
    let t = now_ms();
    let mut index = Hnsw::new(Metric::Cosine, dims, HnswParams::default()).unwrap();
    for (i, v) in vectors.iter().enumerate() {
        index.insert(i as u64, v).unwrap();
    }
    say!("hnsw speed: {n} x {dims} built in {:.0} ms", now_ms() - t);
    let truth: Vec<Vec<u64>> =
        queries.iter().map(|q| index.search_exact(q, 10, None).unwrap().iter().map(|h| h.id).collect()).collect();
    for ef in [10, 20, 40, 100] {
        let t = now_ms();
        let found: Vec<Vec<Hit>> = queries.iter().map(|q| index.search(q, 10, ef).unwrap()).collect();
        let mean_us = (now_ms() - t) * 1e3 / queries.len() as f64;
        let at10 = found.iter().zip(&truth).map(|(f, t)| recall(f, t)).sum::<f64>() / queries.len() as f64;
        say!("hnsw speed: ef {ef}: recall@10 {at10:.4}, {mean_us:.1} us a query");
    }
}
