//! GGUF reader (versions 2 and 3): header, metadata, tensor table.
//!
//! Parsing borrows the file's bytes and copies only metadata; tensor data is never touched here.
//! `TensorInfo::offset` is absolute into the same bytes, so weights are used in place later.
//! Every count and length is checked against the bytes that remain, and charged to a memory budget for
//! the parsed header, before anything is allocated; tensor sizes are computed with checked arithmetic in
//! `usize`. So a hostile header cannot make us reserve gigabytes, overflow, or read out of bounds, and a
//! file refused on one target is refused on the others too, as `Error::Gguf`.
//!
//! # Design
//!
//! GGUF v2/v3 header reader. It borrows the file's bytes and copies only metadata. The file may be hostile: every
//! count and length is checked against the remaining bytes and charged to a budget for the parsed header before
//! anything is allocated, and tensor sizes use checked `usize` arithmetic, so a file is refused the same way on 32-
//! and 64-bit targets. Change the limits at `MAX_HEADER_BYTES`. `Gguf::parse_prefix` reads the header from the
//! file's first bytes alone, for readers that fetch no more of a file than its header (the text side of a model,
//! `model::text`, and `bytes.rs`'s builder, which plans pieces from the header as the file streams in): it says how
//! many bytes the header needs at least when the prefix is short, checks counts against the header's largest
//! possible length (`MAX_HEADER_FILE_BYTES`) rather than the bytes at hand, and reserves memory only for what the
//! bytes at hand can hold.
//! A split model (llama.cpp's `gguf-split`: shards that are each a GGUF, the first holding the metadata) is read by
//! `Gguf::parse_shards` into one header over the shards laid end to end; which shard each is, of how many, and the
//! tensor count are checked, and all the headers share the one budget.

pub mod bytes;
pub mod id;

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::quant::GgmlType;

const MAGIC: u32 = 0x4655_4747; // "GGUF" read as little-endian u32
/// A split model's keys (llama.cpp's `LLM_KV_SPLIT_*`): which shard a file is, of how many, and the tensors of all.
pub const SPLIT_NO: &str = "split.no";
pub const SPLIT_COUNT: &str = "split.count";
pub const SPLIT_TENSORS: &str = "split.tensors.count";
const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ARRAY_DEPTH: usize = 8;
const MAX_DIMS: usize = 4;
/// Memory the parsed header (metadata and tensor table) may take. Real headers take a few tens of MB at
/// most (a 262k-token vocabulary with its scores and types is ~30 MB); a hostile one could otherwise claim,
/// with 1-byte array elements, many times its own size.
pub(crate) const MAX_HEADER_BYTES: usize = 256 << 20;
/// What each metadata value, key or tensor entry is charged against `MAX_HEADER_BYTES` besides its
/// strings: about what it takes on a 64-bit target, the same on every target so that a file gets the
/// same answer everywhere.
const ITEM_BYTES: usize = 64;

/// A metadata value, as typed in the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// Any integer type that fits in u64 (negative values give None).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => self.as_i64().map(|v| v as f32),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One entry of the tensor table. `dims[0]` is the innermost (contiguous) dimension, as in ggml.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Absolute byte offset of the tensor's data in the file (64 bits: a file streamed to the GPU may be larger
    /// than wasm32's memory, `gpu::GpuModelStream`).
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub size: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// Where the tensor's data lies in the file.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset + self.size as u64
    }

    /// The tensor's data in `file`, the whole file in one slice (which holds it: the header was checked against it).
    pub fn data<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.offset as usize..][..self.size]
    }
}

/// A parsed GGUF header. The bytes it describes stay with the caller.
#[derive(Debug, Clone)]
pub struct Gguf {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: usize,
    /// Absolute offset of the tensor data section.
    pub data_offset: usize,
    /// Bytes of the file the header takes: its metadata and tensor table, without the padding up to
    /// `data_offset` (a file without tensors may end here).
    pub header_bytes: usize,
}

/// What a prefix of a file gives: what was read from its whole header, or how long a prefix the header needs
/// at least (a lower bound: it grows as more of the header is seen).
#[derive(Debug, Clone, PartialEq)]
pub enum Prefix<T> {
    Complete(T),
    /// The header runs past the prefix: at least this many bytes of the file, more than the prefix had.
    Need(usize),
}

