//! The weights' way onto the GPU: arenas planned from the weights' layout (`Weights::layout` needs only the
//! file's header), then filled from the file's bytes as they go past, in order, once.
//!
//! A model loaded whole feeds its file's pieces through this; `GpuModelStream` feeds a download or a file as it is
//! read, keeping none of the matrices in memory: what goes up never needs the file in one place. Each placed run
//! of rows is written where its bytes pass (WebGPU writes whole 4-byte words: a run's last few bytes wait for the
//! next chunk, and its end is padded with zeros, as the arenas are). A matrix laid out here rather than read in
//! place (Qwen3.5's queries and gates, the experts' down matrices side by side: [`Made`]) is gathered whole, then
//! laid out and written.

use std::ops::Range;

use super::device::Gpu;
use super::gpu_error;
use super::model::{Chunk, MatLoc};
use crate::error::{Error, GpuFault, Result};
use crate::model::config::Config;
use crate::model::weights::{MatrixRef, Weights};
use crate::quant::GgmlType;

/// Bytes written between submissions: wgpu stages each write until the next submission, so a large upload
/// submits as it goes, keeping at most this much staged.
const SUBMIT_EVERY: u64 = 64 << 20;

/// A matrix laid out here from a matrix of the file (`src`), rather than read in place.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Made {
    pub src: MatrixRef,
    pub kind: MadeKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum MadeKind {
    /// The rows of `src` in runs of `run`, every other run from the first (`second`: from the second): Qwen3.5's
    /// `attn_q`, per head its queries, then its gate.
    AlternateRuns { run: usize, second: bool },
    /// `src` holds `count` experts' down matrices ([count·d_model × ffn_dim], each expert's d_model rows in turn);
    /// made: side by side, [d_model × count·ffn_dim], row i each expert's row i, one after another. Each expert's
    /// row is whole quantization blocks (a row of a GGUF tensor), so the joined row is a row of the same type.
    SideBySide { count: usize },
}

impl Made {
    fn ty(&self) -> GgmlType {
        self.src.ty
    }

    /// Rows, columns and bytes per row of the made matrix.
    fn shape(&self) -> (usize, usize, usize) {
        let (s, rb) = (&self.src, self.src.row_bytes());
        match self.kind {
            MadeKind::AlternateRuns { .. } => (s.rows / 2, s.cols, rb),
            MadeKind::SideBySide { count } => (s.rows / count, count * s.cols, count * rb),
        }
    }

    /// The made matrix's bytes, from `src`'s.
    fn lay_out(&self, src: &[u8]) -> Vec<u8> {
        let rb = self.src.row_bytes();
        match self.kind {
            MadeKind::AlternateRuns { run, second } => {
                src.chunks(run * rb).skip(second as usize).step_by(2).flatten().copied().collect()
            }
            MadeKind::SideBySide { count } => {
                let d = self.src.rows / count;
                let mut bytes = Vec::with_capacity(src.len());
                for i in 0..d {
                    for e in 0..count {
                        bytes.extend_from_slice(&src[(e * d + i) * rb..][..rb]);
                    }
                }
                bytes
            }
        }
    }
}

/// Where a placed run of rows comes from.
#[derive(Clone, Copy)]
enum Source {
    File(MatrixRef),
    /// `Plan::made[i]`.
    Made(usize),
}

/// The packing of matrices into arenas of at most `max` bytes (each run of rows 4-byte aligned).
pub(crate) struct Plan {
    max: u64,
    sizes: Vec<u64>,
    placed: Vec<(Source, Chunk)>,
    made: Vec<Made>,
}

impl Plan {
    pub fn new(max: u64) -> Plan {
        Plan { max, sizes: Vec::new(), placed: Vec::new(), made: Vec::new() }
    }

    /// Place `m` as the file has it.
    pub fn place(&mut self, m: &MatrixRef) -> Result<MatLoc> {
        self.place_rows(Source::File(*m), m.ty, m.rows, m.cols, m.row_bytes())
    }

