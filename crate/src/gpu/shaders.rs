//! WGSL sources (the files in `wgsl/`) and how a kernel variant's module is put together:
//! a generated header with the model's shape and the variant's constants, then the shared
//! declarations, then the pieces the kernel uses, then the kernel itself.

use crate::model::config::Config;
use crate::quant::GgmlType;

macro_rules! wgsl {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../wgsl/", $name))
    };
}

const COMMON: &str = wgsl!("common.wgsl");
const WEIGHTS: &str = wgsl!("weights.wgsl");
const K_SCALES: &str = wgsl!("quant/k_scales.wgsl");
const MAT_COMMON: &str = wgsl!("mat_common.wgsl");
const BIAS: &str = wgsl!("bias.wgsl");
const NO_BIAS: &str = wgsl!("no_bias.wgsl");
const BEST_OUT: &str = wgsl!("best_out.wgsl");
const NO_BEST: &str = wgsl!("no_best.wgsl");
const IN_NORM: &str = wgsl!("in_norm.wgsl");
const IN_PLAIN: &str = wgsl!("in_plain.wgsl");
const IN_ATTN: &str = wgsl!("in_attn.wgsl");
const MATVEC: &str = wgsl!("matvec.wgsl");
const MATMUL: &str = wgsl!("matmul.wgsl");
const SPLIT_REDUCE: &str = wgsl!("split_reduce.wgsl");
const EMBED: &str = wgsl!("embed.wgsl");
const ROPE: &str = wgsl!("rope.wgsl");
const ROPE_STORE: &str = wgsl!("rope_store.wgsl");
const ATTN_DECODE: &str = wgsl!("attn_decode.wgsl");
const ATTN_PREFILL: &str = wgsl!("attn_prefill.wgsl");
const ROW_RMS: &str = wgsl!("row_rms.wgsl");
const RMSNORM: &str = wgsl!("rmsnorm.wgsl");
const ADD_RMSNORM: &str = wgsl!("add_rmsnorm.wgsl");
const SWIGLU: &str = wgsl!("swiglu.wgsl");
const ARGMAX: &str = wgsl!("argmax.wgsl");
const REDUCE_SUBGROUP: &str = wgsl!("reduce_subgroup.wgsl");
const REDUCE_SHARED: &str = wgsl!("reduce_shared.wgsl");

/// The `dequant8` of a weight type, or `None` when the GPU kernels do not read it.
pub(crate) fn dequant_source(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F32 => wgsl!("quant/f32.wgsl"),
        GgmlType::F16 => wgsl!("quant/f16.wgsl"),
        GgmlType::BF16 => wgsl!("quant/bf16.wgsl"),
        GgmlType::Q4_0 => wgsl!("quant/q4_0.wgsl"),
        GgmlType::Q4_1 => wgsl!("quant/q4_1.wgsl"),
        GgmlType::Q5_0 => wgsl!("quant/q5_0.wgsl"),
        GgmlType::Q5_1 => wgsl!("quant/q5_1.wgsl"),
        GgmlType::Q8_0 => wgsl!("quant/q8_0.wgsl"),
        GgmlType::Q4_K => wgsl!("quant/q4_k.wgsl"),
        GgmlType::Q5_K => wgsl!("quant/q5_k.wgsl"),
        GgmlType::Q6_K => wgsl!("quant/q6_k.wgsl"),
        GgmlType::Q2_K | GgmlType::Q3_K => return None,
    })
}

/// What a matrix kernel does with its results.
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
    /// only: the output head in greedy decoding).
    Argmax = 4,
}

/// Where a matvec's input vector comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Input {
    /// RMSNorm of the last token's row, times a norm weight.
    Norm,
    /// The last token's row as is.
    Plain,
    /// The merge of decode attention's per-chunk partials.
    Attn,
}

/// One compiled pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Matvec {
        ty: GgmlType,
        input: Input,
        mode: OutMode,
        bias: bool,
        /// Output rows per workgroup (`matvec_rows`).
        rows: u32,
        /// Row length: the kernel's loops have constant trip counts.
        cols: u32,
    },
    Matmul {
        ty: GgmlType,
        mode: OutMode,
        bias: bool,
    },
    /// The sum of a split matmul's partial products, stored or added (`mode`) with the bias.
    SplitReduce {
        mode: OutMode,
        bias: bool,
    },
    Embed {
        ty: GgmlType,
    },
    /// RoPE and the KV store, from qkv rows or (`splits` > 1) a split qkv matmul's partials.
    RopeStore {
        splits: u32,
    },
    AttnDecode,
    AttnPrefill,
    RmsNorm,
    /// The residual add of a split matmul's `splits` partials, then RMSNorm.
    AddRmsNorm {
        splits: u32,
    },
    /// SwiGLU of gate/up rows, summing `splits` partial products of a split matmul (1: plain rows).
    Swiglu {
        splits: u32,
    },
    /// The argmax of a logits row (`per` 1) or of the best rows of an `OutMode::Argmax` matvec's
    /// workgroups (`per` = its rows per workgroup).
    Argmax {
        per: u32,
    },
}

