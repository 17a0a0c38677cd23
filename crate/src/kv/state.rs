//! One conversation's saved state (llama.cpp's slot save/restore): its tokens and the keys and values of
//! every layer at their positions, as bytes a caller can keep and restore later into a session of the same
//! model. The reader takes bytes from outside: it checks the size against what the header says and the
//! context allows, the checksum and the model before it believes anything.
//!
//! ```text
//! 0   magic "RVLLMST\0"           8 bytes
//! 8   version                     u32
//! 12  KV type                     u32, ggml's type id: 1 = f16, 8 = q8_0, 2 = q4_0 (a two-tier cache's cold type)
//! 16  layers, row width, tokens   3 × u32
//! 28  model id                    32 bytes
//! 60  tokens                      n × u32
//! ..  cold positions c            u32, only for a quantized KV type
//! ..  per layer: keys of the n positions, then their values: the first c rows in the KV type, the others f16
//! ..  the recurrent state         f32s, only for a model with delta-net layers (Qwen3.5): each such layer's
//!                                 convolution state, then its delta-rule state, after the n tokens
//! end CRC-32 of all the above     u32
//! ```
//!
//! A two-tier cache's state keeps each tier as it is, so a session restores it exactly (where its own
//! hot window puts the boundary elsewhere, rows move between the tiers as they do in the cache). A state
//! of another KV type is an `Error::KvCache`: the sessions of a model all have its one KV format. The frame
//! (magic, version, CRC-32) is `crate::record`'s.

use super::page::VERSION;
use crate::error::{Error, Result};
use crate::gguf::id::ModelId;
use crate::kv::cache::{KvCache, KvType};
use crate::kv::recurrent::RecurrentState;
use crate::record::{seal, u32_at, Kind};

const HEADER_BYTES: usize = 60;
const KIND: Kind =
    Kind { what: "a saved state", magic: *b"RVLLMST\0", version: VERSION, oldest: VERSION, header: HEADER_BYTES };

/// The bytes of a conversation: `tokens` and their rows `0..tokens.len()` of `kv`.
pub fn encode(model: &ModelId, tokens: &[u32], kv: &KvCache) -> Vec<u8> {
    let n = tokens.len();
    let (kv_dim, ty) = (kv.kv_dim(), kv.options().persisted());
    let cold = kv.n_cold().min(n);
    let mut out = KIND.begin();
    for x in [ty.id(), kv.layers.len() as u32, kv_dim as u32, n as u32] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&model.0);
    out.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
    if ty != KvType::F16 {
        out.extend_from_slice(&(cold as u32).to_le_bytes());
    }
    let (cold_bytes, hot_bytes) = (cold * ty.row_bytes(kv_dim), (n - cold) * kv_dim * 2);
    let mut rows = vec![0u8; 2 * (cold_bytes + hot_bytes)];
    for layer in &kv.layers {
        let (keys, values) = rows.split_at_mut(cold_bytes + hot_bytes);
        let ((kc, kh), (vc, vh)) = (keys.split_at_mut(cold_bytes), values.split_at_mut(cold_bytes));
        layer.read(0..cold, ty, kc, vc);
        layer.read(cold..n, KvType::F16, kh, vh);
        out.extend_from_slice(&rows);
    }
    if let Some(r) = &kv.recurrent {
        assert_eq!(r.len, n, "the recurrent state is that after the tokens saved");
        r.write_bytes(&mut out);
    }
    seal(out)
}

/// The largest state a session of `n_layers` layers of `kv_dim` wide rows and a context of `n_ctx` takes (an
/// f16 cache's, the widest type), with a recurrent state of `recurrent_bytes`: bytes beyond it are refused before
/// they are read, or copied anywhere.
pub fn max_bytes(n_layers: usize, kv_dim: usize, n_ctx: usize, recurrent_bytes: usize) -> usize {
    let rows = n_layers.saturating_mul(2).saturating_mul(n_ctx).saturating_mul(KvType::F16.row_bytes(kv_dim));
    rows.saturating_add(HEADER_BYTES + 4 * n_ctx + 4 + 4).saturating_add(recurrent_bytes)
}

