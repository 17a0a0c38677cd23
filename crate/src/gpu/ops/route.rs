//! A mixture of experts' routing on the GPU (`wgsl/route.wgsl`), for the dense mixture (`model.rs`): from each
//! token's router logits, its chosen experts' weights (the softmax over the chosen, as `model::experts::route`), by
//! which each expert's hidden values are scaled in place, 0 for the others.

use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::model::config::Experts;

/// The hidden rows (scaled in place), the router logits.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Out, Slot::In0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    pub experts: u32,
    pub used: u32,
    /// Each expert's hidden width (`ffn_dim`).
    pub ffn: u32,
}

impl Route {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("N_EXPERTS", self.experts);
        m.constant("N_USED", self.used);
        m.constant("EXPERT_FFN", self.ffn);
        m.piece(wgsl!("route.wgsl"));
    }
}

/// Scale the hidden rows `h` ([n × n_experts·ffn_dim]) by the routing weights of the router `logits` ([n ×
/// n_experts]): one workgroup per token.
pub(crate) async fn op(b: &OpBuilder<'_>, experts: Experts, logits: &wgpu::Buffer, h: &wgpu::Buffer) -> Result<Op> {
    let entries = vec![(Slot::Out, h.as_entire_binding()), (Slot::In0, logits.as_entire_binding())];
    let ffn = b.m.model.config.ffn_dim as u32;
    let kernel = Kernel::Route(Route { experts: experts.count as u32, used: experts.used as u32, ffn });
    b.op("route", kernel, Grid::tokens(), entries).await
}
