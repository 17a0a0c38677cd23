//! LoRA adapters on the GPU (`wgsl/lora.wgsl`): `y += s·B·(A·x)` added to a projection group's output
//! right after its matrix op, as `AdapterSet::add_to` does on the CPU.
//!
//! An adapter set is uploaded once ([`LoraWeights::upload`]): per group of projections that share
//! their input and write adjacent columns of one output ([`Group`]: q/k/v, o, gate/up, down, the
//! output head), the `A` rows of every adapter of the set on those projections one after another
//! (`rank` rows of the input width), then as many rows of `Bᵀ`, each as wide as the group's
//! output, holding the adapter's scale times its row of `Bᵀ` in its projection's columns and zero
//! elsewhere. One op then adds a whole group's adapters in one dispatch, with no branch per
//! projection; the zeros cost little, the ranks being small.
//!
//! The op reads its input as the matrix op beside it does: through the matvec input stages in
//! decode (`in_norm.wgsl`, `in_attn.wgsl`, `in_plain.wgsl`: the normed row and the merged attention
//! output are never stored there), or every token row of a stored buffer in prefill (`in_rows.wgsl`).

use super::attn_decode::PARTIALS;
use super::params::uniform;
use super::shader::{wgsl, Module};
use super::{Count, Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::{GpuFault, Result};
use crate::gpu::gpu_error;
use crate::gpu::model::GpuModel;
use crate::model::config::Config;
use crate::model::lora::{AdapterSet, Proj, Site};

/// Most ranks one op takes (its `A·x` is kept in workgroup memory): a group of more takes several ops.
pub(crate) const MAX_RANK: usize = 128;

/// Where the op reads its input: the matvec input stages (the last token's row), or every token row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LoraInput {
    /// RMSNorm of the last row, times a norm weight (`in_norm.wgsl`).
    Norm,
    /// The last row as it is (`in_plain.wgsl`).
    Plain,
    /// Decode attention's partials, merged (`in_attn.wgsl`).
    Attn,
    /// Every token row of the call (`in_rows.wgsl`).
    Rows,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Lora {
    pub input: LoraInput,
    /// Input width (`A`'s rows).
    pub cols: u32,
    /// Whether the output is the residual stream (o and down without a post-norm), whose additions are scaled by the
    /// model's `residual` multiplier (Granite's).
    pub residual: bool,
}

uniform! {
    /// One op's matrices in the adapter set's buffer (lora.wgsl `lora`).
    pub(crate) struct LoraParams {
        /// Float offset of the first row of `A`.
        a_off: u32,
        /// Float offset of the first row of `Bᵀ`.
        bt_off: u32,
        /// Rows of `A` and of `Bᵀ`.
        rank: u32,
        /// Width of `Bᵀ`'s rows: the group's output columns, also the stride between token rows.
        rows: u32,
    }
}

impl Lora {
    /// The adapter weights, parameters, call parameters (but for `Rows`, whose workgroups know their
    /// token), output, the input, the norm weight of `Norm`.
    pub(crate) fn bindings(self) -> &'static [Slot] {
        use Slot::*;
        match self.input {
            LoraInput::Norm => &[Weights, Params, Call, Out, In0, In1],
            LoraInput::Plain | LoraInput::Attn => &[Weights, Params, Call, Out, In0],
            LoraInput::Rows => &[Weights, Params, Out, In0],
        }
    }

    pub(crate) fn source(self, m: &mut Module) {
        debug_assert!(self.cols.is_multiple_of(4));
        m.constant("COLS", self.cols);
        m.constant("MAX_RANK", MAX_RANK as u32);
        m.flag("RESIDUAL", self.residual);
        m.uniform::<LoraParams>();
        m.reduce();
        match self.input {
            LoraInput::Norm => m.piece(wgsl!("in_norm.wgsl")),
            LoraInput::Plain => m.piece(wgsl!("in_plain.wgsl")),
            LoraInput::Attn => {
                m.piece(PARTIALS);
                m.piece(wgsl!("attn_ungated.wgsl"));
                m.piece(wgsl!("in_attn.wgsl"));
            }
            LoraInput::Rows => m.piece(wgsl!("in_rows.wgsl")),
        }
        m.piece(wgsl!("lora.wgsl"));
    }
}

