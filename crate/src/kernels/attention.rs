//! Causal grouped-query attention of new queries over the KV cache.
//!
//! For each query row (a token at absolute position `p`) and head `h`, attend to cached positions
//! `0..=p` of KV head `h / (n_heads / n_kv_heads)`, or with a sliding window of `w` positions to the last `w` of
//! them (`p + 1 - w..=p`, llama.cpp's standard window: Gemma 3's local layers). Keys and values are stored a row of
//! `n_kv_heads × head_dim` per position, as f16 (as llama.cpp's default cache) or, for the positions of
//! a two-tier cache's cold tier, as Q8_0 or Q4_0 blocks along the row ([`KvRows`]); scores and the
//! softmax are f32.

use std::ops::Range;

use crate::kernels::exp::{exp, Exp};
use crate::kernels::f16::{self, F32Rows, Rows};
use crate::parallel::{chunk_size, for_each_chunk, LineBuf, SharedMut};
use crate::quant::kv::{self, KvBlock, KV_BLOCK};
use crate::quant::{BlockQ4_0, BlockQ8_0};
use crate::simd::cpu::widest_fn;

/// Largest head dimension (the model loader refuses more): a task's key/value row lives on its stack.
pub const MAX_HEAD_DIM: usize = 512;

/// Cached positions per block of the softmax (see [`attention`]). Fixed, so results never depend
/// on how the blocks are spread over tasks.
const BLOCK: usize = 32;

/// Tokens of a batch whose query rows share each block of cached keys and values: the block is converted to f32
/// once for all of them, and their rows (`GROUP_TOKENS` times the heads of a KV head) are scored against it as one
/// matrix product. Any size gives the same bits (rows do not depend on each other).
const GROUP_TOKENS: usize = 16;

pub struct AttentionShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Positions a query sees, itself included: 0 for all of them.
    pub window: usize,
    /// What the scores `q·k` are multiplied by: `1 / sqrt(head_dim)` but for Granite's `attention.scale` and Gemma 4's 1.
    pub scale: f32,
    /// Values of a position's row in the cache: `n_kv_heads × head_dim`, or more where the cache's rows are wider
    /// than this layer's (Gemma 4's windowed layers; the rest of a row is not read).
    pub row: usize,
}

impl AttentionShape {
    /// The first cached position a query at `pos` sees.
    fn first_seen(&self, pos: usize) -> usize {
        if self.window == 0 {
            0
        } else {
            (pos + 1).saturating_sub(self.window)
        }
    }

    fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }
    /// Floats of one head's softmax part: `[m, l, o[head_dim]]`.
    fn part_len(&self) -> usize {
        self.head_dim + 2
    }
}

/// A layer's cached keys and values as attention reads them: positions `0..n_cold` in the cold tier, the
/// others as f16 rows from position `n_cold` on (position `j` at row `j - n_cold` of `keys` and `values`).
/// `n_cold` is a multiple of [`BLOCK`], so a block of positions lies in one tier.
#[derive(Clone, Copy)]
pub struct KvRows<'a> {
    pub n_cold: usize,
    pub cold: ColdRows<'a>,
    pub keys: &'a [[u8; 2]],
    pub values: &'a [[u8; 2]],
}

/// The cold tier's keys and values: a row of `n_kv_heads × head_dim / 32` blocks per position.
#[derive(Clone, Copy)]
pub enum ColdRows<'a> {
    None,
    Q8_0 { keys: &'a [BlockQ8_0], values: &'a [BlockQ8_0] },
    Q4_0 { keys: &'a [BlockQ4_0], values: &'a [BlockQ4_0] },
}

impl<'a> KvRows<'a> {
    /// Every position as f16 rows (a one-tier cache).
    pub fn f16(keys: &'a [[u8; 2]], values: &'a [[u8; 2]]) -> KvRows<'a> {
        KvRows { n_cold: 0, cold: ColdRows::None, keys, values }
    }

    /// Positions held, checked against the shape.
    fn positions(&self, shape: &AttentionShape) -> usize {
        let row = shape.row;
        let cold_rows = |blocks: usize| {
            assert!(shape.head_dim.is_multiple_of(KV_BLOCK), "a cold tier needs whole blocks per head");
            blocks / (row / KV_BLOCK)
        };
        let cold = match self.cold {
            ColdRows::None => 0,
            ColdRows::Q8_0 { keys, values } => cold_rows(keys.len().min(values.len())),
            ColdRows::Q4_0 { keys, values } => cold_rows(keys.len().min(values.len())),
        };
        assert!(cold >= self.n_cold && self.n_cold.is_multiple_of(BLOCK), "the cold tier holds whole blocks");
        self.n_cold + self.keys.len().min(self.values.len()) / row
    }
}

