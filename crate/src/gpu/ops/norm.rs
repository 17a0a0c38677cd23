//! The prefill RMSNorms, one workgroup per token row: `wgsl/rmsnorm.wgsl`, and
//! `wgsl/add_rmsnorm.wgsl`, which first adds a split matmul's partials to the residual (the
//! split's reduce folded into the norm). Both after a reduction and `wgsl/row_rms.wgsl`, as is
//! `wgsl/norm_add.wgsl`, Gemma's post-norm of a block's output added to the residual (decode and prefill), then the
//! residual scaled (Gemma 4's layer output scale).
//! And `wgsl/head_norm.wgsl`, the norm of each query and key head in the qkv rows (Qwen3, Gemma 3; prefill
//! and decode), and of each value head (Gemma 4).

use super::params::uniform;
use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;

const ROW_RMS: &str = wgsl!("row_rms.wgsl");

/// Normed rows, rows, norm weight.
pub(crate) const RMSNORM_BINDINGS: &[Slot] = &[Slot::Out, Slot::In0, Slot::In1];
/// Call parameters, normed rows, the residual rows (added to), partials, norm weight.
pub(crate) const ADD_RMSNORM_BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::Aux, Slot::In0, Slot::In1];
/// The scale, call parameters, the residual rows (added to), the block's output rows (or partials), norm weight.
pub(crate) const NORM_ADD_BINDINGS: &[Slot] = &[Slot::Params, Slot::Call, Slot::Out, Slot::In0, Slot::In1];

uniform! {
    /// What `norm_add` multiplies the residual rows by after the add (Gemma 4's `layer_output_scale`; 1 elsewhere).
    pub(crate) struct ScaleParams {
        /// An f32's bits.
        scale: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}
/// Call parameters, the qkv rows (normed in place), the query and key norms' weights.
pub(crate) const HEAD_NORM_BINDINGS: &[Slot] = &[Slot::Call, Slot::Out, Slot::In0];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RmsNorm;

impl RmsNorm {
    pub(crate) fn source(self, m: &mut Module) {
        m.reduce();
        m.piece(ROW_RMS);
        m.piece(wgsl!("rmsnorm.wgsl"));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AddRmsNorm {
    /// Partial products to add per value.
    pub splits: u32,
}

impl AddRmsNorm {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("SPLITS", self.splits);
        m.reduce();
        m.piece(ROW_RMS);
        m.piece(wgsl!("add_rmsnorm.wgsl"));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NormAdd {
    /// Partial products to sum per value (1: plain rows).
    pub splits: u32,
}

impl NormAdd {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("SPLITS", self.splits);
        m.uniform::<ScaleParams>();
        m.reduce();
        m.piece(ROW_RMS);
        m.piece(wgsl!("norm_add.wgsl"));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HeadNorm {
    /// Heads normed in each qkv row: the query heads, then the key heads, then (Gemma 4) the value heads.
    pub heads: u32,
}

impl HeadNorm {
    pub(crate) fn source(self, m: &mut Module) {
        m.constant("HEADS", self.heads);
        m.reduce();
        m.piece(wgsl!("head_norm.wgsl"));
    }
}

/// RMSNorm of the rows of `x` into `out`, times `norm`.
pub(crate) async fn rmsnorm(
    b: &OpBuilder<'_>,
    x: &wgpu::Buffer,
    norm: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<Op> {
    let entries = vec![
        (Slot::Out, out.as_entire_binding()),
        (Slot::In0, x.as_entire_binding()),
        (Slot::In1, norm.as_entire_binding()),
    ];
    b.op("rmsnorm", Kernel::RmsNorm(RmsNorm), Grid::tokens(), entries).await
}

/// `x` += the sum of `splits` partial products in `partials`, then its RMSNorm into `out`.
pub(crate) async fn add_rmsnorm(
    b: &OpBuilder<'_>,
    splits: u32,
    partials: &wgpu::Buffer,
    x: &wgpu::Buffer,
    norm: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, out.as_entire_binding()),
        (Slot::Aux, x.as_entire_binding()),
        (Slot::In0, partials.as_entire_binding()),
        (Slot::In1, norm.as_entire_binding()),
    ];
    b.op("add_rmsnorm", Kernel::AddRmsNorm(AddRmsNorm { splits }), Grid::tokens(), entries).await
}

/// `x` += the RMSNorm of each row of `y` (or of the sum of its `splits` partial products) times `norm`; then `x *=
/// scale`.
pub(crate) async fn norm_add(
    b: &mut OpBuilder<'_>,
    splits: u32,
    y: &wgpu::Buffer,
    (norm, scale): (&wgpu::Buffer, f32),
    x: &wgpu::Buffer,
) -> Result<Op> {
    let params = ScaleParams { scale: scale.to_bits(), ..ScaleParams::default() };
    let entries = vec![
        (Slot::Params, b.params(&params)),
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, x.as_entire_binding()),
        (Slot::In0, y.as_entire_binding()),
        (Slot::In1, norm.as_entire_binding()),
    ];
    b.op("norm_add", Kernel::NormAdd(NormAdd { splits }), Grid::tokens(), entries).await
}

/// The first `heads` heads of the call's rows of `qkv` (its query heads, key heads, value heads) RMS-normed in place,
/// times `qk_norm` ([q_norm | k_norm | v_norm] as far as `heads` reaches).
pub(crate) async fn head_norm(
    b: &OpBuilder<'_>,
    qkv: &wgpu::Buffer,
    qk_norm: &wgpu::Buffer,
    heads: usize,
) -> Result<Op> {
    let entries = vec![
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, qkv.as_entire_binding()),
        (Slot::In0, qk_norm.as_entire_binding()),
    ];
    let grid = Grid::per_token(heads.div_ceil(4) as u32);
    b.op("head_norm", Kernel::HeadNorm(HeadNorm { heads: heads as u32 }), grid, entries).await
}
