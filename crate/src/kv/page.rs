//! A prefix-cache page as bytes: what a store (IndexedDB, files) keeps, and what is read back after a
//! restart. The reader takes bytes from outside, so it checks everything before it believes anything:
//! the size against the layout the reader expects, the checksum, the model and KV format, and that the
//! page's key is the hash of its parent's key and its tokens.
//!
//! ```text
//! 0   magic "RVLLMKV\0"           8 bytes
//! 8   version                     u32
//! 12  KV type                     u32, ggml's type id: 1 = f16, 8 = q8_0, 2 = q4_0
//! 16  layers, row width, tokens   3 × u32
//! 28  model id                    32 bytes
//! 60  key, parent key             2 × 16 bytes
//! 92  tokens                      page tokens × u32
//! ..  keys and values             per layer: the page's key rows, then its value rows, in the KV type
//! end CRC-32 of all the above     u32
//! ```
//! Integers are little-endian; the frame (magic, version, CRC-32) is `crate::record`'s. A two-tier cache's
//! pages are in its cold type (`kv_cache.rs`), so its records are that much smaller; a record of another KV
//! type is another cache's, and its keys differ ([`PageKey::root`]).

use std::fmt;

use sha2::{Digest, Sha256};

use crate::gguf::id::{hex, ModelId};
use crate::kv::cache::KvType;
use crate::record::{seal, u32_at, FrameError, Kind};

/// The version of both memory formats, page records and saved states (`state.rs`).
pub(super) const VERSION: u32 = 1;
const HEADER_BYTES: usize = 92;
const KIND: Kind =
    Kind { what: "a page record", magic: *b"RVLLMKV\0", version: VERSION, oldest: VERSION, header: HEADER_BYTES };

/// A page's name in a store: the hash of its model and its whole token prefix, chained page by page
/// (`root(model).next(page 1 tokens).next(page 2 tokens)...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PageKey(pub [u8; 16]);

impl PageKey {
    /// The key before the first page of a cache of `kv` pages. The f16 cache's keys are those of the
    /// records written before the KV type was a choice, so those stay valid.
    pub fn root(model: &ModelId, kv: KvType) -> PageKey {
        match kv {
            KvType::F16 => PageKey::hash(&[b"root", &model.0[..]]),
            _ => PageKey::hash(&[b"root", &model.0[..], kv.name().as_bytes()]),
        }
    }

    /// The key of the page of `tokens` that follows this one.
    pub fn next(&self, tokens: &[u32]) -> PageKey {
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        PageKey::hash(&[b"page", &self.0[..], &bytes])
    }

    fn hash(parts: &[&[u8]]) -> PageKey {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        let d: [u8; 32] = h.finalize().into();
        PageKey(d[..16].try_into().expect("16 of 32 bytes"))
    }

    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

/// The shape and type every page of a cache has; a record of another is not this cache's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLayout {
    pub n_layers: usize,
    pub kv_dim: usize,
    pub page_tokens: usize,
    /// How the page's rows are stored (a two-tier cache's cold type).
    pub kv: KvType,
}

impl PageLayout {
    /// Bytes of one page's keys and values: every layer's.
    pub fn kv_bytes(&self) -> usize {
        self.n_layers * 2 * self.page_tokens * self.kv.row_bytes(self.kv_dim)
    }

    /// Bytes of a whole record, `None` if that overflows.
    pub fn record_bytes(&self) -> Option<usize> {
        let tokens = self.page_tokens.checked_mul(4)?;
        let row = (self.kv_dim / self.kv.ggml().block_size()).checked_mul(self.kv.ggml().block_bytes())?;
        let kv = self.n_layers.checked_mul(2)?.checked_mul(self.page_tokens)?.checked_mul(row)?;
        HEADER_BYTES.checked_add(tokens)?.checked_add(kv)?.checked_add(4)
    }
}

/// Why a record was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Not a record of this format or version, or cut short.
    Format(String),
    /// The bytes changed after they were written.
    Checksum,
    /// Another model's, or another KV format or page shape.
    Foreign,
    /// Its key is not the hash of its parent and tokens, or it is not the page that was asked for.
    Key,
    /// A key or value is NaN or infinite (a writer's bug, or bytes made to poison the cache).
    NotFinite,
}

