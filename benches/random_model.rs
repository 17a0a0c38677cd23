//! Writes a GGUF model of Llama-3.2-1B's shapes with random weights, for memory and speed benches of a
//! 1B-class model (issue 24) where the real file cannot be had: memory and speed depend on the tensors'
//! types and shapes, not on their values.
//!
//!   cargo bench -p ruvllm --bench random_model -- --tokenizer-from M.gguf --out OUT.gguf [--layers 16] [--seed 1]
//!     [--mix q4_k_m | q5_k_m] [--arch llama | llama8b | qwen35 | gemma4]
//!
//! `--tokenizer-from` may be a GGUF's header alone (`gpu_bench --write-twin-header`'s file): only its metadata is read.
//! `--arch llama8b` writes Llama-3.1-8B's shapes instead (32 layers, d_model 4096, 32 heads of 128 over 8 KV heads,
//! ffn 14336, its own `output.weight`: ~4.9 GB in Q4_K_M), for the model past 4 GiB that a page streams to the GPU.
//!
//! `--arch qwen35` writes Qwen3.5-0.8B's shapes instead (`qwen35_shape` below: 24 layers, every fourth gated
//! attention and the others gated delta nets, vocab 248,320), in the same mix with its small tensors as llama.cpp's
//! converter writes them (F32 convolution, `ssm_a`, `ssm_dt`), `ssm_a` -1 and `ssm_dt` 0: a decay of 1/2 a token.
//!
//! `--arch gemma4` writes Gemma-4-E2B's shapes instead (`gemma4_shape` below: 35 layers, every fifth global with
//! heads of 512, the others windowed with heads of 256, the last 20 reading earlier layers' keys and values,
//! per-layer inputs of 256, vocab 262,144).
//!
//! What the file is (the same bytes for the same arguments):
//! * `llama` architecture with Llama-3.2-1B's hyper-parameters: 16 layers, d_model 2048, 32 heads, 8 KV
//!   heads, head_dim 64, ffn 8192, vocab 128256, RoPE base 500000 and Llama 3's frequency factors as the
//!   `rope_freqs.weight` tensor llama.cpp's converter writes (factor 32, low/high 1/4, original context 8192;
//!   our loader reads that tensor, there is no `rope.scaling` metadata for it). Tied embeddings: no
//!   `output.weight`, as Llama-3.2-1B.
//! * llama.cpp's Q4_K_M mix for this shape: every matrix Q4_K except `token_embd` (which is also the output
//!   head, so it gets Q4_K_M's output type) and `attn_v` / `ffn_down` in the layers llama.cpp's
//!   `use_more_bits` picks (0, 1, 4, 7, 10, 13, 14, 15 of 16), which are Q6_K; norms F32. `--mix q5_k_m`:
//!   Q5_K_M's, the same with Q5_K for Q4_K. The rules are `model_writer.rs`'s, shared with `requantize_k.rs`.
//! * Weights normal with std 0.02 (norm weights 1), quantized with our reference quantizers (ggml's).
//! * The tokenizer, its metadata and the chat template of `--tokenizer-from` (SmolLM2's byte-level BPE,
//!   49,152 tokens), its token list padded to 128,256 with `<|pad_N|>` tokens of type UNUSED (5), which no
//!   merge produces and no special-token match finds: the embedding and output head have Llama's shapes,
//!   and text tokenizes as with SmolLM2.

#[allow(dead_code)] // the writer's other metadata variants are for the tests
#[path = "../tests/rust/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "model_writer.rs"]
mod model_writer;

use gguf_writer::{GgufWriter, Meta};
use model_writer::{write_checked, Mix};
use rayon::prelude::*;
use ruvllm::gguf::{Gguf, Prefix, Value};
use ruvllm::quant::{quantize_row, GgmlType};

/// A Llama 3 model's shapes.
struct Shape {
    name: &'static str,
    d_model: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    /// Whether the embedding is the output head too (no `output.weight`).
    tied: bool,
}

const LLAMA_1B: Shape =
    Shape { name: "Llama-3.2-1B", d_model: 2048, n_heads: 32, n_kv_heads: 8, head_dim: 64, ffn: 8192, tied: true };
const LLAMA_8B: Shape =
    Shape { name: "Llama-3.1-8B", d_model: 4096, n_heads: 32, n_kv_heads: 8, head_dim: 128, ffn: 14336, tied: false };
const VOCAB: usize = 128_256;
const ROPE_BASE: f32 = 500_000.0;
const STD: f32 = 0.02;

