//! The index as byte records for a store, and as one blob.
//!
//! A store keeps an index as records under keys, as it keeps the prefix cache's pages: one header and, for each
//! segment of `SEGMENT_SLOTS` slots, a record of its vectors and one of its links. An insert writes one slot's
//! vector but changes the links of up to `M` nodes on each of its levels, so vectors and links are apart: the
//! vectors (most of the bytes) are rewritten only for segments whose vectors changed, the links (about a tenth of
//! the bytes at 384 dimensions) for every segment a change touched.
//!
//! Versioned commits. `commit` hands over one generation: the segment records changed since the last commit,
//! each under a key that carries the generation (`RecordKey::Vectors(segment, generation)`), and a header naming
//! the generation of every segment's records. The header is the commit point: a store writes it last (under
//! `RecordKey::Header`; a collection puts it inside its meta record), and it is the one record a commit rewrites
//! in place (LevelDB's `CURRENT` file plays that part). So a commit never overwrites a record the stored header
//! names: a write cut short at any record (a killed process, a closed tab), or one refused half way, leaves the
//! previous header and all it names as they were, and what it did write is garbage no header names. `stale` lists
//! the records the new header no longer names: a store deletes them only after the header is stored. A reader
//! reads exactly the state its header names and ignores every other record (`segment_keys` are those it used: the
//! rest are garbage a writer may delete).
//!
//! Every record is framed as every persisted record is (`crate::record`: magic number, version, CRC-32 of all
//! before it) and carries the index's identity (`uid`, mixed from its metric, dims, parameters and seed), so records
//! of an index of another shape are refused (two indexes in one store still need keys of their own, as the prefix
//! cache's do). Any set that does not fit together (a missing, foreign or damaged record) is an `IndexError`, never a
//! panic.
//! ```text
//! header   magic "RVHNSWH\0" | version u32 (2) | metric u32 | dims u32 | M u32 | ef_construction u32 | seed u64
//!          | uid u64 | rng u64 | slots u32 | entry u32 (u32::MAX: none) | max level u32 | generation u64
//!          | per segment: its vectors record's generation u64, its links record's u64 | CRC-32
//! vectors  magic "RVHNSWV\0" | version u32 | uid u64 | segment u32 | slots n u32 | dims u32 | generation u64
//!          | n × dims f32 (finite) | CRC-32
//! links    magic "RVHNSWL\0" | version u32 | uid u64 | segment u32 | slots n u32 | M u32 | generation u64
//!          | per slot: id u64, deleted u8, level u8, per level 0..=level: count u16, count × u32 | CRC-32
//! key      kind u8 ('H', 'V', 'L') | segment u32 | generation u64, big-endian (the header's: 'H' and zeros)
//! blob     magic "RVHNSW\0\0" | version u32 | records u32 | per record: key (13 bytes), length u32, bytes | CRC-32
//! ```
//! Version 1 (before issue 36) had neither the header's list nor generations in keys (5 bytes: kind, segment):
//! segments were overwritten in place before the header, so a write cut short left segments newer than the header
//! and the reader refused the whole index. A collection still reads a version-1 store (`read_v1`) and writes it
//! anew as version 2 at its next commit; a version-1 blob is refused (`IndexError::Version`).
//!
//! A reader allocates only for what the bytes hold: the header's segment list is its own bytes, every record it
//! names must be present (each vectors record of exactly its length) before anything is sized by the header's
//! counts, and those allocations are fallible (`try_reserve`: too little memory is `IndexError::OutOfMemory`, not a
//! trap). Memory is still a multiple of the bytes read, as the graph's lists have room for `M` (`2M` on level 0)
//! links however few a record holds: at most about 17 bytes per byte read at M 16, 260 at M 256 (a slot takes 16
//! bytes of records at least), against about 1 for an index as written. Every f32 is checked finite as it is read
//! (NaN or infinity would poison every distance to it), in one pass without branches over each segment's values:
//! measured natively on 16 MiB of vectors, the copy takes 0.8 ms and the check 0.45 ms more, about one and a half
//! times the CRC-32 over the same bytes (0.3 ms; the copy value by value with the check inside took 3.5 ms). All
//! numbers little-endian but the keys'.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::distance::Metric;
use super::hnsw::{Hnsw, HnswParams, MAX_DIMS, MAX_LEVEL, MAX_M};
use crate::record::{f32_at, seal, u32_at, u64_at, FrameError, Kind, HEAD};

