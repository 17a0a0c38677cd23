//! Reading a LoRA adapter: llama.cpp's GGUF adapter format, checked against the model it is for.
//!
//! The file is llama.cpp's (`convert_lora_to_gguf.py`): `general.type = "adapter"`, `adapter.type = "lora"`,
//! `general.architecture` the model's, `adapter.lora.alpha`, and for each adapted weight `<name>.lora_a` (GGUF
//! dims `[n_in, rank]`: `rank` rows of the weight's input width) and `<name>.lora_b` (dims `[rank, n_out]`:
//! the weight's rows, each `rank` wide). The file may be hostile: `Gguf::parse` checks its layout, and every
//! pair is checked here against the model's weights before it is kept, so the forward pass trusts the shapes.

use std::collections::BTreeMap;
use std::ops::Range;

use sha2::{Digest, Sha256};

use super::lora::{Proj, Site};
use crate::error::{Error, Result};
use crate::gguf::bytes::ModelBytes;
use crate::gguf::id::ModelId;
use crate::gguf::TensorInfo;
use crate::model::config::Arch;
use crate::model::weights::MatrixRef;
use crate::model::Model;
use crate::quant::dequantize_row;

/// One adapted projection's matrices in f32, as the forward pass reads them (`super::AdapterSet::add_to`):
/// `a` is A, `rank` rows of `n_in`; `bt` is B transposed, `rank` rows of `n_out` (row `j` is column `j` of B).
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub rank: usize,
    pub a: Vec<f32>,
    pub bt: Vec<f32>,
}

/// A LoRA adapter checked against one model: its matrices converted to f32 (they are small: `rank` rows or
/// columns), B transposed, so that applying one is a few vector ops per token and needs no conversion.
pub struct LoraAdapter {
    alpha: f32,
    /// The model it was checked against: it runs on that model's sessions only.
    model: ModelId,
    /// SHA-256 of the file: what tells two adapters apart in an [`AdapterSet`](super::AdapterSet).
    digest: [u8; 32],
    name: Option<String>,
    /// Per layer, per [`Proj`]: the pair adapting that projection.
    layers: Vec<[Option<Pair>; Proj::ALL.len()]>,
    output: Option<Pair>,
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter").field("name", &self.name).field("alpha", &self.alpha).finish_non_exhaustive()
    }
}

