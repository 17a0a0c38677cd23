//! The model's weights, borrowed in place from the file's bytes.
//!
//! Matrices stay in their GGUF block format and are read where they lie ([`MatrixRef`] is just a
//! type, a shape and a byte range). Only the small vectors (norm weights, biases) are converted to f32.

use std::cell::RefCell;
use std::ops::Range;

use crate::error::{Error, Result};
use crate::gguf::bytes::ModelBytes;
use crate::gguf::{Gguf, TensorInfo};
use crate::kernels::delta_net::DeltaNetShape;
use crate::model::config::{Arch, Config};
use crate::quant::{dequantize_row, GgmlType, QuantMatrix};

/// A 2-D weight matrix of `rows` rows, each `cols` elements of type `ty`, at `offset` in the model bytes.
#[derive(Clone, Copy, Debug)]
pub struct MatrixRef {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub offset: u64,
}

impl MatrixRef {
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols)
    }

    /// Where the matrix lies in the model file.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + (self.rows * self.row_bytes()) as u64
    }

    /// The matrix's bytes within the model file.
    pub fn bytes<'a>(&self, file: &'a ModelBytes) -> &'a [u8] {
        file.get(self.range())
    }

    /// Rows `rows` of this matrix, a matrix of its own (Phi-3 keeps q/k/v in one tensor, and gate/up in another).
    pub fn row_range(&self, rows: std::ops::Range<usize>) -> MatrixRef {
        assert!(rows.start <= rows.end && rows.end <= self.rows, "rows {rows:?} of {}", self.rows);
        MatrixRef { rows: rows.len(), offset: self.offset + (rows.start * self.row_bytes()) as u64, ..*self }
    }

    /// The matrix as the kernels read it, in place in the model file.
    pub fn view<'a>(&self, file: &'a ModelBytes) -> QuantMatrix<'a> {
        QuantMatrix { ty: self.ty, rows: self.rows, cols: self.cols, bytes: self.bytes(file) }
    }
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,              // [d_model]
    pub wq: MatrixRef,                    // [q_dim rows × d_model]
    pub wk: MatrixRef,                    // [kv_dim × d_model]
    pub wv: MatrixRef,                    // [kv_dim × d_model]
    pub bq: Option<Vec<f32>>,             // [q_dim]  (qwen2)
    pub bk: Option<Vec<f32>>,             // [kv_dim] (qwen2)
    pub bv: Option<Vec<f32>>,             // [kv_dim] (qwen2)
    pub q_norm: Option<Vec<f32>>,         // [head_dim] (qwen3: each query head's RMSNorm before RoPE)
    pub k_norm: Option<Vec<f32>>,         // [head_dim] (qwen3: each key head's)
    pub v_norm: Option<Vec<f32>>,         // [head_dim] (gemma4: each value head's RMSNorm, which has no weight: ones)
    pub post_attn_norm: Option<Vec<f32>>, // [d_model] (gemma3: the attention block's output, before the residual add)
    pub post_ffn_norm: Option<Vec<f32>>,  // [d_model] (gemma3: the feed-forward block's output)
    pub wo: MatrixRef,                    // [d_model × q_dim]
    pub ffn_norm: Vec<f32>,               // [d_model]
    /// With experts (`Config::experts`), the router: [n_experts × d_model] (`ffn_gate_inp`), and each of w_gate,
    /// w_up and w_down every expert's matrix one after another (expert e's: rows e·ffn_dim.. of w_gate and w_up,
    /// e·d_model.. of w_down; `experts.rs`).
    pub router: Option<MatrixRef>,
    pub w_gate: MatrixRef, // [ffn_dim × d_model]           (experts: [n_experts·ffn_dim × d_model])
    pub w_up: MatrixRef,   // [ffn_dim × d_model]           (experts: [n_experts·ffn_dim × d_model])
    pub w_down: MatrixRef, // [d_model × ffn_dim]           (experts: [n_experts·d_model × ffn_dim])
    /// Gemma 4: the layer's per-layer input block (`inp_gate`, `proj`, `post_norm`).
    pub per_layer: Option<PerLayerBlock>,
    /// Gemma 4: what the residual stream is multiplied by after the layer (`layer_output_scale`).
    pub out_scale: Option<f32>,
    /// Qwen3.5's delta-net layers: the block in attention's place (whose q/k/v/o above are then empty).
    pub delta_net: Option<DeltaNetWeights>,
}