/// Output rows per workgroup of a matvec of `rows` rows (matvec.wgsl `ROWS`; a team of 256 / ROWS
/// invocations per row). Four: each invocation walks a short part of a row (H100: 4 rows per
/// workgroup beat 8 and 2), except for very tall matrices (the output head: 16), whose many
/// workgroups cost more than the shorter walk gains (H100: 16 beat 8 and 4).
pub(crate) fn matvec_rows(rows: usize) -> u32 {
    if rows >= 8192 {
        16
    } else {
        4
    }
}

/// Most input columns a matvec stages in workgroup memory per pass (matvec.wgsl `SPAN`; 8 KiB).
const MATVEC_MAX_SPAN: u32 = 2048;

/// Prefill matmul tile: weight rows by token rows per workgroup (matmul.wgsl `TM`, `TN`).
pub(crate) const MATMUL_TILE: (u32, u32) = (64, 64);
/// Columns a matmul workgroup takes per step (matmul.wgsl `TK`): column splits are multiples of it.
pub(crate) const MATMUL_TK: usize = 32;

/// Prefill attention tile: `BQ` queries by `BK` keys, sized so that the query and key tiles fit in
/// the default 16 KiB of workgroup memory.
pub(crate) fn attn_tiles(head_dim: usize) -> (usize, usize) {
    let bk = 16;
    let bq = if head_dim <= 64 { 16 } else { 8 };
    (bq, bk)
}

/// Most key chunks per head in decode attention: the merge keeps each chunk's max, sum and weight
/// in workgroup memory (at most 6 KiB of it, beside a matvec's 4 KiB of input and 2 KiB of sums).
pub(crate) fn max_chunks(n_heads: usize) -> usize {
    (512 / n_heads).clamp(1, 16)
}

/// The model-shape constants every kernel of this model sees.
pub(crate) fn model_header(c: &Config) -> String {
    let (bq, bk) = attn_tiles(c.head_dim);
    let max_chunks = max_chunks(c.n_heads);
    format!(
        "const D_MODEL: u32 = {}u;\nconst N_HEADS: u32 = {}u;\nconst N_KV_HEADS: u32 = {}u;\n\
         const HEAD_DIM: u32 = {}u;\nconst Q_DIM: u32 = {}u;\nconst KV_DIM: u32 = {}u;\nconst FFN: u32 = {}u;\n\
         const VOCAB: u32 = {}u;\nconst ROPE_DIMS: u32 = {}u;\nconst NEOX: bool = {};\nconst EPS: f32 = {:e};\n\
         const BQ: u32 = {bq}u;\nconst BK: u32 = {bk}u;\nconst MAX_CHUNKS: u32 = {max_chunks}u;\n",
        c.d_model,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.q_dim(),
        c.kv_dim(),
        c.ffn_dim,
        c.vocab_size,
        c.rope_dims,
        c.rope_neox,
        c.rms_eps,
    )
}

/// Floats of decode attention's partials (in_attn.wgsl): an output row per head and chunk, then a
/// (max, sum) vec4 per head and chunk.
pub(crate) fn attn_partials_len(n_heads: usize, head_dim: usize) -> usize {
    n_heads * max_chunks(n_heads) * (head_dim + 4)
}

