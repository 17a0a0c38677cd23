//! The gated activation of the prefill feed-forward (`wgsl/glu.wgsl`): `h = silu(gate) * up` (SwiGLU) or
//! `gelu(gate) * up` (Gemma's GeGLU) from gate/up rows, or from a split gate/up matmul's partials, summed here
//! (the split's reduce folded in). Decode fuses it into the gate/up matvec instead (`OutMode::Swiglu`,
//! `OutMode::Geglu`), with the same activation piece.

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::model::config::{Arch, Config};

/// Call parameters, `h`, gate/up rows (or partials).
pub(crate) const BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0];

/// The gate's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Act {
    Silu,
    /// GELU, tanh approximation (Gemma).
    Gelu,
}

impl Act {
    pub(crate) fn of(c: &Config) -> Act {
        match c.arch {
            Arch::Gemma3 | Arch::Gemma4 => Act::Gelu,
            _ => Act::Silu,
        }
    }

    /// The piece that defines `glu(gate, up)`.
    pub(crate) fn source(self) -> &'static str {
        match self {
            Act::Silu => wgsl!("glu_silu.wgsl"),
            Act::Gelu => wgsl!("glu_gelu.wgsl"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Glu {
    /// Partial products to sum per value (1: plain rows).
    pub splits: u32,
    pub act: Act,
}

impl Glu {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("SPLITS", self.splits);
        m.piece(self.act.source());
        m.piece(wgsl!("glu.wgsl"));
    }

    /// One invocation per value of a row, workgroups of 256, by tokens.
    pub(crate) fn grid(ffn: usize) -> Grid {
        Grid::per_token((ffn as u32).div_ceil(256))
    }
}

/// The model's gated activation into `h` from the gate/up rows in `gu`, or from `splits` partial products there.
pub(crate) async fn op(b: &OpBuilder<'_>, splits: u32, gu: &wgpu::Buffer, h: &wgpu::Buffer) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, h.as_entire_binding()),
        (Slot::In0, gu.as_entire_binding()),
    ];
    let kernel = Kernel::Glu(Glu { splits, act: Act::of(&b.m.model.config) });
    b.op("glu", kernel, Glu::grid(b.shape.ffn), entries).await
}
