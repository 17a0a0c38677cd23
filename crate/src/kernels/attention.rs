//! Causal grouped-query attention of new queries over the KV cache.
//!
//! For each query row (a token at absolute position `p`) and head `h`, attend to cached positions
//! `0..=p` of KV head `h / (n_heads / n_kv_heads)`. Keys and values are stored as f16 (as llama.cpp's
//! default cache), scores and the softmax are f32.

use crate::kernels::exp::exp;
use crate::kernels::f16;
use crate::kernels::parallel::{chunk_size, for_each_chunk};
use crate::kv_cache::LayerCache;

/// Largest head dimension (the model loader refuses more): a task's key/value row lives on its stack.
pub const MAX_HEAD_DIM: usize = 512;

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// `q`: [n_tokens × n_heads·head_dim], token `t` at position `pos0 + t`. Writes `out` (same shape as `q`).
/// `scores` is scratch of at least `n_tokens · n_heads · (pos0 + n_tokens)` floats.
///
/// One task per (token, KV head) handles the query heads that share the KV head: each cached key and
/// value is converted from f16 once for all of them.
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    cache: &LayerCache,
    pos0: usize,
    out: &mut [f32],
    scores: &mut [f32],
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim } = *shape;
    let q_dim = n_heads * head_dim;
    let n_tokens = q.len() / q_dim;
    let span = pos0 + n_tokens; // cached positions visible to the last token
    let group = n_heads / n_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let out_ptr = crate::kernels::parallel::SharedMut::new(out);
    let scores_ptr = crate::kernels::parallel::SharedMut::new(scores);
    let n_tasks = n_tokens * n_kv_heads;
    for_each_chunk(n_tasks, chunk_size(n_tasks, 1, 8), |tasks| {
        let mut row = [0f32; MAX_HEAD_DIM];
        let row = &mut row[..head_dim]; // one cached key or value, as f32
        for task in tasks {
            let (t, kvh) = (task / n_kv_heads, task % n_kv_heads);
            let n_ctx = pos0 + t + 1;
            // The group's query heads, output heads and score rows are contiguous.
            let first = t * n_heads + kvh * group; // (token, head) index of the group's first head
            let qg = &q[first * head_dim..][..group * head_dim];
            // SAFETY: each task owns scores[first*span ..][..group*span] and out[first*head_dim ..][..group*head_dim].
            let sc = unsafe { scores_ptr.slice(first * span, group * span) };
            let og = unsafe { out_ptr.slice(first * head_dim, group * head_dim) };
            for j in 0..n_ctx {
                f16::to_f32(cache.key(j, kvh), row);
                for (g, qh) in qg.chunks_exact(head_dim).enumerate() {
                    sc[g * span + j] = f16::dot(qh, row) * scale;
                }
            }
            for s in sc.chunks_exact_mut(span) {
                let s = &mut s[..n_ctx];
                let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                s.iter_mut().for_each(|s| *s = exp(*s - max)); // vectorized; the sum below is not
                let sum: f32 = s.iter().sum();
                s.iter_mut().for_each(|s| *s /= sum);
            }
            og.fill(0.0);
            for j in 0..n_ctx {
                f16::to_f32(cache.value(j, kvh), row);
                for (g, o) in og.chunks_exact_mut(head_dim).enumerate() {
                    f16::axpy(o, sc[g * span + j], row);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::KvCache;
    use crate::model::config::{Arch, Config};
    use crate::quant::act::f16_to_f32;

    fn config(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> Config {
        Config {
            arch: Arch::Llama,
            n_layers: 1,
            d_model: n_heads * head_dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: 1,
            vocab_size: 1,
            context_length: 64,
            rms_eps: 1e-5,
            rope_base: 10000.0,
            rope_freq_scale: 1.0,
            rope_dims: head_dim,
            rope_neox: false,
        }
    }

    /// Values in -1..1 from a fixed sequence.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn matches_a_float64_softmax_over_the_cache() {
        // head_dim 20 leaves a tail after the 8- and 16-wide SIMD steps.
        for (n_heads, n_kv_heads, head_dim) in [(4, 2, 20), (9, 3, 64)] {
            let c = config(n_heads, n_kv_heads, head_dim);
            let shape = AttentionShape { n_heads, n_kv_heads, head_dim };
            let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
            let (pos0, n_tokens) = (3, 5);
            let span = pos0 + n_tokens;
            let mut kv = KvCache::new(&c, 16);
            kv.layers[0].store(0, &values(span * kv_dim, 1), &values(span * kv_dim, 2));
            let q: Vec<f32> = values(n_tokens * q_dim, 3).iter().map(|v| v * 4.0).collect();
            let mut out = vec![0f32; n_tokens * q_dim];
            let mut scores = vec![0f32; n_tokens * n_heads * span];
            attention(&shape, &q, &kv.layers[0], pos0, &mut out, &mut scores);

            let layer = &kv.layers[0];
            for t in 0..n_tokens {
                for h in 0..n_heads {
                    let kvh = h / (n_heads / n_kv_heads);
                    let qh = &q[t * q_dim + h * head_dim..][..head_dim];
                    let logits: Vec<f64> = (0..=pos0 + t)
                        .map(|j| {
                            let k = layer.key(j, kvh);
                            let dot: f64 = qh.iter().zip(k).map(|(&a, &b)| a as f64 * f16_to_f32(b) as f64).sum();
                            dot / (head_dim as f64).sqrt()
                        })
                        .collect();
                    let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                    let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for i in 0..head_dim {
                        let want: f64 = weights
                            .iter()
                            .enumerate()
                            .map(|(j, w)| w / total * f16_to_f32(layer.value(j, kvh)[i]) as f64)
                            .sum();
                        let got = out[t * q_dim + h * head_dim + i] as f64;
                        assert!(
                            (got - want).abs() < 1e-5,
                            "heads {n_heads}, token {t}, head {h}, [{i}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
