//! Hyper-parameters of a llama-family model, read from GGUF metadata (`<arch>.*` keys, as llama.cpp names them).

use crate::error::{Error, Result};
use crate::gguf::Gguf;

/// The model families we run. The decoders share one forward pass (`forward.rs`); the differences are listed
/// here. The encoder (`bert`) has its own (`bert.rs`) and computes embeddings only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3, SmolLM2, Mistral: no attention biases, RoPE on adjacent pairs.
    Llama,
    /// Qwen2: q/k/v biases, NeoX-style RoPE (pairs `i` and `i + rot/2`).
    Qwen2,
    /// Qwen3: no biases, an RMSNorm of each query and key head before RoPE (QK-norm), NeoX-style RoPE.
    Qwen3,
    /// Qwen3-MoE: Qwen3's attention, and in every layer a mixture of experts instead of one feed-forward block
    /// ([`Experts`]).
    Qwen3Moe,
    /// Gemma 3: embeddings scaled by `sqrt(d_model)`, QK-norm, norms after attention and after the feed-forward
    /// block too, GeGLU, NeoX-style RoPE; five of every six layers attend within a sliding window, with RoPE base
    /// 10000 (the others: the model's base).
    Gemma3,
    /// Phi-3: q/k/v in one matrix (`attn_qkv`), gate and up in one (`ffn_up`, gate rows first), NeoX-style RoPE
    /// with LongRoPE's per-pair factors (long ones past the original context) and attention factor.
    Phi3,
    /// SmolLM3: a llama whose every fourth layer has no RoPE (NoPE; llama.cpp fixes the step at 4 for the arch,
    /// no GGUF key says it).
    SmolLM3,
    /// Granite-MoE (granite-3.x-1b-a400m, 3b-a800m): a llama with Granite's multipliers ([`Scales`]) and in every
    /// layer a mixture of experts as Qwen3-MoE's, whose width is `feed_forward_length`.
    GraniteMoe,
    /// BERT (all-MiniLM, bge, ...): an encoder with absolute position and token-type embeddings, LayerNorm
    /// after each block, biases everywhere, GELU, attention over the whole sequence. No RoPE, no KV cache.
    Bert,
}

impl Arch {
    /// Every architecture, in the README's order ("Supported").
    pub const ALL: [Arch; 9] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Phi3,
        Arch::Gemma3,
        Arch::SmolLM3,
        Arch::Qwen3Moe,
        Arch::GraniteMoe,
        Arch::Bert,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Phi3 => "phi3",
            Arch::Gemma3 => "gemma3",
            Arch::SmolLM3 => "smollm3",
            Arch::GraniteMoe => "granitemoe",
            Arch::Bert => "bert",
        }
    }

    /// Whether it is a decoder, run by the one forward pass (`forward.rs`, and the GPU's); the other is the encoder
    /// `bert` (`bert.rs`), which computes embeddings only. A new architecture decides here, once.
    pub fn is_decoder(self) -> bool {
        match self {
            Arch::Llama
            | Arch::Qwen2
            | Arch::Qwen3
            | Arch::Qwen3Moe
            | Arch::Phi3
            | Arch::Gemma3
            | Arch::SmolLM3
            | Arch::GraniteMoe => true,
            Arch::Bert => false,
        }
    }
}

/// How a sequence's hidden states become one embedding (llama.cpp's `--pooling`, `<arch>.pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token, [CLS] and [SEP] included (sentence-transformers' mean over the attention mask).
    Mean,
    /// The first token's state ([CLS]).
    Cls,
    /// The last token's state (decoder embedding models).
    Last,
}

