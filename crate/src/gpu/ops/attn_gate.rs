//! Qwen3.5's gated attention in prefill (`wgsl/attn_gate.wgsl`): the attention output rows times the sigmoid of
//! their gate, before the output projection. Decode gates in that projection's input stage instead
//! (`mat::Input::AttnGated`).

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// Call parameters, the attention output rows (gated in place), the gate rows.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttnGate;

impl AttnGate {
    pub(crate) fn source(self, m: &mut Module) {
        m.piece(wgsl!("attn_gate.wgsl"));
    }
}

/// `att[t] *= sigmoid(gate[t])` over the call's rows (`[n × q_dim]` each).
pub(crate) async fn op(b: &OpBuilder<'_>, att: &wgpu::Buffer, gate: &wgpu::Buffer) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, att.as_entire_binding()),
        (Slot::In0, gate.as_entire_binding()),
    ];
    let grid = Grid::per_token(b.shape.q_dim(&b.m.model.config).div_ceil(256) as u32);
    b.op("attn_gate", Kernel::AttnGate(AttnGate), grid, entries).await
}