/// The longest header [`Gguf::parse_prefix`] waits for. Each byte of a header but its 24-byte preamble is
/// charged to `MAX_HEADER_BYTES` at least once (a string's bytes three times, an item's fixed fields with its
/// 64 bytes), so a longer header is refused by the parse anyway; this is where a prefix reader stops asking.
pub const MAX_HEADER_FILE_BYTES: usize = MAX_HEADER_BYTES + 24;

impl Gguf {
    /// Parse the header of a GGUF file held in `bytes` (the whole file).
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        Gguf::parse_head(bytes, bytes.len() as u64)
    }

    /// Parse the header from `head`, the first bytes of a file of `file_len` bytes (at least `head.len()`):
    /// tensors are checked against the whole file. A header that runs past `head` is an error.
    pub fn parse_head(head: &[u8], file_len: u64) -> Result<Gguf> {
        let mut budget = MAX_HEADER_BYTES;
        Gguf::parse_within(head, file_len, &mut budget)
    }

    /// The header of a model in `shards`, each given as its first bytes and its length, laid end to end: llama.cpp's
    /// split GGUF (`gguf-split`, or `convert_hf_to_gguf.py --split-max-tensors`), whose files
    /// `NAME-00001-of-0000N.gguf` are each a GGUF with a header of its own. The first holds the model's metadata;
    /// each says which shard it is (`split.no`, from 0) of how many (`split.count`), and the first how many tensors
    /// all of them hold (`split.tensors.count`). The result is one header: the first shard's metadata, every shard's
    /// tensors with offsets into the shards laid end to end. One shard is a plain GGUF file (`parse_head`), unless
    /// it says it is one of several. Shards missing, extra, out of order or naming a tensor twice are `Error::Gguf`;
    /// all the headers together are held to one memory budget (`MAX_HEADER_BYTES`).
    pub fn parse_shards(shards: &[(&[u8], u64)]) -> Result<Gguf> {
        let n = shards.len();
        let mut budget = MAX_HEADER_BYTES;
        let mut start = 0u64;
        let mut merged: Option<Gguf> = None;
        let mut names = std::collections::HashSet::new();
        for (i, &(head, len)) in shards.iter().enumerate() {
            let shard = |e: Error| match e {
                Error::Gguf(m) if n > 1 => Error::Gguf(format!("shard {} of {n}: {m}", i + 1)),
                other => other,
            };
            let mut g = Gguf::parse_within(head, len, &mut budget).map_err(shard)?;
            let (no, count) = (g.get(SPLIT_NO).map(Value::as_u64), g.get(SPLIT_COUNT).map(Value::as_u64));
            match (no, count) {
                // A plain file, or a split into one.
                (_, None) | (_, Some(Some(1))) if n == 1 => {}
                (Some(Some(no)), Some(Some(count))) if count == n as u64 && no == i as u64 => {}
                (Some(Some(no)), Some(Some(count))) if n == 1 => {
                    return Err(err(format!(
                        "this file is shard {} of {count} of a split model ({SPLIT_NO} {no}, {SPLIT_COUNT} {count}): \
                         load it from the first shard with every other one",
                        no.saturating_add(1)
                    )))
                }
                (Some(Some(no)), Some(Some(count))) => {
                    return Err(shard(err(format!(
                        "it says it is shard {} of {count} ({SPLIT_NO} {no}, {SPLIT_COUNT} {count})",
                        no.saturating_add(1)
                    ))))
                }
                _ => return Err(shard(err(format!("{SPLIT_NO} and {SPLIT_COUNT} are not both there as integers")))),
            }
            let len = len.max(head.len() as u64);
            for t in &mut g.tensors {
                if !names.insert(t.name.clone()) {
                    return Err(shard(err(format!("tensor '{}' is in an earlier shard too", t.name))));
                }
                // Within its shard (`parse_within` checked), so within the shards' total.
                t.offset = start.checked_add(t.offset).ok_or_else(|| shard(err("the shards' sizes overflow")))?;
            }
            start = start.checked_add(len).ok_or_else(|| shard(err("the shards' sizes overflow")))?;
            match &mut merged {
                None => merged = Some(g),
                Some(m) => m.tensors.append(&mut g.tensors),
            }
        }
        let merged = merged.ok_or_else(|| err("no file: a model has at least one shard"))?;
        if n > 1 {
            let want = merged.get(SPLIT_TENSORS).and_then(Value::as_u64);
            if want != Some(merged.tensors.len() as u64) {
                return Err(err(format!(
                    "the {n} shards hold {} tensors but the first says {SPLIT_TENSORS} {}",
                    merged.tensors.len(),
                    want.map_or("is missing".to_string(), |w| w.to_string())
                )));
            }
        }
        Ok(merged)
    }

    /// `parse_head`, charging what the parsed header takes to `budget` (shared by the shards of a split model).
    fn parse_within(head: &[u8], file_len: u64, budget: &mut usize) -> Result<Gguf> {
        let mut r = Reader { bytes: head, end: head.len(), pos: 0, budget: *budget, short: None };
        let g = r.header(Some(file_len.max(head.len() as u64)))?;
        *budget = r.budget;
        Ok(g)
    }

    /// Parse the header from `prefix`, the first bytes of a file whose length need not be known: the header, or
    /// how many bytes of the file it needs at least (`Prefix::Need`, more than `prefix.len()`). Ask again with
    /// a longer prefix; a reader that does not know where the file ends may take the header's own word for it,
    /// as it never asks for more than [`MAX_HEADER_FILE_BYTES`]. With `file_len`, tensors are checked against
    /// the file as [`Gguf::parse_head`] does; without, only their sizes are (what a header-only reader such as
    /// `model::text::TextModel` uses). A malformed header is an error as soon as the prefix shows it.
    pub fn parse_prefix(prefix: &[u8], file_len: Option<u64>) -> Result<Prefix<Gguf>> {
        let max = MAX_HEADER_FILE_BYTES as u64;
        let end = file_len.map_or(max, |n| n.min(max)) as usize;
        let mut r = Reader { bytes: prefix, end: end.max(prefix.len()), pos: 0, budget: MAX_HEADER_BYTES, short: None };
        match r.header(file_len.map(|n| n.max(prefix.len() as u64))) {
            Ok(g) => Ok(Prefix::Complete(g)),
            Err(e) => match r.short {
                Some(need) => Ok(Prefix::Need(need)),
                None => Err(e),
            },
        }
    }
}