    /// Place a matrix laid out from one of the file's.
    pub fn place_made(&mut self, m: Made) -> Result<MatLoc> {
        let (rows, cols, rb) = m.shape();
        debug_assert_eq!(m.ty().row_bytes(cols), rb);
        self.made.push(m);
        self.place_rows(Source::Made(self.made.len() - 1), m.ty(), rows, cols, rb)
    }

    fn place_rows(&mut self, source: Source, ty: GgmlType, n_rows: usize, cols: usize, rb: usize) -> Result<MatLoc> {
        let rb = rb as u64;
        if rb > self.max {
            return Err(gpu_error(
                GpuFault::Limits,
                format!("a weight row of {rb} bytes does not fit in one storage binding of {} bytes", self.max),
            ));
        }
        let rows_per_arena = (self.max / rb) as usize;
        let mut chunks = Vec::new();
        let mut row0 = 0;
        while row0 < n_rows {
            let rows = (n_rows - row0).min(rows_per_arena);
            let bytes = rows as u64 * rb;
            let fits = self.sizes.last().is_some_and(|&used| used + bytes <= self.max);
            if !fits {
                self.sizes.push(0);
            }
            let arena = self.sizes.len() - 1;
            let offset = self.sizes[arena];
            self.sizes[arena] = (offset + bytes).div_ceil(4) * 4;
            let chunk = Chunk { arena, offset, row0, rows };
            self.placed.push((source, chunk));
            chunks.push(chunk);
            row0 += rows;
        }
        Ok(MatLoc { ty, cols, chunks })
    }
}

/// A run of the file's bytes bound for `arena` at `offset`, written as it passes.
struct Run {
    file: Range<u64>,
    arena: usize,
    offset: u64,
    /// Bytes written so far (whole words), and the next few that wait for the rest of their word.
    written: usize,
    carry: Vec<u8>,
}

impl Run {
    /// Whether every byte of the run has arrived (the last few may still wait in `carry`).
    fn done(&self) -> bool {
        (self.written + self.carry.len()) as u64 == self.file.end - self.file.start
    }
}

/// A made matrix's source, gathered whole, then laid out and written (`done`).
struct Gather {
    made: Made,
    chunks: Vec<Chunk>,
    bytes: Vec<u8>,
    done: bool,
}

impl Gather {
    fn src(&self) -> Range<u64> {
        self.made.src.range()
    }
}

/// The arenas of a [`Plan`], filled from the file's bytes as they go past.
pub(crate) struct WeightUpload {
    gpu: Gpu,
    arenas: Vec<wgpu::Buffer>,
    /// Sorted by where they start in the file; those before `open` are done.
    runs: Vec<Run>,
    open: usize,
    gathers: Vec<Gather>,
    received: u64,
    unsubmitted: u64,
}

impl WeightUpload {
    /// Allocate `plan`'s arenas (empty) on `gpu`.
    pub async fn new(gpu: Gpu, plan: Plan) -> Result<WeightUpload> {
        let mut arenas = Vec::with_capacity(plan.sizes.len());
        for (a, &size) in plan.sizes.iter().enumerate() {
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
            arenas.push(gpu.buffer(&format!("weights {a}"), size, usage).await?);
        }
        let mut runs = Vec::new();
        let mut gathers: Vec<Gather> = (plan.made.iter())
            .map(|&made| Gather { made, chunks: Vec::new(), bytes: Vec::new(), done: made.src.rows == 0 })
            .collect();
        for (source, chunk) in plan.placed {
            match source {
                Source::File(m) => {
                    let rows = m.row_range(chunk.row0..chunk.row0 + chunk.rows);
                    let file = rows.range();
                    runs.push(Run { file, arena: chunk.arena, offset: chunk.offset, written: 0, carry: Vec::new() });
                }
                Source::Made(i) => gathers[i].chunks.push(chunk),
            }
        }
        runs.sort_by_key(|r| r.file.start);
        Ok(WeightUpload { gpu, arenas, runs, open: 0, gathers, received: 0, unsubmitted: 0 })
    }