/// The whole WGSL module of `kernel` (entry point `main`), its reductions with subgroup
/// operations when `subgroups` (the device has them). `None` for a weight type without a GPU
/// `dequant8`.
pub(crate) fn source(kernel: Kernel, header: &str, subgroups: bool) -> Option<String> {
    let mut parts: Vec<&str> = vec![header, COMMON];
    let reduce = if subgroups { REDUCE_SUBGROUP } else { REDUCE_SHARED };
    let mode_line;
    let weights = |parts: &mut Vec<&str>, ty: GgmlType| -> Option<()> {
        parts.push(WEIGHTS);
        if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
            parts.push(K_SCALES);
        }
        parts.push(dequant_source(ty)?);
        Some(())
    };
    match kernel {
        Kernel::Matvec { ty, input, mode, bias, rows, cols } => {
            debug_assert!(!(bias && mode == OutMode::Argmax), "binding 4 is the bias or the best rows");
            debug_assert!(cols % 8 == 0 && 256 % rows == 0);
            // A pass: at most 4 rounds of 8-column groups per lane, and at most 8 KiB of input.
            let max_span = if input == Input::Attn { MATVEC_MAX_SPAN / 2 } else { MATVEC_MAX_SPAN };
            let span = cols.min(max_span).min(4 * 8 * (256 / rows));
            let rounds = span.div_ceil(8 * (256 / rows));
            let loads = (span / 4).div_ceil(256);
            mode_line = format!(
                "const OUT_MODE: u32 = {}u;\nconst ROWS: u32 = {rows}u;\nconst COLS: u32 = {cols}u;\n\
                 const SPAN: u32 = {span}u;\nconst ROUNDS: u32 = {rounds}u;\nconst LOADS: u32 = {loads}u;\n",
                mode as u32
            );
            parts.push(&mode_line);
            weights(&mut parts, ty)?;
            parts.extend([MAT_COMMON, if bias { BIAS } else { NO_BIAS }, reduce]);
            parts.push(if mode == OutMode::Argmax { BEST_OUT } else { NO_BEST });
            parts.push(match input {
                Input::Norm => IN_NORM,
                Input::Plain => IN_PLAIN,
                Input::Attn => IN_ATTN,
            });
            parts.push(MATVEC);
        }
        Kernel::Matmul { ty, mode, bias } => {
            mode_line = format!("const OUT_MODE: u32 = {}u;\n", mode as u32);
            parts.push(&mode_line);
            weights(&mut parts, ty)?;
            parts.extend([MAT_COMMON, if bias { BIAS } else { NO_BIAS }, MATMUL]);
        }
        Kernel::SplitReduce { mode, bias } => {
            mode_line = format!("const OUT_MODE: u32 = {}u;\n", mode as u32);
            parts.extend([mode_line.as_str(), MAT_COMMON, if bias { BIAS } else { NO_BIAS }, SPLIT_REDUCE]);
        }
        Kernel::Embed { ty } => {
            weights(&mut parts, ty)?;
            parts.push(EMBED);
        }
        Kernel::RopeStore { splits } => {
            mode_line = format!("const SPLITS: u32 = {splits}u;\n");
            parts.extend([mode_line.as_str(), ROPE, ROPE_STORE]);
        }
        Kernel::AttnDecode => parts.extend([ROPE, ATTN_DECODE]),
        Kernel::AttnPrefill => parts.push(ATTN_PREFILL),
        Kernel::RmsNorm => parts.extend([reduce, ROW_RMS, RMSNORM]),
        Kernel::AddRmsNorm { splits } => {
            mode_line = format!("const SPLITS: u32 = {splits}u;\n");
            parts.extend([mode_line.as_str(), reduce, ROW_RMS, ADD_RMSNORM]);
        }
        Kernel::Swiglu { splits } => {
            mode_line = format!("const SPLITS: u32 = {splits}u;\n");
            parts.extend([mode_line.as_str(), SWIGLU]);
        }
        Kernel::Argmax { per } => {
            mode_line = format!("const PER: u32 = {per}u;\n");
            parts.extend([mode_line.as_str(), ARGMAX]);
        }
    }
    Some(parts.join("\n"))
}

/// The bindings (group 0) each kernel's bind group provides, in the order the session passes them.
pub(crate) fn bindings(kernel: Kernel) -> &'static [u32] {
    match kernel {
        Kernel::Matvec { input: Input::Norm, bias: true, .. }
        | Kernel::Matvec { input: Input::Norm, mode: OutMode::Argmax, .. } => &[0, 1, 2, 3, 4, 5, 6],
        Kernel::Matvec { mode: OutMode::Argmax, .. } => &[0, 1, 2, 3, 4, 5],
        Kernel::Matvec { input: Input::Norm, bias: false, .. } => &[0, 1, 2, 3, 5, 6],
        Kernel::Matvec { bias: true, .. } | Kernel::Matmul { bias: true, .. } => &[0, 1, 2, 3, 4, 5],
        Kernel::Matvec { bias: false, .. } | Kernel::Matmul { bias: false, .. } => &[0, 1, 2, 3, 5],
        Kernel::SplitReduce { bias: true, .. } => &[1, 2, 3, 4, 5],
        Kernel::SplitReduce { bias: false, .. } => &[1, 2, 3, 5],
        Kernel::Embed { .. } => &[0, 1, 2, 3, 5],
        Kernel::RopeStore { .. } | Kernel::AttnDecode => &[2, 3, 4, 5, 6, 7],
        Kernel::AttnPrefill => &[2, 3, 5, 6, 7],
        Kernel::RmsNorm => &[3, 5, 6],
        Kernel::AddRmsNorm { .. } => &[2, 3, 4, 5, 6],
        Kernel::Swiglu { .. } => &[2, 3, 5],
        Kernel::Argmax { .. } => &[2, 3, 4, 5],
    }
}
