//! Qwen3.5's gated delta-net block on the GPU, after its projections (one matrix op into the `dn_in` rows: the
//! convolved channels, z, alpha, beta) and before its output's (`ssm_out`): `wgsl/delta_conv.wgsl`, the causal
//! convolution and SiLU, one invocation per channel; `wgsl/delta_rule.wgsl`, the delta rule, the output's norm and
//! gate, one workgroup per value head. Both walk the call's tokens in order and carry the layer's recurrent state
//! (one buffer per layer: the convolution's, then the rule's, as `kv::recurrent` lays a layer out), so a prefill is
//! as sequential as the CPU's over its tokens; decode is the same kernels on one.

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::kernels::delta_net::DeltaNetShape;

/// Call parameters, the convolution's output, the recurrent state, the projections, the layer's parameters.
pub(crate) const CONV_BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1];
/// Call parameters, the block's output, the recurrent state, the convolution's output, the projections, the
/// layer's parameters.
pub(crate) const RULE_BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1, Slot::In2];

/// The widest delta-net head the rule kernel takes: a workgroup per head, an invocation per row of its state (a
/// power of two: its sums over the head are `team_sum2`'s).
pub(crate) const MAX_HEAD_DIM: usize = 256;
/// The most convolution taps (the window each invocation holds).
pub(crate) const MAX_TAPS: usize = 16;

/// Floats of a token's row of projections: the convolved channels, z, alpha, beta.
pub(crate) fn in_stride(s: &DeltaNetShape) -> usize {
    s.conv_dim() + s.value_dim() + 2 * s.v_heads
}

/// Floats of a layer's parameters: the convolution's taps, dt_bias, a, the output norm.
pub(crate) fn params_len(s: &DeltaNetShape) -> usize {
    s.conv_dim() * s.conv_kernel + 2 * s.v_heads + s.head_dim
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DeltaConv {
    pub conv_dim: u32,
    pub taps: u32,
    pub in_stride: u32,
}

impl DeltaConv {
    pub(crate) fn of(s: &DeltaNetShape) -> DeltaConv {
        DeltaConv { conv_dim: s.conv_dim() as u32, taps: s.conv_kernel as u32, in_stride: in_stride(s) as u32 }
    }

    pub(crate) fn source(self, m: &mut Module) {
        m.constant("CONV_DIM", self.conv_dim);
        m.constant("TAPS", self.taps);
        m.constant("IN_STRIDE", self.in_stride);
        m.piece(wgsl!("delta_conv.wgsl"));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DeltaRule {
    pub conv: DeltaConv,
    pub k_heads: u32,
    pub v_heads: u32,
    pub head_dim: u32,
}

impl DeltaRule {
    pub(crate) fn of(s: &DeltaNetShape) -> DeltaRule {
        DeltaRule {
            conv: DeltaConv::of(s),
            k_heads: s.k_heads as u32,
            v_heads: s.v_heads as u32,
            head_dim: s.head_dim as u32,
        }
    }

    pub(crate) fn source(self, m: &mut Module) {
        m.constant("CONV_DIM", self.conv.conv_dim);
        m.constant("TAPS", self.conv.taps);
        m.constant("IN_STRIDE", self.conv.in_stride);
        m.constant("K_HEADS", self.k_heads);
        m.constant("V_HEADS", self.v_heads);
        m.constant("DN_HEAD_DIM", self.head_dim);
        m.reduce();
        m.piece(wgsl!("delta_rule.wgsl"));
    }
}

/// The buffers of one delta-net layer's two ops.
pub(crate) struct DeltaBuffers<'a> {
    /// The call's projections, `[n × in_stride]`.
    pub dn_in: &'a wgpu::Buffer,
    /// The convolution's output, `[n × conv_dim]`.
    pub conv: &'a wgpu::Buffer,
    /// The block's output before `ssm_out`, `[n × value_dim]`.
    pub out: &'a wgpu::Buffer,
    /// The layer's recurrent state (read and written).
    pub state: &'a wgpu::Buffer,
    /// The layer's parameters ([`params_len`] floats).
    pub params: &'a wgpu::Buffer,
}

/// The convolution and the rule of a delta-net layer of shape `s` over the call's tokens.
pub(crate) async fn ops(b: &OpBuilder<'_>, s: &DeltaNetShape, bufs: DeltaBuffers<'_>) -> Result<Vec<Op>> {
    let conv = DeltaConv::of(s);
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, bufs.conv.as_entire_binding()),
        (Slot::Aux, bufs.state.as_entire_binding()),
        (Slot::In0, bufs.dn_in.as_entire_binding()),
        (Slot::In1, bufs.params.as_entire_binding()),
    ];
    let grid = Grid::fixed(conv.conv_dim.div_ceil(256), 1, 1);
    let conv_op = b.op("delta_conv", Kernel::DeltaConv(conv), grid, entries).await?;
    let rule = DeltaRule::of(s);
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, bufs.out.as_entire_binding()),
        (Slot::Aux, bufs.state.as_entire_binding()),
        (Slot::In0, bufs.conv.as_entire_binding()),
        (Slot::In1, bufs.dn_in.as_entire_binding()),
        (Slot::In2, bufs.params.as_entire_binding()),
    ];
    let rule_op = b.op("delta_rule", Kernel::DeltaRule(rule), Grid::fixed(rule.v_heads, 1, 1), entries).await?;
    Ok(vec![conv_op, rule_op])
}
