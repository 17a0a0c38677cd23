//! The index as byte records for a store, and as one blob.
//!
//! A store keeps an index as records under keys, as it keeps the prefix cache's pages: one header and, for each
//! segment of `SEGMENT_SLOTS` slots, a record of its vectors and one of its links. An insert writes one slot's
//! vector but changes the links of up to `M` nodes on each of its levels, so vectors and links are apart: the
//! vectors (most of the bytes) are rewritten only for segments whose vectors changed, the links (about a tenth of
//! the bytes at 384 dimensions) for every segment a change touched. `take_changed_records` hands over the header
//! and the records changed since it was last called; `from_records` reads a whole set back.
//!
//! Every record is framed as the prefix cache's are (magic number, version, CRC-32 of all before it) and carries
//! the index's identity (`uid`, mixed from its metric, dims, parameters and seed), so records of an index of
//! another shape are refused (two indexes in one store still need keys of their own, as the prefix cache's do).
//! Each `take_changed_records` is one generation: its records and its header carry its number. Write the
//! segments before the header: a header then never names a segment the store lacks, and a write cut short leaves
//! segments newer than the header, which the reader refuses (`IndexError::NewerThanHeader`) instead of mixing
//! two states of the graph. Any set that does not fit together (a missing, foreign or damaged record) is an
//! `IndexError`, never a panic. //!
//! ```text
//! header   magic "RVHNSWH\0" | version u32 | metric u32 | dims u32 | M u32 | ef_construction u32 | seed u64
//!          | uid u64 | rng u64 | slots u32 | entry u32 (u32::MAX: none) | max level u32 | generation u64 | CRC-32
//! vectors  magic "RVHNSWV\0" | version u32 | uid u64 | segment u32 | slots n u32 | dims u32 | generation u64
//!          | n × dims f32 | CRC-32
//! links    magic "RVHNSWL\0" | version u32 | uid u64 | segment u32 | slots n u32 | M u32 | generation u64
//!          | per slot: id u64, deleted u8, level u8, per level 0..=level: count u16, count × u32 | CRC-32
//! blob     magic "RVHNSW\0\0" | version u32 | records u32 | per record: key (5 bytes), length u32, bytes | CRC-32
//! ```
//!
//! A reader allocates only for what the bytes hold: every count is checked against the bytes present (and
//! dims, M and levels against the index's limits) before anything is sized by it. Memory is still a multiple of
//! the bytes read, as the graph's lists have room for `M` (`2M` on level 0) links however few a record holds: at
//! most about 17 bytes per byte read at M 16, 260 at M 256 (a slot takes 16 bytes of records at least), against
//! about 1 for an index as written. All numbers little-endian.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::distance::Metric;
use super::hnsw::{Hnsw, HnswParams, MAX_DIMS, MAX_LEVEL, MAX_M};

/// Slots a vectors or links record holds (the last segment fewer).
pub const SEGMENT_SLOTS: usize = 64;
const VERSION: u32 = 1;
const HEADER_MAGIC: [u8; 8] = *b"RVHNSWH\0";
const VECTORS_MAGIC: [u8; 8] = *b"RVHNSWV\0";
const LINKS_MAGIC: [u8; 8] = *b"RVHNSWL\0";
const BLOB_MAGIC: [u8; 8] = *b"RVHNSW\0\0";
const HEADER_BYTES: usize = 76;
/// A segment record's fixed part: magic, version, uid, segment, slots, dims or M, generation.
const SEGMENT_HEAD: usize = 40;
const NO_ENTRY: u32 = u32::MAX;

/// Why bytes are not an index (or a record of this one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexError {
    /// Not a record or blob of this format: wrong magic, cut short, or its contents contradict themselves.
    Format(String),
    /// Written by another version of the format.
    Version(u32),
    /// The checksum does not match: the bytes were damaged.
    Checksum,
    /// A record of another index (another uid) or of another shape than its header.
    Foreign(String),
    /// A record the header needs is not in the set.
    Missing(RecordKey),
    /// A record of a later generation than the header: the store's last write stopped before its header.
    NewerThanHeader(RecordKey),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Format(m) => write!(f, "not an HNSW index record: {m}"),
            IndexError::Version(v) => write!(f, "an HNSW index record of version {v}; this build reads {VERSION}"),
            IndexError::Checksum => write!(f, "an HNSW index record's checksum does not match: it was damaged"),
            IndexError::Foreign(m) => write!(f, "an HNSW index record of another index: {m}"),
            IndexError::Missing(key) => write!(f, "the HNSW index's {key:?} record is missing"),
            IndexError::NewerThanHeader(key) => {
                write!(f, "the HNSW index's {key:?} record is newer than its header: a write was cut short")
            }
        }
    }
}

