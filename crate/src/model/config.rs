//! Hyper-parameters of a llama-family model, read from GGUF metadata (`<arch>.*` keys, as llama.cpp names them).

use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::kernels::delta_net::DeltaNetShape;

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
    /// Gemma 4 (E2B, E4B, 31B): Gemma 3's blocks with layers of two shapes ([`LayerShapes`]: windowed ones with
    /// narrower heads, their own RoPE base and rotated width; global ones with Gemma 4's "proportional" RoPE as
    /// frequency factors), scores not scaled, values RMS-normed without a weight (and equal to the keys where a
    /// layer has no `attn_v`), the last layers reading an earlier layer's keys and values, a per-layer input from
    /// a second embedding (`per_layer_token_embd`), each layer's output scaled, and the logits soft-capped.
    Gemma4,
    /// Phi-3: q/k/v in one matrix (`attn_qkv`), gate and up in one (`ffn_up`, gate rows first), NeoX-style RoPE
    /// with LongRoPE's per-pair factors (long ones past the original context) and attention factor.
    Phi3,
    /// Qwen3.5 (0.8B-27B, dense): most layers are gated delta nets (linear attention with a recurrent state,
    /// [`DeltaNet`]); every `full_attention_interval`-th is gated attention: QK-norm, a sigmoid gate on each head's
    /// output from the query projection's second half, NeoX-style RoPE on part of the head with Qwen's interleaved
    /// sections (text positions turn every pair but those of the fourth section). The feed-forward block's norm is
    /// `post_attention_norm`.
    Qwen35,
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
    pub const ALL: [Arch; 11] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Qwen35,
        Arch::Phi3,
        Arch::Gemma3,
        Arch::Gemma4,
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
            Arch::Qwen35 => "qwen35",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Phi3 => "phi3",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
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
            | Arch::Qwen35
            | Arch::Qwen3Moe
            | Arch::Phi3
            | Arch::Gemma3
            | Arch::Gemma4
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

/// The shapes of layers that differ from one another (Gemma 4): which attend within the sliding window, each one's
/// KV heads and feed-forward width, the windowed layers' heads, and which layers keep keys and values of their own.
/// The config's own `head_dim`, `rope_dims` and `rope_base` are the global layers'.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerShapes {
    /// Each layer's: whether it attends within the window (`attention.sliding_window_pattern`).
    pub windowed: Vec<bool>,
    /// Each layer's KV heads (`attention.head_count_kv`, a number or one per layer).
    pub n_kv_heads: Vec<usize>,
    /// Each layer's feed-forward width (`feed_forward_length`, a number or one per layer).
    pub ffn_dims: Vec<usize>,
    /// The windowed layers' head size, rotated dimensions and RoPE base (`attention.key_length_swa`,
    /// `rope.dimension_count_swa`, `rope.freq_base_swa`); they take no frequency factors.
    pub local_head_dim: usize,
    pub local_rope_dims: usize,
    pub local_rope_base: f32,
    /// Layers `0..kv_layers` store keys and values; each later one attends to those of the last of them of its kind
    /// (`attention.shared_kv_layers`, llama.cpp's `n_layer_kv_from_start`).
    pub kv_layers: usize,
    /// The width of each layer's input from the per-layer embedding (`embedding_length_per_layer_input`; 0: none).
    pub per_layer_input: usize,
}