/// Check `bytes` as a state of `model` (whose vocabulary has `vocab` ids) that fits `kv` (its layers, row
/// width, KV type and context), and copy it in; its tokens. `kv` is only written once everything is checked.
pub fn decode_into(bytes: &[u8], model: &ModelId, vocab: usize, kv: &mut KvCache) -> Result<Vec<u32>> {
    let recurrent_bytes = kv.recurrent.as_ref().map_or(0, |r| r.bytes());
    let shape = Shape {
        n_layers: kv.layers.len(),
        kv_dim: kv.kv_dim(),
        ty: kv.options().persisted(),
        n_ctx: kv.n_ctx,
        recurrent_bytes,
    };
    let state = check(bytes, model, vocab, shape)?;
    Ok(copy_into(bytes, &state, kv))
}

/// Check `bytes` as an f16 state (the GPU's cache is f16) of `model` (`vocab` ids) with `n_layers` layers of
/// `kv_dim` wide rows that fits a context of `n_ctx`, with a recurrent state of `recurrent`'s shape where the model
/// has one; its tokens and their rows in a cache of just their positions, `recurrent` filled (to go on to the GPU's).
pub fn decode(
    bytes: &[u8],
    model: &ModelId,
    vocab: usize,
    n_layers: usize,
    kv_dim: usize,
    n_ctx: usize,
    recurrent: Option<RecurrentState>,
) -> Result<(Vec<u32>, KvCache)> {
    let recurrent_bytes = recurrent.as_ref().map_or(0, |r| r.bytes());
    let state = check(bytes, model, vocab, Shape { n_layers, kv_dim, ty: KvType::F16, n_ctx, recurrent_bytes })?;
    let mut kv = KvCache::new(n_layers, kv_dim, state.n);
    kv.recurrent = recurrent;
    Ok((copy_into(bytes, &state, &mut kv), kv))
}

/// A state's shape, checked by [`check`].
struct Checked {
    ty: KvType,
    /// Tokens, and the first of them whose rows are f16.
    n: usize,
    cold: usize,
    /// Bytes of one layer's keys (or values): the cold rows, then the hot ones.
    cold_bytes: usize,
    hot_bytes: usize,
    /// Where the first layer's rows start.
    at: usize,
    /// Bytes of the recurrent state after the rows.
    recurrent_bytes: usize,
}

/// The cache a state is restored into: `n_layers` layers of `kv_dim` wide rows of type `ty` (its persisted one)
/// and a context of `n_ctx`, and a recurrent state of `recurrent_bytes` (0: none).
#[derive(Clone, Copy)]
struct Shape {
    n_layers: usize,
    kv_dim: usize,
    ty: KvType,
    n_ctx: usize,
    recurrent_bytes: usize,
}