impl std::error::Error for IndexError {}

/// What a record holds; its bytes as a store's key are `to_bytes` (a store may hex them and add a prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    Header,
    Vectors(u32),
    Links(u32),
}

impl RecordKey {
    pub fn to_bytes(self) -> [u8; 5] {
        let (kind, segment) = match self {
            RecordKey::Header => (b'H', 0),
            RecordKey::Vectors(s) => (b'V', s),
            RecordKey::Links(s) => (b'L', s),
        };
        let mut out = [kind, 0, 0, 0, 0];
        out[1..].copy_from_slice(&segment.to_be_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<RecordKey> {
        let [kind, a, b, c, d] = *bytes else { return None };
        let segment = u32::from_be_bytes([a, b, c, d]);
        match kind {
            b'H' if segment == 0 => Some(RecordKey::Header),
            b'V' => Some(RecordKey::Vectors(segment)),
            b'L' => Some(RecordKey::Links(segment)),
            _ => None,
        }
    }
}

/// Reads numbers from a record's bytes, refusing to read past them.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format(format!("cut short at byte {} (needs {n} more)", self.at)))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    pub(super) fn u8(&mut self) -> Result<u8, IndexError> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, IndexError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub(super) fn u32(&mut self) -> Result<u32, IndexError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub(super) fn u64(&mut self) -> Result<u64, IndexError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(super) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
}

pub(super) fn format(message: String) -> IndexError {
    IndexError::Format(message)
}

pub(super) fn begin(magic: &[u8; 8]) -> Vec<u8> {
    let mut out = magic.to_vec();
    out.extend_from_slice(&VERSION.to_le_bytes());
    out
}

pub(super) fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A record's body (after magic and version, before the checksum), its frame checked.
pub(super) fn unseal<'a>(bytes: &'a [u8], magic: &[u8; 8], what: &str) -> Result<Reader<'a>, IndexError> {
    if bytes.len() < 16 || bytes[..8] != *magic {
        return Err(format(format!("{} bytes without the magic number of an index {what}", bytes.len())));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(IndexError::Version(version));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(IndexError::Checksum);
    }
    Ok(Reader { bytes: body, at: 12 })
}

pub(super) fn push_u32(out: &mut Vec<u8>, x: u32) {
    out.extend_from_slice(&x.to_le_bytes());
}

pub(super) fn push_u64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// The header's fields as read, before the segments are.
struct Header {
    metric: Metric,
    dims: usize,
    params: HnswParams,
    uid: u64,
    rng: u64,
    slots: usize,
    entry: Option<u32>,
    max_level: usize,
    generation: u64,
}

impl Hnsw {
    /// Segments the index's slots fill.
    fn segments(&self) -> u32 {
        self.ids.len().div_ceil(SEGMENT_SLOTS) as u32
    }

    /// Every record of the index, the header last (the order a store should write them in).
    pub fn records(&self) -> Vec<(RecordKey, Vec<u8>)> {
        let mut out = Vec::new();
        for s in 0..self.segments() {
            out.push((RecordKey::Vectors(s), self.vectors_record(s)));
            out.push((RecordKey::Links(s), self.links_record(s)));
        }
        out.push((RecordKey::Header, self.header_record()));
        out
    }