/// Qwen3.5's linear-attention layers: which layers are gated delta nets (the others attend over a KV cache), and
/// their shape (`ssm.group_count` key heads, `ssm.time_step_rank` value heads, all `ssm.state_size` wide;
/// `ssm.conv_kernel` taps). Each keeps a recurrent state instead of keys and values (`kv::recurrent`).
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaNet {
    /// Each layer's: whether it is a delta net (`attention.recurrent_layers`, else all but every
    /// `full_attention_interval`-th).
    pub recurrent: Vec<bool>,
    pub shape: DeltaNetShape,
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
    /// Layers of different shapes (Gemma 4); None where every layer has the config's.
    pub layer_shapes: Option<LayerShapes>,
    /// `final_logit_softcapping`: the logits become `cap · tanh(logits / cap)` (Gemma 4).
    pub logit_softcap: Option<f32>,
    /// Qwen3.5's delta-net layers, where the model has them.
    pub delta_net: Option<DeltaNet>,
    /// Qwen3.5's RoPE sections (`rope.dimension_sections`): rotated pair `i` is in section `i % Σ` (interleaved:
    /// section `i % 3` up to 3× its size, else the fourth); text has position 0 in the fourth, whose pairs stay.
    pub rope_sections: Option<[usize; 4]>,
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
        let rope_base = g.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0);
        let rope_orig_context = match g.get_u64(&key("rope.scaling.original_context_length")) {
            Some(_) => req("rope.scaling.original_context_length")?,
            None => context_length,
        };
        let sliding_window = match (arch, g.get_u64(&key("attention.sliding_window"))) {
            (Arch::Gemma3, Some(_)) => req("attention.sliding_window")?,
            (Arch::Gemma4, _) => req("attention.sliding_window")?,
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
        let blocks = req("block_count")?;
        // Qwen3.5's converted files end with multi-token-prediction blocks (`nextn_predict_layers`, for speculative
        // drafts in llama.cpp), counted in `block_count`: the forward pass runs the layers before them.
        let n_layers = match (arch, g.get_u64(&key("nextn_predict_layers"))) {
            (Arch::Qwen35, Some(nextn)) => {
                usize::try_from(nextn).ok().and_then(|nextn| blocks.checked_sub(nextn)).filter(|&n| n > 0).ok_or_else(
                    || Error::Model(format!("{nextn} of {blocks} blocks predict the next tokens: no layer left")),
                )?
            }
            _ => blocks,
        };
        let layer_shapes = match arch {
            Arch::Gemma4 => Some(gemma4_layers(g, n_layers, n_heads, head_dim, rope_dims, rope_base)?),
            _ => None,
        };
        let ffn_dim = match (arch, &layer_shapes) {
            (Arch::Qwen3Moe, _) => req("expert_feed_forward_length")?,
            (_, Some(shapes)) => shapes.ffn_dims.iter().copied().max().unwrap_or(0),
            _ => req("feed_forward_length")?,
        };
        let n_kv_heads = match &layer_shapes {
            Some(shapes) => shapes.n_kv_heads.iter().copied().max().unwrap_or(n_kv_heads),
            None => n_kv_heads,
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
            // Gemma 4's queries and keys are RMS-normed, and its scores not scaled (llama.cpp's `f_attention_scale`).
            Arch::Gemma4 => Scales { embedding: (d_model as f32).sqrt(), attention: 1.0, ..plain },
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
        let delta_net = match arch {
            Arch::Qwen35 => Some(delta_net(g, n_layers, blocks)?),
            _ => None,
        };
        let rope_sections = match arch {
            Arch::Qwen35 => {
                let k = "rope.dimension_sections";
                let sections: Option<Vec<usize>> = g
                    .get(&key(k))
                    .and_then(|v| v.as_array())
                    .and_then(|a| a.iter().map(|v| v.as_u64().and_then(|v| usize::try_from(v).ok())).collect());
                match sections.as_deref() {
                    Some(&[a, b, c, d])
                        if (1..=rope_dims).contains(&a.saturating_add(b).saturating_add(c).saturating_add(d)) =>
                    {
                        Some([a, b, c, d])
                    }
                    _ => {
                        return Err(Error::Model(format!(
                            "metadata key {} is not 4 sections of at most {rope_dims} dimensions in all",
                            key(k)
                        )))
                    }
                }
            }
            _ => None,
        };
        let logit_softcap = match (arch, g.get_f32(&key("final_logit_softcapping"))) {
            (Arch::Gemma4, Some(cap)) if cap.is_finite() && cap > 0.0 => Some(cap),
            (Arch::Gemma4, Some(cap)) if cap != 0.0 => {
                return Err(Error::Model(format!("final_logit_softcapping {cap} is not a positive number")))
            }
            _ => None,
        };
        Ok(Config {
            arch,
            n_layers,
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
            rope_base,
            rope_freq_scale,
            rope_dims,
            rope_neox: matches!(
                arch,
                Arch::Qwen2 | Arch::Qwen3 | Arch::Qwen35 | Arch::Qwen3Moe | Arch::Phi3 | Arch::Gemma3 | Arch::Gemma4
            ),
            sliding_window,
            rope_attn_factor,
            rope_orig_context,
            pooling: g.get_u64(&key("pooling_type")).and_then(Pooling::from_gguf_value),
            scales,
            layer_shapes,
            logit_softcap,
            delta_net,
            rope_sections,
        })
    }

    /// The widest layer's attention shape (what a forward pass's scratch is sized for).
    pub fn attention_shape(&self) -> crate::kernels::attention::AttentionShape {
        crate::kernels::attention::AttentionShape {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.max_head_dim(),
            window: 0,
            scale: self.scales.attention,
            row: self.kv_dim(),
        }
    }

    /// Layer `l`'s attention: its heads, window and scale, over cached rows of [`Config::kv_dim`].
    pub fn layer_attention_shape(&self, l: usize) -> crate::kernels::attention::AttentionShape {
        crate::kernels::attention::AttentionShape {
            n_kv_heads: self.layer_n_kv_heads(l),
            head_dim: self.layer_head_dim(l),
            window: self.layer_window(l),
            ..self.attention_shape()
        }
    }

    /// Layer `l`'s sliding window (0: it sees every position). Gemma 3, as llama.cpp sets it: every sixth layer is
    /// global, the others windowed; Gemma 4: as its file says.
    pub fn layer_window(&self, l: usize) -> usize {
        match (self.arch, &self.layer_shapes) {
            (Arch::Gemma3, _) if l % 6 < 5 => self.sliding_window,
            (_, Some(shapes)) if shapes.windowed[l] => self.sliding_window,
            _ => 0,
        }
    }

    /// Whether layer `l` rotates its queries and keys: SmolLM3's every fourth layer (3, 7, ...) does not.
    pub fn layer_uses_rope(&self, l: usize) -> bool {
        !(self.arch == Arch::SmolLM3 && (l + 1).is_multiple_of(4))
    }

    /// Layer `l`'s RoPE base: Gemma 3's windowed layers use 10000 whatever the model's base, Gemma 4's their own.
    pub fn layer_rope_base(&self, l: usize) -> f32 {
        match (&self.layer_shapes, self.layer_window(l) > 0) {
            (_, false) => self.rope_base,
            (Some(shapes), true) => shapes.local_rope_base,
            (None, true) => 10_000.0,
        }
    }

    /// Layer `l`'s head size: Gemma 4's windowed layers have their own.
    pub fn layer_head_dim(&self, l: usize) -> usize {
        match &self.layer_shapes {
            Some(shapes) if shapes.windowed[l] => shapes.local_head_dim,
            _ => self.head_dim,
        }
    }

    pub fn layer_n_kv_heads(&self, l: usize) -> usize {
        self.layer_shapes.as_ref().map_or(self.n_kv_heads, |shapes| shapes.n_kv_heads[l])
    }

    pub fn layer_ffn_dim(&self, l: usize) -> usize {
        self.layer_shapes.as_ref().map_or(self.ffn_dim, |shapes| shapes.ffn_dims[l])
    }

    pub fn layer_q_dim(&self, l: usize) -> usize {
        self.n_heads * self.layer_head_dim(l)
    }

    pub fn layer_kv_dim(&self, l: usize) -> usize {
        self.layer_n_kv_heads(l) * self.layer_head_dim(l)
    }

    /// The layers of the KV cache: one per layer that stores keys and values (all but Gemma 4's last ones, and
    /// Qwen3.5's attention layers only).
    pub fn kv_layers(&self) -> usize {
        match (&self.layer_shapes, &self.delta_net) {
            (Some(shapes), _) => shapes.kv_layers,
            (_, Some(dn)) => dn.recurrent.iter().filter(|&&r| !r).count(),
            _ => self.n_layers,
        }
    }

    /// Whether layer `l` computes keys and values and stores them (in its [`Config::kv_layer`]); a Gemma 4 layer
    /// past `kv_layers` reads an earlier layer's, a delta-net layer has none.
    pub fn layer_stores_kv(&self, l: usize) -> bool {
        match (&self.layer_shapes, &self.delta_net) {
            (Some(shapes), _) => l < shapes.kv_layers,
            (_, Some(dn)) => !dn.recurrent[l],
            _ => true,
        }
    }

    /// Whether layer `l` is a gated delta net (Qwen3.5's linear attention): no KV cache, a recurrent state.
    pub fn layer_is_recurrent(&self, l: usize) -> bool {
        self.delta_net.as_ref().is_some_and(|dn| dn.recurrent[l])
    }

    /// The layer of the KV cache that attention layer `l` stores to and attends to: its own, or for Gemma 4's last
    /// layers the last one before them of the same kind (llama.cpp: `n_layer_kv_from_start - (is_swa ? 2 : 1)`; the
    /// reader checks those two are a windowed and a global layer); Qwen3.5's attention layers in order.
    pub fn kv_layer(&self, l: usize) -> usize {
        let n = self.kv_layers();
        match (&self.layer_shapes, &self.delta_net) {
            (Some(shapes), _) if l >= n => n - if shapes.windowed[l] { 2 } else { 1 },
            (_, Some(dn)) => dn.recurrent[..l].iter().filter(|&&r| !r).count(),
            _ => l,
        }
    }

    /// The index of delta-net layer `l` among the model's delta-net layers (its slot in the recurrent state).
    pub fn recurrent_layer(&self, l: usize) -> usize {
        self.delta_net.as_ref().map_or(0, |dn| dn.recurrent[..l].iter().filter(|&&r| r).count())
    }

    /// The recurrent state of a conversation's start (zeros), where the model has delta-net layers.
    pub fn recurrent_state(&self) -> Option<crate::kv::recurrent::RecurrentState> {
        let dn = self.delta_net.as_ref()?;
        let layers = dn.recurrent.iter().filter(|&&r| r).count();
        Some(crate::kv::recurrent::RecurrentState::new(layers, dn.shape.conv_state_len(), dn.shape.state_len()))
    }

    /// Bytes of [`Config::recurrent_state`] (0 without delta-net layers), saturating.
    pub fn recurrent_state_bytes(&self) -> usize {
        self.delta_net.as_ref().map_or(0, |dn| {
            let layers = dn.recurrent.iter().filter(|&&r| r).count();
            crate::kv::recurrent::RecurrentState::bytes_for(layers, dn.shape.conv_state_len(), dn.shape.state_len())
        })
    }

    /// Whether attention's output is gated per head by the sigmoid of the query projection's second half (Qwen3.5:
    /// `attn_q` is then `2 × q_dim` rows, each head's queries then its gate).
    pub fn attention_output_gate(&self) -> bool {
        self.arch == Arch::Qwen35
    }

    /// RoPE's per-pair frequency factors implied by [`Config::rope_sections`]: infinite (the angle is 0) for the
    /// pairs that take the fourth section's position, which is 0 for text; 1 for the others.
    pub fn rope_section_factors(&self) -> Option<Vec<f32>> {
        let [t, h, w, _] = self.rope_sections?;
        let all: usize = self.rope_sections?.iter().sum();
        let fourth = |i: usize| {
            let sector = i % all;
            // ggml_mrope_cache_init's interleaved (IMROPE) rule: t, h, w in turn up to 3× their sections' sizes.
            match sector % 3 {
                0 => sector >= 3 * t,
                1 => sector >= 3 * h,
                _ => sector >= 3 * w,
            }
        };
        Some((0..self.rope_dims / 2).map(|i| if fourth(i) { f32::INFINITY } else { 1.0 }).collect())
    }

    /// The largest head of any layer (an upper bound where no layer is windowed).
    pub fn max_head_dim(&self) -> usize {
        self.layer_shapes.as_ref().map_or(self.head_dim, |s| self.head_dim.max(s.local_head_dim))
    }

    /// The width of each layer's input from Gemma 4's per-layer embedding (0: none).
    pub fn per_layer_input(&self) -> usize {
        self.layer_shapes.as_ref().map_or(0, |s| s.per_layer_input)
    }

    /// The rotated dimensions of the windowed layers' RoPE where it is their own (`Model::local_rope`): Gemma 4's
    /// where it has windowed layers, Gemma 3's (its base only differs) where a layer's base is not the model's.
    pub fn local_rope_dims(&self) -> Option<usize> {
        match &self.layer_shapes {
            Some(s) => s.windowed.contains(&true).then_some(s.local_rope_dims),
            None => (0..self.n_layers).any(|l| self.layer_rope_base(l) != self.rope_base).then_some(self.rope_dims),
        }
    }

    /// What the token embeddings are multiplied by ([`Scales::embedding`]).
    pub fn embedding_scale(&self) -> f32 {
        self.scales.embedding
    }

    /// The widest layer's queries: `n_heads × head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.max_head_dim()
    }

    /// The output head's products become the logits: divided by Granite's `logit_scale`, soft-capped (Gemma 4). Both
    /// backends apply it where they hand logits out (greedy argmax on the GPU does without: neither changes the order).
    pub fn finish_logits(&self, logits: &mut [f32]) {
        let divisor = self.scales.logit_divisor;
        if divisor != 1.0 {
            logits.iter_mut().for_each(|v| *v /= divisor);
        }
        if let Some(cap) = self.logit_softcap {
            let inv = 1.0 / cap; // as ggml: scaled by 1/cap, tanh, scaled by cap
            logits.iter_mut().for_each(|v| *v = (*v * inv).tanh() * cap);
        }
    }

    /// The width of a position's row in the KV cache: the widest KV layer's `n_kv_heads × head_dim` (a narrower
    /// layer's rows are padded with zeros to it; Gemma 4's windowed layers).
    pub fn kv_dim(&self) -> usize {
        match self.layer_shapes {
            None => self.n_kv_heads * self.head_dim,
            Some(_) => (0..self.kv_layers()).map(|l| self.layer_kv_dim(l)).max().unwrap_or(0),
        }
    }
}