/// A Qwen3.5 gated delta-net block (`forward.rs`; the shape is `Config::delta_net`'s).
pub struct DeltaNetWeights {
    pub qkv: MatrixRef, // [conv_dim × d_model] (`attn_qkv`: every key head's queries, then keys, then values)
    pub gate: MatrixRef, // [value_dim × d_model] (`attn_gate`: z, the output's gate)
    pub alpha: MatrixRef, // [v_heads × d_model] (`ssm_alpha`: the decay's input)
    pub beta: MatrixRef, // [v_heads × d_model] (`ssm_beta`: the write strength's input)
    pub conv: Vec<f32>, // [conv_dim × conv_kernel] (`ssm_conv1d`, the oldest input's tap first)
    pub dt_bias: Vec<f32>, // [v_heads] (`ssm_dt.bias`)
    pub a: Vec<f32>,    // [v_heads] (`ssm_a`: -exp(A_log), as the converter writes it)
    pub norm: Vec<f32>, // [head_dim] (`ssm_norm`: each value head's output RMSNorm)
    pub out: MatrixRef, // [d_model × value_dim] (`ssm_out`)
}

/// Gemma 4's per-layer inputs: a second embedding of `n_layers × width` per token, plus a projection of the first,
/// give each layer a `width` input (`forward.rs`).
pub struct PerLayerEmbedding {
    pub token_embd: MatrixRef, // [vocab × n_layers·width] (`per_layer_token_embd`)
    pub model_proj: MatrixRef, // [n_layers·width × d_model] (`per_layer_model_proj`)
    pub proj_norm: Vec<f32>,   // [width] (`per_layer_proj_norm`)
}

/// What a Gemma 4 layer does with its per-layer input: `x += norm(proj · (gelu(inp_gate · x) * input))`.
pub struct PerLayerBlock {
    pub inp_gate: MatrixRef, // [width × d_model]
    pub proj: MatrixRef,     // [d_model × width]
    pub post_norm: Vec<f32>, // [d_model]
}

pub struct Weights {
    pub token_embd: MatrixRef, // [vocab × d_model]
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [d_model]
    /// [vocab × d_model]; the token embedding itself when the model ties them.
    pub output: MatrixRef,
    /// Gemma 4's per-layer embedding, where the file has one.
    pub per_layer: Option<PerLayerEmbedding>,
    /// [rope_dims / 2]: each rotated pair's frequency divisor (Llama 3.1+ `rope_freqs.weight`), if the file has one.
    pub rope_freqs: Option<Vec<f32>>,
    /// [rope_dims / 2] each: LongRoPE's divisors (Phi-3) within the original context and past it.
    pub rope_factors_short: Option<Vec<f32>>,
    pub rope_factors_long: Option<Vec<f32>>,
}

impl Weights {
    pub fn from_gguf(g: &Gguf, file: &ModelBytes, c: &Config) -> Result<Weights> {
        Weights::read(g, &VectorBytes::File(file), c)
    }

    /// The weights as the header alone lays them out: every matrix where [`from_gguf`](Self::from_gguf) puts it,
    /// ones in the place of every vector, and the byte ranges of the vectors, which a file held in part must keep
    /// (`gpu::GpuModelStream` plans the GPU's buffers from this before the bytes arrive).
    pub fn layout(g: &Gguf, c: &Config) -> Result<(Weights, Vec<Range<u64>>)> {
        let noted = RefCell::new(Vec::new());
        let weights = Weights::read(g, &VectorBytes::Noted(&noted), c)?;
        Ok((weights, noted.into_inner()))
    }

