//! A prefill matmul's weights decoded to f16 before the product (`wgsl/dequant_f16.wgsl`), into the session's
//! dequant buffer, which the matmul then reads as an F16 matrix (`mat::ops`, where `Gpu::dequant_first`).
//! Why: in the tile kernels each invocation decodes its weights block by block inside the column loop, scattered
//! reads of scales and quants per eight values; on tensor cores that decoding, not the multiply-adds, was most of
//! the product's time (benches/README.md). Decoded once per call, a tile's weights are one 16-byte load per eight
//! values, and the decoding itself is a coalesced pass over the bytes.

use super::mat::{MatParams, Matvec};
use super::shader::{wgsl, Module};
use super::{Grid, Slot};
use crate::quant::GgmlType;

/// Weights, the op's parameters (its segments and columns), the f16 rows.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Weights, Slot::Params, Slot::Out];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Dequant {
    pub ty: GgmlType,
}

impl Dequant {
    pub(crate) fn source(self, m: &mut Module) {
        m.uniform::<MatParams>();
        m.weights(self.ty);
        m.piece(wgsl!("mat_params.wgsl"));
        m.piece(wgsl!("dequant_f16.wgsl"));
    }

    /// One invocation per eight values of `rows` x `cols`, workgroups of 256.
    pub(crate) fn grid(rows: usize, cols: usize) -> Grid {
        Matvec::grid(rows * cols / 8, 256)
    }

    /// Bytes of `rows` x `cols` f16 values.
    pub(crate) fn bytes(rows: usize, cols: usize) -> u64 {
        (rows * cols * 2) as u64
    }

    /// Whether a matmul of `ty` weights gains from decoding them first: block-quantized types (F16 is already
    /// what the product reads; F32 and BF16 are one load per value).
    pub(crate) fn takes(ty: GgmlType) -> bool {
        !matches!(ty, GgmlType::F16 | GgmlType::F32 | GgmlType::BF16)
    }
}