    /// The records changed since the last call (or since the index was made or read), the header last; empty if
    /// nothing changed. A store that writes them all has the index as it is now.
    pub fn take_changed_records(&mut self) -> Vec<(RecordKey, Vec<u8>)> {
        let segment = |s: &u32| *s / SEGMENT_SLOTS as u32;
        let vectors: BTreeSet<u32> = std::mem::take(&mut self.changed.vectors).iter().map(segment).collect();
        let links: BTreeSet<u32> = std::mem::take(&mut self.changed.links).iter().map(segment).collect();
        if vectors.is_empty() && links.is_empty() {
            return Vec::new();
        }
        self.generation += 1;
        let mut out: Vec<_> = vectors.into_iter().map(|s| (RecordKey::Vectors(s), self.vectors_record(s))).collect();
        out.extend(links.into_iter().map(|s| (RecordKey::Links(s), self.links_record(s))));
        out.push((RecordKey::Header, self.header_record()));
        out
    }

    /// The identity every record of this index carries: its parameters, mixed.
    pub(super) fn uid(&self) -> u64 {
        let mut h = self.params.seed ^ 0x5851_F42D_4C95_7F2D;
        for x in [self.metric as u64, self.dims as u64, self.params.m as u64, self.params.ef_construction as u64] {
            h = (h ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
        }
        h
    }

    fn header_record(&self) -> Vec<u8> {
        let mut out = begin(&HEADER_MAGIC);
        for x in [self.metric as u32, self.dims as u32, self.params.m as u32, self.params.ef_construction as u32] {
            push_u32(&mut out, x);
        }
        for x in [self.params.seed, self.uid(), self.rng] {
            push_u64(&mut out, x);
        }
        for x in [self.ids.len() as u32, self.entry.unwrap_or(NO_ENTRY), self.max_level as u32] {
            push_u32(&mut out, x);
        }
        push_u64(&mut out, self.generation);
        seal(out)
    }

    fn segment_slots(&self, segment: u32) -> std::ops::Range<usize> {
        let first = segment as usize * SEGMENT_SLOTS;
        first..(first + SEGMENT_SLOTS).min(self.ids.len())
    }

    fn segment_head(&self, magic: &[u8; 8], segment: u32, last: u32) -> Vec<u8> {
        let mut out = begin(magic);
        push_u64(&mut out, self.uid());
        push_u32(&mut out, segment);
        push_u32(&mut out, self.segment_slots(segment).len() as u32);
        push_u32(&mut out, last);
        push_u64(&mut out, self.generation);
        out
    }

    fn vectors_record(&self, segment: u32) -> Vec<u8> {
        let mut out = self.segment_head(&VECTORS_MAGIC, segment, self.dims as u32);
        let slots = self.segment_slots(segment);
        out.extend(self.vectors[slots.start * self.dims..slots.end * self.dims].iter().flat_map(|x| x.to_le_bytes()));
        seal(out)
    }

    fn links_record(&self, segment: u32) -> Vec<u8> {
        let mut out = self.segment_head(&LINKS_MAGIC, segment, self.params.m as u32);
        for slot in self.segment_slots(segment) {
            push_u64(&mut out, self.ids[slot]);
            out.push(self.deleted[slot] as u8);
            out.push(self.levels[slot]);
            for level in 0..=self.levels[slot] as usize {
                let neighbours = self.neighbours(slot as u32, level);
                out.extend_from_slice(&(neighbours.len() as u16).to_le_bytes());
                for &n in neighbours {
                    push_u32(&mut out, n);
                }
            }
        }
        seal(out)
    }

    /// The whole index as one blob (its records, framed and checksummed together).
    pub fn to_bytes(&self) -> Vec<u8> {
        let records = self.records();
        let mut out = begin(&BLOB_MAGIC);
        push_u32(&mut out, records.len() as u32);
        for (key, bytes) in &records {
            out.extend_from_slice(&key.to_bytes());
            push_u32(&mut out, bytes.len() as u32);
            out.extend_from_slice(bytes);
        }
        seal(out)
    }

    /// Read a blob of `to_bytes`, checking all of it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Hnsw, IndexError> {
        let mut r = unseal(bytes, &BLOB_MAGIC, "blob")?;
        let count = r.u32()? as usize;
        let mut records = Vec::new();
        for _ in 0..count {
            let key = r.take(5)?;
            let key = RecordKey::from_bytes(key).ok_or_else(|| format(format!("an unknown record key {key:?}")))?;
            let len = r.u32()? as usize;
            records.push((key, r.take(len)?));
        }
        if r.left() != 0 {
            return Err(format(format!("{} bytes after the blob's records", r.left())));
        }
        Hnsw::from_records(records)
    }

