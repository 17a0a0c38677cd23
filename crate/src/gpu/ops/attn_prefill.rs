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
    /// A query's team sums its scores with subgroup shuffles (`attn_team_subgroup.wgsl`), else through
    /// workgroup memory (`attn_team_shared.wgsl`).
    pub shuffles: bool,
}

impl AttnPrefill {
    /// The variant for heads of `head_dim` on a device whose kernels use subgroups of at least
    /// `subgroup_min` invocations (`None`: no subgroup operations): shuffles where a subgroup holds a team.
    pub(crate) fn new(windowed: bool, head_dim: usize, subgroup_min: Option<u32>) -> AttnPrefill {
        let team = Tile::of(head_dim).team;
        AttnPrefill { windowed, shuffles: subgroup_min.is_some_and(|min| min as usize >= team) }
    }

    pub(crate) fn source(self, m: &mut Module) {
        m.flag("WINDOWED", self.windowed);
        m.piece(if self.shuffles { wgsl!("attn_team_subgroup.wgsl") } else { wgsl!("attn_team_shared.wgsl") });
        m.piece(wgsl!("attn_prefill.wgsl"));
    }

    /// One workgroup per block of `BQ` queries and head.
    pub(crate) fn grid(n_heads: usize, head_dim: usize) -> Grid {
        let bq = Tile::of(head_dim).bq as u32;
        Grid([Count::Tokens { per: bq }, Count::Fixed(n_heads as u32), Count::Fixed(1)])
    }
}

/// The kernel's tile (header `BQ`, `BK`, `Q_TEAM`, `Q_CHUNKS`): `BQ` queries of `Q_TEAM` invocations each
/// (256 in all), a member holding `Q_CHUNKS` chunks of four dimensions of its query and output (at most 8:
/// the kernel keeps them in separate registers), against `BK` keys at a time. Teams of 8 where a head has a
/// multiple of 32 dimensions, else of 4 (`GpuModel` takes heads of multiples of 16 up to 128 and of 32 up
/// to 256). A tile's keys and values take 12 KiB at most (at most 512 chunks, two an invocation), so with
/// the 4 KiB of `attn_team_shared.wgsl` the kernel fits WebGPU's default 16 KiB of workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tile {
    pub bq: usize,
    pub bk: usize,
    pub team: usize,
    pub ch: usize,
}

impl Tile {
    pub(crate) fn of(head_dim: usize) -> Tile {
        let chunks = head_dim / 4;
        let team = if chunks.is_multiple_of(8) { 8 } else { 4 };
        let bk = (12288 / (2 * 4 * head_dim)).min(64) / 4 * 4;
        debug_assert!(chunks / team <= 8 && bk >= 4, "head dim {head_dim}");
        Tile { bq: 256 / team, bk, team, ch: chunks / team }
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
    let subgroup_min = b.m.gpu.summary.subgroups.map(|(min, _)| min);
    let kernel = Kernel::AttnPrefill(AttnPrefill::new(windowed, c.head_dim, subgroup_min));
    b.op("attn_prefill", kernel, AttnPrefill::grid(c.n_heads, c.head_dim), entries).await
}
