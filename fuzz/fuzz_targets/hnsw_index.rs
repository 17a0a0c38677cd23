#![no_main]
//! Any bytes as a persisted HNSW index (`Hnsw::from_bytes`, what a store gives back), and the record reader on
//! records whose checksums are right but whose contents the input edits: a small index is built from the input's
//! first bytes, its records (`Hnsw::records`) are edited at the offsets the rest of the input names and re-sealed,
//! then read back with `Hnsw::from_records`. Either is refused with a typed error, or the index it gives searches,
//! takes inserts, updates and deletes, and writes itself back to the same bytes.

use libfuzzer_sys::fuzz_target;
use ruvllm::index::{Hnsw, HnswParams, Metric};

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
});

/// Search, write back, then change an index read from outside: nothing may panic, results stay sorted and live.
fn exercise(mut index: Hnsw) {
    let bytes = index.to_bytes();
    assert_eq!(Hnsw::from_bytes(&bytes).expect("a blob it wrote").to_bytes(), bytes);
    let query: Vec<f32> = (0..index.dims()).map(|i| (i as f32 * 0.37).sin()).collect();
    for round in 0..2u64 {
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