/// Everything `decode_into` checks, for a cache of `shape` and a vocabulary of `vocab` ids.
fn check(bytes: &[u8], model: &ModelId, vocab: usize, shape: Shape) -> Result<Checked> {
    let Shape { n_layers, kv_dim, ty, n_ctx, recurrent_bytes } = shape;
    let invalid = |e: String| Error::InvalidArgument(format!("not a saved state of this model: {e}"));
    let (_, body) = KIND.open(bytes).map_err(|e| invalid(e.to_string()))?;
    let saved = u32_at(bytes, 12);
    if saved != ty.id() {
        let name = KvType::from_id(saved).map_or_else(|| format!("type {saved}"), |t| t.name().to_string());
        return Err(Error::KvCache(format!(
            "the saved state holds a {name} KV cache; this session's is {}",
            ty.name()
        )));
    }
    let saved_shape = [u32_at(bytes, 16), u32_at(bytes, 20)];
    if saved_shape != [n_layers as u32, kv_dim as u32] || bytes[28..60] != model.0 {
        return Err(invalid("the saved state belongs to another model".into()));
    }
    let n = u32_at(bytes, 24) as usize;
    if n > n_ctx {
        return Err(invalid(format!("the saved state holds {n} tokens, more than this context of {n_ctx}")));
    }
    let mut at = HEADER_BYTES + 4 * n;
    let cold = match ty {
        KvType::F16 => 0,
        _ if body.len() < at + 4 => return Err(invalid(format!("the saved state ends after {} bytes", bytes.len()))),
        _ => {
            at += 4;
            u32_at(bytes, at - 4) as usize
        }
    };
    if cold > n {
        return Err(invalid(format!("the saved state has {cold} cold positions of {n}")));
    }
    let (cold_bytes, hot_bytes) = (cold * ty.row_bytes(kv_dim), (n - cold) * kv_dim * 2);
    let want = (cold_bytes + hot_bytes)
        .checked_mul(2 * n_layers)
        .and_then(|rows| rows.checked_add(at + 4 + recurrent_bytes))
        .ok_or_else(|| invalid("its size overflows".into()))?;
    if bytes.len() != want {
        return Err(invalid(format!("the saved state has {} bytes where its header says {want}", bytes.len())));
    }
    if let Some(id) = tokens(bytes, n).find(|&id| id as usize >= vocab) {
        return Err(invalid(format!("the saved state holds token {id}, outside this vocabulary of {vocab}")));
    }
    // Every layer's keys, then its values: the cold rows, then the hot ones.
    let tail = want - 4 - recurrent_bytes;
    let rows = bytes[at..tail].chunks_exact((cold_bytes + hot_bytes).max(1));
    if !rows.into_iter().all(|r| ty.rows_finite(&r[..cold_bytes]) && KvType::F16.rows_finite(&r[cold_bytes..])) {
        return Err(invalid("the saved state holds a key or value that is NaN or infinite".into()));
    }
    if !RecurrentState::bytes_finite(&bytes[tail..want - 4]) {
        return Err(invalid("the saved state's recurrent state holds a value that is NaN or infinite".into()));
    }
    Ok(Checked { ty, n, cold, cold_bytes, hot_bytes, at, recurrent_bytes })
}

/// Copy the checked state's rows into `kv` (of its shape and type, holding positions `0..n`); its tokens.
fn copy_into(bytes: &[u8], state: &Checked, kv: &mut KvCache) -> Vec<u32> {
    let Checked { ty, n, cold, cold_bytes, hot_bytes, mut at, recurrent_bytes } = *state;
    let tokens = tokens(bytes, n).collect();
    kv.resize(0, 0);
    kv.resize(n, cold);
    for layer in &mut kv.layers {
        let rows = &bytes[at..at + 2 * (cold_bytes + hot_bytes)];
        let (keys, values) = rows.split_at(cold_bytes + hot_bytes);
        let ((kc, kh), (vc, vh)) = (keys.split_at(cold_bytes), values.split_at(cold_bytes));
        layer.write(0, ty, kc, vc);
        layer.write(cold, KvType::F16, kh, vh);
        at += rows.len();
    }
    if let Some(r) = &mut kv.recurrent {
        r.read_bytes(&bytes[at..at + recurrent_bytes], n);
    }
    tokens
}