impl Pooling {
    /// llama.cpp's `enum llama_pooling_type` value; None for NONE, RANK and unknown values.
    pub fn from_gguf_value(v: u64) -> Option<Pooling> {
        match v {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// A mixture of experts' shape (`<arch>.expert_count`, `expert_used_count`): each token's feed-forward block is the
/// sum of the `used` experts its router scores highest, weighted by the router's softmax renormalized over them
/// (`experts.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    pub count: usize,
    pub used: usize,
}

/// Granite's multipliers (`embedding_scale`, `residual_scale`, `attention.scale`, `logit_scale`), and what the other
/// architectures do in their place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    /// What the token embeddings are multiplied by (Gemma: `sqrt(d_model)`; 1 elsewhere).
    pub embedding: f32,
    /// What each block's output is multiplied by before its residual add.
    pub residual: f32,
    /// What the attention scores `q·k` are multiplied by (`1 / sqrt(head_dim)` elsewhere).
    pub attention: f32,
    /// What the logits are divided by.
    pub logit_divisor: f32,
}

impl Scales {
    /// A llama's: none, and scores scaled by `1 / sqrt(head_dim)`.
    pub fn plain(head_dim: usize) -> Scales {
        Scales { embedding: 1.0, residual: 1.0, attention: 1.0 / (head_dim as f32).sqrt(), logit_divisor: 1.0 }
    }
}

/// More experts than llama.cpp's own limit (LLAMA_MAX_EXPERTS) is a hostile file.
pub const MAX_EXPERTS: usize = 512;

#[derive(Clone, Debug)]
pub struct Config {
    pub arch: Arch,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// The feed-forward block's width: each expert's with [`Config::experts`] (`expert_feed_forward_length`).
    pub ffn_dim: usize,
    pub experts: Option<Experts>,
    pub vocab_size: usize,
    /// Training context length: the largest context a session may use.
    pub context_length: usize,
    /// The epsilon of the norms: RMSNorm for the decoders, LayerNorm for `bert`.
    pub rms_eps: f32,
    pub rope_base: f32,
    /// Position scale (1 / linear scaling factor), as llama.cpp's `freq_scale`.
    pub rope_freq_scale: f32,
    /// What RoPE multiplies each rotated value by (`rope.scaling.attn_factor`, LongRoPE's; 1 elsewhere).
    pub rope_attn_factor: f32,
    /// The context the model was trained at before any extension (`rope.scaling.original_context_length`): a
    /// session past it uses LongRoPE's long factors.
    pub rope_orig_context: usize,
    /// Positions a windowed layer's query sees (`attention.sliding_window`; Gemma 3); 0 without windows.
    pub sliding_window: usize,
    /// Number of leading dimensions of each head that RoPE rotates.
    pub rope_dims: usize,
    pub rope_neox: bool,
    /// The pooling the GGUF asks for (`<arch>.pooling_type`), if any: embeddings default to it.
    pub pooling: Option<Pooling>,
    pub scales: Scales,
}

impl Config {
    pub fn from_gguf(g: &Gguf) -> Result<Config> {
        let arch_name = g.architecture()?;
        let arch = Arch::ALL
            .into_iter()
            .find(|a| a.name() == arch_name)
            .ok_or_else(|| Error::UnsupportedArchitecture(arch_name.to_string()))?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let req = |k: &str| -> Result<usize> {
            let v = g.get_u64(&key(k)).ok_or_else(|| Error::Model(format!("metadata key {} is missing", key(k))))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0 && v < 1 << 31)
                .ok_or_else(|| Error::Model(format!("metadata key {} has an invalid value {v}", key(k))))
        };
        let n_heads = req("attention.head_count")?;
        let d_model = req("embedding_length")?;
        let n_kv_heads = match g.get_u64(&key("attention.head_count_kv")) {
            Some(_) => req("attention.head_count_kv")?,
            None => n_heads,
        };
        let head_dim = match g.get_u64(&key("attention.key_length")) {
            Some(_) => req("attention.key_length")?,
            None => d_model / n_heads,
        };
        if n_heads % n_kv_heads != 0
            || head_dim == 0
            || head_dim % 2 != 0
            || head_dim > crate::kernels::attention::MAX_HEAD_DIM
        {
            return Err(Error::Model(format!(
                "{n_heads} attention heads cannot be grouped over {n_kv_heads} KV heads of dim {head_dim}"
            )));
        }
        // q_dim() and kv_dim() (n_kv_heads <= n_heads) are then products that fit in usize; the weights'
        // shapes check them against the tensors.
        if n_heads.checked_mul(head_dim).is_none() {
            return Err(Error::Model(format!("{n_heads} attention heads of dim {head_dim} overflow usize")));
        }
        let rope_dims = match g.get_u64(&key("rope.dimension_count")) {
            Some(_) => req("rope.dimension_count")?,
            None => head_dim,
        };
        if rope_dims > head_dim || rope_dims % 2 != 0 || rope_dims > crate::kernels::rope::MAX_ROPE_DIMS {
            return Err(Error::Model(format!("rope.dimension_count {rope_dims} does not fit head dim {head_dim}")));
        }
        let scaling = g.get_str(&key("rope.scaling.type")).unwrap_or("none");
        let factor = g.get_f32(&key("rope.scaling.factor")).unwrap_or(1.0);
        let rope_freq_scale = match scaling {
            "linear" if factor > 0.0 => 1.0 / factor,
            "none" | "linear" => 1.0,
            other => return Err(Error::Model(format!("rope scaling '{other}' is not supported"))),
        };
        let rope_attn_factor = g.get_f32(&key("rope.scaling.attn_factor")).unwrap_or(1.0);
        if !(rope_attn_factor.is_finite() && rope_attn_factor > 0.0) {
            return Err(Error::Model(format!("rope.scaling.attn_factor {rope_attn_factor} is not a positive number")));
        }
        let context_length = req("context_length")?;
        let rope_orig_context = match g.get_u64(&key("rope.scaling.original_context_length")) {
            Some(_) => req("rope.scaling.original_context_length")?,
            None => context_length,
        };
        let sliding_window = match (arch, g.get_u64(&key("attention.sliding_window"))) {
            (Arch::Gemma3, Some(_)) => req("attention.sliding_window")?,
            _ => 0,
        };
        let experts = match arch {
            Arch::Qwen3Moe | Arch::GraniteMoe => {
                let (count, used) = (req("expert_count")?, req("expert_used_count")?);
                if count > MAX_EXPERTS || used > count {
                    return Err(Error::Model(format!("{used} of {count} experts (at most {MAX_EXPERTS})")));
                }
                Some(Experts { count, used })
            }
            _ => None,
        };
        let ffn_dim = match arch {
            Arch::Qwen3Moe => req("expert_feed_forward_length")?,
            _ => req("feed_forward_length")?,
        };
        let scale = |k: &str, default: f32| -> Result<f32> {
            match g.get_f32(&key(k)) {
                None => Ok(default),
                Some(v) if v.is_finite() && v > 0.0 => Ok(v),
                Some(v) => Err(Error::Model(format!("metadata key {} is {v}, not a positive number", key(k)))),
            }
        };
        let plain = Scales::plain(head_dim);
        let scales = match arch {
            Arch::Gemma3 => Scales { embedding: (d_model as f32).sqrt(), ..plain },
            Arch::GraniteMoe => {
                // Granite 4's shared expert (`expert_shared_feed_forward_length`) is a block this forward pass does
                // not have.
                if g.get_u64(&key("expert_shared_feed_forward_length")).is_some_and(|n| n > 0) {
                    return Err(Error::Model("granitemoe with a shared expert is not supported".into()));
                }
                Scales {
                    embedding: scale("embedding_scale", 1.0)?,
                    residual: scale("residual_scale", 1.0)?,
                    attention: scale("attention.scale", plain.attention)?,
                    logit_divisor: scale("logit_scale", 1.0)?,
                }
            }
            _ => plain,
        };
        let vocab_size = g
            .tensor("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied())
            .ok_or_else(|| Error::Model("tensor token_embd.weight is missing or not 2-D".into()))?;
        Ok(Config {
            arch,
            n_layers: req("block_count")?,
            d_model,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            experts,
            vocab_size,
            context_length,
            rms_eps: if arch.is_decoder() {
                g.get_f32(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-5)
            } else {
                g.get_f32(&key("attention.layer_norm_epsilon")).unwrap_or(1e-12)
            },
            rope_base: g.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
            rope_freq_scale,
            rope_dims,
            rope_neox: matches!(arch, Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen3Moe | Arch::Phi3 | Arch::Gemma3),
            sliding_window,
            rope_attn_factor,
            rope_orig_context,
            pooling: g.get_u64(&key("pooling_type")).and_then(Pooling::from_gguf_value),
            scales,
        })
    }

