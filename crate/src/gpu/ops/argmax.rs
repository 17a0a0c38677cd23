//! Greedy sampling on the GPU (`wgsl/argmax.wgsl`): the id of the largest logit, stored in the ids
//! buffer and as the next step's input token. It scans a logits row, or the best rows the output
//! head's matvec left per workgroup (`OutMode::Argmax`).

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// Call parameters, ids, the tokens buffer (the next input), candidates (logits or best rows).
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Argmax {
    /// Logits per candidate: 1 (a logits row), or the output layer's rows per workgroup.
    pub per: u32,
}

impl Argmax {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("PER", self.per);
        m.piece(wgsl!("argmax.wgsl"));
    }
}

/// The argmax of `candidates` (`per` logits each) into `ids` and `tokens`: one workgroup.
pub(crate) async fn op(
    b: &OpBuilder<'_>,
    per: u32,
    candidates: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    tokens: &wgpu::Buffer,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, ids.as_entire_binding()),
        (Slot::Aux, tokens.as_entire_binding()),
        (Slot::In0, candidates.as_entire_binding()),
    ];
    b.op("argmax", Kernel::Argmax(Argmax { per }), Grid::fixed(1, 1, 1), entries).await
}
