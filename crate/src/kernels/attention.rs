//! Causal grouped-query attention of new queries over the KV cache.
//!
//! For each query row (a token at absolute position `p`) and head `h`, attend to cached positions
//! `0..=p` of KV head `h / (n_heads / n_kv_heads)`. Keys and values are stored as f16 (as llama.cpp's
//! default cache), a row of `n_kv_heads × head_dim` per position; scores and the softmax are f32.

use std::ops::Range;

use crate::kernels::exp::{exp, Exp};
use crate::kernels::f16::{self, F32Rows, Rows};
use crate::parallel::{chunk_size, for_each_chunk, LineBuf, SharedMut};

/// Largest head dimension (the model loader refuses more): a task's key/value row lives on its stack.
pub const MAX_HEAD_DIM: usize = 512;

/// Cached positions per block of the softmax (see [`attention`]). Fixed, so results never depend
/// on how the blocks are spread over tasks.
const BLOCK: usize = 32;

/// Query rows of a batch that share each block of cached keys and values (converted to f32 once for all of them).
const GROUP_TOKENS: usize = 4;

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl AttentionShape {
    fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
    /// Width of one position's cached keys (or values): every KV head's row, side by side.
    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Floats of one head's softmax part: `[m, l, o[head_dim]]`.
    fn part_len(&self) -> usize {
        self.head_dim + 2
    }
}

/// Scratch of [`attention`] for up to `n_tokens` query rows over up to `n_ctx` cached positions.
pub struct AttentionScratch {
    scores: LineBuf, // per-row tasks: [n_tokens × n_heads × n_ctx]; one row: [n_heads × blocks × BLOCK]
    parts: LineBuf,  // per-row tasks: [n_tokens × n_heads × 2 × part]; one row: [n_heads × blocks × part]
}

impl AttentionScratch {
    pub fn new(shape: &AttentionShape, n_tokens: usize, n_ctx: usize) -> AttentionScratch {
        let blocks = n_ctx.div_ceil(BLOCK);
        let scores = (n_tokens * n_ctx).max(blocks * BLOCK) * shape.n_heads;
        let parts = (n_tokens * 2).max(blocks) * shape.n_heads * shape.part_len();
        AttentionScratch { scores: LineBuf::zeros(scores), parts: LineBuf::zeros(parts) }
    }
}