    fn read(g: &Gguf, file: &VectorBytes, c: &Config) -> Result<Weights> {
        let matrix = |name: &str, rows: usize, cols: usize| read_matrix(g, name, rows, cols);
        let vector = |name: &str, n: usize| read_vector(g, file, name, n);
        let d = c.d_model;
        let token_embd = matrix("token_embd.weight", c.vocab_size, d)?;
        // Before reserving a layer each: every layer has at least these tensors in the file (attn_norm, q, k, v,
        // output, ffn_norm, gate, up, down; Phi-3 fuses q/k/v and gate/up).
        let layer_tensors = if c.arch == Arch::Phi3 { 6 } else { 9 };
        if c.n_layers > g.tensors.len() / layer_tensors {
            return Err(Error::Model(format!(
                "block_count {} needs at least {layer_tensors} tensors a layer, but the file has {} tensors",
                c.n_layers,
                g.tensors.len()
            )));
        }
        let mut layers = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let (q, kv, ff, head_dim) = (c.layer_q_dim(i), c.layer_kv_dim(i), c.layer_ffn_dim(i), c.layer_head_dim(i));
            // Gemma 4's last layers attend to an earlier layer's keys and values: their own k/v tensors, if the file
            // has them, are not read.
            let has_kv = c.layer_stores_kv(i);
            let p = |s: &str| format!("blk.{i}.{s}");
            let bias = |s: &str, n| match c.arch {
                Arch::Qwen2 => vector(&p(s), n).map(Some),
                Arch::Llama | Arch::GraniteMoe if g.tensor(&p(s)).is_some() => vector(&p(s), n).map(Some),
                // A bert model has no decoder layers (`encoder_only`): it never comes here.
                Arch::Llama
                | Arch::Qwen3
                | Arch::Qwen35
                | Arch::Qwen3Moe
                | Arch::Phi3
                | Arch::Gemma3
                | Arch::Gemma4
                | Arch::SmolLM3
                | Arch::GraniteMoe
                | Arch::Bert => Ok(None),
            };
            // Granite's optional output bias is a term this forward pass does not have: refused, not dropped.
            if c.arch == Arch::GraniteMoe && g.tensor(&p("attn_output.bias")).is_some() {
                return Err(Error::Model(format!(
                    "{} (an attention output bias) is not supported",
                    p("attn_output.bias")
                )));
            }
            let head_norm = |s: &str| match c.arch {
                Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3 => vector(&p(s), head_dim).map(Some),
                Arch::Qwen35 if has_kv => vector(&p(s), head_dim).map(Some),
                Arch::Gemma4 if has_kv || s == "attn_q_norm.weight" => vector(&p(s), head_dim).map(Some),
                Arch::Llama
                | Arch::Qwen2
                | Arch::Qwen35
                | Arch::Phi3
                | Arch::Gemma4
                | Arch::SmolLM3
                | Arch::GraniteMoe
                | Arch::Bert => Ok(None),
            };
            let post_norm = |s: &str| match c.arch {
                Arch::Gemma3 | Arch::Gemma4 => vector(&p(s), d).map(Some),
                _ => Ok(None),
            };
            let delta_net = match &c.delta_net {
                Some(dn) if dn.recurrent[i] => Some(delta_net_weights(g, file, &p, d, &dn.shape)?),
                _ => None,
            };
            // Phi-3's fused matrices, as views of their row ranges: q, k, v; gate, then up.
            let (wq, wk, wv, wo) = match c.arch {
                Arch::Phi3 => {
                    let qkv = matrix(&p("attn_qkv.weight"), q + 2 * kv, d)?;
                    let wo = matrix(&p("attn_output.weight"), d, q)?;
                    (qkv.row_range(0..q), qkv.row_range(q..q + kv), qkv.row_range(q + kv..q + 2 * kv), wo)
                }
                // A delta-net layer has no attention: empty views.
                _ if delta_net.is_some() => {
                    let none = token_embd.row_range(0..0);
                    (none, none, none, none)
                }
                Arch::Gemma4 => {
                    let wq = matrix(&p("attn_q.weight"), q, d)?;
                    if has_kv {
                        // A layer without `attn_v` uses its keys' projection for the values too.
                        let wk = matrix(&p("attn_k.weight"), kv, d)?;
                        let wv = match g.tensor(&p("attn_v.weight")) {
                            Some(_) => matrix(&p("attn_v.weight"), kv, d)?,
                            None => wk,
                        };
                        (wq, wk, wv, matrix(&p("attn_output.weight"), d, q)?)
                    } else {
                        (wq, wq.row_range(0..0), wq.row_range(0..0), matrix(&p("attn_output.weight"), d, q)?)
                    }
                }
                _ => (
                    // Qwen3.5's query projection holds each head's output gate after its queries.
                    matrix(&p("attn_q.weight"), if c.attention_output_gate() { 2 * q } else { q }, d)?,
                    matrix(&p("attn_k.weight"), kv, d)?,
                    matrix(&p("attn_v.weight"), kv, d)?,
                    matrix(&p("attn_output.weight"), d, q)?,
                ),
            };
            let (router, w_gate, w_up, w_down) = match (c.arch, c.experts) {
                (_, Some(e)) => (
                    Some(matrix(&p("ffn_gate_inp.weight"), e.count, d)?),
                    read_experts(g, &p("ffn_gate_exps.weight"), e.count, ff, d)?,
                    read_experts(g, &p("ffn_up_exps.weight"), e.count, ff, d)?,
                    read_experts(g, &p("ffn_down_exps.weight"), e.count, d, ff)?,
                ),
                (Arch::Phi3, None) => {
                    let gate_up = matrix(&p("ffn_up.weight"), 2 * ff, d)?;
                    let down = matrix(&p("ffn_down.weight"), d, ff)?;
                    (None, gate_up.row_range(0..ff), gate_up.row_range(ff..2 * ff), down)
                }
                _ => (
                    None,
                    matrix(&p("ffn_gate.weight"), ff, d)?,
                    matrix(&p("ffn_up.weight"), ff, d)?,
                    matrix(&p("ffn_down.weight"), d, ff)?,
                ),
            };
            let per_layer = match c.per_layer_input() {
                0 => None,
                width => Some(PerLayerBlock {
                    inp_gate: matrix(&p("inp_gate.weight"), width, d)?,
                    proj: matrix(&p("proj.weight"), d, width)?,
                    post_norm: vector(&p("post_norm.weight"), d)?,
                }),
            };
            let out_scale = match g.tensor(&p("layer_output_scale.weight")) {
                Some(_) if c.arch == Arch::Gemma4 => match vector(&p("layer_output_scale.weight"), 1)?[0] {
                    s if s.is_finite() => Some(s),
                    s => return Err(Error::Model(format!("{} is {s}", p("layer_output_scale.weight")))),
                },
                _ => None,
            };
            layers.push(LayerWeights {
                attn_norm: vector(&p("attn_norm.weight"), d)?,
                wq,
                wk,
                wv,
                bq: bias("attn_q.bias", q)?,
                bk: bias("attn_k.bias", kv)?,
                bv: bias("attn_v.bias", kv)?,
                q_norm: head_norm("attn_q_norm.weight")?,
                k_norm: head_norm("attn_k_norm.weight")?,
                v_norm: (c.arch == Arch::Gemma4 && has_kv).then(|| vec![1.0; head_dim]),
                post_attn_norm: post_norm("post_attention_norm.weight")?,
                post_ffn_norm: post_norm("post_ffw_norm.weight")?,
                wo,
                // Qwen3.5 names the feed-forward block's norm after the attention block it follows.
                ffn_norm: vector(
                    &p(if c.arch == Arch::Qwen35 { "post_attention_norm.weight" } else { "ffn_norm.weight" }),
                    d,
                )?,
                router,
                w_gate,
                w_up,
                w_down,
                per_layer,
                out_scale,
                delta_net,
            });
        }
        let output = match g.tensor("output.weight") {
            Some(_) => matrix("output.weight", c.vocab_size, d)?,
            None => token_embd,
        };
        // RoPE's per-pair divisors, where the file has them: each positive.
        let factors = |name: &str| -> Result<Option<Vec<f32>>> {
            if g.tensor(name).is_none() {
                return Ok(None);
            }
            // Gemma 4's holds one per pair of its global heads (llama.cpp: `n_embd_head / 2`), of which the rotated
            // ones are the first (a file may rotate fewer than all: `rope.dimension_count`).
            let n = if c.layer_shapes.is_some() { c.head_dim / 2 } else { c.rope_dims / 2 };
            let mut f = vector(name, n)?;
            if f.iter().any(|&v| !(v.is_finite() && v > 0.0)) {
                return Err(Error::Model(format!("{name} holds a factor that is not a positive number")));
            }
            f.truncate(c.rope_dims / 2);
            Ok(Some(f))
        };
        let per_layer = match c.per_layer_input() {
            0 => None,
            width => {
                let all = width.checked_mul(c.n_layers).filter(|&n| n < 1 << 31).ok_or_else(|| {
                    Error::Model(format!("per-layer inputs of {width} for {} layers overflow", c.n_layers))
                })?;
                Some(PerLayerEmbedding {
                    token_embd: matrix("per_layer_token_embd.weight", c.vocab_size, all)?,
                    model_proj: matrix("per_layer_model_proj.weight", all, d)?,
                    proj_norm: vector("per_layer_proj_norm.weight", width)?,
                })
            }
        };
        Ok(Weights {
            token_embd,
            layers,
            output_norm: vector("output_norm.weight", d)?,
            output,
            per_layer,
            rope_freqs: factors("rope_freqs.weight")?,
            rope_factors_short: factors("rope_factors_short.weight")?,
            rope_factors_long: factors("rope_factors_long.weight")?,
        })
    }

    /// The decoder weights of an encoder model (`bert`): none. The encoder's own are `model::bert::BertWeights`;
    /// `Evaluator::open` refuses encoder models, so no decoder forward pass ever reads these.
    pub fn encoder_only(token_embd: MatrixRef) -> Weights {
        Weights {
            token_embd,
            layers: Vec::new(),
            output_norm: Vec::new(),
            output: token_embd,
            per_layer: None,
            rope_freqs: None,
            rope_factors_short: None,
            rope_factors_long: None,
        }
    }
}