    /// Read an index from its records (each key once; records of other keys are an error), checking all of them
    /// against each other before anything is believed.
    pub fn from_records<'a>(records: impl IntoIterator<Item = (RecordKey, &'a [u8])>) -> Result<Hnsw, IndexError> {
        let mut by_key: BTreeMap<RecordKey, &[u8]> = BTreeMap::new();
        for (key, bytes) in records {
            if by_key.insert(key, bytes).is_some() {
                return Err(format(format!("two {key:?} records")));
            }
        }
        let header = read_header(by_key.remove(&RecordKey::Header).ok_or(IndexError::Missing(RecordKey::Header))?)?;
        let segments = header.slots.div_ceil(SEGMENT_SLOTS) as u32;
        if let Some((key, _)) =
            by_key.iter().find(|(k, _)| matches!(k, RecordKey::Vectors(s) | RecordKey::Links(s) if *s >= segments))
        {
            return Err(IndexError::Foreign(format!("a {key:?} record past the header's {} slots", header.slots)));
        }
        let mut index = Hnsw::new(header.metric, header.dims, header.params)
            .map_err(|e| format(format!("the header's parameters: {e}")))?;
        if index.uid() != header.uid {
            return Err(format("the header's uid does not match its parameters".into()));
        }
        let (m, m0) = (header.params.m, 2 * header.params.m);
        // A node's levels above 0 number 1 / (M - 1) on average (at most 1, for M 2): more than twice the slots is
        // a forgery that would only cost memory. (Saturating: `slots` may be near u32::MAX, and usize is 32 bits on
        // wasm32.)
        let (mut upper_levels, most_upper_levels) = (0, header.slots.saturating_mul(2).saturating_add(64));
        for segment in 0..segments {
            let first = segment as usize * SEGMENT_SLOTS;
            let slots = SEGMENT_SLOTS.min(header.slots - first);
            let take = |key| by_key.get(&key).copied().ok_or(IndexError::Missing(key));
            let vectors = take(RecordKey::Vectors(segment))?;
            let links = take(RecordKey::Links(segment))?;
            let mut r = segment_body(vectors, RecordKey::Vectors(segment), &header, slots)?;
            let want = slots * header.dims * 4;
            if r.left() != want {
                return Err(format(format!("vectors of segment {segment}: {} bytes for {want}", r.left())));
            }
            for x in r.take(want)?.chunks_exact(4) {
                let x = f32::from_le_bytes(x.try_into().expect("4 bytes"));
                if !x.is_finite() {
                    return Err(format(format!("vectors of segment {segment}: a value {x}")));
                }
                index.vectors.push(x);
            }
            let mut r = segment_body(links, RecordKey::Links(segment), &header, slots)?;
            for _ in 0..slots {
                let (id, deleted, level) = (r.u64()?, r.u8()?, r.u8()? as usize);
                upper_levels += level;
                if deleted > 1 || level > MAX_LEVEL || upper_levels > most_upper_levels {
                    return Err(format(format!("segment {segment}: a slot deleted {deleted} at level {level}")));
                }
                index.ids.push(id);
                index.deleted.push(deleted == 1);
                index.levels.push(level as u8);
                let slot = index.links0.len() / (1 + m0);
                let mut upper = Vec::new();
                for l in 0..=level {
                    let cap = if l == 0 { m0 } else { m };
                    let count = r.u16()? as usize;
                    if count > cap {
                        return Err(format(format!("slot {slot}: {count} links on level {l} (at most {cap})")));
                    }
                    let list = if l == 0 { &mut index.links0 } else { &mut upper };
                    list.push(count as u32);
                    for _ in 0..count {
                        let n = r.u32()?;
                        if n as usize >= header.slots || n as usize == slot {
                            return Err(format(format!("slot {slot}: a link to {n} of {} slots", header.slots)));
                        }
                        list.push(n);
                    }
                    list.resize(list.len() + cap - count, 0);
                }
                index.upper.push(upper);
            }
            if r.left() != 0 {
                return Err(format(format!("links of segment {segment}: {} bytes after its slots", r.left())));
            }
        }
        // Each link's target has the level it is linked on; one live slot per id; the entry on the top level.
        for slot in 0..header.slots as u32 {
            for l in 0..=index.levels[slot as usize] as usize {
                if let Some(&n) = index.neighbours(slot, l).iter().find(|&&n| (index.levels[n as usize] as usize) < l) {
                    return Err(format(format!("slot {slot} links to {n} on level {l}, above that slot's level")));
                }
            }
            if index.deleted[slot as usize] {
                index.free.insert(slot);
            } else if index.slot_of.insert(index.ids[slot as usize], slot).is_some() {
                return Err(format(format!("two live slots of id {}", index.ids[slot as usize])));
            }
        }
        let top = index.levels.iter().copied().max().map_or(0, usize::from);
        match header.entry {
            None if header.slots == 0 && header.max_level == 0 => {}
            Some(e)
                if (e as usize) < header.slots
                    && index.levels[e as usize] as usize == header.max_level
                    && header.max_level == top =>
            {
                index.entry = Some(e);
                index.max_level = header.max_level;
            }
            _ => {
                return Err(format(format!(
                    "an entry {:?} at level {} of {} slots",
                    header.entry, header.max_level, header.slots
                )))
            }
        }
        index.rng = header.rng;
        index.generation = header.generation;
        index.requantize();
        Ok(index)
    }
}

