//! The matrix ops, which share their pieces (`wgsl/mat_common.wgsl`, a bias function) and their
//! parameter struct: the decode matrix-vector product (`wgsl/matvec.wgsl`, with an input stage:
//! RMSNorm, plain, or the attention merge), the prefill matrix-matrix product (`wgsl/matmul.wgsl`,
//! split over the columns when a short prompt gives too few tiles) and the sum of a split's partial
//! products (`wgsl/split_reduce.wgsl`). Up to 4 matrices of one weight type in one arena whose
//! outputs are adjacent columns (q/k/v, gate/up) go in one dispatch, as "segments".

use super::attn_decode::PARTIALS;
use super::glu::Act;
use super::params::uniform;
use super::shader::{wgsl, Module};
use super::{Count, Grid, Kernel, Op, OpBuilder, Slot};
use crate::error::Result;
use crate::gpu::model::MatLoc;
use crate::quant::GgmlType;

const MAT_COMMON: &str = wgsl!("mat_common.wgsl");
const BIAS: &str = wgsl!("bias.wgsl");
const NO_BIAS: &str = wgsl!("no_bias.wgsl");

/// What a matrix kernel does with its results (header `OUT_*`, the variant's `OUT_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum OutMode {
    Store = 0,
    /// Add to the output (the residual stream).
    Add = 1,
    /// `silu(gate) * up` of segment 0 and 1 (matvec only).
    Swiglu = 2,
    /// A partial product over one split of the columns, summed by `SplitReduce` (matmul only).
    Partial = 3,
    /// Store, and each workgroup's best row for `Argmax { per: rows }` (matvec without bias
    /// only: the output layer in greedy decoding).
    Argmax = 4,
    /// `gelu(gate) * up` of segment 0 and 1 (matvec only; Gemma).
    Geglu = 5,
}

impl OutMode {
    pub(crate) const ALL: [OutMode; 6] =
        [OutMode::Store, OutMode::Add, OutMode::Swiglu, OutMode::Partial, OutMode::Argmax, OutMode::Geglu];

    /// Its constant in the generated header.
    pub(crate) fn wgsl_name(self) -> &'static str {
        match self {
            OutMode::Store => "OUT_STORE",
            OutMode::Add => "OUT_ADD",
            OutMode::Swiglu => "OUT_SWIGLU",
            OutMode::Partial => "OUT_PARTIAL",
            OutMode::Argmax => "OUT_ARGMAX",
            OutMode::Geglu => "OUT_GEGLU",
        }
    }
}

/// Where a matvec's input vector comes from: the input stage its module includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Input {
    /// RMSNorm of the last token's row, times a norm weight (`in_norm.wgsl`).
    Norm,
    /// The last token's row as is (`in_plain.wgsl`).
    Plain,
    /// The merge of decode attention's per-chunk partials (`in_attn.wgsl`).
    Attn,
    /// That merge times the sigmoid of each value's gate (`attn_gated.wgsl`: Qwen3.5's gated attention).
    AttnGated,
}

uniform! {
    /// The op's matrices and output (mat_common.wgsl `op`).
    pub(crate) struct MatParams {
        /// Byte offset in the arena of each segment's first row.
        seg_off: [u32; 4],
        /// Cumulative row counts: segment s has output rows `seg_end[s-1]..seg_end[s]`.
        seg_end: [u32; 4],
        cols: u32,
        /// Floats between the output rows of consecutive tokens (matmul).
        out_stride: u32,
        /// Output column of the op's first row.
        out_col0: u32,
        n_segs: u32,
        /// Columns per split of a split matmul (`cols` when not split).
        k_len: u32,
        /// Number of splits (split_reduce.wgsl sums their partial products).
        splits: u32,
        pad0: u32,
        pad1: u32,
    }
}

impl MatParams {
    /// Segments `segs` (byte offset, rows) of `cols` columns, written from output column
    /// `out_col0`, token rows `out_stride` apart; not split.
    pub(crate) fn new(segs: &[(u64, usize)], cols: usize, out_stride: usize, out_col0: usize) -> MatParams {
        let mut p = MatParams {
            cols: cols as u32,
            out_stride: out_stride as u32,
            out_col0: out_col0 as u32,
            n_segs: segs.len() as u32,
            k_len: cols as u32,
            splits: 1,
            ..MatParams::default()
        };
        let mut total = 0;
        for (i, &(offset, rows)) in segs.iter().enumerate() {
            p.seg_off[i] = offset as u32;
            total += rows;
            p.seg_end[i] = total as u32;
        }
        p
    }