/// `q`: [n_tokens × n_heads·head_dim], token `t` at position `pos0 + t`. Writes `out` (same shape as `q`).
/// `keys`, `values`: the layer's cache, f16, a row of `n_kv_heads × head_dim` per position, holding at
/// least positions `0..pos0 + n_tokens`.
///
/// The softmax over a row's cached positions is computed in blocks of [`BLOCK`] positions, each block's
/// part folded into the previous ones in order (the "online softmax" of flash attention); the
/// query heads that share a KV head are handled together, so each cached key and value is converted
/// from f16 once for all of them. A batch of rows runs one task per ([`GROUP_TOKENS`] tokens, KV head): it
/// converts each block's keys and values to f32 once for its tokens (at long contexts, re-reading and converting
/// the cache for every token was most of a prefill's time), and does each token's blocks in order. A single row
/// (decode) would be only `n_kv_heads` tasks, 3 for 2 threads with the
/// default model, so there each task is one block of one KV head, and the calling thread folds the
/// parts after the loop. Both do the same float operations in the same order: the results are
/// identical either way.
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    keys: &[[u8; 2]],
    values: &[[u8; 2]],
    pos0: usize,
    out: &mut [f32],
    scratch: &mut AttentionScratch,
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim } = *shape;
    let q_dim = n_heads * head_dim;
    let n_tokens = q.len() / q_dim;
    let span = pos0 + n_tokens; // cached positions visible to the last token
    let (group, part) = (shape.group(), shape.part_len());
    assert!(head_dim <= MAX_HEAD_DIM && out.len() == q.len());
    assert!(keys.len() >= span * shape.kv_dim() && values.len() >= span * shape.kv_dim(), "cache too short");
    let scale = 1.0 / (head_dim as f32).sqrt();
    let out_ptr = SharedMut::new(out);
    let scores_len = scratch.scores.len();
    let scores = SharedMut::new(&mut scratch.scores);
    let parts_len = scratch.parts.len();
    let parts = SharedMut::new(&mut scratch.parts);
    // The group of token `t` and KV head `kvh`: its query heads, output heads and score rows are contiguous.
    let first = |t: usize, kvh: usize| t * n_heads + kvh * group;
    // Block `js` of KV head `kvh` for token `t`, its rows read from the f16 cache.
    let block = |t: usize, kvh: usize, js: Range<usize>, sc: &mut [f32], stride: usize, parts: &mut [f32]| {
        let qg = &q[first(t, kvh) * head_dim..][..group * head_dim];
        let row_of = |cached, j| head_row(shape, cached, kvh, j);
        let mut k: [&[[u8; 2]]; BLOCK] = [&[]; BLOCK];
        let mut v: [&[[u8; 2]]; BLOCK] = [&[]; BLOCK];
        let n = js.len();
        for (i, j) in js.enumerate() {
            (k[i], v[i]) = (row_of(keys, j), row_of(values, j));
        }
        attend_block(shape, qg, &k[..n], &v[..n], scale, sc, stride, parts);
    };

    if n_tokens == 1 {
        let n_ctx = pos0 + 1;
        let blocks = n_ctx.div_ceil(BLOCK);
        assert!(
            scores_len >= n_heads * blocks * BLOCK && parts_len >= n_heads * blocks * part,
            "attention scratch too small"
        );
        // The scores and parts of (KV head, block, group head) at ((kvh * blocks + b) * group + g) * (BLOCK or part).
        let slot = |kvh: usize, b: usize| (kvh * blocks + b) * group * part;
        let head_part = |kvh: usize, b: usize, g: usize| slot(kvh, b) + g * part;
        let n_tasks = blocks * n_kv_heads;
        for_each_chunk(n_tasks, 1, |tasks| {
            for task in tasks {
                // Block-major order: the short last blocks come last.
                let (b, kvh) = (task / n_kv_heads, task % n_kv_heads);
                // SAFETY: each task owns its block's scores and parts.
                let sc = unsafe { scores.slice((kvh * blocks + b) * group * BLOCK, group * BLOCK) };
                let p = unsafe { parts.slice(slot(kvh, b), group * part) };
                block(0, kvh, b * BLOCK..((b + 1) * BLOCK).min(n_ctx), sc, BLOCK, p);
            }
        });
        // SAFETY: the loop is over; this thread alone uses the buffers now.
        let (parts, out) = unsafe { (parts.slice(0, parts_len), out_ptr.slice(0, q_dim)) };
        for kvh in 0..n_kv_heads {
            for g in 0..group {
                let acc = head_part(kvh, 0, g);
                for b in 1..blocks {
                    let (before, from_b) = parts.split_at_mut(head_part(kvh, b, g));
                    fold(&mut before[acc..][..part], &from_b[..part]);
                }
                finish(&parts[acc..][..part], &mut out[(first(0, kvh) + g) * head_dim..][..head_dim]);
            }
        }
        return;
    }

    assert!(
        scores_len >= n_tokens * n_heads * span && parts_len >= n_tokens * n_heads * 2 * part,
        "attention scratch too small"
    );
    let groups = n_tokens.div_ceil(GROUP_TOKENS);
    let n_tasks = groups * n_kv_heads;
    for_each_chunk(n_tasks, chunk_size(n_tasks, 1, 8), |tasks| {
        // A block's keys and values, converted once for every token of the group.
        let (mut k32, mut v32) = (vec![0f32; BLOCK * head_dim], vec![0f32; BLOCK * head_dim]);
        let mut row_refs: [&[[u8; 2]]; BLOCK] = [&[]; BLOCK];
        for task in tasks {
            // Later tokens attend to more positions: the longest tasks go first, so the loop ends evenly.
            let task = n_tasks - 1 - task;
            let (tg, kvh) = (task / n_kv_heads, task % n_kv_heads);
            let tokens = tg * GROUP_TOKENS..(n_tokens).min((tg + 1) * GROUP_TOKENS);
            let last_ctx = pos0 + tokens.end; // positions the group's last token sees
            let row_of = |cached, j| head_row(shape, cached, kvh, j);
            for j0 in (0..last_ctx).step_by(BLOCK) {
                let rows = (last_ctx - j0).min(BLOCK);
                for (i, r) in row_refs[..rows].iter_mut().enumerate() {
                    *r = row_of(keys, j0 + i);
                }
                f16::rows_to_f32(&row_refs[..rows], &mut k32);
                for (i, r) in row_refs[..rows].iter_mut().enumerate() {
                    *r = row_of(values, j0 + i);
                }
                f16::rows_to_f32(&row_refs[..rows], &mut v32);
                for t in tokens.clone() {
                    let n_ctx = pos0 + t + 1;
                    if j0 >= n_ctx {
                        continue;
                    }
                    let n = (n_ctx - j0).min(BLOCK);
                    let qg = &q[first(t, kvh) * head_dim..][..group * head_dim];
                    // SAFETY: each task owns its tokens' score rows and two parts per head of its KV head.
                    let sc = unsafe { scores.slice(first(t, kvh) * span, group * span) };
                    let (acc, next) =
                        unsafe { parts.slice(first(t, kvh) * 2 * part, 2 * group * part) }.split_at_mut(group * part);
                    let k = F32Rows { data: &k32[..n * head_dim], d: head_dim };
                    let v = F32Rows { data: &v32[..n * head_dim], d: head_dim };
                    if j0 == 0 {
                        attend_block(shape, qg, &k, &v, scale, &mut sc[j0..], span, acc);
                    } else {
                        attend_block(shape, qg, &k, &v, scale, &mut sc[j0..], span, next);
                        acc.chunks_exact_mut(part).zip(next.chunks_exact(part)).for_each(|(a, p)| fold(a, p));
                    }
                }
            }
            for t in tokens {
                // SAFETY: as above.
                let og = unsafe { out_ptr.slice(first(t, kvh) * head_dim, group * head_dim) };
                let acc = unsafe { parts.slice(first(t, kvh) * 2 * part, group * part) };
                for (a, o) in acc.chunks_exact(part).zip(og.chunks_exact_mut(head_dim)) {
                    finish(a, o);
                }
            }
        }
    });
}