/// Slots a vectors or links record holds (the last segment fewer).
pub const SEGMENT_SLOTS: usize = 64;
pub(super) const VERSION: u32 = 2;
/// The format before versioned commits: read by a collection, never written.
pub(super) const V1: u32 = 1;
const HEADER_KIND: Kind = kind(*b"RVHNSWH\0", "an index header");
const VECTORS_KIND: Kind = kind(*b"RVHNSWV\0", "an index segment");
const LINKS_KIND: Kind = kind(*b"RVHNSWL\0", "an index segment");
/// A blob is read in this version only.
const BLOB_KIND: Kind = Kind { oldest: VERSION, ..kind(*b"RVHNSW\0\0", "an index blob") };
/// A header's bytes without its segment list (all of a version-1 header).
const HEADER_FIXED: usize = 76;
/// A segment record's fixed part: magic, version, uid, segment, slots, dims or M, generation.
const SEGMENT_HEAD: usize = 40;
const NO_ENTRY: u32 = u32::MAX;
/// The largest records of each kind: 64 slots of `MAX_DIMS` values; of `MAX_LEVEL` levels of `MAX_M` links.
pub(super) const MAX_VECTORS_RECORD: usize = SEGMENT_HEAD + SEGMENT_SLOTS * MAX_DIMS * 4 + 4;
pub(super) const MAX_LINKS_RECORD: usize =
    SEGMENT_HEAD + SEGMENT_SLOTS * (10 + (MAX_LEVEL + 1) * 2 + (2 * MAX_M + MAX_LEVEL * MAX_M) * 4) + 4;

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
    /// A version-1 record of a later generation than its header: that store's last write stopped before its
    /// header, and version 1 overwrote what the header needed (version 2 never does).
    NewerThanHeader(RecordKey),
    /// What the records hold does not fit in memory: `bytes` for `what`.
    OutOfMemory { bytes: usize, what: String },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Format(m) => write!(f, "not an HNSW index record: {m}"),
            IndexError::Version(v) => {
                write!(f, "an HNSW index record of version {v}; this build reads 1 and {VERSION}")
            }
            IndexError::Checksum => write!(f, "an HNSW index record's checksum does not match: it was damaged"),
            IndexError::Foreign(m) => write!(f, "an HNSW index record of another index: {m}"),
            IndexError::Missing(key) => write!(f, "the HNSW index's {key} record is missing"),
            IndexError::NewerThanHeader(key) => {
                write!(f, "the HNSW index's {key} record is newer than its header: a version-1 write was cut short")
            }
            IndexError::OutOfMemory { bytes, what } => write!(f, "no memory for {bytes} bytes of {what}"),
        }
    }
}

impl std::error::Error for IndexError {}

impl From<FrameError> for IndexError {
    fn from(e: FrameError) -> IndexError {
        match e {
            FrameError::Version { version, .. } => IndexError::Version(version),
            FrameError::Checksum { .. } => IndexError::Checksum,
            e => format(e.to_string()),
        }
    }
}

/// What a record holds, and for segments the generation that wrote it; its bytes as a store's key are `to_bytes`
/// (a store may hex them and add a prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    Header,
    /// A segment's vectors, as generation `.1` wrote them.
    Vectors(u32, u64),
    /// A segment's links, as generation `.1` wrote them.
    Links(u32, u64),
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKey::Header => write!(f, "header"),
            RecordKey::Vectors(s, g) => write!(f, "segment {s} vectors (generation {g})"),
            RecordKey::Links(s, g) => write!(f, "segment {s} links (generation {g})"),
        }
    }
}

impl RecordKey {
    pub const BYTES: usize = 13;

