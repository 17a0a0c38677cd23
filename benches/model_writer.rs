//! What the bench binaries that write model files share (`random_model.rs`, `requantize_k.rs`, each including this
//! file with `#[path]`): llama.cpp's tensor types for its K-quant "_M" mixes, and keeping a written file only once it
//! loads and gives finite logits.
//!
//! The types follow `llama_tensor_get_type` in llama.cpp's `src/llama-quant.cpp` (read at ggml-org/llama.cpp
//! 007dbbf, 2026-11) for what these benches write: the `llama` architecture without experts, no importance matrix,
//! no per-tensor overrides. Left out, as no model here has them: the 70B rule (80 layers: `attn_v` Q4_K -> Q5_K)
//! and the Falcon and MoE branches.

use ruvllm::quant::GgmlType;
use ruvllm::{Model, Session};
use std::sync::Arc;

/// A K-quant "_M" mix: its main type and llama.cpp's `LLAMA_FTYPE` (`general.file_type`) for it.
#[derive(Clone, Copy, Debug)]
pub enum Mix {
    Q4KM,
    Q5KM,
}

impl Mix {
    pub fn parse(name: &str) -> Result<Mix, String> {
        match name {
            "q4_k_m" => Ok(Mix::Q4KM),
            "q5_k_m" => Ok(Mix::Q5KM),
            m => Err(format!("--mix {m}: q4_k_m or q5_k_m")),
        }
    }

    pub fn base(self) -> GgmlType {
        match self {
            Mix::Q4KM => GgmlType::Q4_K,
            Mix::Q5KM => GgmlType::Q5_K,
        }
    }

    pub fn file_type(self) -> u32 {
        match self {
            Mix::Q4KM => 15,
            Mix::Q5KM => 17,
        }
    }

    /// The type llama-quantize gives tensor `name` of shape `dims` (ggml order: `dims[0]` is the row length) in a
    /// model of `n_layers` layers, or `None` where it keeps the tensor's type (norms, 1-D tensors). `tied`: the
    /// file has no `output.weight`, so `token_embd` is the output head too.
    ///
    /// llama.cpp counts `attn_v` and `ffn_down` tensors in the order it walks them (by layer number, then name) and
    /// asks `use_more_bits` of that count; with one of each per layer, as every llama model has, that is the layer.
    pub fn tensor_type(self, name: &str, dims: &[usize], n_layers: usize, tied: bool) -> Option<GgmlType> {
        if dims.len() < 2 || !name.ends_with("weight") || name.contains("_norm.weight") {
            return None;
        }
        let layer = || {
            let n = name.strip_prefix("blk.").and_then(|s| s.split('.').next()).and_then(|s| s.parse().ok());
            n.expect("a layer's tensor is named blk.N.*")
        };
        let ty = if name == "output.weight" || (tied && name == "token_embd.weight") {
            // The output head: Q8_0 where the main type's blocks do not fit its rows, else Q6_K.
            if !dims[0].is_multiple_of(self.base().block_size()) {
                GgmlType::Q8_0
            } else {
                GgmlType::Q6_K
            }
        } else if (name.contains("attn_v.weight") || name.contains("ffn_down")) && use_more_bits(layer(), n_layers) {
            GgmlType::Q6_K
        } else {
            self.base()
        };
        Some(fallback(ty, dims[0]))
    }
}

/// llama.cpp's `use_more_bits`: the layers whose `attn_v` and `ffn_down` a "_M" mix gives Q6_K (the first and last
/// eighth, and every third layer between).
pub fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as isize - (n / 8) as isize).rem_euclid(3) == 2
}

/// llama.cpp's `tensor_type_fallback`: a K-quant's 256-element blocks must tile the rows (`ncols`, ggml's ne[0]);
/// where they do not, a 32-element type of about the same bits takes its place, and F16 where not even those fit.
fn fallback(ty: GgmlType, ncols: usize) -> GgmlType {
    if ncols.is_multiple_of(ty.block_size()) {
        return ty;
    }
    let to = match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        t => panic!("no fallback for {t:?}"),
    };
    if ncols.is_multiple_of(to.block_size()) {
        to
    } else {
        GgmlType::F16
    }
}

/// Writes `bytes` to `out` through `out.tmp`, which is renamed into place only once it loads and gives finite logits
/// for a short prompt. Returns the loaded model and the logits' range. The bytes are dropped once written: the
/// check maps the file, so a large model is not held twice.
pub fn write_checked(out: &str, bytes: Vec<u8>) -> Result<(Arc<Model>, f32, f32), String> {
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| format!("{tmp}: {e}"))?;
    drop(bytes);
    let model = Arc::new(Model::from_file(&tmp).map_err(|e| format!("the written model does not load: {e}"))?);
    let ids = model.tokenizer().encode_with_special("The capital of France is", true).map_err(|e| e.to_string())?;
    let logits = Session::new(model.clone()).eval(&ids, false).map_err(|e| e.to_string())?.to_vec();
    if !logits.iter().all(|x| x.is_finite()) {
        return Err("the written model's logits are not all finite".into());
    }
    let (lo, hi) = logits.iter().fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    std::fs::rename(&tmp, out).map_err(|e| format!("{out}: {e}"))?;
    Ok((model, lo, hi))
}