/// KV head `kvh`'s row of position `j` in a layer's cached keys or values.
fn head_row<'a>(shape: &AttentionShape, cached: &'a [[u8; 2]], kvh: usize, j: usize) -> &'a [[u8; 2]] {
    &cached[j * shape.kv_dim() + kvh * shape.head_dim..][..shape.head_dim]
}

/// Each head of a group (queries `qg`, back to back) over the cached keys `k` and values `v` of one block of
/// positions of one KV head: `[m, l, o..]` per head into `parts`, with `m` the largest score, `l = Σ e^(s - m)` and
/// `o = Σ e^(s - m) · v`. Head `g`'s score of the block's position `i` goes to `sc[g * stride + i]`.
#[allow(clippy::too_many_arguments)]
fn attend_block<R: Rows + ?Sized>(
    shape: &AttentionShape,
    qg: &[f32],
    k: &R,
    v: &R,
    scale: f32,
    sc: &mut [f32],
    stride: usize,
    parts: &mut [f32],
) {
    let mut row = [0f32; MAX_HEAD_DIM];
    let row = &mut row[..shape.head_dim]; // scratch: one cached key or value as f32
    let n = k.count();
    assert!(n <= BLOCK && v.count() == n, "a block has at most {BLOCK} positions");
    f16::scores(qg, k, scale, sc, stride, row);
    let e = Exp::new();
    for (g, p) in parts.chunks_exact_mut(shape.part_len()).enumerate() {
        let s = &mut sc[g * stride..][..n];
        let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        s.iter_mut().for_each(|s| *s = e.at(*s - max)); // vectorized; the sum below is not
        p[0] = max;
        p[1] = s.iter().sum();
        p[2..].fill(0.0);
    }
    f16::weighted_sums(v, sc, stride, &mut parts[2..], shape.part_len(), row);
}