impl Reader<'_> {
    /// The header from the start of the bytes; tensors checked against `file_len` if known, else only their
    /// sizes against `usize` and their offsets against `u64`.
    fn header(&mut self, file_len: Option<u64>) -> Result<Gguf> {
        let r = self;
        let magic = r.u32().map_err(|_| err("file is shorter than a GGUF header"))?;
        if magic != MAGIC {
            if magic.swap_bytes() == MAGIC {
                return Err(err("big-endian GGUF files are not supported"));
            }
            return Err(err(format!("bad magic 0x{magic:08x}: not a GGUF file")));
        }
        let version = r.u32()?;
        if version != 2 && version != 3 {
            let v = if version.swap_bytes() == 2 || version.swap_bytes() == 3 { version.swap_bytes() } else { version };
            return Err(err(format!("unsupported GGUF version {v} (supported: 2, 3)")));
        }
        let n_tensors = r.u64()?;
        let n_kv = r.u64()?;
        // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least 8+4+8+4+8.
        r.reserve(n_kv, 13, "metadata entries")?;
        let n_tensors = r.reserve(n_tensors, 32, "tensors")?;

        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let value = r.value(ty, 0).map_err(|e| prefix(e, &key))?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(err(format!("duplicate metadata key '{key}'")));
            }
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
                _ => return Err(err(format!("general.alignment {v:?} is not a power of two"))),
            },
        } as usize;

        let mut raw = Vec::with_capacity(r.capacity(n_tensors, 32));
        for _ in 0..n_tensors {
            let name = r.string()?;
            let n_dims = r.u32()? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(err(format!("tensor '{name}' has {n_dims} dimensions (1..={MAX_DIMS} allowed)")));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                let d = r.u64()?;
                if d == 0 {
                    return Err(err(format!("tensor '{name}' has a dimension of 0")));
                }
                dims.push(d);
            }
            let type_id = r.u32()?;
            let offset = r.u64()?;
            raw.push((name, dims, type_id, offset));
        }

        let header_bytes = r.pos;
        let data_offset = align_up(r.pos, alignment);
        let file_len = file_len.unwrap_or(u64::MAX);
        if data_offset as u64 > file_len && !raw.is_empty() {
            return Err(err(format!(
                "truncated: tensor data should start at byte {data_offset} but the file has {} bytes",
                file_len
            )));
        }

        let mut tensors = Vec::with_capacity(raw.len());
        let mut names = std::collections::HashSet::new();
        for (name, dims, type_id, rel) in raw {
            if !names.insert(name.clone()) {
                return Err(err(format!("duplicate tensor name '{name}'")));
            }
            let ty = GgmlType::from_id(type_id)
                .ok_or_else(|| Error::UnsupportedTensorType { tensor: name.clone(), type_id })?;
            if dims[0] % ty.block_size() as u64 != 0 {
                return Err(err(format!(
                    "tensor '{name}': row length {} is not a multiple of the {} block size {}",
                    dims[0],
                    ty.name(),
                    ty.block_size()
                )));
            }
            let size = tensor_bytes(ty, &dims).ok_or_else(|| {
                err(format!("tensor '{name}' of shape {dims:?} has more bytes than memory can address"))
            })?;
            // No dimension exceeds the element count, which fits in usize.
            let dims = dims.into_iter().map(|d| d as usize).collect();
            if rel % alignment as u64 != 0 {
                return Err(err(format!("tensor '{name}' offset {rel} is not aligned to {alignment}")));
            }
            let offset = (data_offset as u64).checked_add(rel).filter(|&o| o <= file_len);
            let end = offset.and_then(|o| o.checked_add(size as u64));
            match (offset, end) {
                (Some(o), Some(e)) if e <= file_len => tensors.push(TensorInfo { name, dims, ty, offset: o, size }),
                _ => {
                    return Err(err(format!(
                        "tensor '{name}' ({} bytes at data offset {rel}) runs past the end of the file ({} bytes): truncated?",
                        size,
                        file_len
                    )))
                }
            }
        }

        Ok(Gguf { version, metadata, tensors, alignment, data_offset, header_bytes })
    }
}