/// Projections that one op adapts: they share their input and write adjacent columns of one output
/// buffer, in this order (the layout of `qkv`, of `gate_up`, of the residual stream, of the logits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    Qkv(usize),
    O(usize),
    GateUp(usize),
    Down(usize),
    Output,
}

impl Group {
    /// Every group of a model of `n_layers` layers, in the order of [`Group::index`].
    fn all(n_layers: usize) -> impl Iterator<Item = Group> {
        (0..n_layers)
            .flat_map(|l| [Group::Qkv(l), Group::O(l), Group::GateUp(l), Group::Down(l)])
            .chain([Group::Output])
    }

    fn index(self, n_layers: usize) -> usize {
        match self {
            Group::Qkv(l) => 4 * l,
            Group::O(l) => 4 * l + 1,
            Group::GateUp(l) => 4 * l + 2,
            Group::Down(l) => 4 * l + 3,
            Group::Output => 4 * n_layers,
        }
    }

    /// Its sites with the first output column of each, its input width and its output width.
    fn layout(self, c: &Config) -> (Vec<(Site, usize)>, usize, usize) {
        let d = c.d_model;
        let site = |l, p| Site::Layer(l, p);
        match self {
            Group::Qkv(l) => {
                let (qd, kvd) = (c.layer_q_dim(l), c.layer_kv_dim(l));
                (vec![(site(l, Proj::Q), 0), (site(l, Proj::K), qd), (site(l, Proj::V), qd + kvd)], d, qd + 2 * kvd)
            }
            Group::O(l) => (vec![(site(l, Proj::O), 0)], c.layer_q_dim(l), d),
            Group::GateUp(l) => {
                let ff = c.layer_ffn_dim(l);
                (vec![(site(l, Proj::Gate), 0), (site(l, Proj::Up), ff)], d, 2 * ff)
            }
            Group::Down(l) => (vec![(site(l, Proj::Down), 0)], c.layer_ffn_dim(l), d),
            Group::Output => (vec![(Site::Output, 0)], d, c.vocab_size),
        }
    }
}

/// Where a group's matrices are.
struct Placed {
    buffer: usize,
    a_off: usize,
    bt_off: usize,
    rank: usize,
    n_in: usize,
    rows: usize,
}

/// An adapter set's matrices on the GPU, in buffers of at most one storage binding each.
pub(crate) struct LoraWeights {
    buffers: Vec<wgpu::Buffer>,
    /// Per [`Group::index`]: `None` where no adapter of the set adds anything.
    groups: Vec<Option<Placed>>,
}

impl LoraWeights {
    /// Upload `set` for model `m`; `None` when it adds nothing (no adapters, or every scale 0: the base
    /// model's ops then run, as the CPU skips an adapter at scale 0).
    pub(crate) async fn upload(m: &GpuModel, set: &AdapterSet) -> Result<Option<LoraWeights>> {
        let c = &m.model.config;
        let max_floats = (m.gpu.max_binding / 4) as usize;
        let mut host: Vec<Vec<f32>> = Vec::new();
        let mut groups = Vec::new();
        for group in Group::all(c.n_layers) {
            let (sites, n_in, rows) = group.layout(c);
            let (mut a, mut bt, mut rank) = (Vec::new(), Vec::new(), 0);
            for (adapter, scale) in set.adapters() {
                for &(site, col0) in &sites {
                    let Some(pair) = adapter.pair(site) else { continue };
                    let s = adapter.effective_scale(*scale, pair.rank);
                    if s == 0.0 {
                        continue;
                    }
                    a.extend_from_slice(&pair.a);
                    let n_out = pair.bt.len() / pair.rank;
                    for row in pair.bt.chunks_exact(n_out) {
                        let start = bt.len() + col0;
                        bt.resize(bt.len() + rows, 0.0);
                        for (o, &v) in bt[start..start + n_out].iter_mut().zip(row) {
                            *o = s * v;
                        }
                    }
                    rank += pair.rank;
                }
            }
            if rank == 0 {
                groups.push(None);
                continue;
            }
            let floats = a.len() + bt.len();
            if floats > max_floats {
                let what = format!("LoRA adapters of {group:?} need {} bytes in one binding", 4 * floats);
                return Err(gpu_error(GpuFault::Limits, format!("{what}; the device allows {}", m.gpu.max_binding)));
            }
            if host.last().is_none_or(|h| h.len() + floats > max_floats) {
                host.push(Vec::new());
            }
            let buffer = host.len() - 1;
            let h = &mut host[buffer];
            groups.push(Some(Placed { buffer, a_off: h.len(), bt_off: h.len() + a.len(), rank, n_in, rows }));
            h.extend_from_slice(&a);
            h.extend_from_slice(&bt);
        }
        if host.is_empty() {
            return Ok(None);
        }
        let mut buffers = Vec::with_capacity(host.len());
        for h in &host {
            let bytes: &[u8] = bytemuck::cast_slice(h);
            buffers.push(m.gpu.buffer_with("lora adapters", bytes, wgpu::BufferUsages::STORAGE).await?);
        }
        Ok(Some(LoraWeights { buffers, groups }))
    }