    /// The same, its columns split into `splits` runs of `k_len`.
    pub(crate) fn split(self, k_len: usize, splits: usize) -> MatParams {
        MatParams { k_len: k_len as u32, splits: splits as u32, ..self }
    }
}

/// Decode: one input vector times the segments' rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Matvec {
    pub ty: GgmlType,
    pub input: Input,
    pub mode: OutMode,
    pub bias: bool,
    /// Output rows per workgroup (`matvec_rows`).
    pub rows: u32,
    /// Row length: the kernel's loops have constant trip counts.
    pub cols: u32,
}

/// Prefill: every token row times the segments' rows, in `Tiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Matmul {
    pub ty: GgmlType,
    pub mode: OutMode,
    pub bias: bool,
    pub tiles: Tiles,
}

/// How a prefill matmul multiplies its tiles, and their shape (`Tiles::shape`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Tiles {
    /// In f32 (`matmul.wgsl`), 64 rows x 64 tokens.
    F32,
    /// On cooperative matrices in f16 (`matmul_coop.wgsl`; the device's `Gpu::coop`), 128 rows x 64
    /// tokens.
    Coop,
    /// The same, 64 rows x 128 tokens: each weight tile read for twice the tokens, each token tile
    /// for half the rows. On an H100-class GPU faster for batches of 512 tokens, slower for 128
    /// (benches/README.md).
    CoopWide,
}

impl Tiles {
    /// The tiles of a device with cooperative matrices or not (`coop`) for a session of `n_batch`
    /// tokens a call.
    pub(crate) fn choose(coop: bool, n_batch: usize) -> Tiles {
        match (coop, n_batch >= 512) {
            (false, _) => Tiles::F32,
            (true, false) => Tiles::Coop,
            (true, true) => Tiles::CoopWide,
        }
    }

    /// Weight rows by token rows per workgroup (the kernel's `TM`, `TN`).
    pub(crate) fn shape(self) -> (u32, u32) {
        match self {
            Tiles::F32 => (64, 64),
            Tiles::Coop => (128, 64),
            Tiles::CoopWide => (64, 128),
        }
    }
}

/// The sum of a split matmul's partial products, stored or added (`mode`) with the bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SplitReduce {
    pub mode: OutMode,
    pub bias: bool,
}

/// Output rows per workgroup of a matvec of `rows` rows of `ty` (matvec_shared.wgsl `ROWS`; a team
/// of 256 / ROWS invocations per row). Four, so that each invocation walks a short part of a row;
/// eight for the types of `matvec_q8.wgsl`, whose lanes take 64 columns at a time (a 2048-column
/// pass then has one unit per lane); 16 for very tall matrices (the output layer), whose many
/// workgroups would cost more than the shorter walk gains, and whose best rows argmax then scans
/// are 16 times fewer. Each beat its neighbours on an H100 (benches/README.md, "Figures behind
/// design choices"). Never fewer than `matvec_rows(rows, GgmlType::F32)`, which sizes buffers of
/// best rows.
pub(crate) fn matvec_rows(rows: usize, ty: GgmlType) -> u32 {
    if rows >= 8192 {
        16
    } else if int8_input(ty) {
        8
    } else {
        4
    }
}