/// Layer `p("")`'s gated delta-net block of `shape`.
fn delta_net_weights(
    g: &Gguf,
    file: &VectorBytes,
    p: &dyn Fn(&str) -> String,
    d: usize,
    shape: &DeltaNetShape,
) -> Result<DeltaNetWeights> {
    let vector = |name: &str, n: usize| read_vector(g, file, &p(name), n);
    let conv = file.read(shaped(g, &p("ssm_conv1d.weight"), &[shape.conv_kernel, shape.conv_dim()])?)?;
    let weights = DeltaNetWeights {
        qkv: read_matrix(g, &p("attn_qkv.weight"), shape.conv_dim(), d)?,
        gate: read_matrix(g, &p("attn_gate.weight"), shape.value_dim(), d)?,
        alpha: read_matrix(g, &p("ssm_alpha.weight"), shape.v_heads, d)?,
        beta: read_matrix(g, &p("ssm_beta.weight"), shape.v_heads, d)?,
        conv,
        dt_bias: vector("ssm_dt.bias", shape.v_heads)?,
        a: vector("ssm_a", shape.v_heads)?,
        norm: vector("ssm_norm.weight", shape.head_dim)?,
        out: read_matrix(g, &p("ssm_out.weight"), d, shape.value_dim())?,
    };
    let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
    if !(finite(&weights.conv) && finite(&weights.dt_bias) && finite(&weights.a)) {
        return Err(Error::Model(format!("{} holds a value that is not finite", p("ssm_*"))));
    }
    Ok(weights)
}

