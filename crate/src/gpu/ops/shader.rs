//! How a kernel's WGSL module is put together: the model's generated header, `common.wgsl`, then
//! the pieces the op adds (its constants and parameter struct, shared pieces, the kernel). The
//! `.wgsl` files live in `wgsl/` at the repository root; each says at its top what it needs.

use super::mat::OutMode;
use super::params::{CallParams, Uniform};
use super::Slot;
use crate::model::config::Config;
use crate::quant::GgmlType;

/// The text of `wgsl/<name>`.
macro_rules! wgsl {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/gpu/wgsl/", $name))
    };
}
pub(crate) use wgsl;

const COMMON: &str = wgsl!("common.wgsl");
const WEIGHTS: &str = wgsl!("weights.wgsl");
const K_SCALES: &str = wgsl!("quant/k_scales.wgsl");
const IQ4_VALUES: &str = wgsl!("quant/iq4_values.wgsl");
const REDUCE_SUBGROUP: &str = wgsl!("reduce_subgroup.wgsl");
const REDUCE_SHARED: &str = wgsl!("reduce_shared.wgsl");

/// The `dequant8` of a weight type: every type the loader takes has one.
fn dequant_source(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::F32 => wgsl!("quant/f32.wgsl"),
        GgmlType::F16 => wgsl!("quant/f16.wgsl"),
        GgmlType::BF16 => wgsl!("quant/bf16.wgsl"),
        GgmlType::Q4_0 => wgsl!("quant/q4_0.wgsl"),
        GgmlType::Q4_1 => wgsl!("quant/q4_1.wgsl"),
        GgmlType::Q5_0 => wgsl!("quant/q5_0.wgsl"),
        GgmlType::Q5_1 => wgsl!("quant/q5_1.wgsl"),
        GgmlType::Q8_0 => wgsl!("quant/q8_0.wgsl"),
        GgmlType::Q2_K => wgsl!("quant/q2_k.wgsl"),
        GgmlType::Q3_K => wgsl!("quant/q3_k.wgsl"),
        GgmlType::Q4_K => wgsl!("quant/q4_k.wgsl"),
        GgmlType::Q5_K => wgsl!("quant/q5_k.wgsl"),
        GgmlType::Q6_K => wgsl!("quant/q6_k.wgsl"),
        GgmlType::IQ4_NL => wgsl!("quant/iq4_nl.wgsl"),
        GgmlType::IQ4_XS => wgsl!("quant/iq4_xs.wgsl"),
    }
}

/// The shape a layer's kernels are compiled for, the header's per-layer constants: every layer's is the model's
/// ([`Shape::model`]) but Gemma 4's, whose windowed and global layers differ in head size, KV heads, rotated
/// width and feed-forward width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    pub head_dim: usize,
    pub n_kv_heads: usize,
    /// The width of the feed-forward rows on the GPU: the feed-forward width, or every expert's together (the dense
    /// mixture).
    pub ffn: usize,
    pub rope_dims: usize,
}

impl Shape {
    /// The model's: the widest of its layers' (`Config`'s own fields), which size the session's buffers.
    pub(crate) fn model(c: &Config) -> Shape {
        Shape {
            head_dim: c.max_head_dim(),
            n_kv_heads: c.n_kv_heads,
            ffn: Shape::ffn_rows(c, c.ffn_dim),
            rope_dims: c.rope_dims,
        }
    }

    /// Layer `l`'s.
    pub(crate) fn layer(c: &Config, l: usize) -> Shape {
        let local = c.layer_shapes.as_ref().filter(|s| s.windowed[l]);
        Shape {
            head_dim: c.layer_head_dim(l),
            n_kv_heads: c.layer_n_kv_heads(l),
            ffn: Shape::ffn_rows(c, c.layer_ffn_dim(l)),
            rope_dims: local.map_or(c.rope_dims, |s| s.local_rope_dims),
        }
    }

    /// The feed-forward rows of a block `ffn_dim` wide (each expert's, in a mixture).
    fn ffn_rows(c: &Config, ffn_dim: usize) -> usize {
        ffn_dim * c.experts.map_or(1, |e| e.count)
    }

    pub(crate) fn q_dim(&self, c: &Config) -> usize {
        c.n_heads * self.head_dim
    }