    pub fn to_bytes(self) -> [u8; RecordKey::BYTES] {
        let (kind, segment, generation) = match self {
            RecordKey::Header => (b'H', 0, 0),
            RecordKey::Vectors(s, g) => (b'V', s, g),
            RecordKey::Links(s, g) => (b'L', s, g),
        };
        let mut out = [kind; RecordKey::BYTES];
        out[1..5].copy_from_slice(&segment.to_be_bytes());
        out[5..].copy_from_slice(&generation.to_be_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<RecordKey> {
        let bytes: &[u8; RecordKey::BYTES] = bytes.try_into().ok()?;
        let segment = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let generation = u64::from_be_bytes(bytes[5..].try_into().expect("8 bytes"));
        match bytes[0] {
            b'H' if segment == 0 && generation == 0 => Some(RecordKey::Header),
            b'V' => Some(RecordKey::Vectors(segment, generation)),
            b'L' => Some(RecordKey::Links(segment, generation)),
            _ => None,
        }
    }

    /// A version-1 key (kind, segment), its segments as generation 0 (which version 2 never writes to a store).
    pub(super) fn from_v1_bytes(bytes: &[u8]) -> Option<RecordKey> {
        let [kind, a, b, c, d] = *bytes else { return None };
        let segment = u32::from_be_bytes([a, b, c, d]);
        match kind {
            b'H' if segment == 0 => Some(RecordKey::Header),
            b'V' => Some(RecordKey::Vectors(segment, 0)),
            b'L' => Some(RecordKey::Links(segment, 0)),
            _ => None,
        }
    }

    /// The largest valid record under this key in a collection's store (whose version-2 header rides in its meta
    /// record, so a header there is version 1's).
    pub(super) fn max_bytes(self) -> usize {
        match self {
            RecordKey::Header => HEADER_FIXED,
            RecordKey::Vectors(..) => MAX_VECTORS_RECORD,
            RecordKey::Links(..) => MAX_LINKS_RECORD,
        }
    }
}

/// One commit of an index: put `segments`, then the header (its commit point), then delete `stale`.
#[derive(Debug)]
pub struct Commit {
    /// The generation every record of this commit carries.
    pub generation: u64,
    /// Segment records, each under a key of its own (nothing a stored header names is overwritten).
    pub segments: Vec<(RecordKey, Vec<u8>)>,
    /// The header naming every segment's records: under `RecordKey::Header`, or inside a collection's meta record.
    pub header: Vec<u8>,
    /// Records the previous header named and this one does not: delete them once the header is stored.
    pub stale: Vec<RecordKey>,
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
        Ok(u32_at(self.take(4)?, 0))
    }
    pub(super) fn u64(&mut self) -> Result<u64, IndexError> {
        Ok(u64_at(self.take(8)?, 0))
    }
    /// An f32 that must be finite (`what` names it in the error).
    pub(super) fn finite(&mut self, what: &dyn fmt::Display) -> Result<f32, IndexError> {
        let x = f32_at(self.take(4)?, 0);
        if !x.is_finite() {
            return Err(format(format!("{what} holds a value {x}")));
        }
        Ok(x)
    }
    pub(super) fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
}

pub(super) fn format(message: String) -> IndexError {
    IndexError::Format(message)
}

/// Room for `n` more items in `v`, or `IndexError::OutOfMemory` (never an abort: `n` comes from outside bytes).
pub(super) fn reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<(), IndexError> {
    v.try_reserve_exact(n)
        .map_err(|_| IndexError::OutOfMemory { bytes: n.saturating_mul(std::mem::size_of::<T>()), what: what.into() })
}

/// An index record of a kind (`what` with its article), read in both versions; its fields are checked as they
/// are read.
pub(super) const fn kind(magic: [u8; 8], what: &'static str) -> Kind {
    Kind { what, magic, version: VERSION, oldest: V1, header: HEAD }
}

/// A record of `kind` once its frame holds: its version, and a reader of its fields.
pub(super) fn open<'a>(kind: &Kind, bytes: &'a [u8]) -> Result<(u32, Reader<'a>), IndexError> {
    let (version, body) = kind.open(bytes)?;
    Ok((version, Reader { bytes: body, at: HEAD }))
}

pub(super) fn push_u32(out: &mut Vec<u8>, x: u32) {
    out.extend_from_slice(&x.to_le_bytes());
}

pub(super) fn push_u64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// The header's fields as read, before the segments are.
struct Header {
    version: u32,
    metric: Metric,
    dims: usize,
    params: HnswParams,
    uid: u64,
    rng: u64,
    slots: usize,
    entry: Option<u32>,
    max_level: usize,
    generation: u64,
    /// The generations of each segment's vectors and links records (version 2; version 1's are all 0).
    stored: Vec<[u64; 2]>,
}

impl Header {
    fn segments(&self) -> usize {
        self.slots.div_ceil(SEGMENT_SLOTS)
    }

    fn key(&self, segment: usize, links: bool) -> RecordKey {
        let generations = self.stored.get(segment).copied().unwrap_or_default();
        match links {
            false => RecordKey::Vectors(segment as u32, generations[0]),
            true => RecordKey::Links(segment as u32, generations[1]),
        }
    }
}