/// The `n` tokens of a state whose size was checked.
fn tokens(bytes: &[u8], n: usize) -> impl Iterator<Item = u32> + '_ {
    bytes[HEADER_BYTES..HEADER_BYTES + 4 * n].chunks_exact(4).map(|c| u32_at(c, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::cache::KvCacheOptions;
    use crate::test_support::{test, Rng};

    const VOCAB: usize = 1000;

    /// A cache of `n` positions of random rows, decoded one position at a time (so a two-tier one moves
    /// blocks to its cold tier as it goes).
    fn filled(n_layers: usize, kv_dim: usize, n_ctx: usize, opts: KvCacheOptions, n: usize, rng: &mut Rng) -> KvCache {
        let mut kv = KvCache::with_options(n_layers, kv_dim, n_ctx, opts);
        for p in 0..n {
            kv.make_room(p, 1);
            for layer in &mut kv.layers {
                let row: Vec<f32> = (0..2 * kv_dim).map(|_| rng.normal()).collect();
                layer.store(p, &row[..kv_dim], &row[kv_dim..]);
            }
        }
        kv
    }

    /// Every layer's rows `0..n` as f16.
    fn rows(kv: &KvCache, n: usize) -> Vec<u8> {
        let rb = kv.kv_dim() * 2;
        let mut out = Vec::new();
        for layer in &kv.layers {
            let (mut k, mut v) = (vec![0; n * rb], vec![0; n * rb]);
            layer.read(0..n, KvType::F16, &mut k, &mut v);
            out.extend(k.into_iter().chain(v));
        }
        out
    }

    #[test]
    fn states_round_trip_and_refuse_damage_and_other_models() {
        let mut rng = Rng::new(12);
        let model = ModelId([3; 32]);
        let kv = filled(2, 4, 10, KvCacheOptions::default(), 10, &mut rng);
        let tokens = [5, 6, 7, 8, 9, 10];
        let bytes = encode(&model, &tokens, &kv);
        let mut back = KvCache::new(2, 4, 10);
        assert_eq!(decode_into(&bytes, &model, VOCAB, &mut back).unwrap(), tokens);
        assert_eq!(rows(&back, 6), rows(&kv, 6));
        let mut other = KvCache::new(2, 4, 10);
        for cut in 0..bytes.len() {
            assert!(decode_into(&bytes[..cut], &model, VOCAB, &mut other).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[70] ^= 1;
        assert!(decode_into(&flipped, &model, VOCAB, &mut other).unwrap_err().to_string().contains("damaged"));
        let foreign = decode_into(&bytes, &ModelId([4; 32]), VOCAB, &mut other).unwrap_err();
        assert!(foreign.to_string().contains("another model") && foreign.code() == "E_INVALID_ARGUMENT");
        assert!(decode_into(&bytes, &model, VOCAB, &mut KvCache::new(2, 4, 5))
            .unwrap_err()
            .to_string()
            .contains("more than this context"));
        assert!(decode_into(&bytes, &model, VOCAB, &mut KvCache::new(2, 8, 10)).is_err());
        // Decoded into a cache of just its positions (for the GPU): the same rows, the same checks.
        let (got, just) = decode(&bytes, &model, VOCAB, 2, 4, 10, None).unwrap();
        assert_eq!((got.as_slice(), just.positions()), (&tokens[..], 0..6));
        for (a, b) in kv.layers.iter().zip(&just.layers) {
            assert_eq!(a.rows(0..6), b.rows(0..6));
        }
        assert!(decode(&bytes, &model, VOCAB, 2, 4, 5, None)
            .err()
            .unwrap()
            .to_string()
            .contains("more than this context"));
        assert!(decode(&flipped, &model, VOCAB, 2, 4, 10, None).err().unwrap().to_string().contains("damaged"));
    }

    /// A two-tier cache's state keeps both tiers: restored into a session of the same format it is the
    /// same cache, into one with another hot window the same values, and into one of another KV type an
    /// `E_KV_CACHE` error that leaves it alone.
    #[test]
    fn two_tier_states_round_trip_and_refuse_another_kv_type() {
        for cold in [KvType::Q8_0, KvType::Q4_0] {
            let mut rng = Rng::new(cold.id() as u64);
            let model = ModelId([3; 32]);
            let opts = KvCacheOptions { cold, hot_tokens: 32 };
            let kv = filled(2, 64, 200, opts, 150, &mut rng);
            assert_eq!(kv.n_cold(), 96);
            let tokens: Vec<u32> = (0..140).collect(); // the session's last 10 positions are not its tokens'
            let bytes = encode(&model, &tokens, &kv);
            let f16_size = encode(&model, &tokens, &filled(2, 64, 200, KvCacheOptions::default(), 150, &mut rng)).len();
            assert!(bytes.len() < f16_size, "{cold:?}: {} bytes, f16 {f16_size}", bytes.len());

            let mut back = KvCache::with_options(2, 64, 200, opts);
            assert_eq!(decode_into(&bytes, &model, VOCAB, &mut back).unwrap(), tokens);
            assert_eq!((back.len(), back.n_cold()), (140, 96));
            assert_eq!(rows(&back, 140), rows(&kv, 140), "{cold:?}: exact");
            let mut wider = KvCache::with_options(2, 64, 200, KvCacheOptions { cold, hot_tokens: 96 });
            decode_into(&bytes, &model, VOCAB, &mut wider).unwrap();
            assert_eq!((wider.n_cold(), rows(&wider, 140)), (96, rows(&kv, 140)), "{cold:?}: another hot window");

            for other in [KvCacheOptions::default(), KvCacheOptions { cold: KvType::Q4_0, hot_tokens: 32 }] {
                if other.cold == cold {
                    continue;
                }
                let mut kv = filled(2, 64, 200, other, 20, &mut rng);
                let before = rows(&kv, 20);
                let e = decode_into(&bytes, &model, VOCAB, &mut kv).unwrap_err();
                assert_eq!(e.code(), "E_KV_CACHE", "{e}");
                assert_eq!(rows(&kv, 20), before);
            }
            // Nor does a GPU session's f16 cache take it.
            assert_eq!(decode(&bytes, &model, VOCAB, 2, 64, 200, None).err().unwrap().code(), "E_KV_CACHE");
            // And the other way: an f16 state into this format.
            let f16_state = encode(&model, &[1, 2, 3], &filled(2, 64, 200, KvCacheOptions::default(), 3, &mut rng));
            assert_eq!(decode_into(&f16_state, &model, VOCAB, &mut back).unwrap_err().code(), "E_KV_CACHE");
            for cut in (0..bytes.len()).step_by(97) {
                assert!(decode_into(&bytes[..cut], &model, VOCAB, &mut back).is_err(), "cut at {cut}");
            }
        }
    }

    /// A state whose checksum holds but which names a token outside the vocabulary, or holds a NaN or an
    /// infinite key or value (in either tier), is refused and leaves the cache alone: restored, it would
    /// poison every answer of the session and every page it later shares.
    #[test]
    fn states_with_foreign_tokens_or_values_that_are_not_finite_are_refused() {
        let model = ModelId([3; 32]);
        let reseal = |b: &mut Vec<u8>| {
            b.truncate(b.len() - 4);
            *b = seal(std::mem::take(b));
        };
        for opts in [KvCacheOptions::default(), KvCacheOptions { cold: KvType::Q8_0, hot_tokens: 32 }] {
            let mut rng = Rng::new(opts.cold.id() as u64);
            let kv = filled(2, 32, 100, opts, 70, &mut rng);
            let tokens: Vec<u32> = (0..70).collect();
            let good = encode(&model, &tokens, &kv);
            // The f16 state of a full context is the largest (its cold count aside).
            assert!(good.len() <= max_bytes(2, 32, 70, 0));
            assert!(opts.cold != KvType::F16 || good.len() + 4 == max_bytes(2, 32, 70, 0));
            let mut back = filled(2, 32, 100, opts, 5, &mut rng);
            let before = rows(&back, 5);
            let mut foreign = good.clone();
            foreign[HEADER_BYTES + 8..HEADER_BYTES + 12].copy_from_slice(&(VOCAB as u32).to_le_bytes());
            reseal(&mut foreign);
            let e = decode_into(&foreign, &model, VOCAB, &mut back).unwrap_err();
            assert!(e.to_string().contains("outside this vocabulary"), "{e}");
            // The first row's first value (cold where there is a cold tier), and the last layer's last value.
            let first = HEADER_BYTES + 4 * 70 + if opts.cold == KvType::F16 { 0 } else { 4 };
            for at in [first, good.len() - 6] {
                for bits in [0x7c00u16, 0xfe00] {
                    let mut bad = good.clone();
                    bad[at..at + 2].copy_from_slice(&bits.to_le_bytes());
                    reseal(&mut bad);
                    let e = decode_into(&bad, &model, VOCAB, &mut back).unwrap_err();
                    assert!(e.to_string().contains("NaN or infinite"), "{opts:?} at {at}: {e}");
                    if opts.cold == KvType::F16 {
                        assert!(decode(&bad, &model, VOCAB, 2, 32, 100, None).is_err());
                    }
                }
            }
            assert_eq!(rows(&back, 5), before);
            assert_eq!(decode_into(&good, &model, VOCAB, &mut back).unwrap(), tokens);
        }
    }
}