fn main() {
    if let Err(e) = run() {
        eprintln!("random_model: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let src = opt("--tokenizer-from").ok_or("--tokenizer-from M.gguf")?;
    let out = opt("--out").ok_or("--out OUT.gguf")?;
    let seed: u64 = opt("--seed").map_or(Ok(1), |v| v.parse().map_err(|_| format!("--seed {v}")))?;
    let mix = Mix::parse(opt("--mix").as_deref().unwrap_or("q4_k_m"))?;
    let (shape, default_layers) = match opt("--arch").as_deref().unwrap_or("llama") {
        "llama" => (LLAMA_1B, 16),
        "llama8b" => (LLAMA_8B, 32),
        "qwen35" => return qwen35_shape(&src, &out, seed, mix),
        "gemma4" => return gemma4_shape(&src, &out, seed, mix),
        other => return Err(format!("--arch {other}: llama, llama8b, qwen35 or gemma4")),
    };
    let layers = opt("--layers").map_or(Ok(default_layers), |v| v.parse().map_err(|_| format!("--layers {v}")))?;
    let Shape { d_model, n_heads, n_kv_heads, head_dim, ffn, .. } = shape;

    let g = tokenizer_source(&src)?;
    let mut w = GgufWriter::new()
        .meta("general.architecture", Meta::Str("llama".into()))
        .meta("general.name", Meta::Str(format!("{} shapes, random weights (seed {seed})", shape.name)))
        .meta("general.file_type", Meta::U32(mix.file_type()))
        .meta("llama.block_count", Meta::U32(layers as u32))
        .meta("llama.context_length", Meta::U32(131_072))
        .meta("llama.embedding_length", Meta::U32(d_model as u32))
        .meta("llama.feed_forward_length", Meta::U32(ffn as u32))
        .meta("llama.attention.head_count", Meta::U32(n_heads as u32))
        .meta("llama.attention.head_count_kv", Meta::U32(n_kv_heads as u32))
        .meta("llama.attention.key_length", Meta::U32(head_dim as u32))
        .meta("llama.attention.value_length", Meta::U32(head_dim as u32))
        .meta("llama.rope.freq_base", Meta::F32(ROPE_BASE))
        .meta("llama.rope.dimension_count", Meta::U32(head_dim as u32))
        .meta("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5))
        .meta("llama.vocab_size", Meta::U32(VOCAB as u32));
    w = padded_tokenizer(w, &g, &src, VOCAB)?;

    w = w.tensor(
        "rope_freqs.weight",
        &[head_dim as u64 / 2],
        GgmlType::F32 as u32,
        f32_bytes(&llama3_rope_freqs(head_dim)),
    );
    let mut matrices = Matrices::new(mix, layers, shape.tied, seed);
    let mut matrix = |name: String, cols: usize, rows: usize| matrices.make(name, cols, rows);
    let mut tensors = vec![matrix("token_embd.weight".into(), d_model, VOCAB)];
    let ones = vec![1.0; d_model];
    for l in 0..layers {
        let p = |s: &str| format!("blk.{l}.{s}");
        tensors.push(matrix(p("attn_q.weight"), d_model, n_heads * head_dim));
        tensors.push(matrix(p("attn_k.weight"), d_model, n_kv_heads * head_dim));
        tensors.push(matrix(p("attn_v.weight"), d_model, n_kv_heads * head_dim));
        tensors.push(matrix(p("attn_output.weight"), n_heads * head_dim, d_model));
        tensors.push(matrix(p("ffn_gate.weight"), d_model, ffn));
        tensors.push(matrix(p("ffn_up.weight"), d_model, ffn));
        tensors.push(matrix(p("ffn_down.weight"), ffn, d_model));
        tensors.push(f32_tensor(p("attn_norm.weight"), vec![d_model as u64], &ones));
        tensors.push(f32_tensor(p("ffn_norm.weight"), vec![d_model as u64], &ones));
    }
    tensors.push(f32_tensor("output_norm.weight".into(), vec![d_model as u64], &ones));
    if !shape.tied {
        tensors.push(matrix("output.weight".into(), d_model, VOCAB));
    }
    write_model(w, tensors, &out, matrices.t0)
}

/// The header of `src`, a GGUF file or its first bytes (only the metadata is read).
fn tokenizer_source(src: &str) -> Result<Gguf, String> {
    let bytes = std::fs::read(src).map_err(|e| format!("{src}: {e}"))?;
    match Gguf::parse_prefix(&bytes, None).map_err(|e| format!("{src}: {e}"))? {
        Prefix::Complete(g) => Ok(g),
        Prefix::Need(n) => Err(format!("{src}: its header needs {n} bytes, the file has {}", bytes.len())),
    }
}

/// `src`'s tokenizer metadata into `w`, its token list padded to `vocab` with `<|pad_N|>` tokens of type UNUSED.
fn padded_tokenizer(mut w: GgufWriter, g: &Gguf, src: &str, vocab: usize) -> Result<GgufWriter, String> {
    let n_src_tokens = g.get("tokenizer.ggml.tokens").and_then(Value::as_array).map_or(0, |a| a.len());
    if n_src_tokens == 0 || n_src_tokens > vocab {
        return Err(format!("{src}: {n_src_tokens} tokens (want 1..={vocab})"));
    }
    for (key, value) in &g.metadata {
        if !(key.starts_with("tokenizer.")) {
            continue;
        }
        let mut value = value.clone();
        if let Value::Array(items) = &mut value {
            let pad = vocab - n_src_tokens;
            match key.as_str() {
                "tokenizer.ggml.tokens" => items.extend((0..pad).map(|i| Value::String(format!("<|pad_{i}|>")))),
                "tokenizer.ggml.token_type" => items.extend((0..pad).map(|_| Value::I32(5))),
                "tokenizer.ggml.scores" => items.extend((0..pad).map(|_| Value::F32(0.0))),
                _ => {}
            }
        }
        w = w.meta(key, Meta::of(&value)?);
    }
    Ok(w)
}

/// Qwen3.5-0.8B's shapes with random weights: d_model 1024, 24 layers (3, 7, ... gated attention: 8 heads of 256
/// over 2 KV heads, 64 dimensions rotated in sections [11, 11, 10, 0], base 10^7; the others gated delta nets: 16
/// key and 16 value heads of 128, a convolution of 4 taps), ffn 3584, vocab 248,320, tied embedding.
fn qwen35_shape(src: &str, out: &str, seed: u64, mix: Mix) -> Result<(), String> {
    const D: usize = 1024;
    const LAYERS: usize = 24;
    const HEADS: usize = 8;
    const KV_HEADS: usize = 2;
    const HEAD: usize = 256;
    const FF: usize = 3584;
    const VOCAB: usize = 248_320;
    const DN_HEADS: usize = 16;
    const DN_HEAD: usize = 128;
    const TAPS: usize = 4;
    let conv_dim = 3 * DN_HEADS * DN_HEAD;
    let g = tokenizer_source(src)?;
    let key = |k: &str| format!("qwen35.{k}");
    let sections = Meta::I32Array(vec![11, 11, 10, 0]);
    let w = GgufWriter::new()
        .meta("general.architecture", Meta::Str("qwen35".into()))
        .meta("general.name", Meta::Str(format!("Qwen3.5-0.8B shapes, random weights (seed {seed})")))
        .meta("general.file_type", Meta::U32(mix.file_type()))
        .meta(&key("block_count"), Meta::U32(LAYERS as u32))
        .meta(&key("context_length"), Meta::U32(262_144))
        .meta(&key("embedding_length"), Meta::U32(D as u32))
        .meta(&key("feed_forward_length"), Meta::U32(FF as u32))
        .meta(&key("attention.head_count"), Meta::U32(HEADS as u32))
        .meta(&key("attention.head_count_kv"), Meta::U32(KV_HEADS as u32))
        .meta(&key("attention.key_length"), Meta::U32(HEAD as u32))
        .meta(&key("attention.value_length"), Meta::U32(HEAD as u32))
        .meta(&key("attention.layer_norm_rms_epsilon"), Meta::F32(1e-6))
        .meta(&key("rope.freq_base"), Meta::F32(10_000_000.0))
        .meta(&key("rope.dimension_count"), Meta::U32(64))
        .meta(&key("rope.dimension_sections"), sections)
        .meta(&key("full_attention_interval"), Meta::U32(4))
        .meta(&key("ssm.conv_kernel"), Meta::U32(TAPS as u32))
        .meta(&key("ssm.state_size"), Meta::U32(DN_HEAD as u32))
        .meta(&key("ssm.group_count"), Meta::U32(DN_HEADS as u32))
        .meta(&key("ssm.time_step_rank"), Meta::U32(DN_HEADS as u32))
        .meta(&key("ssm.inner_size"), Meta::U32((DN_HEADS * DN_HEAD) as u32));
    let w = padded_tokenizer(w, &g, src, VOCAB)?;
    let mut matrices = Matrices::new(mix, LAYERS, true, seed);
    let mut matrix = |name: String, cols: usize, rows: usize| matrices.make(name, cols, rows);
    let f32s = |name: String, dims: Vec<u64>, v: &[f32]| f32_tensor(name, dims, v);
    let mut tensors = vec![matrix("token_embd.weight".into(), D, VOCAB)];
    for l in 0..LAYERS {
        let p = |s: &str| format!("blk.{l}.{s}");
        tensors.push(f32s(p("attn_norm.weight"), vec![D as u64], &[1.0; D]));
        tensors.push(f32s(p("post_attention_norm.weight"), vec![D as u64], &[1.0; D]));
        if (l + 1) % 4 == 0 {
            tensors.push(matrix(p("attn_q.weight"), D, 2 * HEADS * HEAD));
            tensors.push(matrix(p("attn_k.weight"), D, KV_HEADS * HEAD));
            tensors.push(matrix(p("attn_v.weight"), D, KV_HEADS * HEAD));
            tensors.push(matrix(p("attn_output.weight"), HEADS * HEAD, D));
            tensors.push(f32s(p("attn_q_norm.weight"), vec![HEAD as u64], &[1.0; HEAD]));
            tensors.push(f32s(p("attn_k_norm.weight"), vec![HEAD as u64], &[1.0; HEAD]));
        } else {
            tensors.push(matrix(p("attn_qkv.weight"), D, conv_dim));
            tensors.push(matrix(p("attn_gate.weight"), D, DN_HEADS * DN_HEAD));
            tensors.push(matrix(p("ssm_alpha.weight"), D, DN_HEADS));
            tensors.push(matrix(p("ssm_beta.weight"), D, DN_HEADS));
            let conv: Vec<f32> = (0..conv_dim * TAPS).map(|i| if i % TAPS == TAPS - 1 { 1.0 } else { 0.25 }).collect();
            tensors.push(f32s(p("ssm_conv1d.weight"), vec![TAPS as u64, conv_dim as u64], &conv));
            tensors.push(f32s(p("ssm_dt.bias"), vec![DN_HEADS as u64], &[0.0; DN_HEADS]));
            tensors.push(f32s(p("ssm_a"), vec![DN_HEADS as u64], &[-1.0; DN_HEADS]));
            tensors.push(f32s(p("ssm_norm.weight"), vec![DN_HEAD as u64], &[1.0; DN_HEAD]));
            tensors.push(matrix(p("ssm_out.weight"), DN_HEADS * DN_HEAD, D));
        }
        tensors.push(matrix(p("ffn_gate.weight"), D, FF));
        tensors.push(matrix(p("ffn_up.weight"), D, FF));
        tensors.push(matrix(p("ffn_down.weight"), FF, D));
    }
    tensors.push(f32s("output_norm.weight".into(), vec![D as u64], &[1.0; D]));
    write_model(w, tensors, out, matrices.t0)
}

/// Gemma-4-E2B's shapes with random weights: d_model 1536, 35 layers (4, 9, ... global: 8 heads of 512 over one KV
/// head, RoPE on a quarter of each, "proportional": frequency factors of 1e30 on the other pairs, base 10^6; the
/// others windowed, 512 positions: heads of 256 over one KV head, all rotated, base 10^4), ffn 6144 (12,288 on the
/// last 20 layers, which read the keys and values of layers 13 and 14), per-layer inputs of 256, vocab 262,144,
/// tied embedding, logits soft-capped at 30.
fn gemma4_shape(src: &str, out: &str, seed: u64, mix: Mix) -> Result<(), String> {
    const D: usize = 1536;
    const LAYERS: usize = 35;
    const HEADS: usize = 8;
    const HEAD: usize = 512;
    const HEAD_SWA: usize = 256;
    const SHARED: usize = 20;
    const PER_LAYER: usize = 256;
    const VOCAB: usize = 262_144;
    let windowed = |l: usize| !(l + 1).is_multiple_of(5);
    let ffn = |l: usize| if l >= LAYERS - SHARED { 12_288 } else { 6144 };
    let g = tokenizer_source(src)?;
    let key = |k: &str| format!("gemma4.{k}");
    let u32s = |v: Vec<u32>| Meta::Array(4, v.into_iter().map(Meta::U32).collect());
    let w = GgufWriter::new()
        .meta("general.architecture", Meta::Str("gemma4".into()))
        .meta("general.name", Meta::Str(format!("Gemma-4-E2B shapes, random weights (seed {seed})")))
        .meta("general.file_type", Meta::U32(mix.file_type()))
        .meta(&key("block_count"), Meta::U32(LAYERS as u32))
        .meta(&key("context_length"), Meta::U32(131_072))
        .meta(&key("embedding_length"), Meta::U32(D as u32))
        .meta(&key("feed_forward_length"), u32s((0..LAYERS).map(|l| ffn(l) as u32).collect()))
        .meta(&key("attention.head_count"), Meta::U32(HEADS as u32))
        .meta(&key("attention.head_count_kv"), Meta::U32(1))
        .meta(&key("attention.key_length"), Meta::U32(HEAD as u32))
        .meta(&key("attention.value_length"), Meta::U32(HEAD as u32))
        .meta(&key("attention.key_length_swa"), Meta::U32(HEAD_SWA as u32))
        .meta(&key("attention.value_length_swa"), Meta::U32(HEAD_SWA as u32))
        .meta(&key("attention.sliding_window"), Meta::U32(512))
        .meta(
            &key("attention.sliding_window_pattern"),
            Meta::Array(7, (0..LAYERS).map(|l| Meta::Bool(windowed(l))).collect()),
        )
        .meta(&key("attention.shared_kv_layers"), Meta::U32(SHARED as u32))
        .meta(&key("attention.layer_norm_rms_epsilon"), Meta::F32(1e-6))
        .meta(&key("embedding_length_per_layer_input"), Meta::U32(PER_LAYER as u32))
        .meta(&key("rope.freq_base"), Meta::F32(1_000_000.0))
        .meta(&key("rope.dimension_count"), Meta::U32(HEAD as u32))
        .meta(&key("rope.freq_base_swa"), Meta::F32(10_000.0))
        .meta(&key("rope.dimension_count_swa"), Meta::U32(HEAD_SWA as u32))
        .meta(&key("final_logit_softcapping"), Meta::F32(30.0));
    let w = padded_tokenizer(w, &g, src, VOCAB)?;
    let mut matrices = Matrices::new(mix, LAYERS, true, seed);
    let mut matrix = |name: String, cols: usize, rows: usize| matrices.make(name, cols, rows);
    let f32s = |name: String, v: &[f32]| f32_tensor(name, vec![v.len() as u64], v);
    let factors: Vec<f32> = (0..HEAD / 2).map(|i| if i < HEAD / 8 { 1.0 } else { 1e30 }).collect();
    let mut tensors = vec![
        matrix("token_embd.weight".into(), D, VOCAB),
        matrix("per_layer_token_embd.weight".into(), PER_LAYER * LAYERS, VOCAB),
        matrix("per_layer_model_proj.weight".into(), D, PER_LAYER * LAYERS),
        f32s("per_layer_proj_norm.weight".into(), &[1.0; PER_LAYER]),
        f32s("rope_freqs.weight".into(), &factors),
    ];
    for l in 0..LAYERS {
        let p = |s: &str| format!("blk.{l}.{s}");
        let hd = if windowed(l) { HEAD_SWA } else { HEAD };
        tensors.push(f32s(p("attn_norm.weight"), &[1.0; D]));
        tensors.push(matrix(p("attn_q.weight"), D, HEADS * hd));
        if l < LAYERS - SHARED {
            tensors.push(matrix(p("attn_k.weight"), D, hd));
            tensors.push(matrix(p("attn_v.weight"), D, hd));
            tensors.push(f32s(p("attn_k_norm.weight"), &vec![1.0; hd]));
        }
        // Scores of about unit spread with Gemma 4's unscaled attention.
        tensors.push(f32s(p("attn_q_norm.weight"), &vec![1.0 / (hd as f32).sqrt(); hd]));
        tensors.push(matrix(p("attn_output.weight"), HEADS * hd, D));
        tensors.push(f32s(p("post_attention_norm.weight"), &[1.0; D]));
        tensors.push(f32s(p("ffn_norm.weight"), &[1.0; D]));
        tensors.push(matrix(p("ffn_gate.weight"), D, ffn(l)));
        tensors.push(matrix(p("ffn_up.weight"), D, ffn(l)));
        tensors.push(matrix(p("ffn_down.weight"), ffn(l), D));
        tensors.push(f32s(p("post_ffw_norm.weight"), &[1.0; D]));
        tensors.push(matrix(p("inp_gate.weight"), D, PER_LAYER));
        tensors.push(matrix(p("proj.weight"), PER_LAYER, D));
        tensors.push(f32s(p("post_norm.weight"), &[1.0; D]));
        tensors.push(f32s(p("layer_output_scale.weight"), &[1.0]));
    }
    tensors.push(f32s("output_norm.weight".into(), &[1.0; D]));
    write_model(w, tensors, out, matrices.t0)
}

/// A tensor of the file: name, dimensions, GGML type id, bytes.
type Tensor = (String, Vec<u64>, u32, Vec<u8>);

/// The file's matrices in turn, each in the mix's type for its name and shape (`tied`: the embedding is the output
/// head too), random ([`random_matrix`]: the `n`-th one made takes tensor seed `n`), their progress on stderr.
struct Matrices {
    mix: Mix,
    n_layers: usize,
    tied: bool,
    seed: u64,
    made: u64,
    t0: std::time::Instant,
}

impl Matrices {
    fn new(mix: Mix, n_layers: usize, tied: bool, seed: u64) -> Matrices {
        Matrices { mix, n_layers, tied, seed, made: 0, t0: std::time::Instant::now() }
    }

    fn make(&mut self, name: String, cols: usize, rows: usize) -> Tensor {
        let ty = self.mix.tensor_type(&name, &[cols, rows], self.n_layers, self.tied).expect("a matrix is quantized");
        self.made += 1;
        eprintln!("random_model: {name} {ty:?} [{cols}, {rows}] at {:.1} s", self.t0.elapsed().as_secs_f64());
        let data = random_matrix(ty, cols, rows, self.seed, self.made);
        (name, vec![cols as u64, rows as u64], ty as u32, data)
    }
}

/// An F32 tensor of `dims` holding `v`.
fn f32_tensor(name: String, dims: Vec<u64>, v: &[f32]) -> Tensor {
    (name, dims, GgmlType::F32 as u32, f32_bytes(v))
}

/// `w` with `tensors` written to `out`, once it loads and gives finite logits (`write_checked`); what it is, on
/// stderr (`t0`: when the writing began).
fn write_model(mut w: GgufWriter, tensors: Vec<Tensor>, out: &str, t0: std::time::Instant) -> Result<(), String> {
    for (name, dims, ty, data) in tensors {
        w = w.tensor(&name, &dims, ty, data);
    }
    let bytes = w.bytes();
    drop(w);
    let n_bytes = bytes.len();
    let (model, lo, hi) = write_checked(out, bytes)?;
    eprintln!(
        "random_model: {out}: {n_bytes} bytes, {} layers, vocab {}, logits in [{lo:.3}, {hi:.3}], in {:.1} s",
        model.config.n_layers,
        model.config.vocab_size,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Llama 3's RoPE frequency divisors, as llama.cpp's converter writes `rope_freqs.weight` for Llama 3.2
/// (`rope_scaling`: factor 32, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192).
fn llama3_rope_freqs(head_dim: usize) -> Vec<f32> {
    let (factor, low, high, old_ctx) = (32f64, 1f64, 4f64, 8192f64);
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / (ROPE_BASE as f64).powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let divisor = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect()
}

/// `rows` rows of `cols` normal(0, STD) values quantized to `ty`; each row from its own generator seeded by
/// (seed, tensor, row), so the bytes do not depend on how rows are spread over threads.
fn random_matrix(ty: GgmlType, cols: usize, rows: usize, seed: u64, tensor: u64) -> Vec<u8> {
    let row_bytes = cols / ty.block_size() * ty.block_bytes();
    let mut out = vec![0u8; rows * row_bytes];
    out.par_chunks_mut(row_bytes).enumerate().for_each_init(
        || vec![0f32; cols],
        |x, (r, dst)| {
            let mut s = splitmix(seed ^ splitmix(tensor << 32 | r as u64));
            for pair in x.chunks_mut(2) {
                // Box-Muller from two uniforms in (0, 1].
                let u1 = ((splitmix(s) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                let u2 = (splitmix(s.wrapping_add(1)) >> 11) as f64 / (1u64 << 53) as f64;
                s = s.wrapping_add(2);
                let (rad, ang) = ((-2.0 * u1.ln()).sqrt(), 2.0 * std::f64::consts::PI * u2);
                pair[0] = (rad * ang.cos()) as f32 * STD;
                if let Some(v) = pair.get_mut(1) {
                    *v = (rad * ang.sin()) as f32 * STD;
                }
            }
            quantize_row(ty, x, dst);
        },
    );
    out
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