/// Scratch of [`attention`]'s decode row over up to `n_ctx` cached positions: every block's scores and parts, one
/// block a task (a batch's tasks keep a block's of their own).
pub struct AttentionScratch {
    scores: LineBuf, // [n_heads × blocks × BLOCK]
    parts: LineBuf,  // [n_heads × blocks × part]
}

impl AttentionScratch {
    pub fn new(shape: &AttentionShape, n_ctx: usize) -> AttentionScratch {
        let [scores, parts] = Self::lens(shape, n_ctx);
        AttentionScratch { scores: LineBuf::zeros(scores), parts: LineBuf::zeros(parts) }
    }

    /// The bytes [`AttentionScratch::new`] allocates (saturating, for the memory probe of a hostile file's shapes).
    pub fn bytes(shape: &AttentionShape, n_ctx: usize) -> usize {
        Self::lens(shape, n_ctx).iter().fold(0usize, |a, &n| a.saturating_add(LineBuf::bytes(n)))
    }

    /// The floats of `scores` and `parts`.
    fn lens(shape: &AttentionShape, n_ctx: usize) -> [usize; 2] {
        let blocks = n_ctx.div_ceil(BLOCK);
        let scores = blocks.saturating_mul(BLOCK).saturating_mul(shape.n_heads);
        let parts = blocks.saturating_mul(shape.n_heads).saturating_mul(shape.part_len());
        [scores, parts]
    }
}