impl LoraAdapter {
    /// Read the adapter file `bytes` for `model`: a GGUF that is not an adapter is `Error::Adapter`, as is one
    /// of another architecture, or one whose tensors do not name this model's weights or match their shapes;
    /// bytes that are not a readable GGUF (truncated ones) are `Error::Gguf`.
    pub fn from_bytes(model: &Model, bytes: Vec<u8>) -> Result<LoraAdapter> {
        let digest = Sha256::digest(&bytes).into();
        let bytes = ModelBytes::from(bytes);
        let g = bytes.gguf()?;
        let bad = |m: String| Err(Error::Adapter(m));
        let meta = |key: &str| g.get_str(key).unwrap_or("");
        if meta("general.type") != "adapter" {
            return bad(format!("general.type is '{}', not 'adapter'", meta("general.type")));
        }
        if meta("adapter.type") != "lora" {
            return bad(format!("adapter.type is '{}', not 'lora'", meta("adapter.type")));
        }
        let arch = model.config.arch.name();
        if meta("general.architecture") != arch {
            return bad(format!("the adapter is for a '{}' model, not '{arch}'", meta("general.architecture")));
        }
        // llama.cpp reads a missing alpha as 0: the scale is then used as it is.
        let alpha = g.get_f32("adapter.lora.alpha").unwrap_or(0.0);
        if !alpha.is_finite() {
            return bad(format!("adapter.lora.alpha is {alpha}"));
        }

        // Pair the tensors by the weight they adapt. Norm vectors are skipped, as llama.cpp does.
        let mut pairs: BTreeMap<&str, (Option<&TensorInfo>, Option<&TensorInfo>)> = BTreeMap::new();
        for t in &g.tensors {
            if let Some(weight) = t.name.strip_suffix(".lora_a") {
                pairs.entry(weight).or_default().0 = Some(t);
            } else if let Some(weight) = t.name.strip_suffix(".lora_b") {
                pairs.entry(weight).or_default().1 = Some(t);
            } else if !t.name.ends_with("_norm.weight") {
                return bad(format!("tensor '{}' is neither a lora_a nor a lora_b", t.name));
            }
        }
        if pairs.is_empty() {
            return bad("the adapter has no lora_a/lora_b pairs".into());
        }

        let c = &model.config;
        let mut adapter = LoraAdapter {
            digest,
            name: g.get_str("general.name").map(str::to_string),
            alpha,
            model: model.id(),
            layers: vec![Default::default(); c.n_layers],
            output: None,
        };
        for (weight, pair) in pairs {
            let (Some(a), Some(b)) = pair else {
                return bad(format!("'{weight}' has only one of lora_a and lora_b"));
            };
            let Some(Target { n_in, n_out, sites }) = target(model, weight) else {
                return bad(format!("'{weight}' is not a weight of this model that adapters apply to"));
            };
            // GGUF dims are innermost first: lora_a is [n_in, rank], lora_b [rank, n_out].
            let rank = b.dims.first().copied().unwrap_or(0);
            if rank == 0 || a.dims != [n_in, rank] || b.dims != [rank, n_out] {
                return bad(format!(
                    "'{weight}' has lora_a {:?} and lora_b {:?}; this model needs [{n_in}, rank] and [rank, {n_out}]",
                    a.dims, b.dims
                ));
            }
            // Beyond the weight's smaller side a rank adds nothing a full-rank update would not (llama.cpp takes such
            // files, and so do we); beyond its larger side the factors outgrow the weight, and their size is the file's
            // to choose: that bound keeps their memory within twice the weight's.
            if rank > n_in.max(n_out) {
                return bad(format!("'{weight}' has rank {rank}, more than its {n_out} x {n_in} weight's larger side"));
            }
            let a = adapter_matrix(&bytes, MatrixRef { ty: a.ty, rows: rank, cols: n_in, offset: a.offset }, weight)?;
            let b = adapter_matrix(&bytes, MatrixRef { ty: b.ty, rows: n_out, cols: rank, offset: b.offset }, weight)?;
            for (site, rows) in sites {
                // The site's rows of B (Phi-3's fused weights feed several), transposed.
                let mut bt = try_vec(rank * rows.len(), weight)?;
                let b = &b;
                bt.extend((0..rank).flat_map(|j| rows.clone().map(move |i| b[i * rank + j])));
                let mut a_copy = try_vec(a.len(), weight)?;
                a_copy.extend_from_slice(&a);
                *adapter.slot(site) = Some(Pair { rank, a: a_copy, bt });
            }
        }
        Ok(adapter)
    }

    /// An adapter of weights trained here (`crate::training`), for `model`, with `digest` naming its weights.
    pub(crate) fn trained(
        model: &Model,
        name: &str,
        alpha: f32,
        digest: [u8; 32],
        pairs: Vec<(Site, Pair)>,
    ) -> LoraAdapter {
        let mut adapter = LoraAdapter {
            alpha,
            model: model.id(),
            digest,
            name: Some(name.to_string()),
            layers: vec![Default::default(); model.config.n_layers],
            output: None,
        };
        for (site, pair) in pairs {
            *adapter.slot(site) = Some(pair);
        }
        adapter
    }

    /// The pair adapting `site`.
    pub(crate) fn pair(&self, site: Site) -> Option<&Pair> {
        match site {
            Site::Layer(l, p) => self.layers[l][p as usize].as_ref(),
            Site::Output => self.output.as_ref(),
        }
    }

    fn slot(&mut self, site: Site) -> &mut Option<Pair> {
        match site {
            Site::Layer(l, p) => &mut self.layers[l][p as usize],
            Site::Output => &mut self.output,
        }
    }

    /// What multiplies `B·A·x` of a pair of rank `rank` at the request's `scale`: llama.cpp's
    /// `scale · alpha / rank`, or `scale` itself when the adapter's alpha is 0.
    pub fn effective_scale(&self, scale: f32, rank: usize) -> f32 {
        if self.alpha == 0.0 {
            scale
        } else {
            scale * self.alpha / rank as f32
        }
    }

    pub fn alpha(&self) -> f32 {
        self.alpha
    }

    /// The file's `general.name`, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// SHA-256 of the adapter file.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The id of the model this adapter was checked against.
    pub fn model_id(&self) -> ModelId {
        self.model
    }
}

/// An adapter file's matrix `m` (adapting `weight`) as f32: memory for it is asked for, not assumed (an
/// `Error::OutOfMemory`, never a trap), and every value must be finite (a NaN or an infinity in a factor
/// reaches every output of the projection; checking costs one comparison per value, against the
/// conversion's dozens).
fn adapter_matrix(bytes: &ModelBytes, m: MatrixRef, weight: &str) -> Result<Vec<f32>> {
    let mut out = try_vec(m.rows * m.cols, weight)?;
    out.resize(m.rows * m.cols, 0.0);
    dequantize_into(bytes, m, &mut out);
    match out.iter().all(|v| v.is_finite()) {
        true => Ok(out),
        false => Err(Error::Adapter(format!("'{weight}' has a factor that is NaN or infinite"))),
    }
}