/// Qwen3.5's delta-net layers ([`DeltaNet`]), checked: the value width is the heads' (`ssm.inner_size`), value
/// heads are a multiple of key heads, and a state's floats fit comfortably in memory's addresses.
fn delta_net(g: &Gguf, n_layers: usize, blocks: usize) -> Result<DeltaNet> {
    let key = |k: &str| format!("qwen35.{k}");
    let bad = |k: &str, why: String| Error::Model(format!("metadata key {}: {why}", key(k)));
    let req = |k: &str, most: usize| -> Result<usize> {
        let v = g.get_u64(&key(k)).ok_or_else(|| bad(k, "missing".into()))?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0 && v <= most)
            .ok_or_else(|| bad(k, format!("{v} is not in 1..={most}")))
    };
    let shape = DeltaNetShape {
        conv_kernel: req("ssm.conv_kernel", 16)?,
        head_dim: req("ssm.state_size", crate::kernels::attention::MAX_HEAD_DIM)?,
        k_heads: req("ssm.group_count", 1 << 10)?,
        v_heads: req("ssm.time_step_rank", 1 << 10)?,
    };
    if shape.conv_kernel < 2 {
        return Err(bad("ssm.conv_kernel", "a convolution needs 2 taps or more".into()));
    }
    if !shape.v_heads.is_multiple_of(shape.k_heads) {
        return Err(bad(
            "ssm.time_step_rank",
            format!("{} value heads over {} key heads", shape.v_heads, shape.k_heads),
        ));
    }
    if req("ssm.inner_size", 1 << 24)? != shape.value_dim() {
        return Err(bad("ssm.inner_size", format!("is not {} value heads of {}", shape.v_heads, shape.head_dim)));
    }
    // One flag per block, the next-token-prediction blocks' too (the converter writes false for those).
    let recurrent = match g.get(&key("attention.recurrent_layers")) {
        Some(v) => v
            .as_array()
            .filter(|a| a.len() == blocks)
            .and_then(|a| a.iter().take(n_layers).map(|v| v.as_bool()).collect())
            .ok_or_else(|| bad("attention.recurrent_layers", format!("not {blocks} booleans")))?,
        None => {
            let interval = match g.get_u64(&key("full_attention_interval")) {
                None => 4,
                Some(_) => req("full_attention_interval", 1 << 16)?,
            };
            (0..n_layers).map(|l| !(l + 1).is_multiple_of(interval)).collect()
        }
    };
    Ok(DeltaNet { recurrent, shape })
}

