//! Embedding lookup (`wgsl/embed.wgsl`): token rows of the table, dequantized and scaled, into `x` (the token
//! embeddings; Gemma 4's per-layer embeddings too). One op per row chunk of the table (a table larger than one
//! storage binding is split).

use super::params::uniform;
use super::shader::{wgsl, Module};
use super::{Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::gpu::model::MatLoc;
use crate::quant::GgmlType;

/// Weights, parameters, call parameters, the output rows, the token ids.
pub(crate) const BINDINGS: &[Slot] = &[Slot::Weights, Slot::Params, Slot::Call, Slot::Out, Slot::In0];

uniform! {
    /// The row chunk one embed op holds.
    pub(crate) struct EmbedParams {
        /// Byte offset of the chunk's first row in the arena.
        offset: u32,
        /// First and one-past-last token id of the chunk.
        row0: u32,
        row1: u32,
        cols: u32,
        /// What the values are multiplied by (an f32's bits).
        scale: u32,
        pad0: u32,
        pad1: u32,
        pad2: u32,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Embed {
    pub ty: GgmlType,
}

impl Embed {
    pub(crate) fn source(self, m: &mut Module) {
        m.uniform::<EmbedParams>();
        m.weights(self.ty);
        m.piece(wgsl!("embed.wgsl"));
    }

    /// One invocation per 8 values, workgroups of 64, by tokens.
    pub(crate) fn grid(cols: usize) -> Grid {
        Grid::per_token((cols as u32 / 8).div_ceil(64))
    }
}

/// The embedding of the call's `tokens` into `x`, times `scale`: one op per chunk of `table`.
pub(crate) async fn ops(
    b: &mut OpBuilder<'_>,
    (table, scale): (&MatLoc, f32),
    x: &wgpu::Buffer,
    tokens: &wgpu::Buffer,
) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    for ch in &table.chunks {
        let p = EmbedParams {
            offset: ch.offset as u32,
            row0: ch.row0 as u32,
            row1: (ch.row0 + ch.rows) as u32,
            cols: table.cols as u32,
            scale: scale.to_bits(),
            ..EmbedParams::default()
        };
        let entries = vec![
            (Slot::Weights, b.m.arenas[ch.arena].as_entire_binding()),
            (Slot::Params, b.params(&p)),
            (Slot::Call, b.call.as_entire_binding()),
            (Slot::Out, x.as_entire_binding()),
            (Slot::In0, tokens.as_entire_binding()),
        ];
        let kernel = Kernel::Embed(Embed { ty: table.ty });
        ops.push(b.op("embed", kernel, Embed::grid(table.cols), entries).await?);
    }
    Ok(ops)
}