impl Gguf {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key).and_then(Value::as_f32)
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?.as_array()?.iter().map(Value::as_str).collect()
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
            .ok_or_else(|| Error::Model("metadata key general.architecture is missing".into()))
    }
}

/// Write a GGUF (version 3) with `metadata` (scalars and strings) and f32 `tensors`, each named with its
/// ggml dims (innermost first) and its data: what llama.cpp reads, and what [`Gguf::parse`] reads back (an
/// exported LoRA adapter is one). Arrays are not written: nothing we export needs them.
pub fn write_f32(metadata: &[(&str, Value)], tensors: &[(String, Vec<usize>, &[f32])]) -> Vec<u8> {
    let mut out = Vec::new();
    let put_str = |out: &mut Vec<u8>, s: &str| {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    };
    out.extend(MAGIC.to_le_bytes());
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        put_str(&mut out, key);
        let (ty, bytes): (u32, Vec<u8>) = match value {
            Value::U8(v) => (0, vec![*v]),
            Value::I8(v) => (1, v.to_le_bytes().to_vec()),
            Value::U16(v) => (2, v.to_le_bytes().to_vec()),
            Value::I16(v) => (3, v.to_le_bytes().to_vec()),
            Value::U32(v) => (4, v.to_le_bytes().to_vec()),
            Value::I32(v) => (5, v.to_le_bytes().to_vec()),
            Value::F32(v) => (6, v.to_le_bytes().to_vec()),
            Value::Bool(v) => (7, vec![*v as u8]),
            Value::String(v) => (8, [&(v.len() as u64).to_le_bytes()[..], v.as_bytes()].concat()),
            Value::U64(v) => (10, v.to_le_bytes().to_vec()),
            Value::I64(v) => (11, v.to_le_bytes().to_vec()),
            Value::F64(v) => (12, v.to_le_bytes().to_vec()),
            Value::Array(_) => unreachable!("write_f32 writes no arrays"),
        };
        out.extend(ty.to_le_bytes());
        out.extend(bytes);
    }
    let align = DEFAULT_ALIGNMENT as usize;
    let mut offset = 0;
    for (name, dims, data) in tensors {
        assert_eq!(dims.iter().product::<usize>(), data.len(), "tensor '{name}': dims and data disagree");
        put_str(&mut out, name);
        out.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|&d| out.extend((d as u64).to_le_bytes()));
        out.extend((GgmlType::F32 as u32).to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset = align_up(offset + 4 * data.len(), align);
    }
    out.resize(align_up(out.len(), align), 0);
    for (_, _, data) in tensors {
        data.iter().for_each(|v| out.extend(v.to_le_bytes()));
        out.resize(align_up(out.len(), align), 0);
    }
    out
}

