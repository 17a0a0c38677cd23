//! A model file's identity: which model a persisted record (a prefix-cache page, a saved state) or an adapter
//! belongs to.

use std::ops::Range;

use sha2::{Digest, Sha256};

use super::bytes::ModelBytes;

/// Which model a record belongs to: SHA-256 of the GGUF header (metadata and tensor table) and of
/// samples of the tensor data. A record of another model is never used (nor one of another KV type: the
/// record says its type, and its key depends on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ModelId(pub [u8; 32]);

impl ModelId {
    /// Bytes of tensor data hashed at each sample point.
    const SAMPLE_BYTES: usize = 4096;
    const SAMPLES: usize = 16;

    /// The id of a GGUF file whose tensor data starts at `data_offset`.
    pub fn of_gguf(file: &ModelBytes, data_offset: usize) -> ModelId {
        let mut h = Sha256::new();
        h.update(b"ruvllm model, f16 KV");
        for range in ModelId::hashed(file.len(), data_offset) {
            file.chunks(range).for_each(|c| h.update(c));
        }
        ModelId(h.finalize().into())
    }

    /// The byte ranges the id of a file of `len` bytes hashes, in order: its header, then samples of its weights
    /// (which differ where headers do not: a fine-tune with the same metadata), from the start of the data to its
    /// last bytes, evenly. A file held in part keeps them (`gpu::GpuModelStream`).
    pub fn hashed(len: u64, data_offset: usize) -> impl Iterator<Item = Range<u64>> {
        let header = (data_offset as u64).min(len);
        let sample = ModelId::SAMPLE_BYTES as u64;
        let span = (len - header).saturating_sub(sample);
        let samples = (0..ModelId::SAMPLES as u64).map(move |i| {
            let at = header + span * i / (ModelId::SAMPLES as u64 - 1);
            at..(at + sample).min(len)
        });
        std::iter::once(0..header).chain(samples)
    }

    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

/// `bytes` as lowercase hex, two digits each.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    #[test]
    fn model_ids_see_the_header_and_the_weights() {
        let mut file = vec![0u8; 100_000];
        Rng::new(5).fill(&mut file);
        let id_of = |bytes: &Vec<u8>| ModelId::of_gguf(&ModelBytes::from(bytes.clone()), 1000);
        let id = id_of(&file);
        let mut header = file.clone();
        header[10] ^= 1;
        let mut weights = file.clone();
        weights[99_999] ^= 1;
        assert_ne!(id_of(&header), id);
        assert_ne!(id_of(&weights), id);
        assert_eq!(id_of(&file), id);
    }
}