    /// Whether an adapter of the set adds to `group`.
    pub(crate) fn adapts(&self, group: Group, n_layers: usize) -> bool {
        self.groups[group.index(n_layers)].is_some()
    }
}

/// Where a LoRA op reads its input (the buffers of the matrix op beside it).
pub(crate) enum LoraIn<'a> {
    /// The last row of `x`, RMS-normed with this norm weight.
    Norm(&'a wgpu::Buffer, &'a wgpu::Buffer),
    /// The last row of a buffer.
    Plain(&'a wgpu::Buffer),
    /// Decode attention's partials.
    Attn(&'a wgpu::Buffer),
    /// Every token row of a buffer.
    Rows(&'a wgpu::Buffer),
}

/// The ops adding the adapters of `w` on `group` to `out` (the group's output rows), from `input`:
/// none where the set has none there, more than one past `MAX_RANK` ranks.
pub(crate) async fn ops(
    b: &mut OpBuilder<'_>,
    w: &LoraWeights,
    group: Group,
    input: LoraIn<'_>,
    out: &wgpu::Buffer,
    residual: bool,
) -> Result<Vec<Op>> {
    let Some(p) = &w.groups[group.index(b.m.model.config.n_layers)] else { return Ok(Vec::new()) };
    let (kind, x, norm) = match input {
        LoraIn::Norm(x, norm) => (LoraInput::Norm, x, Some(norm)),
        LoraIn::Plain(x) => (LoraInput::Plain, x, None),
        LoraIn::Attn(part) => (LoraInput::Attn, part, None),
        LoraIn::Rows(x) => (LoraInput::Rows, x, None),
    };
    let kernel = Kernel::Lora(Lora { input: kind, cols: p.n_in as u32, residual });
    let tokens = if kind == LoraInput::Rows { Count::Tokens { per: 1 } } else { Count::Fixed(1) };
    let groups = (p.rows as u32).div_ceil(256);
    debug_assert!(groups <= 65535);
    let grid = Grid([Count::Fixed(groups), tokens, Count::Fixed(1)]);
    let mut ops = Vec::new();
    for r0 in (0..p.rank).step_by(MAX_RANK) {
        let params = LoraParams {
            a_off: (p.a_off + r0 * p.n_in) as u32,
            bt_off: (p.bt_off + r0 * p.rows) as u32,
            rank: (p.rank - r0).min(MAX_RANK) as u32,
            rows: p.rows as u32,
        };
        let mut entries =
            vec![(Slot::Weights, w.buffers[p.buffer].as_entire_binding()), (Slot::Params, b.params(&params))];
        if kind != LoraInput::Rows {
            entries.push((Slot::Call, b.call.as_entire_binding()));
        }
        entries.extend([(Slot::Out, out.as_entire_binding()), (Slot::In0, x.as_entire_binding())]);
        if let Some(norm) = norm {
            entries.push((Slot::In1, norm.as_entire_binding()));
        }
        ops.push(b.op("lora", kernel, grid, entries).await?);
    }
    Ok(ops)
}