fn err(msg: impl Into<String>) -> Error {
    Error::Gguf(msg.into())
}

fn prefix(e: Error, key: &str) -> Error {
    match e {
        Error::Gguf(m) => Error::Gguf(format!("metadata '{key}': {m}")),
        other => other,
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Bytes of a tensor of type `ty` with shape `dims` (`dims[0]` a whole number of blocks), or None when its
/// element count or its byte count does not fit in `usize`.
fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> Option<usize> {
    let n = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
    (n / ty.block_size()).checked_mul(ty.block_bytes())
}

struct Reader<'a> {
    /// The bytes at hand: the file's first `bytes.len()`.
    bytes: &'a [u8],
    /// Where the header must end at the latest: the end of `bytes` for a whole header, else the file's length or
    /// `MAX_HEADER_FILE_BYTES`. Counts and lengths are checked against it.
    end: usize,
    pos: usize,
    /// Bytes of memory the parsed header may still take (see `MAX_HEADER_BYTES`).
    budget: usize,
    /// Set when a read ran past `bytes` but not past `end`: how many bytes of the file that read needed.
    short: Option<usize>,
}

impl<'a> Reader<'a> {
    /// Bytes the header may still take.
    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(err(format!(
                "truncated: needed {n} bytes at offset {} but only {} remain",
                self.pos,
                self.remaining()
            )));
        }
        if n > self.bytes.len() - self.pos {
            self.short = Some(self.pos + n);
            return Err(err(format!("the header runs past the {} bytes read", self.bytes.len())));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// What to reserve for `n` items of at least `min_item_bytes`: no more than the bytes at hand can hold,
    /// so that a prefix's counts, checked only against `end`, never allocate beyond what was read.
    fn capacity(&self, n: usize, min_item_bytes: usize) -> usize {
        n.min((self.bytes.len() - self.pos) / min_item_bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Refuse a count whose items could not fit in the remaining bytes, or whose parsed items would
    /// exceed the header's memory budget, before allocating for it; else charge them to the budget.
    fn reserve(&mut self, count: u64, min_item_bytes: usize, what: &str) -> Result<usize> {
        let Some(n) = usize::try_from(count).ok().filter(|&n| n <= self.remaining() / min_item_bytes) else {
            return Err(err(format!(
                "{count} {what} cannot fit in the {} bytes that remain at offset {}",
                self.remaining(),
                self.pos
            )));
        };
        self.charge(n.saturating_mul(ITEM_BYTES), what)?;
        Ok(n)
    }

    fn charge(&mut self, bytes: usize, what: &str) -> Result<()> {
        self.budget = self.budget.checked_sub(bytes).ok_or_else(|| {
            err(format!(
                "{what} at offset {} would take the parsed header past {} MiB of memory",
                self.pos,
                MAX_HEADER_BYTES >> 20
            ))
        })?;
        Ok(())
    }

    fn string(&mut self) -> Result<String> {
        let len = self.u64()?;
        let Some(len) = usize::try_from(len).ok().filter(|&n| n <= self.remaining()) else {
            return Err(err(format!(
                "string of length {len} at offset {} runs past the end of the file",
                self.pos - 8
            )));
        };
        // Lossy decoding writes at most 3 bytes (U+FFFD) per byte read.
        self.charge(len.saturating_mul(3), "a string")?;
        let b = self.take(len)?;
        // llama.cpp accepts invalid UTF-8 in token strings; keep the bytes readable rather than failing the file.
        Ok(String::from_utf8_lossy(b).into_owned())
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>()?[0]),
            1 => Value::I8(self.array::<1>()?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(err(format!("bool value {b} is neither 0 nor 1"))),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(err(format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
                }
                let elem_ty = self.u32()?;
                let n = self.u64()?;
                let min = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    t => return Err(err(format!("unknown metadata value type {t}"))),
                };
                let n = self.reserve(n, min, "array elements")?;
                let mut items = Vec::with_capacity(self.capacity(n, min));
                for _ in 0..n {
                    items.push(self.value(elem_ty, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            t => return Err(err(format!("unknown metadata value type {t}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn rejects_wrong_magic() {
        let e = Gguf::parse(b"GGML\x03\0\0\0").unwrap_err();
        assert!(matches!(e, Error::Gguf(ref m) if m.contains("bad magic")), "{e}");
        assert!(matches!(Gguf::parse_prefix(b"GGML", None), Err(Error::Gguf(ref m)) if m.contains("bad magic")));
    }

    fn file() -> Vec<u8> {
        let data = [1.0f32; 64];
        let meta =
            [("general.architecture", Value::String("llama".into())), ("general.name", Value::String("x".repeat(300)))];
        write_f32(&meta, &[("a".into(), vec![64], &data[..]), ("b".into(), vec![32, 2], &data[..])])
    }

    #[test]
    fn a_prefix_asks_for_more_until_the_header_is_whole_then_reads_what_the_whole_file_does() {
        let bytes = file();
        let whole = Gguf::parse(&bytes).unwrap();
        assert!(whole.header_bytes <= whole.data_offset && whole.data_offset - whole.header_bytes < whole.alignment);
        let mut asked = 0;
        for cut in 0..whole.header_bytes {
            match Gguf::parse_prefix(&bytes[..cut], None).unwrap() {
                // A lower bound: more than the prefix, never past the header, never less than asked before.
                Prefix::Need(n) => {
                    assert!(cut < n && n <= whole.header_bytes && n >= asked, "cut {cut}: need {n}");
                    asked = n;
                }
                Prefix::Complete(_) => panic!("cut {cut}: a header of {} bytes read whole", whole.header_bytes),
            }
        }
        let len = bytes.len() as u64;
        for (cut, file_len) in [(whole.header_bytes, None), (bytes.len(), None), (bytes.len(), Some(len))] {
            let Prefix::Complete(g) = Gguf::parse_prefix(&bytes[..cut], file_len).unwrap() else { panic!("{cut}") };
            assert_eq!(
                (g.metadata, g.tensors, g.data_offset),
                (whole.metadata.clone(), whole.tensors.clone(), whole.data_offset)
            );
        }
        // A stated length checks the tensors as `parse_head` does.
        let e = Gguf::parse_prefix(&bytes[..whole.header_bytes], Some(len - 1)).unwrap_err();
        assert!(matches!(e, Error::Gguf(ref m) if m.contains("past the end")), "{e}");
    }

    #[test]
    fn a_prefix_of_a_hostile_header_is_refused_or_asks_for_no_more_than_a_header_may_take() {
        let preamble = |n_tensors: u64, n_kv: u64| {
            [&MAGIC.to_le_bytes()[..], &3u32.to_le_bytes(), &n_tensors.to_le_bytes(), &n_kv.to_le_bytes()].concat()
        };
        // Four million tensors: a count the budget takes, whose table no 24-byte prefix holds. The prefix asks for
        // the next bytes and reserves nothing for the table.
        let head = preamble(4 << 20, 0);
        assert!(matches!(Gguf::parse_prefix(&head, None), Ok(Prefix::Need(32))));
        for n in [0usize, 3, 23] {
            assert!(matches!(Gguf::parse_prefix(&head[..n], None), Ok(Prefix::Need(m)) if m > n && m <= 24));
        }
        // A key of 2^40 bytes: past any header, an error rather than a request for a terabyte.
        let mut head = preamble(0, 1);
        head.extend((1u64 << 40).to_le_bytes());
        let e = Gguf::parse_prefix(&head, None).unwrap_err();
        assert!(matches!(e, Error::Gguf(ref m) if m.contains("runs past the end")), "{e}");
        // An array of more elements than any header holds.
        let mut head = preamble(0, 1);
        head.extend(1u64.to_le_bytes());
        head.extend(b"k");
        head.extend(9u32.to_le_bytes());
        head.extend(6u32.to_le_bytes());
        head.extend((MAX_HEADER_FILE_BYTES as u64).to_le_bytes());
        let e = Gguf::parse_prefix(&head, None).unwrap_err();
        assert!(matches!(e, Error::Gguf(ref m) if m.contains("cannot fit")), "{e}");
    }
}