/// `q`: [n_tokens × n_heads·head_dim], token `t` at position `pos0 + t`. Writes `out` (same shape as `q`).
/// `kv`: the layer's cache, holding at least positions `0..pos0 + n_tokens`.
///
/// The softmax over a row's cached positions is computed in blocks of [`BLOCK`] positions, each block's
/// part folded into the previous ones in order (the "online softmax" of flash attention); the
/// query heads that share a KV head are handled together, so each cached key and value is converted
/// (from f16, or unpacked from its blocks) once for all of them. A block of positions lies in one tier. A
/// batch of rows runs one task per ([`GROUP_TOKENS`] tokens, KV head): for each block any of its tokens sees, it
/// converts the hot block's f16 keys and values to f32 once (at long contexts, re-reading and converting the
/// cache for every token was most of a prefill's time), and scores the rows of all the tokens that see the block
/// against it at once, each row's positions then picked out by its token's range (`attend_block`); a cold block's
/// rows are unpacked from their blocks by the quantized kernels as they are read (`quant::kv`). A single row
/// (decode) would be only `n_kv_heads` tasks, 3 for 2 threads with the
/// default model, so there each task is one block of one KV head, and the calling thread folds the
/// parts after the loop. Both do the same float operations in the same order (a block's f16 rows give the
/// same bits converted before or as they are read): the results are identical either way, and do not
/// depend on the number of threads.
pub fn attention(
    shape: &AttentionShape,
    q: &[f32],
    kv: &KvRows,
    pos0: usize,
    out: &mut [f32],
    scratch: &mut AttentionScratch,
) {
    let AttentionShape { n_heads, n_kv_heads, head_dim, .. } = *shape;
    let q_dim = n_heads * head_dim;
    let n_tokens = q.len() / q_dim;
    let span = pos0 + n_tokens; // cached positions visible to the last token
    let (group, part) = (shape.group(), shape.part_len());
    assert!(head_dim <= MAX_HEAD_DIM && out.len() == q.len() && shape.row >= n_kv_heads * head_dim);
    assert!(kv.positions(shape) >= span, "cache too short");
    let scale = shape.scale;
    let out_ptr = SharedMut::new(out);
    let scores_len = scratch.scores.len();
    let scores = SharedMut::new(&mut scratch.scores);
    let parts_len = scratch.parts.len();
    let parts = SharedMut::new(&mut scratch.parts);
    // The group of token `t` and KV head `kvh`: its query heads, output heads and score rows are contiguous.
    let first = |t: usize, kvh: usize| t * n_heads + kvh * group;

    if n_tokens == 1 {
        let n_ctx = pos0 + 1;
        let blocks = n_ctx.div_ceil(BLOCK);
        // A window starts inside block `b0`; the blocks before it are not read.
        let seen = shape.first_seen(pos0);
        let b0 = seen / BLOCK;
        assert!(
            scores_len >= n_heads * blocks * BLOCK && parts_len >= n_heads * blocks * part,
            "attention scratch too small"
        );
        // The scores and parts of (KV head, block, group head) at ((kvh * blocks + b) * group + g) * (BLOCK or part).
        let slot = |kvh: usize, b: usize| (kvh * blocks + b) * group * part;
        let head_part = |kvh: usize, b: usize, g: usize| slot(kvh, b) + g * part;
        let n_tasks = (blocks - b0) * n_kv_heads;
        for_each_chunk(n_tasks, 1, |tasks| {
            for task in tasks {
                // Block-major order: the short last blocks come last.
                let (b, kvh) = (b0 + task / n_kv_heads, task % n_kv_heads);
                // SAFETY: each task owns its block's scores and parts.
                let sc = unsafe { scores.slice((kvh * blocks + b) * group * BLOCK, group * BLOCK) };
                let p = unsafe { parts.slice(slot(kvh, b), group * part) };
                let qg = &q[first(0, kvh) * head_dim..][..group * head_dim];
                let js = (b * BLOCK).max(seen)..((b + 1) * BLOCK).min(n_ctx);
                let seen_in_block = js.start - b * BLOCK..js.end - b * BLOCK;
                attend_cached(shape, kv, kvh, js, None, qg, std::slice::from_ref(&seen_in_block), scale, sc, p);
            }
        });
        // SAFETY: the loop is over; this thread alone uses the buffers now.
        let (parts, out) = unsafe { (parts.slice(0, parts_len), out_ptr.slice(0, q_dim)) };
        for kvh in 0..n_kv_heads {
            for g in 0..group {
                let acc = head_part(kvh, b0, g);
                for b in b0 + 1..blocks {
                    let (before, from_b) = parts.split_at_mut(head_part(kvh, b, g));
                    fold(&mut before[acc..][..part], &from_b[..part]);
                }
                finish(&parts[acc..][..part], &mut out[(first(0, kvh) + g) * head_dim..][..head_dim]);
            }
        }
        return;
    }

    let groups = n_tokens.div_ceil(GROUP_TOKENS);
    let n_tasks = groups * n_kv_heads;
    for_each_chunk(n_tasks, chunk_size(n_tasks, 1, 8), |tasks| {
        // Per task: its query rows back to back (token-major, a KV head's `group` heads per token), a hot block's
        // keys and values converted once for all of them, the rows' scores of the block, their parts of the block
        // and their parts so far (folded block by block: no row of n_ctx scores).
        let rows_max = GROUP_TOKENS * group;
        let (mut k32, mut v32) = (vec![0f32; BLOCK * head_dim], vec![0f32; BLOCK * head_dim]);
        let mut qt = vec![0f32; rows_max * head_dim];
        let mut sc = vec![0f32; rows_max * BLOCK];
        let (mut acc, mut next) = (vec![0f32; rows_max * part], vec![0f32; rows_max * part]);
        let mut ranges: [Range<usize>; GROUP_TOKENS] = std::array::from_fn(|_| 0..0);
        for task in tasks {
            // Later tokens attend to more positions: the longest tasks go first, so the loop ends evenly.
            let task = n_tasks - 1 - task;
            let (tg, kvh) = (task / n_kv_heads, task % n_kv_heads);
            let tokens = tg * GROUP_TOKENS..(n_tokens).min((tg + 1) * GROUP_TOKENS);
            for (i, t) in tokens.clone().enumerate() {
                let rows = group * head_dim;
                qt[i * rows..][..rows].copy_from_slice(&q[first(t, kvh) * head_dim..][..rows]);
            }
            // The positions the group's last token sees, in blocks from the one where the group's first token's
            // window starts (block 0 without a window).
            let last_ctx = pos0 + tokens.end;
            let first_block = shape.first_seen(pos0 + tokens.start) / BLOCK * BLOCK;
            for j0 in (first_block..last_ctx).step_by(BLOCK) {
                // The tokens that see the block (those before `ta` end before it; windows start after it from
                // `tb` on), and the positions any of them sees: the rows are read once for all of them.
                let ta = tokens.start.max(j0.saturating_sub(pos0));
                let tb = tokens.clone().rev().find(|&t| shape.first_seen(pos0 + t) < j0 + BLOCK).map_or(ta, |t| t + 1);
                if ta >= tb {
                    continue;
                }
                let js = j0.max(shape.first_seen(pos0 + ta))..(j0 + BLOCK).min(pos0 + tb);
                let hot = js.start >= kv.n_cold;
                if hot {
                    f16::rows_to_f32(&hot_rows(shape, kv.keys, kv, kvh, &js), &mut k32);
                    f16::rows_to_f32(&hot_rows(shape, kv.values, kv, kvh, &js), &mut v32);
                }
                // Each token's positions in the block, from `j0`.
                for (range, t) in ranges.iter_mut().zip(ta..tb) {
                    *range = j0.max(shape.first_seen(pos0 + t)) - j0..(pos0 + t + 1).min(j0 + BLOCK) - j0;
                }
                let rows = (ta - tokens.start) * group..(tb - tokens.start) * group;
                let hot32 = hot.then_some((&k32[..], &v32[..]));
                let (qr, nr) = (&qt[rows.start * head_dim..rows.end * head_dim], &mut next[..rows.len() * part]);
                attend_cached(shape, kv, kvh, js.clone(), hot32, qr, &ranges[..tb - ta], scale, &mut sc, nr);
                for (t, parts) in (ta..tb).zip(nr.chunks_exact(group * part)) {
                    let acc = &mut acc[(t - tokens.start) * group * part..][..group * part];
                    if j0 <= shape.first_seen(pos0 + t) {
                        acc.copy_from_slice(parts); // the token's first block
                    } else {
                        acc.chunks_exact_mut(part).zip(parts.chunks_exact(part)).for_each(|(a, p)| fold(a, p));
                    }
                }
            }
            for (t, acc) in tokens.zip(acc.chunks_exact(group * part)) {
                // SAFETY: each task owns its tokens' output rows of its KV head.
                let og = unsafe { out_ptr.slice(first(t, kvh) * head_dim, group * head_dim) };
                for (a, o) in acc.chunks_exact(part).zip(og.chunks_exact_mut(head_dim)) {
                    finish(a, o);
                }
            }
        }
    });
}