impl Hnsw {
    /// Segments the index's slots fill.
    fn segments(&self) -> u32 {
        self.ids.len().div_ceil(SEGMENT_SLOTS) as u32
    }

    /// The generations of segment `s`'s stored records (0: none).
    fn stored(&self, s: u32) -> [u64; 2] {
        self.stored.get(s as usize).copied().unwrap_or_default()
    }

    /// Every record of the index as it is, under the keys its last commit stored (or read) them under, the header
    /// last: a self-contained set for a blob, not a commit (see `commit_all`).
    pub fn records(&self) -> Vec<(RecordKey, Vec<u8>)> {
        let mut out = Vec::new();
        for s in 0..self.segments() {
            let [v, l] = self.stored(s);
            out.push((RecordKey::Vectors(s, v), self.vectors_record(s, v)));
            out.push((RecordKey::Links(s, l), self.links_record(s, l)));
        }
        out.push((RecordKey::Header, self.header_record()));
        out
    }

    /// The segment records the index's last commit (or read) stored, which its header names.
    pub fn segment_keys(&self) -> Vec<RecordKey> {
        (0..self.segments())
            .flat_map(|s| [RecordKey::Vectors(s, self.stored(s)[0]), RecordKey::Links(s, self.stored(s)[1])])
            .collect()
    }

    /// The next generation: the segments changed since the last commit (and any the store does not hold yet),
    /// each under a key of this generation, and a header naming every segment's records.
    pub fn commit(&mut self) -> Commit {
        self.commit_segments(false)
    }

    /// `commit` with every segment written anew, for a store that lost track of what it holds.
    pub fn commit_all(&mut self) -> Commit {
        self.commit_segments(true)
    }

    fn commit_segments(&mut self, all: bool) -> Commit {
        let segments = self.segments();
        let segment = |s: &u32| *s / SEGMENT_SLOTS as u32;
        let vectors: BTreeSet<u32> = std::mem::take(&mut self.changed.vectors).iter().map(segment).collect();
        let links: BTreeSet<u32> = std::mem::take(&mut self.changed.links).iter().map(segment).collect();
        self.generation += 1;
        let generation = self.generation;
        self.stored.resize(segments as usize, [0, 0]);
        let (mut put, mut stale) = (Vec::new(), Vec::new());
        for (which, changed) in [vectors, links].into_iter().enumerate() {
            for s in 0..segments {
                if !(all || changed.contains(&s) || self.stored[s as usize][which] == 0) {
                    continue;
                }
                let old = std::mem::replace(&mut self.stored[s as usize][which], generation);
                let (key, bytes) = match which {
                    0 => (RecordKey::Vectors(s, generation), self.vectors_record(s, generation)),
                    _ => (RecordKey::Links(s, generation), self.links_record(s, generation)),
                };
                put.push((key, bytes));
                if old != 0 {
                    stale.push(if which == 0 { RecordKey::Vectors(s, old) } else { RecordKey::Links(s, old) });
                }
            }
        }
        Commit { generation, segments: put, header: self.header_record(), stale }
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
        let mut out = HEADER_KIND.begin();
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
        for s in 0..self.segments() {
            let [v, l] = self.stored(s);
            push_u64(&mut out, v);
            push_u64(&mut out, l);
        }
        seal(out)
    }

    fn segment_slots(&self, segment: u32) -> std::ops::Range<usize> {
        let first = segment as usize * SEGMENT_SLOTS;
        first..(first + SEGMENT_SLOTS).min(self.ids.len())
    }

    fn segment_head(&self, kind: &Kind, segment: u32, last: u32, generation: u64) -> Vec<u8> {
        let mut out = kind.begin();
        push_u64(&mut out, self.uid());
        push_u32(&mut out, segment);
        push_u32(&mut out, self.segment_slots(segment).len() as u32);
        push_u32(&mut out, last);
        push_u64(&mut out, generation);
        out
    }

    fn vectors_record(&self, segment: u32, generation: u64) -> Vec<u8> {
        let mut out = self.segment_head(&VECTORS_KIND, segment, self.dims as u32, generation);
        let slots = self.segment_slots(segment);
        out.extend(self.vectors[slots.start * self.dims..slots.end * self.dims].iter().flat_map(|x| x.to_le_bytes()));
        seal(out)
    }

