//! Prefill attention (`wgsl/attn_prefill.wgsl`): causal, tiled, over the KV cache after
//! `rope_store` wrote the new tokens' keys and values; the rotated queries in, the attention
//! output rows out. A layer with a sliding window (Gemma 3) runs the windowed variant.

use super::rope_store::KvBuffers;
use super::shader::{wgsl, Module};
use super::{Count, Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// Call parameters, output rows, rotated queries, key cache, value cache.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0, Slot::In1, Slot::In2];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttnPrefill {
    /// The layer attends within the model's sliding window (header `WINDOW`).
    pub windowed: bool,
}

impl AttnPrefill {
    pub(crate) fn source(self, m: &mut Module) {
        m.flag("WINDOWED", self.windowed);
        m.piece(wgsl!("attn_prefill.wgsl"));
    }

    /// One workgroup per block of `BQ` queries and head.
    pub(crate) fn grid(n_heads: usize, head_dim: usize) -> Grid {
        let bq = tiles(head_dim).0 as u32;
        Grid([Count::Tokens { per: bq }, Count::Fixed(n_heads as u32), Count::Fixed(1)])
    }
}

/// The tile (header `BQ`, `BK`, `BD`): `BQ` queries by `BK` keys, the keys and values `BD` dimensions
/// at a time (the whole head up to 128, else halves), sized so that the query tile and a part of the key
/// tile fit in the default 16 KiB of workgroup memory (`BQ * HEAD_DIM + BK * (BD + 1) + 2 * BQ * BK`
/// floats). Heads up to 256 wide (`GpuModel` refuses wider ones).
pub(crate) fn tiles(head_dim: usize) -> (usize, usize, usize) {
    let bk = 16;
    match head_dim {
        0..=64 => (16, bk, head_dim),
        65..=128 => (8, bk, head_dim),
        _ => (4, bk, head_dim / 2),
    }
}

/// Attention of the call's rotated queries `q_rot` over the caches `kv`, into `att`, within the model's
/// sliding window when `windowed`.
pub(crate) async fn op(
    b: &OpBuilder<'_>,
    windowed: bool,
    q_rot: &wgpu::Buffer,
    att: &wgpu::Buffer,
    kv: KvBuffers<'_>,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, att.as_entire_binding()),
        (Slot::In0, q_rot.as_entire_binding()),
        (Slot::In1, kv.k.as_entire_binding()),
        (Slot::In2, kv.v.as_entire_binding()),
    ];
    let c = &b.m.model.config;
    let kernel = Kernel::AttnPrefill(AttnPrefill { windowed });
    b.op("attn_prefill", kernel, AttnPrefill::grid(c.n_heads, c.head_dim), entries).await
}