/// Positions `js` of one block of KV head `kvh` (all in one tier) for the query rows `q`: [`attend_block`] over
/// their keys and values where they are. Cold rows are read from their quantized blocks; hot ones from `hot32`, keys
/// and values of `js` converted to f32 before (a batch's group of tokens shares a block's conversion), else from the
/// f16 rows, converted as they are read. `ranges`: each token's positions, counted from the block's start.
#[allow(clippy::too_many_arguments)]
fn attend_cached(
    shape: &AttentionShape,
    kv: &KvRows,
    kvh: usize,
    js: Range<usize>,
    hot32: Option<(&[f32], &[f32])>,
    q: &[f32],
    ranges: &[Range<usize>],
    scale: f32,
    sc: &mut [f32],
    parts: &mut [f32],
) {
    let cold = js.start < kv.n_cold;
    debug_assert!(!cold || js.end <= kv.n_cold, "a block lies in one tier");
    let offset = js.start % BLOCK;
    match (cold, kv.cold) {
        (false, _) => match hot32 {
            Some((k, v)) => {
                let (d, n) = (shape.head_dim, js.len());
                let (k, v) = (F32Rows { data: &k[..n * d], d }, F32Rows { data: &v[..n * d], d });
                attend_block(shape, q, ranges, offset, &Hot(&k), &Hot(&v), scale, sc, parts)
            }
            None => {
                let (k, v) = (hot_rows(shape, kv.keys, kv, kvh, &js), hot_rows(shape, kv.values, kv, kvh, &js));
                attend_block(shape, q, ranges, offset, &Hot(&*k), &Hot(&*v), scale, sc, parts)
            }
        },
        (true, ColdRows::Q8_0 { keys, values }) => {
            let (k, v) = (cold_rows(shape, keys, kvh, &js), cold_rows(shape, values, kvh, &js));
            attend_block(shape, q, ranges, offset, &Cold(&k), &Cold(&v), scale, sc, parts)
        }
        (true, ColdRows::Q4_0 { keys, values }) => {
            let (k, v) = (cold_rows(shape, keys, kvh, &js), cold_rows(shape, values, kvh, &js));
            attend_block(shape, q, ranges, offset, &Cold(&k), &Cold(&v), scale, sc, parts)
        }
        (true, ColdRows::None) => unreachable!("cold positions without a cold tier"),
    }
}