/// The weight types whose decode matvec quantizes its input to int8 (`matvec_q8.wgsl` and the
/// type's `quant/*_q8.wgsl`): the K-quants of Q4_K_M and Q5_K_M files, where it takes about three
/// quarters of the time of unpacking each quant to a float.
pub(crate) fn int8_input(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// Most input columns a matvec stages in workgroup memory per pass (matvec.wgsl `SPAN`; 8 KiB).
const MATVEC_MAX_SPAN: u32 = 2048;
/// The same for `matvec_q8.wgsl`, a byte per column.
const MATVEC_MAX_SPAN_Q8: u32 = 8192;

/// Columns a matmul workgroup takes per step (matmul.wgsl and matmul_coop.wgsl `TK`): column
/// splits are multiples of it.
pub(crate) const MATMUL_TK: usize = 32;
/// Most column splits of a prefill matmul (see `split_count`).
pub(crate) const MAX_SPLITS: usize = 4;

/// The slots of a matrix kernel: `aux` the bias or best rows, `norm` the norm weight.
fn bindings(aux: bool, norm: bool) -> &'static [Slot] {
    use Slot::*;
    match (aux, norm) {
        (false, false) => &[Weights, Params, Call, Out, In0],
        (true, false) => &[Weights, Params, Call, Out, Aux, In0],
        (false, true) => &[Weights, Params, Call, Out, In0, In1],
        (true, true) => &[Weights, Params, Call, Out, Aux, In0, In1],
    }
}

impl Matvec {
    /// Weights, parameters, call parameters, output, the bias or (`OutMode::Argmax`) the best rows, the input
    /// (rows or partials), the norm weight of `Input::Norm` or the gate of `Input::AttnGated`.
    pub(crate) fn bindings(self) -> &'static [Slot] {
        bindings(self.bias || self.mode == OutMode::Argmax, matches!(self.input, Input::Norm | Input::AttnGated))
    }

    pub(crate) fn source(self, m: &mut Module) {
        let Matvec { ty, input, mode, bias, rows, cols } = self;
        debug_assert!(!(bias && mode == OutMode::Argmax), "BIND_AUX is the bias or the best rows");
        debug_assert!(cols % 8 == 0 && 256 % rows == 0);
        // A pass: at most 8 KiB of staged input (half of it beside the attention merge's partials)
        // and, in matvec.wgsl, at most 4 rounds of 8-column groups per lane. The int8 kernel stages
        // a byte per column, in passes of whole blocks of 256 (the maxima are multiples).
        let attn = matches!(input, Input::Attn | Input::AttnGated);
        let q8 = int8_input(ty);
        m.constant("OUT_MODE", mode as u32);
        m.constant("ROWS", rows);
        m.constant("COLS", cols);
        if q8 {
            debug_assert!(cols % 256 == 0);
            let span = cols.min(if attn { MATVEC_MAX_SPAN_Q8 / 2 } else { MATVEC_MAX_SPAN_Q8 });
            m.constant("SPAN", span);
            m.constant("QLOADS", (span / 32).div_ceil(256));
        } else {
            let max_span = if attn { MATVEC_MAX_SPAN / 2 } else { MATVEC_MAX_SPAN };
            let span = cols.min(max_span).min(4 * 8 * (256 / rows));
            m.constant("SPAN", span);
            m.constant("ROUNDS", span.div_ceil(8 * (256 / rows)));
            m.constant("LOADS", (span / 4).div_ceil(256));
        }
        m.uniform::<MatParams>();
        m.weights(ty);
        if q8 {
            if ty == GgmlType::Q6_K {
                m.piece(wgsl!("quant/q6_k_q8.wgsl"));
            } else {
                m.flag("FIFTH_BIT", ty == GgmlType::Q5_K);
                m.piece(wgsl!("quant/k4_q8.wgsl"));
            }
        }
        m.piece(MAT_COMMON);
        m.piece(if bias { BIAS } else { NO_BIAS });
        m.reduce();
        m.piece(if mode == OutMode::Argmax { wgsl!("best_out.wgsl") } else { wgsl!("no_best.wgsl") });
        m.piece(if mode == OutMode::Geglu { Act::Gelu } else { Act::Silu }.source());
        match input {
            Input::Norm => m.piece(wgsl!("in_norm.wgsl")),
            Input::Plain => m.piece(wgsl!("in_plain.wgsl")),
            Input::Attn | Input::AttnGated => {
                m.piece(PARTIALS);
                m.piece(if input == Input::Attn { wgsl!("attn_ungated.wgsl") } else { wgsl!("attn_gated.wgsl") });
                m.piece(wgsl!("in_attn.wgsl"));
            }
        }
        m.piece(wgsl!("matvec_shared.wgsl"));
        m.piece(if q8 { wgsl!("matvec_q8.wgsl") } else { wgsl!("matvec.wgsl") });
    }

    /// Workgroups of `per_wg` rows over `rows` rows, folded into two dimensions past 65535.
    pub(crate) fn grid(rows: usize, per_wg: u32) -> Grid {
        let wgs = rows.div_ceil(per_wg as usize) as u32;
        Grid::fixed(wgs.min(65535), wgs.div_ceil(65535), 1)
    }
}