    pub fn attention_shape(&self) -> crate::kernels::attention::AttentionShape {
        crate::kernels::attention::AttentionShape {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            window: 0,
            scale: self.scales.attention,
        }
    }

    /// Layer `l`'s sliding window (0: it sees every position). Gemma 3, as llama.cpp sets it: every sixth layer is
    /// global, the others windowed.
    pub fn layer_window(&self, l: usize) -> usize {
        match self.arch {
            Arch::Gemma3 if l % 6 < 5 => self.sliding_window,
            _ => 0,
        }
    }

    /// Whether layer `l` rotates its queries and keys: SmolLM3's every fourth layer (3, 7, ...) does not.
    pub fn layer_uses_rope(&self, l: usize) -> bool {
        !(self.arch == Arch::SmolLM3 && (l + 1).is_multiple_of(4))
    }

    /// Layer `l`'s RoPE base: Gemma 3's windowed layers use 10000 whatever the model's base.
    pub fn layer_rope_base(&self, l: usize) -> f32 {
        if self.arch == Arch::Gemma3 && self.layer_window(l) > 0 {
            10_000.0
        } else {
            self.rope_base
        }
    }

    /// What the token embeddings are multiplied by ([`Scales::embedding`]).
    pub fn embedding_scale(&self) -> f32 {
        self.scales.embedding
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

#[cfg(test)]
mod tests {
    use super::Arch;
    use crate::test_support::{readme_supported, test};

    #[test]
    fn the_readme_lists_every_architecture_and_no_other() {
        let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(readme_supported("Architectures"), names, "README.md's architectures (in backticks), in order");
    }
}