/// One block's cached keys or values of one KV head as [`attend_block`] reads them.
trait BlockRows {
    fn count(&self) -> usize;
    /// `out[g * stride + i] = dot(q[g], row i) * scale` for each head `g` of `q`; `row`: scratch of a row.
    fn scores(&self, q: &[f32], scale: f32, out: &mut [f32], stride: usize, row: &mut [f32]);
    /// `o[g * o_stride..] += w[g * w_stride + i] * row i`, `i` in order, for each head `g`.
    fn weighted_sums(&self, w: &[f32], w_stride: usize, o: &mut [f32], o_stride: usize, row: &mut [f32]);
}

/// Hot rows: f16, converted as they are read or before ([`Rows`]).
struct Hot<'r, R: ?Sized>(&'r R);

impl<R: Rows + ?Sized> BlockRows for Hot<'_, R> {
    fn count(&self) -> usize {
        self.0.count()
    }
    fn scores(&self, q: &[f32], scale: f32, out: &mut [f32], stride: usize, row: &mut [f32]) {
        f16::scores(q, self.0, scale, out, stride, row)
    }
    fn weighted_sums(&self, w: &[f32], w_stride: usize, o: &mut [f32], o_stride: usize, row: &mut [f32]) {
        f16::weighted_sums(self.0, w, w_stride, o, o_stride, row)
    }
}

/// Cold rows: Q8_0 or Q4_0 blocks, unpacked as they are read.
struct Cold<'r, 'a, B>(&'r [&'a [B]]);

impl<B: KvBlock> BlockRows for Cold<'_, '_, B> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn scores(&self, q: &[f32], scale: f32, out: &mut [f32], stride: usize, _: &mut [f32]) {
        kv::scores(q, self.0, scale, out, stride)
    }
    fn weighted_sums(&self, w: &[f32], w_stride: usize, o: &mut [f32], o_stride: usize, _: &mut [f32]) {
        kv::weighted_sums(self.0, w, w_stride, o, o_stride)
    }
}

/// Query rows `q` (back to back, the same number per token) over the cached keys `k` and values `v` of positions
/// `offset..offset + k.count()` of one block (so of one tier) of one KV head: `[m, l, o..]` per row into `parts`, with
/// `m` the largest score, `l = Σ e^(s - m)` and `o = Σ e^(s - m) · v` over the positions `ranges[token]` of the block
/// that the row's token sees (`l` added in order). A row's scores sit at `sc[r * BLOCK..]` by position in the block.
/// Every row is scored against every position of `k`, and its sums run over all of them, a position it does not see
/// weighing 0: `o + 0 · v` is `o` exactly (`o` starts at +0 and never becomes -0), so each row gets the bits it would
/// get alone over its own positions, as a decode row does.
#[allow(clippy::too_many_arguments)]
fn attend_block<K: BlockRows>(
    shape: &AttentionShape,
    q: &[f32],
    ranges: &[Range<usize>],
    offset: usize,
    k: &K,
    v: &K,
    scale: f32,
    sc: &mut [f32],
    parts: &mut [f32],
) {
    let mut row = [0f32; MAX_HEAD_DIM];
    let row = &mut row[..shape.head_dim]; // scratch: one cached f16 key or value as f32
    let n = k.count();
    let rows = q.len() / shape.head_dim;
    let per_token = rows / ranges.len();
    assert!(offset + n <= BLOCK && v.count() == n, "positions in one block of {BLOCK}");
    assert!(rows == per_token * ranges.len() && parts.len() == rows * shape.part_len() && sc.len() >= rows * BLOCK);
    k.scores(q, scale, &mut sc[offset..], BLOCK, row);
    debug_assert!(ranges.iter().all(|seen| offset <= seen.start && seen.end <= offset + n));
    softmax_parts(sc, ranges, per_token, parts, shape.part_len());
    v.weighted_sums(&sc[offset..], BLOCK, &mut parts[2..], shape.part_len(), row);
}