    fn links_record(&self, segment: u32, generation: u64) -> Vec<u8> {
        let mut out = self.segment_head(&LINKS_KIND, segment, self.params.m as u32, generation);
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
        let mut out = BLOB_KIND.begin();
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
        let (_, mut r) = open(&BLOB_KIND, bytes)?;
        let count = r.u32()? as usize;
        let mut records = Vec::new();
        for _ in 0..count {
            let key = r.take(RecordKey::BYTES)?;
            let key = RecordKey::from_bytes(key).ok_or_else(|| format(format!("an unknown record key {key:?}")))?;
            let len = r.u32()? as usize;
            records.push((key, r.take(len)?));
        }
        if r.left() != 0 {
            return Err(format(format!("{} bytes after the blob's records", r.left())));
        }
        Hnsw::from_records(records)
    }

    /// Read the index its header record (under `RecordKey::Header`) names from a store's records (each key once),
    /// checking them against each other before anything is believed. Records the header does not name (a commit
    /// cut short, or records a writer has not deleted yet) are not read.
    pub fn from_records<'a>(records: impl IntoIterator<Item = (RecordKey, &'a [u8])>) -> Result<Hnsw, IndexError> {
        let mut by_key: BTreeMap<RecordKey, &[u8]> = BTreeMap::new();
        for (key, bytes) in records {
            if by_key.insert(key, bytes).is_some() {
                return Err(format(format!("two {key} records")));
            }
        }
        let header = by_key.get(&RecordKey::Header).ok_or(IndexError::Missing(RecordKey::Header))?;
        Hnsw::from_header(header, &by_key)
    }

    /// The index the header record `header` describes, from the segment records it names in `records`.
    pub(super) fn from_header(header: &[u8], records: &BTreeMap<RecordKey, &[u8]>) -> Result<Hnsw, IndexError> {
        let header = read_header(header)?;
        if header.version != VERSION {
            return Err(IndexError::Version(header.version));
        }
        Hnsw::read(header, records)
    }

    /// A version-1 index: its header and its segments under `RecordKey::from_v1_bytes` keys.
    pub(super) fn read_v1(header: &[u8], records: &BTreeMap<RecordKey, &[u8]>) -> Result<Hnsw, IndexError> {
        let header = read_header(header)?;
        if header.version != V1 {
            return Err(format(format!("a version-{} index header in a version-1 store", header.version)));
        }
        Hnsw::read(header, records)
    }

    fn read(header: Header, by_key: &BTreeMap<RecordKey, &[u8]>) -> Result<Hnsw, IndexError> {
        let segments = header.segments();
        // Every record the header names is here, each vectors record of exactly its length, before anything is
        // sized by the header's counts: the vectors then take the bytes present, and the rest a multiple of them.
        for segment in 0..segments {
            let slots = SEGMENT_SLOTS.min(header.slots - segment * SEGMENT_SLOTS);
            let vectors = header.key(segment, false);
            let bytes = by_key.get(&vectors).ok_or(IndexError::Missing(vectors))?;
            let want = SEGMENT_HEAD + slots * header.dims * 4 + 4;
            if bytes.len() != want {
                return Err(format(format!("the {vectors} record has {} bytes, not {want}", bytes.len())));
            }
            let links = header.key(segment, true);
            by_key.get(&links).ok_or(IndexError::Missing(links))?;
        }
        let mut index = Hnsw::new(header.metric, header.dims, header.params)
            .map_err(|e| format(format!("the header's parameters: {e}")))?;
        if index.uid() != header.uid {
            return Err(format("the header's uid does not match its parameters".into()));
        }
        let (m, m0) = (header.params.m, 2 * header.params.m);
        reserve(&mut index.vectors, header.slots.saturating_mul(header.dims), "the index's vectors")?;
        reserve(&mut index.links0, header.slots.saturating_mul(1 + m0), "the index's links")?;
        reserve(&mut index.ids, header.slots, "the index's ids")?;
        reserve(&mut index.levels, header.slots, "the index's levels")?;
        reserve(&mut index.deleted, header.slots, "the index's slots")?;
        reserve(&mut index.upper, header.slots, "the index's upper levels")?;
        // A node's levels above 0 number 1 / (M - 1) on average (at most 1, for M 2): more than twice the slots is
        // a forgery that would only cost memory. (Saturating: `slots` may be near u32::MAX, and usize is 32 bits on
        // wasm32.)
        let (mut upper_levels, most_upper_levels) = (0, header.slots.saturating_mul(2).saturating_add(64));
        for segment in 0..segments {
            let slots = SEGMENT_SLOTS.min(header.slots - segment * SEGMENT_SLOTS);
            let key = header.key(segment, false);
            let mut r = segment_body(by_key[&key], key, &header, slots)?;
            let values = r.take(slots * header.dims * 4)?;
            let start = index.vectors.len();
            index.vectors.extend(values.chunks_exact(4).map(|x| f32_at(x, 0)));
            // Every value finite: a pass without branches (vectorized), then a search for the message only.
            if index.vectors[start..].iter().fold(false, |bad, x| bad | !x.is_finite()) {
                let x = index.vectors[start..].iter().find(|x| !x.is_finite()).expect("a value that is not finite");
                return Err(format(format!("the {key} record holds a value {x}")));
            }
            let key = header.key(segment, true);
            let mut r = segment_body(by_key[&key], key, &header, slots)?;
            for _ in 0..slots {
                let (id, deleted, level) = (r.u64()?, r.u8()?, r.u8()? as usize);
                upper_levels += level;
                if deleted > 1 || level > MAX_LEVEL || upper_levels > most_upper_levels {
                    return Err(format(format!("{key}: a slot deleted {deleted} at level {level}")));
                }
                index.ids.push(id);
                index.deleted.push(deleted == 1);
                index.levels.push(level as u8);
                let slot = index.links0.len() / (1 + m0);
                let mut upper = Vec::new();
                reserve(&mut upper, level * (1 + m), "a slot's links")?;
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
                return Err(format(format!("the {key} record has {} bytes after its slots", r.left())));
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
        // Version 1's segments are all 0: the next commit writes each anew (and the caller deletes the old keys).
        index.stored = header.stored;
        index.stored.resize(segments, [0, 0]);
        index.requantize();
        Ok(index)
    }
}

fn read_header(bytes: &[u8]) -> Result<Header, IndexError> {
    let (version, mut r) = open(&HEADER_KIND, bytes)?;
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
    // Version 2 lists each segment's generations: the list is the header's own bytes, checked before it is read.
    let segments = slots.div_ceil(SEGMENT_SLOTS);
    let want = if version == V1 { HEADER_FIXED } else { HEADER_FIXED + 16 * segments };
    if bytes.len() != want {
        return Err(format(format!("a header of {} bytes for {slots} slots (not {want})", bytes.len())));
    }
    let mut stored = Vec::new();
    if version == VERSION {
        reserve(&mut stored, segments, "the header's segments")?;
        for segment in 0..segments {
            let generations = [r.u64()?, r.u64()?];
            if generations.iter().any(|&g| g > generation) {
                return Err(format(format!(
                    "segment {segment} of generation {generations:?}, past the header's {generation}"
                )));
            }
            stored.push(generations);
        }
    }
    let entry = (entry != NO_ENTRY).then_some(entry);
    let params = HnswParams { m, ef_construction, seed };
    Ok(Header { version, metric, dims, params, uid, rng, slots, entry, max_level, generation, stored })
}

/// The body after the fixed part of the segment record `key` (vectors or links), which must name `header`'s
/// index, the segment, its `slots`, the dims (vectors) or M (links), and the generation the header names for it
/// (version 1: one no later than the header's).
fn segment_body<'a>(bytes: &'a [u8], key: RecordKey, header: &Header, slots: usize) -> Result<Reader<'a>, IndexError> {
    let (kind, segment, generation, last) = match key {
        RecordKey::Vectors(segment, g) => (&VECTORS_KIND, segment, g, header.dims),
        RecordKey::Links(segment, g) => (&LINKS_KIND, segment, g, header.params.m),
        RecordKey::Header => return Err(format("a header where a segment belongs".into())),
    };
    let (version, mut r) = open(kind, bytes)?;
    if version != header.version {
        return Err(format(format!("a version-{version} {key} record under a version-{} header", header.version)));
    }
    if r.bytes.len() < SEGMENT_HEAD {
        return Err(format(format!("a {key} record of {} bytes", bytes.len())));
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
    let theirs = r.u64()?;
    if header.version == V1 && theirs > header.generation {
        return Err(IndexError::NewerThanHeader(key));
    }
    if header.version == VERSION && theirs != generation {
        return Err(IndexError::Foreign(format!("the {key} record says generation {theirs}")));
    }
    Ok(r)
}
