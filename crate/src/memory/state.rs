//! One conversation's saved state (llama.cpp's slot save/restore): its tokens and the keys and values of
//! every layer at their positions, as bytes a caller can keep and restore later into a session of the same
//! model. The reader takes bytes from outside: it checks the size against what the header says and the
//! context allows, the checksum and the model before it believes anything.
//!
//! ```text
//! 0   magic "RVLLMST\0"           8 bytes
//! 8   version                     u32
//! 12  KV type (1 = f16)           u32
//! 16  layers, row width, tokens   3 × u32
//! 28  model id                    32 bytes
//! 60  tokens                      n × u32
//! ..  per layer: keys of the n positions, then their values (f16)
//! end CRC-32 of all the above     u32
//! ```

use super::record::{frame, seal, u32_at, unseal, ModelId, KV_F16};
use crate::kv_cache::KvCache;

const MAGIC: [u8; 8] = *b"RVLLMST\0";
const HEADER_BYTES: usize = 60;

/// The bytes of a conversation: `tokens` and their rows `0..tokens.len()` of `kv`.
pub fn encode(model: &ModelId, tokens: &[u32], kv: &KvCache) -> Vec<u8> {
    let n = tokens.len();
    let kv_dim = kv.kv_dim();
    let mut out = Vec::new();
    frame(&mut out, &MAGIC);
    for x in [KV_F16, kv.layers.len() as u32, kv_dim as u32, n as u32] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&model.0);
    out.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
    for layer in &kv.layers {
        out.extend(layer.keys()[..n * kv_dim].iter().flatten());
        out.extend(layer.values()[..n * kv_dim].iter().flatten());
    }
    seal(&mut out);
    out
}

/// Check `bytes` as a state of `model` with `n_layers` layers of `kv_dim` wide rows that fits `kv`, and
/// copy it in; its tokens. `kv` is only written once everything is checked.
pub fn decode_into(bytes: &[u8], model: &ModelId, kv: &mut KvCache) -> Result<Vec<u32>, String> {
    let n = check(bytes, model, kv.layers.len(), kv.kv_dim(), kv.n_ctx)?;
    Ok(copy_into(bytes, n, kv))
}

/// Check `bytes` as a state of `model` with `n_layers` layers of `kv_dim` wide rows that fits a context of
/// `n_ctx`; its tokens and their rows in a cache of just their positions (to go on to the GPU's).
pub fn decode(
    bytes: &[u8],
    model: &ModelId,
    n_layers: usize,
    kv_dim: usize,
    n_ctx: usize,
) -> Result<(Vec<u32>, KvCache), String> {
    let n = check(bytes, model, n_layers, kv_dim, n_ctx)?;
    let mut kv = KvCache::new(n_layers, kv_dim, n);
    Ok((copy_into(bytes, n, &mut kv), kv))
}

/// Everything `decode_into` checks; the number of tokens.
fn check(bytes: &[u8], model: &ModelId, n_layers: usize, kv_dim: usize, n_ctx: usize) -> Result<usize, String> {
    unseal(bytes, &MAGIC, HEADER_BYTES, "saved state").map_err(|e| e.to_string())?;
    let shape = [u32_at(bytes, 12), u32_at(bytes, 16), u32_at(bytes, 20)];
    if shape[..2] != [KV_F16, n_layers as u32][..] || shape[2] as usize != kv_dim || bytes[28..60] != model.0 {
        return Err("the saved state belongs to another model or KV format".into());
    }
    let n = u32_at(bytes, 24) as usize;
    if n > n_ctx {
        return Err(format!("the saved state holds {n} tokens, more than this context of {n_ctx}"));
    }
    let rows = n * kv_dim * 2; // bytes of one layer's keys (or values)
    let want = HEADER_BYTES + 4 * n + n_layers * 2 * rows + 4;
    if bytes.len() != want {
        return Err(format!("the saved state has {} bytes where its header says {want}", bytes.len()));
    }
    Ok(n)
}

/// Copy the checked state's `n` tokens' rows into `kv`; its tokens.
fn copy_into(bytes: &[u8], n: usize, kv: &mut KvCache) -> Vec<u32> {
    let rows = n * kv.kv_dim() * 2;
    let tokens = bytes[HEADER_BYTES..HEADER_BYTES + 4 * n].chunks_exact(4).map(|c| u32_at(c, 0)).collect();
    let mut at = HEADER_BYTES + 4 * n;
    for layer in &mut kv.layers {
        let (keys, values) = layer.rows_mut(0..n);
        for dst in [keys, values] {
            for (d, s) in dst.iter_mut().zip(bytes[at..at + rows].chunks_exact(2)) {
                *d = [s[0], s[1]];
            }
            at += rows;
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    #[test]
    fn states_round_trip_and_refuse_damage_and_other_models() {
        let mut rng = Rng::new(12);
        let model = ModelId([3; 32]);
        let mut kv = KvCache::new(2, 4, 10);
        for layer in &mut kv.layers {
            let (k, v) = layer.rows_mut(0..10);
            for x in k.iter_mut().chain(v.iter_mut()) {
                *x = (rng.next_u64() as u16).to_le_bytes();
            }
        }
        let tokens = [5, 6, 7, 8, 9, 10];
        let bytes = encode(&model, &tokens, &kv);
        let mut back = KvCache::new(2, 4, 10);
        assert_eq!(decode_into(&bytes, &model, &mut back).unwrap(), tokens);
        for (a, b) in kv.layers.iter().zip(&back.layers) {
            assert_eq!(a.keys()[..24], b.keys()[..24]);
            assert_eq!(a.values()[..24], b.values()[..24]);
        }
        let mut other = KvCache::new(2, 4, 10);
        for cut in 0..bytes.len() {
            assert!(decode_into(&bytes[..cut], &model, &mut other).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[70] ^= 1;
        assert!(decode_into(&flipped, &model, &mut other).unwrap_err().contains("damaged"));
        assert!(decode_into(&bytes, &ModelId([4; 32]), &mut other).unwrap_err().contains("another model"));
        assert!(decode_into(&bytes, &model, &mut KvCache::new(2, 4, 5))
            .unwrap_err()
            .contains("more than this context"));
        assert!(decode_into(&bytes, &model, &mut KvCache::new(2, 8, 10)).is_err());
        // Decoded into a cache of just its positions (for the GPU): the same rows, the same checks.
        let (got, just) = decode(&bytes, &model, 2, 4, 10).unwrap();
        assert_eq!((got.as_slice(), just.positions()), (&tokens[..], 0..6));
        for (a, b) in kv.layers.iter().zip(&just.layers) {
            assert_eq!(a.rows(0..6), b.rows(0..6));
        }
        assert!(decode(&bytes, &model, 2, 4, 5).err().unwrap().contains("more than this context"));
        assert!(decode(&flipped, &model, 2, 4, 10).err().unwrap().contains("damaged"));
    }
}
