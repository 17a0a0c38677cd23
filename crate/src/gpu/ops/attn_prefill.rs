//! Prefill attention (`wgsl/attn_prefill.wgsl`): causal, tiled, over the KV cache after
//! `rope_store` wrote the new tokens' keys and values; the rotated queries in, the attention
//! output rows out. A layer with a sliding window (Gemma 3) runs the windowed variant. Over a long
//! cache the keys are split among several workgroups per query block (more of the GPU at work than
//! one workgroup per block and head, whose last block walks every key), and `attn_merge.wgsl` merges
//! their partials.

use super::rope_store::KvBuffers;
use super::shader::{wgsl, Module};
use super::{Count, Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::model::config::Config;

/// Call parameters, output rows, partials, rotated queries, key cache, value cache.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1, Slot::In2];

/// The merge's: call parameters, output rows, partials.
pub(crate) const MERGE_BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0];

/// The layout of split attention's partials (`HD4`, `part_record`, `part_stats`), shared with the merge.
const PARTS: &str = wgsl!("attn_prefill_parts.wgsl");

/// Most workgroups sharing a query block's keys.
pub(crate) const MAX_KEY_SPLITS: usize = 8;

/// Fewest keys a split takes: below this the merge's dispatch costs more than the split gains.
const MIN_SPLIT_KEYS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttnPrefill {
    /// The layer attends within the model's sliding window (header `WINDOW`).
    pub windowed: bool,
    /// A query's team sums its scores with subgroup shuffles (`attn_team_subgroup.wgsl`), else through
    /// workgroup memory (`attn_team_shared.wgsl`).
    pub shuffles: bool,
    /// The tile keeps f16 pairs (`attn_tile_f16.wgsl`), else f32 chunks (`Tile::packed`).
    pub packed: bool,
    /// On cooperative matrices (`attn_prefill_coop.wgsl`, heads of 64; the other fields then unused).
    pub coop: bool,
}

/// Queries per workgroup of `attn_prefill_coop.wgsl` (`CQ`).
const COOP_QUERIES: u32 = 32;

impl AttnPrefill {
    /// The variant for heads of `head_dim` on a device whose kernels use subgroups of at least
    /// `subgroup_min` invocations (`None`: no subgroup operations): shuffles where a subgroup holds a team;
    /// on cooperative matrices where the device runs them there (`coop`) and the heads have 64 dimensions.
    pub(crate) fn new(windowed: bool, head_dim: usize, subgroup_min: Option<u32>, coop: bool) -> AttnPrefill {
        let Tile { team, packed, .. } = Tile::of(head_dim);
        let shuffles = subgroup_min.is_some_and(|min| min as usize >= team);
        AttnPrefill { windowed, shuffles, packed, coop: coop && head_dim == 64 }
    }

    pub(crate) fn source(self, m: &mut Module) {
        m.flag("WINDOWED", self.windowed);
        if self.coop {
            m.enable("f16");
            m.enable("wgpu_cooperative_matrix");
            m.piece(PARTS);
            m.piece(wgsl!("attn_prefill_coop.wgsl"));
            return;
        }
        m.piece(if self.shuffles { wgsl!("attn_team_subgroup.wgsl") } else { wgsl!("attn_team_shared.wgsl") });
        m.piece(PARTS);
        m.piece(if self.packed { wgsl!("attn_tile_f16.wgsl") } else { wgsl!("attn_tile_f32.wgsl") });
        m.piece(wgsl!("attn_prefill.wgsl"));
    }

    /// Queries per workgroup: `BQ`, or `CQ` on cooperative matrices.
    pub(crate) fn queries(self, head_dim: usize) -> u32 {
        if self.coop {
            COOP_QUERIES
        } else {
            Tile::of(head_dim).bq as u32
        }
    }

    /// One workgroup per block of queries, head and split of the keys.
    pub(crate) fn grid(self, n_heads: usize, head_dim: usize) -> Grid {
        Grid([Count::Tokens { per: self.queries(head_dim) }, Count::Fixed(n_heads as u32), Count::KeySplits])
    }
}

/// The merge of split attention's partials (`wgsl/attn_merge.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttnMerge;

impl AttnMerge {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("MAX_SPLITS", MAX_KEY_SPLITS as u32);
        m.piece(wgsl!("attn_merge.wgsl"));
        m.piece(PARTS);
    }

    /// 64 invocations per workgroup, one per four dimensions of a token's output; a row of workgroups
    /// per token, none where the keys are not split.
    pub(crate) fn grid(q_dim: usize) -> Grid {
        Grid([Count::Fixed((q_dim / 4).div_ceil(64) as u32), Count::SplitTokens, Count::Fixed(1)])
    }
}

/// The keys per split are a multiple of this: of every layer's tile of keys (`Tile::bk`; Gemma 4's layers have heads
/// of two sizes), as every layer takes the call's splits.
pub(crate) fn split_step(c: &Config) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (0..c.n_layers).map(|l| Tile::of(c.layer_head_dim(l)).bk).fold(1, |step, bk| step / gcd(step, bk) * bk)
}