    /// Write what the planned matrices take of the file's next `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Result<()> {
        let (start, end) = (self.received, self.received + chunk.len() as u64);
        // Bytes `s..e` of the file, within this chunk.
        let within = |s: u64, e: u64| &chunk[(s - start) as usize..(e - start) as usize];
        let mut i = self.open;
        while i < self.runs.len() && self.runs[i].file.start < end {
            let run = &mut self.runs[i];
            let (s, e) = (run.file.start.max(start), run.file.end.min(end));
            if s < e {
                let bytes = within(s, e);
                self.unsubmitted += bytes.len() as u64;
                write_run(&self.gpu.queue, &self.arenas[run.arena], run, bytes);
            }
            i += 1;
        }
        while self.open < self.runs.len() && self.runs[self.open].file.end <= end {
            self.open += 1;
        }
        for g in self.gathers.iter_mut().filter(|g| !g.done) {
            let src = g.src();
            let (s, e) = (src.start.max(start), src.end.min(end));
            if s >= e {
                continue;
            }
            let src_len = (src.end - src.start) as usize;
            if g.bytes.is_empty() {
                g.bytes
                    .try_reserve_exact(src_len)
                    .map_err(|_| Error::OutOfMemory { bytes: src_len, what: "a matrix laid out for the GPU".into() })?;
            }
            g.bytes.extend_from_slice(within(s, e));
            if g.bytes.len() == src_len {
                let made = g.made.lay_out(&std::mem::take(&mut g.bytes));
                let rb = g.made.shape().2;
                for c in &g.chunks {
                    let rows = &made[c.row0 * rb..(c.row0 + c.rows) * rb];
                    write_padded(&self.gpu.queue, &self.arenas[c.arena], c.offset, rows);
                }
                self.unsubmitted += made.len() as u64;
                g.done = true;
            }
        }
        self.received = end;
        if self.unsubmitted >= SUBMIT_EVERY {
            self.gpu.queue.submit(None);
            self.unsubmitted = 0;
        }
        Ok(())
    }

    /// Every run written: the arenas hold the weights. An error if the file ended before a matrix did.
    pub fn finish(self) -> Result<(Gpu, Vec<wgpu::Buffer>)> {
        let runs = self.runs[self.open..].iter().filter(|r| !r.done()).map(|r| r.file.start);
        let gathers = self.gathers.iter().filter(|g| !g.done).map(|g| g.src().start);
        if let Some(at) = runs.chain(gathers).min() {
            return Err(Error::Gguf(format!(
                "the file ended after {} bytes, before the weights at byte {at}",
                self.received
            )));
        }
        self.gpu.queue.submit(None);
        Ok((self.gpu, self.arenas))
    }
}

/// Write `bytes`, the next of `run`'s, into `arena`: whole words now, the rest with the next bytes (or padded with
/// zeros where the run ends).
fn write_run(queue: &wgpu::Queue, arena: &wgpu::Buffer, run: &mut Run, mut bytes: &[u8]) {
    if !run.carry.is_empty() {
        let n = (4 - run.carry.len()).min(bytes.len());
        run.carry.extend_from_slice(&bytes[..n]);
        bytes = &bytes[n..];
        if run.carry.len() == 4 {
            queue.write_buffer(arena, run.offset + run.written as u64, &run.carry);
            run.written += 4;
            run.carry.clear();
        }
    }
    let whole = bytes.len() / 4 * 4;
    if whole > 0 {
        queue.write_buffer(arena, run.offset + run.written as u64, &bytes[..whole]);
        run.written += whole;
    }
    run.carry.extend_from_slice(&bytes[whole..]);
    if run.done() && !run.carry.is_empty() {
        run.carry.resize(4, 0);
        queue.write_buffer(arena, run.offset + run.written as u64, &run.carry);
        run.written += run.carry.len();
        run.carry.clear();
    }
}