impl From<FrameError> for RecordError {
    fn from(e: FrameError) -> RecordError {
        match e {
            FrameError::Checksum { .. } => RecordError::Checksum,
            e => RecordError::Format(e.to_string()),
        }
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Format(m) => write!(f, "{m}"),
            RecordError::Checksum => write!(f, "the record's checksum does not match: it was damaged"),
            RecordError::Foreign => write!(f, "the record belongs to another model or KV format"),
            RecordError::Key => write!(f, "the record's key does not match its tokens"),
            RecordError::NotFinite => write!(f, "the record holds a key or value that is NaN or infinite"),
        }
    }
}

/// A decoded record: its tokens and its keys and values, in the page's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRecord {
    pub key: PageKey,
    pub parent: PageKey,
    pub tokens: Vec<u32>,
    pub kv: Vec<u8>,
}

/// The bytes of a page: `tokens` (the layout's page of them) and `kv` (`layout.kv_bytes()` of rows).
pub fn encode(model: &ModelId, layout: &PageLayout, parent: &PageKey, tokens: &[u32], kv: &[u8]) -> Vec<u8> {
    assert!(tokens.len() == layout.page_tokens && kv.len() == layout.kv_bytes(), "a whole page");
    let key = parent.next(tokens);
    let mut out = KIND.begin();
    out.reserve(layout.record_bytes().unwrap_or(0));
    for n in [layout.kv.id(), layout.n_layers as u32, layout.kv_dim as u32, layout.page_tokens as u32] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&model.0);
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&parent.0);
    out.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
    out.extend_from_slice(kv);
    seal(out)
}

