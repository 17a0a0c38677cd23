//! Gemma 4's per-layer inputs on the GPU. Before the layers, `per_layer_in` (`wgsl/per_layer_in.wgsl`) makes each
//! token's input of every layer from its per-layer embedding (the `embed` op over `per_layer_token_embd`) and the
//! projection of its embedding (a matrix op over `per_layer_model_proj`). In each layer, after the feed-forward
//! block, `per_layer_gate` (`wgsl/per_layer_gate.wgsl`) gates the layer's input by GELU of `inp_gate` times the
//! residual stream; a matrix op projects it back (`proj`) and `norm_add` adds its post-norm to the residual, then
//! scales it by the layer's output scale.

use super::glu::Act;
use super::params::uniform;
use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

/// Parameters, the inputs (the per-layer embeddings in, the inputs out), the projection's rows, the norm weight.
pub(crate) const IN_BINDINGS: &[Slot] = &[Slot::Params, Slot::Out, Slot::In0, Slot::In1];
/// Parameters, call parameters, the gate rows (gated in place), the inputs.
pub(crate) const GATE_BINDINGS: &[Slot] = &[Slot::Params, Slot::Call, Slot::Out, Slot::In0];

uniform! {
    /// The per-layer inputs' shape and the factors of `per_layer_in` (f32 bits).
    pub(crate) struct PerLayerParams {
        /// Values of one layer's input.
        width: u32,
        /// Values of a token's inputs of every layer (`n_layers × width`).
        all: u32,
        /// The layer whose input `per_layer_gate` reads.
        layer: u32,
        /// What the projection is multiplied by before its norm (1 / sqrt(d_model)).
        proj_scale: u32,
        /// What the sum of the normed projection and the embedding is multiplied by (1 / sqrt(2)).
        sum_scale: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}

impl PerLayerParams {
    /// The parameters of inputs `width` wide over `n_layers` layers in a model `d_model` wide (the CPU's factors,
    /// `model::forward::per_layer_inputs`).
    pub(crate) fn new(width: usize, n_layers: usize, d_model: usize) -> PerLayerParams {
        PerLayerParams {
            width: width as u32,
            all: (width * n_layers) as u32,
            proj_scale: (1.0 / (d_model as f32).sqrt()).to_bits(),
            sum_scale: (1.0 / 2f32.sqrt()).to_bits(),
            ..PerLayerParams::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PerLayerIn;

impl PerLayerIn {
    pub(crate) fn source(self, m: &mut Module) {
        m.uniform::<PerLayerParams>();
        m.reduce();
        m.piece(wgsl!("per_layer_in.wgsl"));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PerLayerGate;

impl PerLayerGate {
    pub(crate) fn source(self, m: &mut Module) {
        m.uniform::<PerLayerParams>();
        m.piece(Act::Gelu.source());
        m.piece(wgsl!("per_layer_gate.wgsl"));
    }
}

/// The call's per-layer inputs, in place in `inputs` (the per-layer embeddings, `[n × all]`), from the projection's
/// rows `proj` (`[n × all]`) and the norm weight `norm`: one workgroup per layer and token.
pub(crate) async fn inputs_op(
    b: &mut OpBuilder<'_>,
    p: PerLayerParams,
    inputs: &wgpu::Buffer,
    proj: &wgpu::Buffer,
    norm: &wgpu::Buffer,
) -> Result<Op> {
    let n_layers = p.all / p.width;
    let entries = vec![
        (Slot::Params, b.params(&p)),
        (Slot::Out, inputs.as_entire_binding()),
        (Slot::In0, proj.as_entire_binding()),
        (Slot::In1, norm.as_entire_binding()),
    ];
    b.op("per_layer_in", Kernel::PerLayerIn(PerLayerIn), Grid::per_token(n_layers), entries).await
}

/// `gate = gelu(gate) * input` over the call's rows of `gate` (`[n × width]`), `input` layer `layer`'s rows of
/// `inputs`.
pub(crate) async fn gate_op(
    b: &mut OpBuilder<'_>,
    p: PerLayerParams,
    layer: usize,
    gate: &wgpu::Buffer,
    inputs: &wgpu::Buffer,
) -> Result<Op> {
    let p = PerLayerParams { layer: layer as u32, ..p };
    let entries = vec![
        (Slot::Params, b.params(&p)),
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, gate.as_entire_binding()),
        (Slot::In0, inputs.as_entire_binding()),
    ];
    b.op("per_layer_gate", Kernel::PerLayerGate(PerLayerGate), Grid::per_token(p.width.div_ceil(256)), entries).await
}