widest_fn! {
    /// Each row's `[m, l, 0..]` of its part from its scores `sc[r * BLOCK..][..BLOCK]`, the scores turned into the
    /// weights `e^(s - m)` (0 outside the row's token's positions `ranges[r / per_token]`). Compiled for the widest
    /// vectors the CPU has (`widest_fn`): the exponentials vectorize, the same bits at any width.
    fn softmax_parts(sc: &mut [f32], ranges: &[Range<usize>], per_token: usize, parts: &mut [f32], part_len: usize) {
        let e = Exp::new();
        for (r, p) in parts.chunks_exact_mut(part_len).enumerate() {
            let seen = ranges[r / per_token].clone();
            let s = &mut sc[r * BLOCK..][..BLOCK];
            let max = max_of(&s[seen.clone()]);
            s[seen.clone()].iter_mut().for_each(|s| *s = e.at(*s - max)); // vectorized
            s[..seen.start].fill(0.0);
            s[seen.end..].fill(0.0);
            p[0] = max;
            p[2..].fill(0.0);
        }
        // l: each row's weights added in order (the sum's bits are part of the results, see `kernels::f16`), over the
        // whole block (the +0 weights outside its positions leave it as it is), eight rows' chains of additions side by
        // side: one row's chain alone waits on each addition.
        const SIDE: usize = 8;
        let rows = parts.len() / part_len;
        for r0 in (0..rows).step_by(SIDE) {
            // Rows past the last are the last again (summed, not stored): a fixed count keeps the sums in registers.
            let s: [&[f32]; SIDE] = std::array::from_fn(|k| &sc[(r0 + k).min(rows - 1) * BLOCK..][..BLOCK]);
            let mut l = [0f32; SIDE];
            for i in 0..BLOCK {
                l.iter_mut().zip(&s).for_each(|(l, row)| *l += row[i]);
            }
            for (k, l) in l.iter().enumerate().take(rows - r0) {
                parts[(r0 + k) * part_len + 1] = *l;
            }
        }
    }
}

/// The largest of `s` (exact in any order), in eight lanes and then the rest: a chain of `max` is as slow as the
/// in-order sum beside it.
#[inline(always)]
fn max_of(s: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; 8];
    let chunks = s.chunks_exact(8);
    let rest = chunks.remainder().iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for c in chunks {
        m.iter_mut().zip(c).for_each(|(m, &x)| *m = m.max(x));
    }
    m.iter().fold(rest, |a, &b| a.max(b))
}

/// KV head `kvh`'s f16 rows of hot positions `js` in `cached` (the hot tier's keys or values).
fn hot_rows<'a>(
    shape: &AttentionShape,
    cached: &'a [[u8; 2]],
    kv: &KvRows,
    kvh: usize,
    js: &Range<usize>,
) -> ArrayRows<'a, [u8; 2]> {
    let (head_dim, row) = (shape.head_dim, shape.row);
    let rows = js.clone().map(|j| &cached[(j - kv.n_cold) * row + kvh * head_dim..][..head_dim]);
    ArrayRows::new(rows)
}

/// KV head `kvh`'s blocks of cold positions `js` in `cached` (the cold tier's keys or values).
fn cold_rows<'a, B: KvBlock>(
    shape: &AttentionShape,
    cached: &'a [B],
    kvh: usize,
    js: &Range<usize>,
) -> ArrayRows<'a, B> {
    let (head_blocks, row_blocks) = (shape.head_dim / KV_BLOCK, shape.row / KV_BLOCK);
    ArrayRows::new(js.clone().map(|j| &cached[j * row_blocks + kvh * head_blocks..][..head_blocks]))
}

/// At most a block's rows, on the stack.
struct ArrayRows<'a, T> {
    rows: [&'a [T]; BLOCK],
    n: usize,
}