/// Fold `part` (`[m, l, o..]` over later positions) into `acc` (the same over the earlier ones):
/// the side with the smaller maximum is rescaled by `e^(difference)`.
fn fold(acc: &mut [f32], part: &[f32]) {
    let ([m, l], acc_o) = acc.split_at_mut(2) else { unreachable!("a part is [m, l, o..]") };
    let (pm, pl, part_o) = (part[0], part[1], &part[2..]);
    if pm <= *m {
        let c = exp(pm - *m);
        *l += pl * c;
        acc_o.iter_mut().zip(part_o).for_each(|(o, p)| *o += p * c);
    } else {
        let a = exp(*m - pm);
        *l = *l * a + pl;
        *m = pm;
        acc_o.iter_mut().zip(part_o).for_each(|(o, p)| *o = *o * a + p);
    }
}

/// A head's output from its folded `[m, l, o..]`: `o / l`.
fn finish(acc: &[f32], out: &mut [f32]) {
    let l = acc[1];
    out.iter_mut().zip(&acc[2..]).for_each(|(o, a)| *o = a / l);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::act::{f16_to_f32, f32_to_f16};
    use crate::test_support::{test, Rng};

    /// Values in -1..1 from a fixed sequence.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    #[test]
    fn matches_a_float64_softmax_over_the_cache() {
        // head_dim 20 leaves a tail after the 8- and 16-wide SIMD steps.
        // Rows of 1 to 3 blocks of positions, the last ones partial, in one or more groups of tokens (the last one
        // partial, and a group whose tokens end in different blocks).
        let cases = [(4, 2, 20, 60, 6), (9, 3, 64, 60, 6), (9, 3, 64, 25, 11)];
        for (n_heads, n_kv_heads, head_dim, pos0, n_tokens) in cases {
            let shape = AttentionShape { n_heads, n_kv_heads, head_dim };
            let (q_dim, kv_dim) = (n_heads * head_dim, n_kv_heads * head_dim);
            let span = pos0 + n_tokens;
            let k_cache: Vec<[u8; 2]> = values(span * kv_dim, 1).into_iter().map(f32_to_f16).collect();
            let v_cache: Vec<[u8; 2]> = values(span * kv_dim, 2).into_iter().map(f32_to_f16).collect();
            let (keys, vals) = (&k_cache[..], &v_cache[..]);
            let q: Vec<f32> = values(n_tokens * q_dim, 3).iter().map(|v| v * 4.0).collect();
            let mut out = vec![0f32; n_tokens * q_dim];
            attention(&shape, &q, keys, vals, pos0, &mut out, &mut AttentionScratch::new(&shape, n_tokens, span));
            // One row at a time (decode: blocks as tasks, folded after the loop) gives the same bits.
            for t in 0..n_tokens {
                let mut one = vec![0f32; q_dim];
                let q_t = &q[t * q_dim..(t + 1) * q_dim];
                attention(&shape, q_t, keys, vals, pos0 + t, &mut one, &mut AttentionScratch::new(&shape, 1, span));
                let batched = &out[t * q_dim..(t + 1) * q_dim];
                assert!(
                    one.iter().zip(batched).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "token {t}: alone != batched"
                );
            }

            // KV head `kvh`'s key and value of position `j`.
            let key = |j: usize, kvh: usize| &keys[j * kv_dim + kvh * head_dim..][..head_dim];
            let value = |j: usize, kvh: usize| &vals[j * kv_dim + kvh * head_dim..][..head_dim];
            for t in 0..n_tokens {
                for h in 0..n_heads {
                    let kvh = h / (n_heads / n_kv_heads);
                    let qh = &q[t * q_dim + h * head_dim..][..head_dim];
                    let logits: Vec<f64> = (0..=pos0 + t)
                        .map(|j| {
                            let k = key(j, kvh);
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
                            .map(|(j, w)| w / total * f16_to_f32(value(j, kvh)[i]) as f64)
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