/// Gemma 4's layer shapes ([`LayerShapes`]), checked: `head_dim`, `rope_dims` and `rope_base` are the global layers'.
fn gemma4_layers(
    g: &Gguf,
    n_layers: usize,
    n_heads: usize,
    head_dim: usize,
    rope_dims: usize,
    rope_base: f32,
) -> Result<LayerShapes> {
    let key = |k: &str| format!("gemma4.{k}");
    let bad = |k: &str, why: String| Error::Model(format!("metadata key {}: {why}", key(k)));
    // A number, or one per layer, each in 1..2^31.
    let per_layer = |k: &str| -> Result<Vec<usize>> {
        let values = match g.get(&key(k)) {
            None => return Err(bad(k, "missing".into())),
            Some(v) => match v.as_array() {
                Some(a) if a.len() == n_layers => a.iter().map(|v| v.as_u64()).collect::<Option<Vec<_>>>(),
                Some(a) => return Err(bad(k, format!("{} values for {n_layers} layers", a.len()))),
                None => v.as_u64().map(|v| vec![v; n_layers]),
            },
        };
        let values = values.ok_or_else(|| bad(k, "not unsigned integers".into()))?;
        values
            .into_iter()
            .map(|v| usize::try_from(v).ok().filter(|&v| v > 0 && v < 1 << 31).ok_or_else(|| bad(k, format!("{v}"))))
            .collect()
    };
    let optional = |k: &str, default: usize| match g.get_u64(&key(k)) {
        None => Ok(default),
        Some(v) => usize::try_from(v).ok().filter(|&v| v < 1 << 31).ok_or_else(|| bad(k, format!("{v}"))),
    };
    if g.get_u64(&key("expert_count")).is_some_and(|n| n > 0) {
        return Err(Error::Model("gemma4 with a mixture of experts (26B-A4B) is not supported".into()));
    }
    let windowed: Vec<bool> = g
        .get(&key("attention.sliding_window_pattern"))
        .and_then(|v| v.as_array())
        .filter(|a| a.len() == n_layers)
        .and_then(|a| a.iter().map(|v| v.as_bool()).collect())
        .ok_or_else(|| bad("attention.sliding_window_pattern", format!("not {n_layers} booleans")))?;
    let n_kv_heads = per_layer("attention.head_count_kv")?;
    let ffn_dims = per_layer("feed_forward_length")?;
    let local_head_dim = optional("attention.key_length_swa", head_dim)?;
    let local_rope_dims = optional("rope.dimension_count_swa", rope_dims)?;
    for (k, v, of) in [
        ("attention.value_length", "attention.key_length", head_dim),
        ("attention.value_length_swa", "attention.key_length_swa", local_head_dim),
    ] {
        if optional(k, of)? != of {
            return Err(bad(k, format!("differs from {}", key(v))));
        }
    }
    if local_head_dim == 0
        || !local_head_dim.is_multiple_of(2)
        || local_head_dim > crate::kernels::attention::MAX_HEAD_DIM
        || local_rope_dims > local_head_dim
        || !local_rope_dims.is_multiple_of(2)
    {
        return Err(bad("attention.key_length_swa", format!("heads of {local_head_dim} rotating {local_rope_dims}")));
    }
    if let Some(l) = n_kv_heads.iter().position(|&kv| !n_heads.is_multiple_of(kv)) {
        return Err(bad("attention.head_count_kv", format!("{n_heads} heads over {} at layer {l}", n_kv_heads[l])));
    }
    let shared = optional("attention.shared_kv_layers", 0)?;
    let kv_layers = n_layers.saturating_sub(shared);
    // The shared layers read the last windowed and the last global layer before them (llama.cpp assumes so).
    if shared > 0 && (kv_layers < 2 || !windowed[kv_layers - 2] || windowed[kv_layers - 1]) {
        return Err(bad(
            "attention.shared_kv_layers",
            format!(
                "{shared} of {n_layers} layers: layers {} and {} must be a windowed and a global one",
                kv_layers.saturating_sub(2),
                kv_layers.saturating_sub(1)
            ),
        ));
    }
    let local_rope_base = g.get_f32(&key("rope.freq_base_swa")).unwrap_or(rope_base);
    if !(local_rope_base.is_finite() && local_rope_base > 0.0) {
        return Err(bad("rope.freq_base_swa", format!("{local_rope_base}")));
    }
    Ok(LayerShapes {
        windowed,
        n_kv_heads,
        ffn_dims,
        local_head_dim,
        local_rope_dims,
        local_rope_base,
        kv_layers,
        per_layer_input: optional("embedding_length_per_layer_input", 0)?,
    })
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
