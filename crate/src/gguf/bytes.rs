//! The bytes of a whole GGUF file, where weights are read in place.
//!
//! Natively the file is one buffer or one memory map. wasm32 cannot hold one object of more than `isize::MAX`
//! bytes (2 GiB), so a bigger file arrives through [`ModelBytesBuilder`], which lays it into pieces of at most
//! that size, cut only between tensors: every tensor (so every weight's byte range) lies within one piece, and
//! the file is still copied once, from the chunks it arrives in straight into its piece.
//!
//! A split model (llama.cpp's `NAME-00001-of-0000N.gguf`) is its shards laid end to end ([`ModelBytes::from_shards`]):
//! each shard starts a piece of its own, so each shard's header is read where it starts, and [`ModelBytes::gguf`]
//! gives one header for all of them with every tensor's offset into the whole ([`Gguf::parse_shards`]).
//!
//! A file may also be held in part ([`PartialBytesBuilder`]): the header, the vectors the weights copy out and the
//! bytes the model's identity samples, while its matrices go straight from the stream to the GPU
//! (`gpu::GpuModelStream`), so a file larger than wasm32's memory loads there. Such bytes say so
//! ([`ModelBytes::is_whole`]); nothing on the CPU reads a matrix of them.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, Prefix};

/// A GGUF file held in memory, in one or more pieces that cover it end to end; or a split model's shards, end to end.
pub struct ModelBytes {
    pieces: Vec<Piece>,
    len: u64,
    /// Where each shard starts (one file: `[0]`). Each starts a piece, or is empty.
    shards: Vec<u64>,
    /// Whether the pieces cover the file end to end (else it is held in part: [`PartialBytesBuilder`]).
    whole: bool,
}

struct Piece {
    /// Where this piece starts in the file.
    start: u64,
    data: PieceData,
}

enum PieceData {
    Owned(Vec<u8>),
    #[cfg(not(target_arch = "wasm32"))]
    Mapped(memmap2::Mmap),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match &self.data {
            PieceData::Owned(v) => v,
            #[cfg(not(target_arch = "wasm32"))]
            PieceData::Mapped(m) => m,
        }
    }

    fn end(&self) -> u64 {
        self.start + self.bytes().len() as u64
    }

    /// The bytes `range` of the file, which this piece holds.
    fn slice(&self, range: Range<u64>) -> &[u8] {
        &self.bytes()[(range.start - self.start) as usize..(range.end - self.start) as usize]
    }
}

