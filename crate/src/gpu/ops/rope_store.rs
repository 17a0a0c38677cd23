//! RoPE and the KV store of prefill (`wgsl/rope_store.wgsl` after `wgsl/rope.wgsl`): the new
//! tokens' queries rotated into `q_rot`, their keys (rotated) and values into the f16 cache. It
//! reads the qkv rows, or sums a split qkv matmul's partials itself. A layer that reads an earlier layer's keys and
//! values (Gemma 4's last layers) rotates its queries only.

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Shape, Slot};
use crate::error::Result;
use crate::kernels::rope::Rope;
use crate::model::config::Config;

/// RoPE of a value in the qkv rows (`rotated`), shared with decode attention.
pub(crate) const ROPE: &str = wgsl!("rope.wgsl");

/// Call parameters, rotated queries, key cache, qkv rows (or partials), RoPE table, value cache.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1, Slot::In2];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RopeStore {
    /// Partial products to sum per qkv value (1: plain rows).
    pub splits: u32,
    /// The layer stores keys and values (else it has only queries).
    pub own_kv: bool,
}

impl RopeStore {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("SPLITS", self.splits);
        m.flag("OWN_KV", self.own_kv);
        m.piece(ROPE);
        m.piece(wgsl!("rope_store.wgsl"));
    }

    /// One invocation per pair of output values (q, k and v pairs) of a layer of `shape`, workgroups of 64, by
    /// tokens.
    pub(crate) fn grid(self, c: &Config, shape: &Shape) -> Grid {
        let pairs = (shape.q_dim(c) / 2 + if self.own_kv { shape.kv_dim() } else { 0 }) as u32;
        Grid::per_token(pairs.div_ceil(64))
    }
}

/// The caches of one layer.
pub(crate) struct KvBuffers<'a> {
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
}

/// RoPE and the KV store (where the layer has keys and values of its own: `own_kv`) of the call's tokens from `qkv`
/// (rows, or `splits` partials of them).
pub(crate) async fn op(
    b: &OpBuilder<'_>,
    (splits, own_kv): (u32, bool),
    qkv: &wgpu::Buffer,
    rope: &wgpu::Buffer,
    q_rot: &wgpu::Buffer,
    kv: KvBuffers<'_>,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, q_rot.as_entire_binding()),
        (Slot::Aux, kv.k.as_entire_binding()),
        (Slot::In0, qkv.as_entire_binding()),
        (Slot::In1, rope.as_entire_binding()),
        (Slot::In2, kv.v.as_entire_binding()),
    ];
    let kernel = RopeStore { splits, own_kv };
    b.op("rope_store", Kernel::RopeStore(kernel), kernel.grid(&b.m.model.config, &b.shape), entries).await
}

/// The RoPE table of a layer without RoPE (SmolLM3's NoPE layers): every angle 0, (cos, sin) = (1, 0), which
/// the kernels' rotation leaves every value as it is, exactly.
pub(crate) fn identity_table(pairs: usize, n_ctx: usize) -> Vec<u8> {
    [1f32.to_le_bytes(), 0f32.to_le_bytes()].concat().repeat(n_ctx * pairs)
}

/// The RoPE table (rope.wgsl `rope`): (cos, sin) per position and rotated pair, `rope`'s own angles (the CPU's).
pub(crate) fn rope_table(rope: &Rope, n_ctx: usize) -> Vec<u8> {
    let mut angles = vec![(0f32, 0f32); rope.pairs()];
    let mut table = Vec::with_capacity(n_ctx * rope.pairs() * 8);
    for pos in 0..n_ctx {
        rope.angles(pos, &mut angles);
        for (cos, sin) in &angles {
            table.extend(cos.to_le_bytes());
            table.extend(sin.to_le_bytes());
        }
    }
    table
}
