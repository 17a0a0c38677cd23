//! SwiGLU of the prefill feed-forward (`wgsl/swiglu.wgsl`): `h = silu(gate) * up` from gate/up
//! rows, or from a split gate/up matmul's partials, summed here (the split's reduce folded in).
//! Decode fuses SwiGLU into the gate/up matvec instead (`OutMode::Swiglu`).

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// Call parameters, `h`, gate/up rows (or partials).
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Swiglu {
    /// Partial products to sum per value (1: plain rows).
    pub splits: u32,
}

impl Swiglu {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("SPLITS", self.splits);
        m.piece(wgsl!("swiglu.wgsl"));
    }

    /// One invocation per value of a row, workgroups of 256, by tokens.
    pub(crate) fn grid(ffn: usize) -> Grid {
        Grid::per_token((ffn as u32).div_ceil(256))
    }
}

/// SwiGLU into `h` from the gate/up rows in `gu`, or from `splits` partial products there.
pub(crate) async fn op(b: &OpBuilder<'_>, splits: u32, gu: &wgpu::Buffer, h: &wgpu::Buffer) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, h.as_entire_binding()),
        (Slot::In0, gu.as_entire_binding()),
    ];
    b.op("swiglu", Kernel::Swiglu(Swiglu { splits }), Swiglu::grid(b.m.model.config.ffn_dim), entries).await
}