/// Keys per split (`CallParams::split_keys`, a multiple of `bk`, the [`split_step`]) and splits (`n_splits`) over
/// `kv_len` cached positions: at most `MAX_KEY_SPLITS`, each at least `MIN_SPLIT_KEYS` keys.
pub(crate) fn key_splits(kv_len: usize, bk: usize) -> (u32, u32) {
    let n = (kv_len / MIN_SPLIT_KEYS).clamp(1, MAX_KEY_SPLITS);
    let keys = kv_len.div_ceil(n).div_ceil(bk).max(1) * bk;
    (keys as u32, kv_len.div_ceil(keys).max(1) as u32)
}

/// Floats of the partials of `n_batch` tokens (`attn_prefill_parts.wgsl`): per split and token, its heads'
/// unnormalized outputs, then a (max, sum) vec4 per head.
pub(crate) fn parts_len(c: &Config, n_batch: usize) -> usize {
    MAX_KEY_SPLITS * n_batch * (c.q_dim() + 4 * c.n_heads)
}

/// The kernel's tile (header `BQ`, `BK`, `Q_TEAM`, `Q_CHUNKS`): `BQ` queries of `Q_TEAM` invocations each
/// (256 in all), a member holding `Q_CHUNKS` chunks of four dimensions of its query and output (at most 8:
/// the kernel keeps them in separate registers), against `BK` keys at a time. Teams of 8 where a head has a
/// multiple of 32 dimensions, else of 4, and of 16 past 256 dimensions (`GpuModel` takes heads of multiples of 16
/// up to 128, of 32 up to 256 and of 64 up to 512). A tile's keys and values take 12 KiB at most (at most 512
/// chunks, two an invocation): as f32 chunks where four keys fit so, else as f16 pairs (`packed`: heads of more
/// than 384), so with the 4 KiB of `attn_team_shared.wgsl` the kernel fits WebGPU's default 16 KiB of workgroup
/// memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tile {
    pub bq: usize,
    pub bk: usize,
    pub team: usize,
    pub ch: usize,
    pub packed: bool,
}

impl Tile {
    pub(crate) fn of(head_dim: usize) -> Tile {
        let chunks = head_dim / 4;
        let team = if chunks > 64 {
            16
        } else if chunks.is_multiple_of(8) {
            8
        } else {
            4
        };
        let packed = 2 * 4 * 16 * chunks > 12288;
        let chunk_bytes = if packed { 8 } else { 16 };
        let bk = (12288 / (2 * chunk_bytes * chunks)).min(64) / 4 * 4;
        debug_assert!(chunks.is_multiple_of(team) && chunks / team <= 8 && bk >= 4, "head dim {head_dim}");
        Tile { bq: 256 / team, bk, team, ch: chunks / team, packed }
    }
}

/// Attention of the call's rotated queries `q_rot` over the caches `kv`, into `att`, within the model's
/// sliding window when `windowed`: the attention op, then the merge of its partials in `parts` (which
/// dispatches nothing where the keys are not split).
pub(crate) async fn ops(
    b: &OpBuilder<'_>,
    windowed: bool,
    q_rot: &wgpu::Buffer,
    parts: &wgpu::Buffer,
    att: &wgpu::Buffer,
    kv: KvBuffers<'_>,
) -> Result<Vec<Op>> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, att.as_entire_binding()),
        (Slot::Aux, parts.as_entire_binding()),
        (Slot::In0, q_rot.as_entire_binding()),
        (Slot::In1, kv.k.as_entire_binding()),
        (Slot::In2, kv.v.as_entire_binding()),
    ];
    let (c, head_dim) = (&b.m.model.config, b.shape.head_dim);
    let subgroup_min = b.m.gpu.summary.subgroups.map(|(min, _)| min);
    let attn = AttnPrefill::new(windowed, head_dim, subgroup_min, b.m.gpu.coop_attention);
    let attend = b.op("attn_prefill", Kernel::AttnPrefill(attn), attn.grid(c.n_heads, head_dim), entries).await?;
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, att.as_entire_binding()),
        (Slot::In0, parts.as_entire_binding()),
    ];
    let merge = b.op("attn_merge", Kernel::AttnMerge(AttnMerge), AttnMerge::grid(b.shape.q_dim(c)), entries).await?;
    Ok(vec![attend, merge])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_splits_cover_the_cache_in_whole_tiles() {
        for head_dim in [16, 64, 96, 128, 256, 512] {
            let bk = Tile::of(head_dim).bk;
            for kv_len in 1..3000 {
                let (keys, n) = key_splits(kv_len, bk);
                let (keys, n) = (keys as usize, n as usize);
                assert!(keys.is_multiple_of(bk) && (1..=MAX_KEY_SPLITS).contains(&n), "{kv_len}: {keys} x {n}");
                assert!(n * keys >= kv_len && (n - 1) * keys < kv_len, "{kv_len}: {keys} x {n}: a split without keys");
                assert!(n == 1 || keys >= MIN_SPLIT_KEYS, "{kv_len}: {keys} x {n}");
            }
        }
        assert_eq!(key_splits(100, Tile::of(64).bk), (120, 1));
        assert_eq!(key_splits(512, Tile::of(64).bk), (72, 8));
    }
}