/// An empty vector with room for `n` values of the adapter of `weight`.
fn try_vec(n: usize, weight: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        bytes: n.saturating_mul(4),
        what: format!("the LoRA factors of '{weight}'"),
    })?;
    Ok(v)
}

/// The matrix `m` of the file `bytes` (its layout checked by `ModelBytes::gguf`) as f32, row after row.
pub(crate) fn to_f32(bytes: &ModelBytes, m: MatrixRef) -> Vec<f32> {
    let mut out = vec![0.0; m.rows * m.cols];
    dequantize_into(bytes, m, &mut out);
    out
}

/// The matrix `m` of the file `bytes` into `out` (`m.rows * m.cols` values).
fn dequantize_into(bytes: &ModelBytes, m: MatrixRef, out: &mut [f32]) {
    for (row, out) in m.bytes(bytes).chunks_exact(m.row_bytes()).zip(out.chunks_exact_mut(m.cols)) {
        dequantize_row(m.ty, row, out);
    }
}

/// A model weight as an adapter target.
struct Target {
    n_in: usize,
    n_out: usize,
    /// The projections it feeds, with the rows of it each takes (Phi-3's fused `attn_qkv` and `ffn_up` feed several).
    sites: Vec<(Site, Range<usize>)>,
}

/// The model weight `name` as an adapter target; `None` where the model has no such weight, or the forward
/// pass applies no adapter to it.
fn target(model: &Model, name: &str) -> Option<Target> {
    let c = &model.config;
    let d = c.d_model;
    if name == "output.weight" {
        // A model whose output head is its token embedding has no `output.weight` (llama.cpp refuses it too).
        let w = &model.weights;
        let tied = w.output.offset == w.token_embd.offset;
        let sites = vec![(Site::Output, 0..c.vocab_size)];
        return (!tied).then_some(Target { n_in: d, n_out: c.vocab_size, sites });
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, weight) = rest.split_once('.')?;
    let l = layer.parse::<usize>().ok().filter(|&l| l < c.n_layers && layer == l.to_string())?;
    let (q, kv, ff) = (c.layer_q_dim(l), c.layer_kv_dim(l), c.layer_ffn_dim(l));
    if !c.layer_stores_kv(l) && matches!(weight, "attn_k.weight" | "attn_v.weight") {
        return None; // Gemma 4's last layers compute no keys or values of their own
    }
    if c.layer_is_recurrent(l) && weight.starts_with("attn_") {
        return None; // Qwen3.5's delta-net layers have no attention (their `attn_qkv` and `attn_gate` are not adapted)
    }
    let one =
        |p: Proj, n_in: usize, n_out: usize| Some(Target { n_in, n_out, sites: vec![(Site::Layer(l, p), 0..n_out)] });
    let fused = c.arch == Arch::Phi3;
    if c.experts.is_some() && weight.starts_with("ffn_") {
        return None; // a mixture of experts has no one FFN matrix to adapt
    }
    match (weight, fused) {
        // Qwen3.5's query projection is each head's queries and output gate.
        ("attn_q.weight", false) => one(Proj::Q, d, if c.attention_output_gate() { 2 * q } else { q }),
        ("attn_k.weight", false) => one(Proj::K, d, kv),
        ("attn_v.weight", false) => one(Proj::V, d, kv),
        ("attn_qkv.weight", true) => Some(Target {
            n_in: d,
            n_out: q + 2 * kv,
            sites: vec![
                (Site::Layer(l, Proj::Q), 0..q),
                (Site::Layer(l, Proj::K), q..q + kv),
                (Site::Layer(l, Proj::V), q + kv..q + 2 * kv),
            ],
        }),
        ("attn_output.weight", _) => one(Proj::O, q, d),
        ("ffn_gate.weight", false) => one(Proj::Gate, d, ff),
        ("ffn_up.weight", false) => one(Proj::Up, d, ff),
        ("ffn_up.weight", true) => Some(Target {
            n_in: d,
            n_out: 2 * ff,
            sites: vec![(Site::Layer(l, Proj::Gate), 0..ff), (Site::Layer(l, Proj::Up), ff..2 * ff)],
        }),
        ("ffn_down.weight", _) => one(Proj::Down, ff, d),
        _ => None,
    }
}
