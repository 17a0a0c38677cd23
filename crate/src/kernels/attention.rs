//! Causal grouped-query attention of new queries over the KV cache.
//!
//! For each query row (a token at absolute position `p`) and head `h`, attend to cached positions
//! `0..=p` of KV head `h / (n_heads / n_kv_heads)`. Keys and values are stored as f16 (as llama.cpp's
//! default cache), scores and the softmax are f32.

use crate::kernels::parallel::for_each_chunk;
use crate::kv_cache::LayerCache;
use crate::quant::act::f16_to_f32;

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// `q`: [n_tokens × n_heads·head_dim], token `t` at position `pos0 + t`. Writes `out` (same shape as `q`).
/// `scores` is scratch of at least `n_tokens · n_heads · (pos0 + n_tokens)` floats.
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
    let tasks = n_tokens * n_heads;
    let out_ptr = crate::kernels::parallel::SharedMut::new(out);
    let scores_ptr = crate::kernels::parallel::SharedMut::new(scores);
    for_each_chunk(tasks, 1, |range| {
        for task in range {
            let (t, h) = (task / n_heads, task % n_heads);
            let kvh = h / group;
            let n_ctx = pos0 + t + 1;
            let qh = &q[t * q_dim + h * head_dim..][..head_dim];
            // SAFETY: each task owns scores[task*span ..][..span] and out[t*q_dim + h*head_dim ..][..head_dim].
            let sc = unsafe { scores_ptr.slice(task * span, n_ctx) };
            let mut max = f32::NEG_INFINITY;
            for (j, s) in sc.iter_mut().enumerate() {
                let k = cache.key(j, kvh);
                let dot: f32 = qh.iter().zip(k).map(|(&a, &b)| a * f16_to_f32(b)).sum();
                *s = dot * scale;
                max = max.max(*s);
            }
            let mut sum = 0f32;
            for s in sc.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let o = unsafe { out_ptr.slice(t * q_dim + h * head_dim, head_dim) };
            o.fill(0.0);
            for (j, &s) in sc.iter().enumerate() {
                let w = s / sum;
                for (o, &v) in o.iter_mut().zip(cache.value(j, kvh)) {
                    *o += w * f16_to_f32(v);
                }
            }
        }
    });
}