impl Matmul {
    /// Weights, parameters, call parameters, output (or partials), bias, the input rows.
    pub(crate) fn bindings(self) -> &'static [Slot] {
        bindings(self.bias, false)
    }

    pub(crate) fn source(self, m: &mut Module) {
        let coop = self.tiles != Tiles::F32;
        if coop {
            m.enable("f16");
            m.enable("wgpu_cooperative_matrix");
            let (tm, tn) = self.tiles.shape();
            m.constant("TM", tm);
            m.constant("TN", tn);
        }
        m.constant("OUT_MODE", self.mode as u32);
        m.uniform::<MatParams>();
        m.weights(self.ty);
        m.piece(MAT_COMMON);
        m.piece(if self.bias { BIAS } else { NO_BIAS });
        m.piece(wgsl!("matmul_shared.wgsl"));
        m.piece(if coop { wgsl!("matmul_coop.wgsl") } else { wgsl!("matmul.wgsl") });
    }

    /// Tiles over `rows` rows by the call's tokens, by column splits.
    pub(crate) fn grid(self, rows: usize, splits: u32) -> Grid {
        let (tm, tn) = self.tiles.shape();
        Grid([Count::Fixed((rows as u32).div_ceil(tm)), Count::Tokens { per: tn }, Count::Fixed(splits)])
    }
}

impl SplitReduce {
    /// Parameters, call parameters, output, bias, the partials.
    pub(crate) fn bindings(self) -> &'static [Slot] {
        if self.bias {
            &[Slot::Params, Slot::Call, Slot::Out, Slot::Aux, Slot::In0]
        } else {
            &[Slot::Params, Slot::Call, Slot::Out, Slot::In0]
        }
    }

    pub(crate) fn source(self, m: &mut Module) {
        m.constant("OUT_MODE", self.mode as u32);
        m.uniform::<MatParams>();
        m.piece(MAT_COMMON);
        m.piece(if self.bias { BIAS } else { NO_BIAS });
        m.piece(wgsl!("split_reduce.wgsl"));
    }

    /// One invocation per output value, workgroups of 256, by tokens.
    pub(crate) fn grid(rows: usize) -> Grid {
        Grid::per_token((rows as u32).div_ceil(256))
    }
}

/// Where a matrix op reads its input.
pub(crate) enum MatIn<'a> {
    /// matvec, RMSNorm of the last row of `x` with this norm weight.
    Norm(&'a wgpu::Buffer, &'a wgpu::Buffer),
    /// matvec, the last row of a buffer.
    Plain(&'a wgpu::Buffer),
    /// matvec, decode attention's partials.
    Attn(&'a wgpu::Buffer),
    /// matvec, decode attention's partials, each merged value times the sigmoid of its gate in the second buffer.
    AttnGated(&'a wgpu::Buffer, &'a wgpu::Buffer),
    /// matmul over every token row of a buffer.
    Rows(&'a wgpu::Buffer),
}

/// Where and how a matrix op writes: `stride` floats between token rows, `mode`, optional bias;
/// under `OutMode::Argmax`, the buffer for each workgroup's best row.
pub(crate) struct MatOut<'b> {
    pub buf: &'b wgpu::Buffer,
    pub stride: usize,
    pub mode: OutMode,
    pub bias: Option<&'b wgpu::Buffer>,
    pub best: Option<&'b wgpu::Buffer>,
}

pub(crate) fn to<'b>(
    buf: &'b wgpu::Buffer,
    stride: usize,
    mode: OutMode,
    bias: Option<&'b wgpu::Buffer>,
) -> MatOut<'b> {
    MatOut { buf, stride, mode, bias, best: None }
}

/// The buffer of split matmuls' partial products, and the most tokens a call has.
pub(crate) struct Splits<'a> {
    pub buf: &'a wgpu::Buffer,
    pub n_batch: usize,
}