fn read_header(bytes: &[u8]) -> Result<Header, IndexError> {
    if bytes.len() != HEADER_BYTES && bytes.starts_with(&HEADER_MAGIC) {
        return Err(format(format!("a header of {} bytes (not {HEADER_BYTES})", bytes.len())));
    }
    let mut r = unseal(bytes, &HEADER_MAGIC, "header")?;
    let metric = r.u32()?;
    let metric = u8::try_from(metric).ok().and_then(Metric::from_id);
    let metric = metric.ok_or_else(|| format("an unknown metric".into()))?;
    let (dims, m, ef_construction) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
    if dims == 0 || dims > MAX_DIMS || !(2..=MAX_M).contains(&m) || ef_construction == 0 {
        return Err(format(format!("dims {dims}, M {m}, ef_construction {ef_construction}")));
    }
    let (seed, uid, rng) = (r.u64()?, r.u64()?, r.u64()?);
    let (slots, entry, max_level, generation) = (r.u32()? as usize, r.u32()?, r.u32()? as usize, r.u64()?);
    if max_level > MAX_LEVEL || (slots == 0) != (entry == NO_ENTRY) || slots >= NO_ENTRY as usize {
        return Err(format(format!("{slots} slots, entry {entry}, max level {max_level}")));
    }
    let entry = (entry != NO_ENTRY).then_some(entry);
    let params = HnswParams { m, ef_construction, seed };
    Ok(Header { metric, dims, params, uid, rng, slots, entry, max_level, generation })
}

/// The body after the fixed part of the segment record `key` (vectors or links), which must name `header`'s
/// index, the segment, its `slots`, the dims (vectors) or M (links), and a generation no later than the header's.
fn segment_body<'a>(bytes: &'a [u8], key: RecordKey, header: &Header, slots: usize) -> Result<Reader<'a>, IndexError> {
    let (magic, segment, last) = match key {
        RecordKey::Vectors(segment) => (&VECTORS_MAGIC, segment, header.dims),
        RecordKey::Links(segment) => (&LINKS_MAGIC, segment, header.params.m),
        RecordKey::Header => return Err(format("a header where a segment belongs".into())),
    };
    let mut r = unseal(bytes, magic, "segment")?;
    if r.bytes.len() < SEGMENT_HEAD {
        return Err(format(format!("a segment record of {} bytes", bytes.len())));
    }
    let (their_uid, their_segment, their_slots, their_last) =
        (r.u64()?, r.u32()?, r.u32()? as usize, r.u32()? as usize);
    let uid = header.uid;
    if their_uid != uid || their_segment != segment || their_slots != slots || their_last != last {
        return Err(IndexError::Foreign(format!(
            "segment {their_segment} of {their_slots} slots ({their_last}) of index {their_uid:016x} where the header \
             wants segment {segment} of {slots} ({last}) of {uid:016x}"
        )));
    }
    if r.u64()? > header.generation {
        return Err(IndexError::NewerThanHeader(key));
    }
    Ok(r)
}
