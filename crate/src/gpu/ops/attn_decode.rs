//! Decode attention (`wgsl/attn_decode.wgsl` after `wgsl/rope.wgsl`): the new token's queries over
//! the KV cache, split over the cached positions into chunks, one workgroup per head and chunk,
//! with RoPE and the KV store fused in. It leaves per-chunk partials, which the next matvec's
//! input stage (`in_attn.wgsl`) merges. A layer with a sliding window (Gemma 3) runs the windowed
//! variant, which reads only the window's positions of each chunk; a layer that reads an earlier layer's keys and
//! values (Gemma 4's last layers) the variant without a key and value of its own.

use super::rope_store::{KvBuffers, ROPE};
use super::shader::{wgsl, Module};
use super::{Count, Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// The layout of the partials (`HD4`, `ATTN_STATS`), shared with `in_attn.wgsl`.
pub(crate) const PARTIALS: &str = wgsl!("attn_partials.wgsl");

/// Call parameters, partials, key cache, qkv rows, RoPE table, value cache.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1, Slot::In2];

/// Chunks are a multiple of this many keys: the keys attn_decode.wgsl takes per block (a smaller
/// chunk would leave invocations idle and finish no sooner, and give the merge more chunks to sum).
const CHUNK_STEP: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttnDecode {
    /// The layer attends within the model's sliding window (header `WINDOW`).
    pub windowed: bool,
    /// The layer stores the new token's key and value (else its cache layer already holds them).
    pub own_kv: bool,
}

impl AttnDecode {
    pub(crate) fn source(self, m: &mut Module) {
        m.flag("WINDOWED", self.windowed);
        m.flag("OWN_KV", self.own_kv);
        m.piece(PARTIALS);
        m.piece(ROPE);
        m.piece(wgsl!("attn_decode.wgsl"));
    }

    /// One workgroup per head and key chunk.
    pub(crate) fn grid(n_heads: usize) -> Grid {
        Grid([Count::Fixed(n_heads as u32), Count::Chunks, Count::Fixed(1)])
    }
}

/// Most key chunks per head: about 256 workgroups over all heads, at most 16 a head. The merge keeps each
/// chunk's max, sum and weight in workgroup memory (at most 6 KiB of it, beside a matvec's 4 KiB of input and
/// 2 KiB of sums), and each workgroup of the next matvec merges every chunk of its input again: past 256
/// workgroups that costs more than the attention's parallelism gains (benches/README.md).
pub(crate) fn max_chunks(n_heads: usize) -> usize {
    (256 / n_heads).clamp(1, 16)
}

/// Keys per chunk and chunks per head over `kv_len` cached positions (`CallParams::chunk`, `n_chunks`).
pub(crate) fn chunks(kv_len: usize, n_heads: usize) -> (u32, u32) {
    let chunk = CHUNK_STEP * kv_len.div_ceil(CHUNK_STEP * max_chunks(n_heads)).max(1);
    (chunk as u32, kv_len.div_ceil(chunk) as u32)
}

/// Floats of the partials (attn_partials.wgsl): an output row per head and chunk, then a (max,
/// sum) vec4 per head and chunk.
pub(crate) fn partials_len(n_heads: usize, head_dim: usize) -> usize {
    n_heads * max_chunks(n_heads) * (head_dim + 4)
}

/// Decode attention of layer caches `kv` from the qkv row into `partials`, within the model's sliding
/// window when `windowed`, storing the new key and value when `own_kv`.
pub(crate) async fn op(
    b: &OpBuilder<'_>,
    (windowed, own_kv): (bool, bool),
    qkv: &wgpu::Buffer,
    rope: &wgpu::Buffer,
    partials: &wgpu::Buffer,
    kv: KvBuffers<'_>,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, partials.as_entire_binding()),
        (Slot::Aux, kv.k.as_entire_binding()),
        (Slot::In0, qkv.as_entire_binding()),
        (Slot::In1, rope.as_entire_binding()),
        (Slot::In2, kv.v.as_entire_binding()),
    ];
    let grid = AttnDecode::grid(b.m.model.config.n_heads);
    b.op("attn_decode", Kernel::AttnDecode(AttnDecode { windowed, own_kv }), grid, entries).await
}