    pub(crate) fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// The header of the model's kernels outside its layers ([`shape_header`] of [`Shape::model`]; the kernels' checks).
#[cfg(any(test, target_arch = "wasm32"))]
pub(crate) fn model_header(c: &Config) -> String {
    shape_header(c, &Shape::model(c))
}

/// The header every kernel of this model starts with: the model's constants (its width, vocabulary, norm epsilon,
/// Gemma 3's sliding window, 0 without, and its multipliers: the attention scores' and the residual branches',
/// `Config::scales`; `KV_ROW`, the width of a position's row in the KV cache, the widest layer's), the
/// layer `shape`'s (its heads, `Q_DIM` and `KV_DIM` of its qkv rows, `FFN`, and the op tiles that depend on them),
/// the binding slots (`BIND_*`), the matrix kernels' output modes (`OUT_*`) and the `CallParams` uniform's
/// declaration.
pub(crate) fn shape_header(c: &Config, shape: &Shape) -> String {
    let super::attn_prefill::Tile { bq, bk, team, ch, .. } = super::attn_prefill::Tile::of(shape.head_dim);
    let max_chunks = super::attn_decode::max_chunks(c.n_heads);
    let mut h = format!(
        "const D_MODEL: u32 = {}u;\nconst N_HEADS: u32 = {}u;\nconst N_KV_HEADS: u32 = {}u;\n\
         const HEAD_DIM: u32 = {}u;\nconst Q_DIM: u32 = {}u;\nconst KV_DIM: u32 = {}u;\nconst KV_ROW: u32 = {}u;\n\
         const FFN: u32 = {}u;\nconst VOCAB: u32 = {}u;\nconst ROPE_DIMS: u32 = {}u;\nconst NEOX: bool = {};\n\
         const EPS: f32 = {:e};\nconst WINDOW: u32 = {}u;\nconst ATTN_SCALE: f32 = {:e};\n\
         const RESIDUAL_SCALE: f32 = {:e};\n\
         const BQ: u32 = {bq}u;\nconst BK: u32 = {bk}u;\nconst Q_TEAM: u32 = {team}u;\nconst Q_CHUNKS: u32 = {ch}u;\nconst MAX_CHUNKS: u32 = {max_chunks}u;\n",
        c.d_model,
        c.n_heads,
        shape.n_kv_heads,
        shape.head_dim,
        shape.q_dim(c),
        shape.kv_dim(),
        c.kv_dim(),
        shape.ffn,
        c.vocab_size,
        shape.rope_dims,
        c.rope_neox,
        c.rms_eps,
        c.sliding_window,
        c.scales.attention,
        c.scales.residual,
    );
    for slot in Slot::ALL {
        h += &format!("const {}: u32 = {}u;\n", slot.wgsl_name(), slot as u32);
    }
    for mode in OutMode::ALL {
        h += &format!("const {}: u32 = {}u;\n", mode.wgsl_name(), mode as u32);
    }
    h + &CallParams::wgsl()
}

/// A kernel's WGSL module under construction.
pub(crate) struct Module {
    /// `enable` directives, which WGSL wants before any declaration.
    enables: String,
    text: String,
    subgroups: bool,
}

impl Module {
    /// The model's `header` and `common.wgsl`; the reductions with subgroup operations when
    /// `subgroups` (the device has them).
    pub(crate) fn new(header: &str, subgroups: bool) -> Module {
        let mut m = Module { enables: String::new(), text: String::with_capacity(64 * 1024), subgroups };
        m.piece(header);
        m.piece(COMMON);
        m
    }

    /// `enable extension;` at the top of the module.
    pub(crate) fn enable(&mut self, extension: &str) {
        self.enables.push_str(&format!("enable {extension};\n"));
    }

    /// A WGSL file (or any text) as it is.
    pub(crate) fn piece(&mut self, wgsl: &str) {
        self.text.push_str(wgsl);
        self.text.push('\n');
    }

    /// `const name: u32 = value;`: a constant of the kernel variant.
    pub(crate) fn constant(&mut self, name: &str, value: u32) {
        self.text.push_str(&format!("const {name}: u32 = {value}u;\n"));
    }

    /// `const name: bool = value;`: a switch of the kernel variant.
    pub(crate) fn flag(&mut self, name: &str, value: bool) {
        self.text.push_str(&format!("const {name}: bool = {value};\n"));
    }

    /// The WGSL declaration of a parameter struct.
    pub(crate) fn uniform<T: Uniform>(&mut self) {
        self.piece(&T::wgsl());
    }

    /// The weight readers and `dequant8` of `ty` (`weights.wgsl`, `quant/*.wgsl`, and the pieces they share).
    pub(crate) fn weights(&mut self, ty: GgmlType) {
        self.piece(WEIGHTS);
        if matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
            self.piece(K_SCALES);
        }
        if matches!(ty, GgmlType::IQ4_NL | GgmlType::IQ4_XS) {
            self.piece(IQ4_VALUES);
        }
        self.piece(dequant_source(ty));
    }

    /// `team_sum2`: `reduce_subgroup.wgsl` or `reduce_shared.wgsl`.
    pub(crate) fn reduce(&mut self) {
        self.piece(if self.subgroups { REDUCE_SUBGROUP } else { REDUCE_SHARED });
    }

    pub(crate) fn finish(self) -> String {
        self.enables + &self.text
    }
}