/// Matrix ops computing `mats` (each with its first output column) from `input` into `out`: one
/// per group of segments, each matmul followed by its reduce when split.
pub(crate) async fn ops(
    b: &mut OpBuilder<'_>,
    label: &'static str,
    mats: &[(&MatLoc, usize)],
    input: MatIn<'_>,
    out: MatOut<'_>,
    splits_buf: &Splits<'_>,
) -> Result<Vec<Op>> {
    let MatOut { buf: out, stride: out_stride, mode, bias, best } = out;
    debug_assert_eq!(best.is_some(), mode == OutMode::Argmax);
    let mut ops = Vec::new();
    let rows: usize = mats.iter().flat_map(|(m, _)| &m.chunks).map(|c| c.rows).sum();
    let tiles = Tiles::choose(b.m.gpu.coop, splits_buf.n_batch);
    for g in groups(mats) {
        let splits = match input {
            MatIn::Rows(_) => {
                let tm = tiles.shape().0 as usize;
                split_count(rows, tm, g.rows, g.cols, splits_buf.n_batch, splits_buf.buf.size())
            }
            _ => 1,
        };
        let k_len = g.cols.div_ceil(MATMUL_TK).div_ceil(splits) * MATMUL_TK;
        let params = MatParams::new(&g.segs, g.cols, out_stride, g.col0).split(k_len, splits);
        let (kernel, grid, with_bias) = match input {
            MatIn::Rows(_) => {
                let mode = if splits > 1 { OutMode::Partial } else { mode };
                let bias = bias.is_some() && splits == 1;
                let kernel = Matmul { ty: g.ty, mode, bias, tiles };
                (Kernel::Matmul(kernel), kernel.grid(g.rows, splits as u32), bias)
            }
            MatIn::Norm(..) | MatIn::Plain(_) | MatIn::Attn(_) | MatIn::AttnGated(..) => {
                let input = match input {
                    MatIn::Norm(..) => Input::Norm,
                    MatIn::Plain(_) => Input::Plain,
                    MatIn::AttnGated(..) => Input::AttnGated,
                    _ => Input::Attn,
                };
                let rows = matvec_rows(g.rows, g.ty);
                let kernel = Matvec { ty: g.ty, input, mode, bias: bias.is_some(), rows, cols: g.cols as u32 };
                (Kernel::Matvec(kernel), Matvec::grid(g.rows, rows), bias.is_some())
            }
        };
        let mut entries = vec![
            (Slot::Weights, b.m.arenas[g.arena].as_entire_binding()),
            (Slot::Params, b.params(&params)),
            (Slot::Call, b.call.as_entire_binding()),
            (Slot::Out, if splits > 1 { splits_buf.buf } else { out }.as_entire_binding()),
        ];
        match (with_bias, best) {
            (true, _) => entries.push((Slot::Aux, bias.expect("a bias").as_entire_binding())),
            (false, Some(best)) => entries.push((Slot::Aux, best.as_entire_binding())),
            (false, None) => {}
        }
        match input {
            MatIn::Norm(x, w) | MatIn::AttnGated(x, w) => {
                entries.extend([(Slot::In0, x.as_entire_binding()), (Slot::In1, w.as_entire_binding())])
            }
            MatIn::Plain(x) | MatIn::Rows(x) | MatIn::Attn(x) => entries.push((Slot::In0, x.as_entire_binding())),
        }
        ops.push(b.op(label, kernel, grid, entries).await?);
        if splits > 1 {
            let mut entries = vec![
                (Slot::Params, b.params(&params)),
                (Slot::Call, b.call.as_entire_binding()),
                (Slot::Out, out.as_entire_binding()),
            ];
            if let Some(bias) = bias {
                entries.push((Slot::Aux, bias.as_entire_binding()));
            }
            entries.push((Slot::In0, splits_buf.buf.as_entire_binding()));
            let kernel = Kernel::SplitReduce(SplitReduce { mode, bias: bias.is_some() });
            ops.push(b.op("split_reduce", kernel, SplitReduce::grid(g.rows), entries).await?);
        }
    }
    Ok(ops)
}