impl From<Vec<u8>> for ModelBytes {
    fn from(bytes: Vec<u8>) -> ModelBytes {
        ModelBytes::from_pieces(vec![Piece { start: 0, data: PieceData::Owned(bytes) }])
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl From<memmap2::Mmap> for ModelBytes {
    fn from(map: memmap2::Mmap) -> ModelBytes {
        ModelBytes::from_pieces(vec![Piece { start: 0, data: PieceData::Mapped(map) }])
    }
}

impl ModelBytes {
    fn from_pieces(pieces: Vec<Piece>) -> ModelBytes {
        let len = pieces.last().map_or(0, Piece::end);
        ModelBytes { pieces, len, shards: vec![0], whole: true }
    }

    /// A split model's shard files, in order, laid end to end (moved, not copied).
    pub fn from_shards(files: Vec<ModelBytes>) -> ModelBytes {
        let (mut pieces, mut shards, mut len) = (Vec::new(), Vec::new(), 0);
        let whole = files.iter().all(|f| f.whole);
        for file in files {
            shards.extend(file.shards.iter().map(|s| len + s));
            pieces.extend(
                file.pieces.into_iter().filter(|p| !p.bytes().is_empty()).map(|p| Piece { start: len + p.start, ..p }),
            );
            len += file.len;
        }
        if shards.is_empty() {
            shards.push(0);
        }
        ModelBytes { pieces, len, shards, whole }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many pieces hold the file (1 unless it came through a builder with a piece limit below its size).
    pub fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// Whether every byte of the file is here; `false` for a file held in part ([`PartialBytesBuilder`]), whose
    /// matrices are elsewhere.
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// How many shards the model came in (1: one file).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The file's GGUF header, checked against the whole file, and every tensor against the pieces: a tensor that
    /// is not within one piece is an error here, so [`ModelBytes::get`] never fails on a tensor's range later (in a
    /// file held in part, only the tensors held are: [`ModelBytes::try_get`]). For a split model, the header of all
    /// its shards ([`Gguf::parse_shards`]).
    pub fn gguf(&self) -> Result<Gguf> {
        let shards: Vec<(&[u8], u64)> = (0..self.shards.len())
            .map(|i| {
                let (start, end) = (self.shards[i], self.shards.get(i + 1).copied().unwrap_or(self.len));
                // The piece this shard starts, up to the shard's end: the first bytes of the shard.
                let p = self.pieces.partition_point(|p| p.start < start);
                let head = self.pieces.get(p).filter(|p| p.start == start).map_or(&[][..], |p| {
                    let b = p.bytes();
                    &b[..(b.len() as u64).min(end - start) as usize]
                });
                (head, end - start)
            })
            .collect();
        let gguf = Gguf::parse_shards(&shards)?;
        let split = |t: &&super::TensorInfo| self.whole && self.piece_of(t.range()).is_none();
        if let Some(t) = gguf.tensors.iter().find(split) {
            return Err(Error::Gguf(format!("tensor '{}' is split between pieces of the file in memory", t.name)));
        }
        Ok(gguf)
    }

    /// The piece holding all of `range`, if one does.
    fn piece_of(&self, range: Range<u64>) -> Option<&Piece> {
        let i = self.pieces.partition_point(|p| p.end() <= range.start);
        self.pieces.get(i).filter(|p| p.start <= range.start && range.end <= p.end())
    }

    /// The bytes `range` of the file. It must lie within one piece, as every tensor's range (and any part of one)
    /// does once [`ModelBytes::gguf`] has accepted the file.
    pub fn get(&self, range: Range<u64>) -> &[u8] {
        let p = self
            .piece_of(range.clone())
            .unwrap_or_else(|| panic!("bytes {range:?} are not within one piece of the file ({} bytes)", self.len));
        p.slice(range)
    }

    /// The bytes `range` of the file, if one piece holds them all (in a file held in part, a range that is not held
    /// is `None`).
    pub fn try_get(&self, range: Range<u64>) -> Option<&[u8]> {
        self.piece_of(range.clone()).map(|p| p.slice(range))
    }

    /// The bytes `range` of the file (within its length), piece by piece.
    pub fn chunks(&self, range: Range<u64>) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().filter_map(move |p| {
            let (s, e) = (range.start.max(p.start), range.end.min(p.end()));
            (s < e).then(|| p.slice(s..e))
        })
    }
}

/// A GGUF file arriving in chunks, laid into pieces of at most `max_piece` bytes cut between tensors.
///
/// A file that fits in one piece goes into one buffer. For a bigger one (or one of unknown size) the bytes are
/// kept in the first piece until its header can be read; the tensor table then says where pieces may end, and
/// each piece is reserved at its full size when the stream reaches it.
pub struct ModelBytesBuilder {
    max_piece: usize,
    /// The file's size as the caller was told it (a hint: a stream may end earlier or later).
    total: Option<usize>,
    /// Where the pieces go; `None` until the header has been read (or was not needed).
    plan: Option<Plan>,
    pieces: Vec<Vec<u8>>,
    received: usize,
    /// The first piece's length at which to try reading the header next (doubling, so a header is parsed a few
    /// times at most whatever the chunk size).
    next_header_try: usize,
}

struct Plan {
    /// Where each piece after the first starts.
    cuts: Vec<usize>,
    /// Where the file should end: its size if known, else the end of its last tensor.
    end: usize,
}

/// The largest piece wasm32 can hold; elsewhere a file is one piece.
pub const MAX_PIECE_BYTES: usize = isize::MAX as usize;

impl ModelBytesBuilder {
    /// A builder for a file of `total` bytes (`None`: unknown until it ends), in pieces of at most `max_piece`.
    pub fn new(total: Option<usize>, max_piece: usize) -> Result<ModelBytesBuilder> {
        let mut first = Vec::new();
        let one_piece = total.filter(|&t| t <= max_piece);
        if let Some(t) = one_piece {
            reserve_exact(&mut first, t)?;
        }
        Ok(ModelBytesBuilder {
            max_piece,
            total,
            plan: one_piece.map(|end| Plan { cuts: Vec::new(), end }),
            pieces: vec![first],
            received: 0,
            next_header_try: max_piece.min(1 << 20),
        })
    }

    /// Append the file's next `chunk`.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<()> {
        while !chunk.is_empty() {
            // The current piece takes bytes up to the next cut (the last one, all that come).
            let next_cut = self.plan.as_ref().and_then(|p| p.cuts.get(self.pieces.len() - 1).copied());
            if let Some(cut) = next_cut.filter(|&cut| cut == self.received) {
                let plan = self.plan.as_ref().expect("a cut comes from a plan");
                let end = plan.cuts.get(self.pieces.len()).copied().unwrap_or(plan.end);
                let mut piece = Vec::new();
                reserve_exact(&mut piece, end.saturating_sub(cut))?;
                self.pieces.push(piece);
                continue;
            }
            let n = next_cut.map_or(chunk.len(), |cut| chunk.len().min(cut - self.received));
            let piece = self.pieces.last_mut().expect("a builder always has a piece");
            piece.try_reserve(n).map_err(|_| out_of_memory(self.received + n))?;
            piece.extend_from_slice(&chunk[..n]);
            self.received += n;
            chunk = &chunk[n..];
            if self.plan.is_none() {
                self.plan_pieces()?;
            }
        }
        Ok(())
    }

    /// Read the header from the first piece when it has grown enough to try, and decide where pieces end.
    fn plan_pieces(&mut self) -> Result<()> {
        let head = &self.pieces[0];
        let more_may_come = self.total.is_none_or(|t| head.len() < t);
        if head.len() < self.next_header_try && more_may_come {
            return Ok(());
        }
        // Tensors are checked against the stated size, so no piece is reserved past the end of the file.
        let gguf = match Gguf::parse_prefix(head, self.total.map(|t| t as u64))? {
            Prefix::Complete(g) => g,
            // Not all of the header yet: try again at the length it needs, and at twice this one at least.
            Prefix::Need(n) if more_may_come => {
                self.next_header_try = n.max(head.len().saturating_mul(2));
                return Ok(());
            }
            // The file ended inside its header: `ModelBytes::gguf` says so when the file is read.
            Prefix::Need(_) => return Ok(()),
        };
        let (cuts, data_end) = cuts(&gguf, self.max_piece)?;
        let plan = Plan { end: self.total.unwrap_or(data_end), cuts };
        let first_end = plan.cuts.first().copied().unwrap_or(plan.end);
        // The first piece may already hold bytes of the next (a chunk can be large): they move there.
        let head = &mut self.pieces[0];
        let spill = if head.len() > first_end { head.split_off(first_end) } else { Vec::new() };
        let head_len = head.len();
        reserve_exact(head, first_end.saturating_sub(head_len))?;
        head.shrink_to(first_end);
        self.received = head_len;
        self.plan = Some(plan);
        self.push(&spill)
    }

    /// The whole file, once its last chunk is in. Whether it is all there is for [`ModelBytes::gguf`] to say.
    pub fn finish(self) -> ModelBytes {
        let mut start = 0;
        let pieces = self
            .pieces
            .into_iter()
            .map(|data| {
                let piece = Piece { start, data: PieceData::Owned(data) };
                start = piece.end();
                piece
            })
            .collect();
        ModelBytes::from_pieces(pieces)
    }
}

/// Some byte ranges of a file of known length, taken from its bytes as they stream past (in order, from the first):
/// a model whose matrices go elsewhere keeps its header and vectors here ([`ModelBytes::is_whole`] is then `false`).
pub struct PartialBytesBuilder {
    len: u64,
    /// The ranges held, sorted and apart, each with its bytes so far.
    pieces: Vec<(Range<u64>, Vec<u8>)>,
    received: u64,
}

impl PartialBytesBuilder {
    /// A builder for `ranges` (in any order, overlapping or not, cut at `len`) of a file of `len` bytes; each range's
    /// memory is reserved here.
    pub fn new(len: u64, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<PartialBytesBuilder> {
        let mut ranges: Vec<Range<u64>> =
            ranges.into_iter().map(|r| r.start.min(len)..r.end.min(len)).filter(|r| r.start < r.end).collect();
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        let mut pieces = Vec::with_capacity(merged.len());
        for r in merged {
            let mut bytes = Vec::new();
            let n = usize::try_from(r.end - r.start).map_err(|_| out_of_memory(usize::MAX))?;
            reserve_exact(&mut bytes, n)?;
            pieces.push((r, bytes));
        }
        Ok(PartialBytesBuilder { len, pieces, received: 0 })
    }

    /// Take what is held of the file's next `chunk` (bytes past its length are not looked at).
    pub fn push(&mut self, chunk: &[u8]) {
        let (start, end) = (self.received, (self.received + chunk.len() as u64).min(self.len));
        let first = self.pieces.partition_point(|(r, _)| r.end <= start);
        for (r, bytes) in self.pieces[first..].iter_mut().take_while(|(r, _)| r.start < end) {
            let (s, e) = (r.start.max(start), r.end.min(end));
            bytes.extend_from_slice(&chunk[(s - start) as usize..(e - start) as usize]);
        }
        self.received += chunk.len() as u64;
    }

    /// Bytes pushed so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The held ranges as a file held in part; an error if the stream ended before one of them.
    pub fn finish(self) -> Result<ModelBytes> {
        if let Some((r, _)) = self.pieces.iter().find(|(r, b)| (b.len() as u64) < r.end - r.start) {
            return Err(Error::Gguf(format!(
                "the file ended after {} of its {} bytes, before bytes {r:?}",
                self.received, self.len
            )));
        }
        let pieces =
            self.pieces.into_iter().map(|(r, bytes)| Piece { start: r.start, data: PieceData::Owned(bytes) }).collect();
        Ok(ModelBytes { pieces, len: self.len, shards: vec![0], whole: false })
    }
}

/// Where pieces of at most `max_piece` bytes start after the first, cutting only at the start of a tensor; and
/// where the last tensor ends.
fn cuts(gguf: &Gguf, max_piece: usize) -> Result<(Vec<usize>, usize)> {
    let mut tensors: Vec<_> = gguf.tensors.iter().collect();
    tensors.sort_by_key(|t| t.offset);
    let (mut cuts, mut start, mut end) = (Vec::new(), 0usize, 0usize);
    for t in tensors {
        // The file is held in memory, so where it is not addressable it cannot be held.
        let offset = usize::try_from(t.offset).map_err(|_| out_of_memory(usize::MAX))?;
        let t_end = offset.checked_add(t.size).ok_or_else(|| out_of_memory(usize::MAX))?;
        if t_end - start > max_piece && offset >= end && offset > start {
            cuts.push(offset);
            start = offset;
        }
        if t_end - start > max_piece {
            return Err(Error::Gguf(format!(
                "tensor '{}' ({} bytes) cannot be held in one piece of at most {max_piece} bytes",
                t.name, t.size
            )));
        }
        end = end.max(t_end);
    }
    Ok((cuts, end))
}

/// Room for exactly `n` more bytes in `v`.
fn reserve_exact(v: &mut Vec<u8>, n: usize) -> Result<()> {
    v.try_reserve_exact(n).map_err(|_| out_of_memory(v.len() + n))
}

fn out_of_memory(bytes: usize) -> Error {
    Error::OutOfMemory { bytes, what: "the model file".into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::id::ModelId;
    use crate::gguf::{write_f32, Value, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS};

    /// A GGUF of `n` F32 tensors of `floats` each, tensor i filled with i.
    fn file(n: usize, floats: usize) -> Vec<u8> {
        let data: Vec<Vec<f32>> = (0..n).map(|i| vec![i as f32; floats]).collect();
        let tensors: Vec<_> = data.iter().enumerate().map(|(i, v)| (format!("t{i}"), vec![floats], &v[..])).collect();
        write_f32(&[("general.architecture", Value::String("none".into()))], &tensors)
    }

    fn build(bytes: &[u8], total: Option<usize>, max_piece: usize, chunk: usize) -> Result<ModelBytes> {
        let mut b = ModelBytesBuilder::new(total, max_piece)?;
        for c in bytes.chunks(chunk) {
            b.push(c)?;
        }
        Ok(b.finish())
    }

    #[test]
    fn a_file_in_pieces_keeps_every_tensor_whole_and_every_byte() {
        let bytes = file(6, 1000);
        for (total, chunk) in [(Some(bytes.len()), 7), (None, 4096), (Some(bytes.len()), 1 << 20)] {
            let m = build(&bytes, total, 9000, chunk).unwrap();
            assert_eq!(m.len(), bytes.len() as u64);
            assert!(m.piece_count() > 1, "{total:?} {chunk}");
            assert_eq!(m.chunks(0..m.len()).collect::<Vec<_>>().concat(), bytes);
            let g = m.gguf().unwrap();
            let whole = ModelBytes::from(bytes.clone());
            assert_eq!(ModelId::of_gguf(&m, g.data_offset), ModelId::of_gguf(&whole, g.data_offset));
            for (i, t) in g.tensors.iter().enumerate() {
                assert_eq!(m.get(t.range()), t.data(&bytes));
                assert_eq!(f32::from_le_bytes(m.get(t.offset..t.offset + 4).try_into().unwrap()), i as f32);
            }
        }
        // A limit at or above the size: one piece, as `From<Vec<u8>>` gives.
        assert_eq!(build(&bytes, Some(bytes.len()), bytes.len(), 100).unwrap().piece_count(), 1);
    }

    #[test]
    fn a_tensor_bigger_than_a_piece_or_a_short_file_is_an_error() {
        let bytes = file(2, 4000);
        assert!(matches!(build(&bytes, None, 9000, 512), Err(Error::Gguf(m)) if m.contains("one piece")));
        let bytes = file(6, 1000);
        for total in [Some(bytes.len()), None] {
            let short = build(&bytes[..bytes.len() - 10], total, 9000, 512).unwrap();
            assert!(matches!(short.gguf(), Err(Error::Gguf(m)) if m.contains("past the end")));
        }
    }

    #[test]
    fn a_tensor_table_past_the_stated_size_is_refused_before_any_piece_is_reserved() {
        let mut bytes = file(6, 1000);
        let g = Gguf::parse(&bytes).unwrap();
        // The last tensor's offset, relative to the data section, moved to 2^40: a piece there would need a terabyte.
        let last = g.tensors.iter().max_by_key(|t| t.offset).unwrap();
        let rel = last.offset - g.data_offset as u64;
        let at = bytes.windows(8).rposition(|w| w == rel.to_le_bytes()).unwrap();
        bytes[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let err = build(&bytes, Some(bytes.len()), 9000, 512).err().unwrap();
        assert!(matches!(err, Error::Gguf(ref m) if m.contains("past the end")), "{err:?}");
    }

    /// `file(6, floats)` as a split model of shards holding `per` tensors each, as llama.cpp's `gguf-split` writes
    /// one: the first shard has the metadata, each shard its `split.*` keys.
    fn split(floats: usize, per: usize) -> Vec<Vec<u8>> {
        let data: Vec<Vec<f32>> = (0..6).map(|i| vec![i as f32; floats]).collect();
        let tensors: Vec<_> = data.iter().enumerate().map(|(i, v)| (format!("t{i}"), vec![floats], &v[..])).collect();
        let n = tensors.len().div_ceil(per);
        tensors
            .chunks(per)
            .enumerate()
            .map(|(i, part)| {
                let mut meta = vec![
                    (SPLIT_NO, Value::U16(i as u16)),
                    (SPLIT_COUNT, Value::U16(n as u16)),
                    (SPLIT_TENSORS, Value::I32(tensors.len() as i32)),
                ];
                if i == 0 {
                    meta.insert(0, ("general.architecture", Value::String("none".into())));
                }
                write_f32(&meta, part)
            })
            .collect()
    }

    fn shards(files: &[Vec<u8>]) -> ModelBytes {
        ModelBytes::from_shards(files.iter().map(|f| ModelBytes::from(f.clone())).collect())
    }

    #[test]
    fn a_split_model_is_one_header_over_its_shards_laid_end_to_end() {
        let whole = file(6, 1000);
        let one = ModelBytes::from(whole.clone()).gguf().unwrap();
        let files = split(1000, 2);
        assert_eq!(files.len(), 3);
        // As the wasm build receives them: each shard through a builder of its own, in pieces or not.
        let built = |max_piece| {
            let parts = files.iter().map(|f| build(f, Some(f.len()), max_piece, 777).unwrap()).collect();
            ModelBytes::from_shards(parts)
        };
        for m in [shards(&files), built(usize::MAX), built(5000)] {
            assert_eq!(m.shard_count(), 3);
            assert_eq!(m.len(), files.iter().map(Vec::len).sum::<usize>() as u64);
            let g = m.gguf().unwrap();
            assert_eq!(g.get_str("general.architecture"), Some("none"));
            assert_eq!(g.tensors.len(), one.tensors.len());
            for (t, u) in g.tensors.iter().zip(&one.tensors) {
                assert_eq!((&t.name, &t.dims, t.ty, t.size), (&u.name, &u.dims, u.ty, u.size));
                assert_eq!(m.get(t.range()), u.data(&whole), "{}", t.name);
            }
        }
        // One shard of one: a plain file.
        let g = shards(&split(1000, 6)).gguf().unwrap();
        assert_eq!(g.tensors.len(), 6);
    }

    #[test]
    fn shards_missing_extra_out_of_order_or_inconsistent_are_refused() {
        let files = split(1000, 2);
        let refused = |files: &[Vec<u8>], what: &str| match shards(files).gguf() {
            Err(Error::Gguf(m)) => assert!(m.contains(what), "{what}: {m}"),
            other => panic!("{what}: {:?}", other.map(|g| g.tensors.len())),
        };
        refused(&files[..1], "shard 1 of 3 of a split model");
        refused(&files[1..2], "shard 2 of 3 of a split model");
        refused(&files[..2], "shard 1 of 2: it says it is shard 1 of 3");
        refused(&[files[0].clone(), files[2].clone(), files[1].clone()], "shard 2 of 3: it says it is shard 3 of 3");
        refused(&[files[0].clone(), files[1].clone(), files[1].clone()], "shard 3 of 3: it says it is shard 2 of 3");
        // A plain file as a shard: it says nothing of a split.
        refused(
            &[files[0].clone(), files[1].clone(), file(1, 1000)],
            "shard 3 of 3: split.no and split.count are not both",
        );
        // A shard cut short: its last tensor runs past its end (not into the next shard).
        let mut cut = files.clone();
        let short = cut[1].len() - 10;
        cut[1].truncate(short);
        refused(&cut, "shard 2 of 3: tensor 't3'");
        // A tensor in two shards.
        let v = vec![0f32; 1000];
        let meta = [(SPLIT_NO, Value::U16(2)), (SPLIT_COUNT, Value::U16(3)), (SPLIT_TENSORS, Value::I32(6))];
        let again = write_f32(&meta, &[("t2".into(), vec![1000], &v[..]), ("t9".into(), vec![1000], &v[..])]);
        refused(&[files[0].clone(), files[1].clone(), again], "shard 3 of 3: tensor 't2' is in an earlier shard too");
        // split.tensors.count that is not the tensors' count.
        let mut wrong = files.clone();
        let at = wrong[0].windows(SPLIT_TENSORS.len()).position(|w| w == SPLIT_TENSORS.as_bytes()).unwrap();
        let value = at + SPLIT_TENSORS.len() + 4; // after the key, the type (i32)
        wrong[0][value..value + 4].copy_from_slice(&7i32.to_le_bytes());
        refused(&wrong, "hold 6 tensors but the first says split.tensors.count 7");
        // Empty shards and no shards.
        refused(&[files[0].clone(), Vec::new(), files[2].clone()], "shard 2 of 3: file is shorter than a GGUF header");
        assert!(matches!(ModelBytes::from_shards(Vec::new()).gguf(), Err(Error::Gguf(_))));
    }

    #[test]
    fn bytes_that_are_not_gguf_are_refused_once_the_header_is_tried_not_when_they_end() {
        let junk = vec![7u8; 20_000];
        for total in [None, Some(junk.len())] {
            let mut b = ModelBytesBuilder::new(total, 9000).unwrap();
            let refused = junk.chunks(100).position(|c| b.push(c).is_err()).map(|i| (i + 1) * 100);
            // The header is first tried at the first piece's limit (9000 bytes here).
            assert_eq!(refused, Some(9000), "{total:?}");
        }
        // A stream that ends before the first try gets the parser's error from `gguf`.
        let m = build(&junk[..5000], None, 9000, 100).unwrap();
        assert!(matches!(m.gguf(), Err(Error::Gguf(m)) if m.contains("magic")));
    }

    #[test]
    fn the_header_is_tried_again_only_once_it_can_be_whole() {
        // A file whose header is longer than the first try: the builder waits for it, then cuts pieces.
        let long = "x".repeat(30_000);
        let data = vec![1.0f32; 1000];
        let tensors: Vec<_> = (0..6).map(|i| (format!("t{i}"), vec![1000], &data[..])).collect();
        let bytes = write_f32(&[("general.name", Value::String(long))], &tensors);
        let m = build(&bytes, None, 9000, 1000).unwrap();
        assert!(m.piece_count() > 1);
        assert_eq!(m.gguf().unwrap().tensors.len(), 6);
    }
}