impl<'a, T> ArrayRows<'a, T> {
    fn new(rows: impl Iterator<Item = &'a [T]>) -> Self {
        let mut out = ArrayRows { rows: [&[] as &[T]; BLOCK], n: 0 };
        for (slot, row) in out.rows.iter_mut().zip(rows) {
            *slot = row;
            out.n += 1;
        }
        out
    }
}

impl<'a, T> std::ops::Deref for ArrayRows<'a, T> {
    type Target = [&'a [T]];
    fn deref(&self) -> &Self::Target {
        &self.rows[..self.n]
    }
}

widest_fn! {
    /// Fold `part` (`[m, l, o..]` over later positions) into `acc` (the same over the earlier ones):
    /// the side with the smaller maximum is rescaled by `e^(difference)`. Compiled as [`softmax_parts`] is.
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
    use crate::quant::{as_blocks, dequantize_row, quantize_row, GgmlType};
    use crate::test_support::{test, Rng};

    /// Values in -1..1 from a fixed sequence.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
    }

    /// Attention of `n_tokens` rows from `pos0` over `kv`, whose positions hold `keys` and `values` (as f32,
    /// a row of `kv_dim` per position): within float rounding of a float64 softmax, and the same bits for
    /// a batch as for one row at a time (whose blocks are tasks folded after the loop).
    fn check(shape: &AttentionShape, kv: &KvRows, keys: &[f32], vals: &[f32], pos0: usize, n_tokens: usize) {
        let (n_heads, head_dim) = (shape.n_heads, shape.head_dim);
        let (q_dim, kv_dim) = (n_heads * head_dim, shape.row);
        let span = pos0 + n_tokens;
        let at = format!(
            "heads {n_heads}/{}, head_dim {head_dim}, {} cold, window {}",
            shape.n_kv_heads, kv.n_cold, shape.window
        );
        let q: Vec<f32> = values(n_tokens * q_dim, 3).iter().map(|v| v * 4.0).collect();
        let mut out = vec![0f32; n_tokens * q_dim];
        attention(shape, &q, kv, pos0, &mut out, &mut AttentionScratch::new(shape, span));
        for t in 0..n_tokens {
            let mut one = vec![0f32; q_dim];
            let q_t = &q[t * q_dim..(t + 1) * q_dim];
            attention(shape, q_t, kv, pos0 + t, &mut one, &mut AttentionScratch::new(shape, span));
            let batched = &out[t * q_dim..(t + 1) * q_dim];
            assert!(
                one.iter().zip(batched).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{at}, token {t}: alone != batched"
            );
        }

        // KV head `kvh`'s key and value of position `j`.
        let key = |j: usize, kvh: usize| &keys[j * kv_dim + kvh * head_dim..][..head_dim];
        let value = |j: usize, kvh: usize| &vals[j * kv_dim + kvh * head_dim..][..head_dim];
        for t in 0..n_tokens {
            for h in 0..n_heads {
                let kvh = h / shape.group();
                let qh = &q[t * q_dim + h * head_dim..][..head_dim];
                let seen = shape.first_seen(pos0 + t);
                let logits: Vec<f64> = (seen..=pos0 + t)
                    .map(|j| {
                        let dot: f64 = qh.iter().zip(key(j, kvh)).map(|(&a, &b)| a as f64 * b as f64).sum();
                        dot / (head_dim as f64).sqrt()
                    })
                    .collect();
                let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for i in 0..head_dim {
                    let want: f64 =
                        weights.iter().enumerate().map(|(j, w)| w / total * value(seen + j, kvh)[i] as f64).sum();
                    let got = out[t * q_dim + h * head_dim + i] as f64;
                    assert!((got - want).abs() < 1e-5, "{at}, token {t}, head {h}, [{i}]: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn matches_a_float64_softmax_over_the_cache() {
        // head_dim 20 leaves a tail after the 8- and 16-wide SIMD steps.
        // Rows of 1 to 3 blocks of positions, the last ones partial, in one or more groups of tokens (the last one
        // partial, and a group whose tokens end in different blocks).
        // With a sliding window too: windows that start inside a block, on a block's edge, differently for the tokens
        // of one group, and one wider than the context.
        let cases = [
            (4, 2, 20, 60, 6, 0),
            (9, 3, 64, 60, 6, 0),
            (9, 3, 64, 25, 11, 0),
            (9, 3, 64, 60, 6, 17),
            (4, 2, 20, 70, 13, 32),
            (9, 3, 64, 25, 11, 40),
            (4, 2, 20, 10, 5, 100),
            (9, 3, 64, 25, 40, 0),
            (9, 3, 64, 50, 37, 20),
            (4, 2, 32, 70, 35, 32),
        ];
        // Rows as wide as the layer's heads, and wider (a cache shared with wider layers: Gemma 4).
        for ((n_heads, n_kv_heads, head_dim, pos0, n_tokens, window), pad) in
            cases.into_iter().flat_map(|c| [(c, 0), (c, 12)])
        {
            let (scale, row) = (1.0 / (head_dim as f32).sqrt(), n_kv_heads * head_dim + pad);
            let shape = AttentionShape { n_heads, n_kv_heads, head_dim, window, scale, row };
            let n = (pos0 + n_tokens) * shape.row;
            let k_cache: Vec<[u8; 2]> = values(n, 1).into_iter().map(f32_to_f16).collect();
            let v_cache: Vec<[u8; 2]> = values(n, 2).into_iter().map(f32_to_f16).collect();
            let f32s = |c: &[[u8; 2]]| c.iter().map(|&h| f16_to_f32(h)).collect::<Vec<f32>>();
            let kv = KvRows::f16(&k_cache, &v_cache);
            check(&shape, &kv, &f32s(&k_cache), &f32s(&v_cache), pos0, n_tokens);
        }
    }

    /// A two-tier cache: positions before the boundary read from Q8_0 or Q4_0 blocks, the others from f16
    /// rows that start at the boundary. A batch's groups of tokens read blocks of both tiers, and one batch
    /// (a prefill longer than the hot window) has tokens on both sides of the boundary.
    #[test]
    fn reads_the_cold_and_the_hot_tier() {
        let cases = [(9, 3, 64, 64, 100, 7), (4, 2, 32, 96, 100, 7), (2, 2, 96, 32, 100, 7), (4, 2, 32, 64, 20, 90)];
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0] {
            // Rows as wide as the heads, or a block wider; without a window, and with one that starts in the cold tier
            // for some tokens and in the hot one for others.
            for ((n_heads, n_kv_heads, head_dim, n_cold, pos0, n_tokens), window, pad) in
                cases.into_iter().flat_map(|c| [(c, 0, 0), (c, 70, 0), (c, 70, 32)])
            {
                let (scale, row) = (1.0 / (head_dim as f32).sqrt(), n_kv_heads * head_dim + pad);
                let shape = AttentionShape { n_heads, n_kv_heads, head_dim, window, scale, row };
                let kv_dim = shape.row;
                let span = pos0 + n_tokens;
                // Cold rows, and their exact values; then the hot rows as f16.
                let (k, v) = (values(span * kv_dim, 1), values(span * kv_dim, 2));
                let row_bytes = ty.row_bytes(kv_dim);
                let quantized = |x: &[f32]| {
                    let mut out = vec![0u8; n_cold * row_bytes];
                    quantize_row(ty, &x[..n_cold * kv_dim], &mut out);
                    out
                };
                let (kq, vq) = (quantized(&k), quantized(&v));
                let exact = |q: &[u8], x: &[f32]| {
                    let mut all = vec![0f32; n_cold * kv_dim];
                    dequantize_row(ty, q, &mut all);
                    all.extend(x[n_cold * kv_dim..].iter().map(|&x| f16_to_f32(f32_to_f16(x))));
                    all
                };
                let hot = |x: &[f32]| x[n_cold * kv_dim..].iter().map(|&x| f32_to_f16(x)).collect::<Vec<_>>();
                let (kh, vh) = (hot(&k), hot(&v));
                let cold = match ty {
                    GgmlType::Q8_0 => ColdRows::Q8_0 { keys: as_blocks(&kq), values: as_blocks(&vq) },
                    _ => ColdRows::Q4_0 { keys: as_blocks(&kq), values: as_blocks(&vq) },
                };
                let kv = KvRows { n_cold, cold, keys: &kh, values: &vh };
                check(&shape, &kv, &exact(&kq, &k), &exact(&vq, &v), pos0, n_tokens);
            }
        }
    }
}