/// Read a record of `model`'s cache of pages shaped `layout`, checking it whole first.
pub fn decode(bytes: &[u8], model: &ModelId, layout: &PageLayout) -> Result<PageRecord, RecordError> {
    let (_, body) = KIND.open(bytes)?;
    let shape = [u32_at(bytes, 12), u32_at(bytes, 16), u32_at(bytes, 20), u32_at(bytes, 24)];
    let ours = [layout.kv.id(), layout.n_layers as u32, layout.kv_dim as u32, layout.page_tokens as u32];
    if shape != ours || bytes[28..60] != model.0 {
        return Err(RecordError::Foreign);
    }
    if Some(bytes.len()) != layout.record_bytes() {
        return Err(RecordError::Format(format!(
            "a page record of {} bytes where its shape takes {:?}",
            bytes.len(),
            layout.record_bytes()
        )));
    }
    let key = PageKey(bytes[60..76].try_into().expect("16 bytes"));
    let parent = PageKey(bytes[76..92].try_into().expect("16 bytes"));
    let tokens_end = HEADER_BYTES + 4 * layout.page_tokens;
    let tokens: Vec<u32> = bytes[HEADER_BYTES..tokens_end].chunks_exact(4).map(|c| u32_at(c, 0)).collect();
    if parent.next(&tokens) != key {
        return Err(RecordError::Key);
    }
    let kv = &body[tokens_end..];
    if !layout.kv.rows_finite(kv) {
        return Err(RecordError::NotFinite);
    }
    Ok(PageRecord { key, parent, tokens, kv: kv.to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    const LAYOUT: PageLayout = PageLayout { n_layers: 2, kv_dim: 4, page_tokens: 3, kv: KvType::F16 };

    fn page(layout: &PageLayout, rng: &mut Rng) -> (Vec<u32>, Vec<u8>) {
        let tokens = (0..layout.page_tokens).map(|_| rng.next_u64() as u32 % 1000).collect();
        let mut kv = vec![0; layout.kv_bytes()];
        rng.fill(&mut kv);
        // Finite f16 values and scales: exponents below all ones.
        kv.chunks_exact_mut(2).for_each(|h| h[1] &= 0x3f);
        (tokens, kv)
    }

    #[test]
    fn records_round_trip_and_chain_their_keys() {
        let mut rng = Rng::new(3);
        let model = ModelId([7; 32]);
        let (tokens, kv) = page(&LAYOUT, &mut rng);
        let root = PageKey::root(&model, KvType::F16);
        let bytes = encode(&model, &LAYOUT, &root, &tokens, &kv);
        let r = decode(&bytes, &model, &LAYOUT).unwrap();
        assert_eq!((r.parent, r.key, &r.tokens, &r.kv), (root, root.next(&tokens), &tokens, &kv));
        // Keys depend on every earlier token: the same page after another parent has another key.
        let (other, _) = page(&LAYOUT, &mut rng);
        assert_ne!(root.next(&other).next(&tokens), r.key);
        assert_ne!(PageKey::root(&ModelId([8; 32]), KvType::F16), root);
    }

    /// A two-tier cache's pages are records of its cold type: smaller, under other keys, and refused by a
    /// cache of another KV type even where the shape matches.
    #[test]
    fn records_carry_their_kv_type() {
        let mut rng = Rng::new(8);
        let model = ModelId([9; 32]);
        let f16 = PageLayout { n_layers: 2, kv_dim: 64, page_tokens: 16, kv: KvType::F16 };
        let q8 = PageLayout { kv: KvType::Q8_0, ..f16 };
        let q4 = PageLayout { kv: KvType::Q4_0, ..f16 };
        assert_eq!((q8.kv_bytes(), q4.kv_bytes()), (2 * 2 * 16 * 68, 2 * 2 * 16 * 36));
        let (tokens, kv) = page(&q8, &mut rng);
        let root = PageKey::root(&model, KvType::Q8_0);
        assert!(root != PageKey::root(&model, KvType::F16) && root != PageKey::root(&model, KvType::Q4_0));
        let bytes = encode(&model, &q8, &root, &tokens, &kv);
        assert_eq!(bytes.len(), q8.record_bytes().unwrap());
        assert!(bytes.len() * 100 < f16.record_bytes().unwrap() * 55, "34 bytes for 32 values instead of 64");
        assert_eq!(decode(&bytes, &model, &q8).unwrap().kv, kv);
        assert_eq!(decode(&bytes, &model, &q4), Err(RecordError::Foreign));
        assert_eq!(decode(&bytes, &model, &f16), Err(RecordError::Foreign));
        // An f16 record is not a Q8_0 cache's either.
        let (tokens, kv) = page(&f16, &mut rng);
        let f16_bytes = encode(&model, &f16, &PageKey::root(&model, KvType::F16), &tokens, &kv);
        assert_eq!(decode(&f16_bytes, &model, &q8), Err(RecordError::Foreign));
    }

    #[test]
    fn damaged_foreign_and_mislabeled_records_are_refused() {
        let mut rng = Rng::new(4);
        let model = ModelId([1; 32]);
        let (tokens, kv) = page(&LAYOUT, &mut rng);
        let good = encode(&model, &LAYOUT, &PageKey::root(&model, KvType::F16), &tokens, &kv);
        // Every cut, and every single flipped bit, is refused.
        for cut in 0..good.len() {
            assert!(decode(&good[..cut], &model, &LAYOUT).is_err(), "cut at {cut}");
        }
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, &model, &LAYOUT).is_err(), "bit {bit}");
        }
        assert_eq!(decode(&good, &ModelId([2; 32]), &LAYOUT), Err(RecordError::Foreign));
        let wider = PageLayout { kv_dim: 8, ..LAYOUT };
        assert_eq!(
            decode(&good, &model, &PageLayout { kv: KvType::Q8_0, kv_dim: 32, ..LAYOUT }),
            Err(RecordError::Foreign)
        );
        assert_eq!(decode(&good, &model, &wider), Err(RecordError::Foreign));
        // A record written under a key that is not its tokens' (its checksum redone) is refused too.
        let mut relabeled = good.clone();
        relabeled[60] ^= 1;
        relabeled.truncate(relabeled.len() - 4);
        assert_eq!(decode(&seal(relabeled), &model, &LAYOUT), Err(RecordError::Key));
    }

    /// A record whose checksum holds but whose rows hold a NaN or an infinity (an f16 value, or a quantized
    /// block's scale) is refused: it would spread to every later token of every prompt that reuses the page.
    #[test]
    fn records_with_values_that_are_not_finite_are_refused() {
        let mut rng = Rng::new(6);
        let model = ModelId([5; 32]);
        for (layout, value_bytes) in [
            (LAYOUT, 2),
            (PageLayout { n_layers: 2, kv_dim: 32, page_tokens: 2, kv: KvType::Q8_0 }, 34),
            (PageLayout { n_layers: 2, kv_dim: 32, page_tokens: 2, kv: KvType::Q4_0 }, 18),
        ] {
            let (tokens, kv) = page(&layout, &mut rng);
            let root = PageKey::root(&model, layout.kv);
            assert!(decode(&encode(&model, &layout, &root, &tokens, &kv), &model, &layout).is_ok());
            for (at, bits) in [(0, 0x7c00u16), (value_bytes, 0xfc00), (kv.len() - value_bytes, 0x7e01)] {
                let mut bad = kv.clone();
                bad[at..at + 2].copy_from_slice(&bits.to_le_bytes());
                let bytes = encode(&model, &layout, &root, &tokens, &bad);
                assert_eq!(decode(&bytes, &model, &layout), Err(RecordError::NotFinite), "{layout:?} at {at}");
            }
        }
    }
}