/// The tensor `name`, which must have the GGUF dims `dims` (innermost first).
fn shaped<'g>(g: &'g Gguf, name: &str, dims: &[usize]) -> Result<&'g TensorInfo> {
    let t = g.tensor(name).ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if t.dims != dims {
        return Err(Error::Model(format!("tensor {name} has shape {:?}, expected {dims:?}", t.dims)));
    }
    Ok(t)
}

/// The 2-D tensor `name`, which must be `rows` rows of `cols` (GGUF dims `[cols, rows]`).
pub(crate) fn read_matrix(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<MatrixRef> {
    let t = shaped(g, name, &[cols, rows])?;
    Ok(MatrixRef { ty: t.ty, rows, cols, offset: t.offset })
}

/// The 3-D tensor `name` of `count` experts' [rows × cols] matrices (GGUF dims [cols, rows, count]), as one matrix of
/// their rows one expert after another.
fn read_experts(g: &Gguf, name: &str, count: usize, rows: usize, cols: usize) -> Result<MatrixRef> {
    let t = shaped(g, name, &[cols, rows, count])?;
    let rows = rows
        .checked_mul(count)
        .ok_or_else(|| Error::Model(format!("tensor {name}: {count} experts of {rows} rows overflow")))?;
    Ok(MatrixRef { ty: t.ty, rows, cols, offset: t.offset })
}

/// The 1-D tensor `name` of `n` elements, converted to f32.
pub(crate) fn read_vector(g: &Gguf, file: &VectorBytes, name: &str, n: usize) -> Result<Vec<f32>> {
    file.read(shaped(g, name, &[n])?)
}

/// Where the weights' vectors (norms, biases, the small f32 tensors copied out of the file) come from.
pub(crate) enum VectorBytes<'a> {
    /// The file's bytes, which must hold them (a file held in part holds them and little else).
    File(&'a ModelBytes),
    /// Nowhere yet: ones in their place, and the byte ranges they would be read from noted ([`Weights::layout`]).
    Noted(&'a RefCell<Vec<Range<u64>>>),
}

impl VectorBytes<'_> {
    /// Tensor `t`'s elements as f32.
    fn read(&self, t: &TensorInfo) -> Result<Vec<f32>> {
        let range = t.range();
        match self {
            VectorBytes::File(file) => {
                let bytes = file.try_get(range).ok_or_else(|| {
                    Error::Model(format!("tensor {}'s bytes are not held in memory (a model held in part)", t.name))
                })?;
                let mut v = vec![0f32; t.n_elements()];
                dequantize_row(t.ty, bytes, &mut v);
                Ok(v)
            }
            VectorBytes::Noted(ranges) => {
                ranges.borrow_mut().push(range);
                Ok(vec![1.0; t.n_elements()])
            }
        }
    }
}