/// The decode feed-forward's gate and up matvecs in one dispatch, their rows paired, storing
/// `silu(gate) * up` (`OutMode::Swiglu`) or, for Gemma, `gelu(gate) * up` (`OutMode::Geglu`) into `h`.
/// Both matrices must be one chunk each, of one type, in one arena.
pub(crate) async fn gate_up_glu(
    b: &mut OpBuilder<'_>,
    gate: &MatLoc,
    up: &MatLoc,
    x: &wgpu::Buffer,
    norm: &wgpu::Buffer,
    h: &wgpu::Buffer,
) -> Result<Op> {
    let (g, u) = (&gate.chunks[0], &up.chunks[0]);
    debug_assert!(gate.ty == up.ty && gate.chunks.len() == 1 && up.chunks.len() == 1 && g.arena == u.arena);
    let ff = g.rows;
    let params = MatParams::new(&[(g.offset, ff), (u.offset, ff)], gate.cols, ff, 0);
    let entries = vec![
        (Slot::Weights, b.m.arenas[g.arena].as_entire_binding()),
        (Slot::Params, b.params(&params)),
        (Slot::Call, b.call.as_entire_binding()),
        (Slot::Out, h.as_entire_binding()),
        (Slot::In0, x.as_entire_binding()),
        (Slot::In1, norm.as_entire_binding()),
    ];
    let rows = matvec_rows(ff, gate.ty);
    let mode = match Act::of(&b.m.model.config) {
        Act::Silu => OutMode::Swiglu,
        Act::Gelu => OutMode::Geglu,
    };
    let (input, cols) = (Input::Norm, gate.cols as u32);
    let kernel = Kernel::Matvec(Matvec { ty: gate.ty, input, mode, bias: false, rows, cols });
    b.op("matvec_gate_up_glu", kernel, Matvec::grid(ff, rows), entries).await
}

/// Drop the reduce of a single split matmul (`ops` = [matmul, split_reduce]) whose partials the
/// next op sums itself; its split count. (A matrix over several buffers keeps its reduces.)
pub(crate) fn take_reduce(ops: &mut Vec<Op>) -> Option<u32> {
    match ops.as_slice() {
        [Op { kernel: Kernel::Matmul(_), grid: Grid([_, _, Count::Fixed(splits)]), .. }, Op { kernel: Kernel::SplitReduce(_), .. }] =>
        {
            let splits = *splits;
            ops.pop();
            Some(splits)
        }
        _ => None,
    }
}

/// Consecutive matrix rows that one matrix dispatch covers: up to 4 segments of one weight type in
/// one arena, whose outputs are adjacent columns.
struct Group {
    ty: GgmlType,
    arena: usize,
    cols: usize,
    col0: usize,
    rows: usize,
    segs: Vec<(u64, usize)>,
}

/// Split `(matrix, first output column)` pairs into dispatchable groups.
fn groups(mats: &[(&MatLoc, usize)]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for &(m, col0) in mats {
        for ch in &m.chunks {
            let col = col0 + ch.row0;
            match out.last_mut() {
                Some(g)
                    if g.ty == m.ty
                        && g.arena == ch.arena
                        && g.cols == m.cols
                        && g.segs.len() < 4
                        && g.col0 + g.rows == col =>
                {
                    g.segs.push((ch.offset, ch.rows));
                    g.rows += ch.rows;
                }
                _ => out.push(Group {
                    ty: m.ty,
                    arena: ch.arena,
                    cols: m.cols,
                    col0: col,
                    rows: ch.rows,
                    segs: vec![(ch.offset, ch.rows)],
                }),
            }
        }
    }
    out
}

/// Column splits for a prefill matmul of `rows` x `cols` (all the rows of the op's matrices, so that
/// a matrix split over several buffers sums in the same order) in tiles of `tm` rows: a short prompt
/// has few tiles, and each walks all the columns serially, so the columns are split until there are
/// about 128 workgroups at a 128-token batch (two token tiles), keeping at least 4 column slices per
/// split and the partials of a dispatch's `group_rows` within `capacity` bytes for `n_batch` tokens.
fn split_count(rows: usize, tm: usize, group_rows: usize, cols: usize, n_batch: usize, capacity: u64) -> usize {
    let slices = cols.div_ceil(MATMUL_TK);
    let mut s = 64usize.div_ceil(rows.div_ceil(tm)).min(slices / 4).clamp(1, MAX_SPLITS);
    while s > 1 && (s * n_batch * group_rows * 4) as u64 > capacity {
        s -= 1;
    }
    s
}