/// Write `bytes` into `buf` at `offset` (a multiple of 4), the last word padded with zeros.
pub(crate) fn write_padded(queue: &wgpu::Queue, buf: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
    let whole = bytes.len() / 4 * 4;
    if whole > 0 {
        queue.write_buffer(buf, offset, &bytes[..whole]);
    }
    if whole < bytes.len() {
        let mut tail = [0u8; 4];
        tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
        queue.write_buffer(buf, offset + whole as u64, &tail);
    }
}

/// The matrices of `w` placed in arenas of at most `max` bytes, in the order the forward pass reads them, so that
/// a layer's q/k/v (and gate/up) usually share an arena and one dispatch.
pub(crate) fn plan(w: &Weights, c: &Config, max: u64) -> Result<(Plan, Placed)> {
    let mut plan = Plan::new(max);
    let token_embd = plan.place(&w.token_embd)?;
    let per_layer = match &w.per_layer {
        Some(pl) => Some((plan.place(&pl.token_embd)?, plan.place(&pl.model_proj)?)),
        None => None,
    };
    let mut layers = Vec::with_capacity(w.layers.len());
    for lw in &w.layers {
        // Qwen3.5's query rows, per head the queries then the gate: placed as two matrices.
        let (wq, attn_gate) = match c.attention_output_gate() && lw.delta_net.is_none() {
            true => {
                let runs = |second| Made { src: lw.wq, kind: MadeKind::AlternateRuns { run: c.head_dim, second } };
                (plan.place_made(runs(false))?, Some(plan.place_made(runs(true))?))
            }
            false => (plan.place(&lw.wq)?, None),
        };
        let wk = plan.place(&lw.wk)?;
        // Gemma 4's layer without `attn_v` takes its keys' projection for the values: one matrix on the GPU too.
        let wv =
            if (lw.wv.offset, lw.wv.rows) == (lw.wk.offset, lw.wk.rows) { wk.clone() } else { plan.place(&lw.wv)? };
        let wo = plan.place(&lw.wo)?;
        let (w_gate, w_up) = (plan.place(&lw.w_gate)?, plan.place(&lw.w_up)?);
        let w_down = match c.experts {
            Some(e) => plan.place_made(Made { src: lw.w_down, kind: MadeKind::SideBySide { count: e.count } })?,
            None => plan.place(&lw.w_down)?,
        };
        let router = lw.router.as_ref().map(|r| plan.place(r)).transpose()?;
        let delta = match &lw.delta_net {
            Some(dn) => Some((
                [plan.place(&dn.qkv)?, plan.place(&dn.gate)?, plan.place(&dn.alpha)?, plan.place(&dn.beta)?],
                plan.place(&dn.out)?,
            )),
            None => None,
        };
        let per_layer = match &lw.per_layer {
            Some(pl) => Some((plan.place(&pl.inp_gate)?, plan.place(&pl.proj)?)),
            None => None,
        };
        layers.push(PlacedLayer { wq, wk, wv, wo, w_gate, w_up, w_down, router, attn_gate, delta, per_layer });
    }
    let tied = w.output.offset == w.token_embd.offset;
    let output = if tied { token_embd.clone() } else { plan.place(&w.output)? };
    Ok((plan, Placed { token_embd, per_layer, output, layers }))
}

/// Where [`plan`] put each matrix.
pub(crate) struct Placed {
    pub token_embd: MatLoc,
    /// Gemma 4's per-layer embedding and the projection of the token embeddings beside it.
    pub per_layer: Option<(MatLoc, MatLoc)>,
    pub output: MatLoc,
    pub layers: Vec<PlacedLayer>,
}

pub(crate) struct PlacedLayer {
    pub wq: MatLoc,
    pub wk: MatLoc,
    pub wv: MatLoc,
    pub wo: MatLoc,
    pub w_gate: MatLoc,
    pub w_up: MatLoc,
    pub w_down: MatLoc,
    pub router: Option<MatLoc>,
    pub attn_gate: Option<MatLoc>,
    /// A delta-net layer's four projections and output.
    pub delta: Option<([MatLoc; 4], MatLoc)>,
    /// Gemma 4's per-layer input gate and projection.
    pub per_layer: Option<(MatLoc, MatLoc)>,
}
