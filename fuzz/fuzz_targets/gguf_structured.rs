#![no_main]
//! Structure-aware GGUF files: the input describes a small llama or qwen2 model (shapes, tensor types and
//! bytes, a vocabulary and its tokenizer settings), the tests' GGUF writer writes it, and the model is loaded
//! and run: a prompt tokenized and a couple of tokens generated in a tiny context. The description is
//! consistent unless told otherwise, so that mutations get past the header to the loader's checks, the
//! tokenizer and the forward pass; its edits break one part at a time (metadata of any type under the keys
//! the loader reads, tensors dropped, added, reshaped or retyped).

#[path = "../../tests/rust/support/gguf_writer.rs"]
#[allow(dead_code)]
mod gguf_writer;

use std::collections::HashSet;
use std::sync::Arc;

use arbitrary::Arbitrary;
use gguf_writer::{GgufWriter, Meta, Tensor};
use libfuzzer_sys::fuzz_target;
use ruvllm::quant::GgmlType;
use ruvllm::{GenerateOptions, Model, SamplerConfig, Session, SessionOptions};

#[derive(Arbitrary, Debug)]
enum Arch {
    Llama,
    Qwen2,
    Other(String),
}

#[derive(Arbitrary, Debug)]
struct Shape {
    /// 1 or 2 layers.
    layers: u8,
    /// d_model: 32, 64, 128 or 256 (a multiple of every block size only at 256).
    d_model: u8,
    /// 1, 2, 4 or 8 heads, and KV heads as many or fewer (a divisor).
    heads: u8,
    kv_heads: u8,
    /// ffn: 32, 64 or 256.
    ffn: u8,
    /// context_length 1..=64.
    context: u8,
}

#[derive(Arbitrary, Debug)]
enum TokenizerKind {
    /// SentencePiece: <unk> <s> </s> first, byte tokens <0x00>..<0xFF> when asked.
    Spm {
        byte_tokens: bool,
    },
    /// Byte-level BPE: GPT-2's 256 byte characters when asked, and `tokenizer.ggml.pre`.
    Bpe {
        byte_chars: bool,
        pre: Pre,
    },
    /// SentencePiece's unigram model (`t5`): <pad> </s> <unk> first, and a precompiled character map of these XCDA
    /// entries and replacement bytes (its size header consistent with them unless `size_off` says otherwise).
    Ugm {
        xcda: Vec<u32>,
        replacements: Vec<u8>,
        size_off: i8,
        remove_extra_whitespaces: bool,
    },
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Pre {
    None,
    Default,
    Gpt2,
    Smollm,
    Llama3,
    Qwen2,
    Other(String),
}

#[derive(Arbitrary, Debug)]
struct Token {
    text: String,
    /// tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
    ty: i8,
    score: f32,
}

#[derive(Arbitrary, Debug)]
struct Vocabulary {
    kind: TokenizerKind,
    tokens: Vec<Token>,
    /// Merges of two tokens (indices into the vocabulary); their concatenation joins the vocabulary.
    merges: Vec<(u16, u16)>,
    bos: Option<u16>,
    eos: Option<u16>,
    add_bos: Option<bool>,
    chat_template: Option<String>,
}

/// A GGUF metadata value of any type; an array takes the type of its first element (and drops the others).
#[derive(Arbitrary, Debug)]
enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Vec<Value>),
}

/// Keys the loader reads: `<arch>.` + one of ARCH_KEYS, one of KEYS, or any other.
#[derive(Arbitrary, Debug)]
enum Key {
    Arch(u8),
    Global(u8),
    Other(String),
}

const ARCH_KEYS: &[&str] = &[
    "block_count",
    "embedding_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "rope.dimension_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "feed_forward_length",
    "context_length",
    "attention.layer_norm_rms_epsilon",
    "rope.freq_base",
];

const KEYS: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "general.name",
    "tokenizer.chat_template",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.ggml.remove_extra_whitespaces",
    "tokenizer.ggml.precompiled_charsmap",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
    "tokenizer.ggml.prefix_token_id",
    "tokenizer.ggml.suffix_token_id",
    "tokenizer.ggml.middle_token_id",
];

/// Tensors of layer N (`blk.N.` + name): every layer has the first 9, qwen2's the 3 biases too (a llama's may).
const LAYER_TENSORS: &[&str] = &[
    "attn_norm.weight",
    "attn_q.weight",
    "attn_k.weight",
    "attn_v.weight",
    "attn_output.weight",
    "ffn_norm.weight",
    "ffn_gate.weight",
    "ffn_up.weight",
    "ffn_down.weight",
    "attn_q.bias",
    "attn_k.bias",
    "attn_v.bias",
];
const MODEL_TENSORS: &[&str] = &["token_embd.weight", "output_norm.weight", "output.weight"];

#[derive(Arbitrary, Debug)]
enum TensorEdit {
    /// Remove the tensor (index modulo the count).
    Drop(u8),
    /// New dimensions (1..=4 of them; a 0 is kept, the parser must refuse it), data resized to match.
    Reshape(u8, Vec<u16>),
    /// A type id of any value, the data resized when it is a known type.
    Retype(u8, u32),
    /// Another tensor under a real name (`output.weight`, a llama's biases, a layer past block_count), of
    /// `dims` (empty: [d_model, vocabulary]).
    Add { layer: Option<u8>, name: u8, dims: Vec<u16>, ty: u8 },
}

#[derive(Arbitrary, Debug)]
struct Sampling {
    temperature: u8,
    top_k: u8,
    top_p: u8,
    min_p: u8,
    repeat_penalty: u8,
    presence_penalty: i8,
    frequency_penalty: i8,
    penalty_last_n: u8,
    seed: u64,
}

#[derive(Arbitrary, Debug)]
struct Input {
    version: u8,
    arch: Arch,
    shape: Shape,
    vocab: Vocabulary,
    /// Tensor types, cycled over the tensors (an index into the supported types; one whose block does not
    /// divide the row length becomes F32).
    types: Vec<u8>,
    /// Tensor bytes, cycled (zeros when empty).
    data: Vec<u8>,
    meta_edits: Vec<(Key, Value)>,
    tensor_edits: Vec<TensorEdit>,
    prompt: String,
    parse_special: bool,
    n_ctx: u8,
    n_batch: u8,
    sampling: Sampling,
}

impl Value {
    fn meta(&self) -> Meta {
        match self {
            Value::U8(x) => Meta::U8(*x),
            Value::I8(x) => Meta::I8(*x),
            Value::U16(x) => Meta::U16(*x),
            Value::I16(x) => Meta::I16(*x),
            Value::U32(x) => Meta::U32(*x),
            Value::I32(x) => Meta::I32(*x),
            Value::F32(x) => Meta::F32(*x),
            Value::Bool(x) => Meta::Bool(*x),
            Value::Str(x) => Meta::Str(x.clone()),
            Value::U64(x) => Meta::U64(*x),
            Value::I64(x) => Meta::I64(*x),
            Value::F64(x) => Meta::F64(*x),
            Value::Array(items) => {
                let items: Vec<Meta> = items.iter().map(Value::meta).collect();
                let elem = items.first().map_or(0, Meta::type_id);
                Meta::Array(elem, items.into_iter().filter(|m| m.type_id() == elem).collect())
            }
        }
    }
}

/// GPT-2's byte-to-character map (byte-level BPE vocabularies spell bytes with these characters).
fn gpt2_byte_chars() -> Vec<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut n = 0;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            char::from_u32(c).unwrap().to_string()
        })
        .collect()
}

/// Bytes of a `ty` tensor of `dims`, or None when they are not a whole number of blocks or over 4 MiB.
fn tensor_size(ty: GgmlType, dims: &[u64]) -> Option<usize> {
    let row = *dims.first()? as usize;
    if row % ty.block_size() != 0 {
        return None;
    }
    let rows = dims[1..].iter().try_fold(1usize, |n, &d| n.checked_mul(d as usize))?;
    ty.row_bytes(row).checked_mul(rows).filter(|&n| n <= 4 << 20)
}

/// `n` bytes of `data` repeated (zeros if it is empty), copied by doubling: a byte-at-a-time loop is slow under
/// coverage instrumentation.
fn fill(data: &[u8], n: usize) -> Vec<u8> {
    if data.is_empty() {
        return vec![0; n];
    }
    let mut out = Vec::with_capacity(n);
    out.extend_from_slice(&data[..data.len().min(n)]);
    while out.len() < n {
        out.extend_from_within(..out.len().min(n - out.len()));
    }
    out
}

fn dims_of(raw: &[u16]) -> Vec<u64> {
    raw.iter().take(4).map(|&d| d as u64).collect()
}

fn build(input: &Input) -> Vec<u8> {
    let arch = match &input.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
        Arch::Other(s) => s.as_str(),
    };
    let s = &input.shape;
    let n_layers = 1 + s.layers as u64 % 2;
    let d = [32u64, 64, 128, 256][s.d_model as usize % 4];
    let heads = 1u64 << (s.heads % 4);
    let kv_heads = heads >> (s.kv_heads as u32 % (heads.trailing_zeros() + 1));
    let ffn = [32u64, 64, 256][s.ffn as usize % 3];
    let kv_dim = kv_heads * (d / heads);

    // The vocabulary: the model type's fixed tokens, the input's, and each merge's result, without duplicates.
    let v = &input.vocab;
    let mut texts: Vec<String> = Vec::new();
    let mut types: Vec<i32> = Vec::new();
    let mut scores: Vec<f32> = Vec::new();
    let mut seen = HashSet::new();
    let mut push = |text: String, ty: i32, score: f32, texts: &mut Vec<String>| {
        if seen.insert(text.clone()) {
            texts.push(text);
            types.push(ty);
            scores.push(score);
        }
    };
    let kind_name = match &v.kind {
        TokenizerKind::Spm { byte_tokens } => {
            for (t, ty) in [("<unk>", 2), ("<s>", 3), ("</s>", 3)] {
                push(t.into(), ty, 0.0, &mut texts);
            }
            if *byte_tokens {
                (0..=255u8).for_each(|b| push(format!("<0x{b:02X}>"), 6, 0.0, &mut texts));
            }
            "llama".to_string()
        }
        TokenizerKind::Bpe { byte_chars, .. } => {
            if *byte_chars {
                gpt2_byte_chars().into_iter().for_each(|c| push(c, 1, 0.0, &mut texts));
            }
            "gpt2".to_string()
        }
        TokenizerKind::Ugm { .. } => {
            for (t, ty) in [("<pad>", 3), ("</s>", 3), ("<unk>", 2)] {
                push(t.into(), ty, 0.0, &mut texts);
            }
            "t5".to_string()
        }
        TokenizerKind::Other(name) => name.clone(),
    };
    for t in &v.tokens {
        push(t.text.clone(), t.ty as i32, t.score, &mut texts);
    }
    let mut merges = Vec::new();
    for &(a, b) in &v.merges {
        if texts.is_empty() {
            break;
        }
        let (a, b) = (texts[a as usize % texts.len()].clone(), texts[b as usize % texts.len()].clone());
        merges.push(format!("{a} {b}"));
        push(a + &b, 1, -(merges.len() as f32), &mut texts);
    }
    let n_vocab = texts.len().max(1) as u64;

    let mut w = GgufWriter::new();
    w.version = 2 + input.version as u32 % 2;
    let a = |k: &str| format!("{arch}.{k}");
    w = w
        .meta("general.architecture", Meta::Str(arch.into()))
        .meta(&a("block_count"), Meta::U32(n_layers as u32))
        .meta(&a("embedding_length"), Meta::U32(d as u32))
        .meta(&a("attention.head_count"), Meta::U32(heads as u32))
        .meta(&a("attention.head_count_kv"), Meta::U32(kv_heads as u32))
        .meta(&a("feed_forward_length"), Meta::U32(ffn as u32))
        .meta(&a("context_length"), Meta::U32(1 + s.context as u32 % 64))
        .meta("tokenizer.ggml.model", Meta::Str(kind_name))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(texts))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(types))
        .meta("tokenizer.ggml.scores", Meta::F32Array(scores));
    if let TokenizerKind::Bpe { pre, .. } = &v.kind {
        w = w.meta("tokenizer.ggml.merges", Meta::StrArray(merges));
        let pre = match pre {
            Pre::None => None,
            Pre::Default => Some("default"),
            Pre::Gpt2 => Some("gpt-2"),
            Pre::Smollm => Some("smollm"),
            Pre::Llama3 => Some("llama-bpe"),
            Pre::Qwen2 => Some("qwen2"),
            Pre::Other(s) => Some(s.as_str()),
        };
        if let Some(pre) = pre {
            w = w.meta("tokenizer.ggml.pre", Meta::Str(pre.into()));
        }
    }
    for (key, id) in [("tokenizer.ggml.bos_token_id", v.bos), ("tokenizer.ggml.eos_token_id", v.eos)] {
        if let Some(id) = id {
            w = w.meta(key, Meta::U32(id as u32 % n_vocab as u32));
        }
    }
    if let TokenizerKind::Ugm { xcda, replacements, size_off, remove_extra_whitespaces } = &v.kind {
        let size = (xcda.len() as u32 * 4).wrapping_add(*size_off as i32 as u32);
        let mut map = size.to_le_bytes().to_vec();
        xcda.iter().for_each(|e| map.extend_from_slice(&e.to_le_bytes()));
        map.extend_from_slice(replacements);
        w = w
            .meta("tokenizer.ggml.precompiled_charsmap", Meta::U8Array(map))
            .meta("tokenizer.ggml.remove_extra_whitespaces", Meta::Bool(*remove_extra_whitespaces));
    }
    if let Some(b) = v.add_bos {
        w = w.meta("tokenizer.ggml.add_bos_token", Meta::Bool(b));
    }
    if let Some(t) = &v.chat_template {
        w = w.meta("tokenizer.chat_template", Meta::Str(t.clone()));
    }
    // Metadata edits replace an entry of the same key (the parser refuses duplicates) or add one.
    for (key, value) in &input.meta_edits {
        let key = match key {
            Key::Arch(i) => a(ARCH_KEYS[*i as usize % ARCH_KEYS.len()]),
            Key::Global(i) => KEYS[*i as usize % KEYS.len()].to_string(),
            Key::Other(k) => k.clone(),
        };
        match w.meta.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value.meta(),
            None => w.meta.push((key, value.meta())),
        }
    }

    // Tensors: [cols, rows] as GGUF writes them.
    let mut shapes: Vec<(String, Vec<u64>)> =
        vec![("token_embd.weight".into(), vec![d, n_vocab]), ("output_norm.weight".into(), vec![d])];
    for i in 0..n_layers {
        let n_tensors = if arch == "qwen2" { 12 } else { 9 };
        for &name in &LAYER_TENSORS[..n_tensors] {
            let dims = match name {
                "attn_norm.weight" | "ffn_norm.weight" | "attn_q.bias" => vec![d],
                "attn_k.bias" | "attn_v.bias" => vec![kv_dim],
                "attn_q.weight" | "attn_output.weight" => vec![d, d],
                "attn_k.weight" | "attn_v.weight" => vec![d, kv_dim],
                "ffn_gate.weight" | "ffn_up.weight" => vec![d, ffn],
                _ => vec![ffn, d], // ffn_down
            };
            shapes.push((format!("blk.{i}.{name}"), dims));
        }
    }
    let pick = |i: usize, dims: &[u64]| {
        let t = input.types.get(i % input.types.len().max(1)).copied().unwrap_or(0);
        let ty = GgmlType::ALL[t as usize % GgmlType::ALL.len()];
        if dims[0] as usize % ty.block_size() == 0 {
            ty
        } else {
            GgmlType::F32
        }
    };
    let mut tensors: Vec<Tensor> = Vec::new();
    for (i, (name, dims)) in shapes.into_iter().enumerate() {
        let ty = pick(i, &dims);
        let Some(n) = tensor_size(ty, &dims) else { continue };
        tensors.push(Tensor { name, dims, type_id: ty as u32, data: fill(&input.data, n), zeros: 0 });
    }
    for edit in &input.tensor_edits {
        let at = |i: u8| (!tensors.is_empty()).then(|| i as usize % tensors.len());
        match edit {
            TensorEdit::Drop(i) => {
                if let Some(i) = at(*i) {
                    tensors.remove(i);
                }
            }
            TensorEdit::Reshape(i, dims) => {
                if let Some(i) = at(*i) {
                    let t = &mut tensors[i];
                    t.dims = dims_of(dims);
                    if let Some(n) = GgmlType::from_id(t.type_id).and_then(|ty| tensor_size(ty, &t.dims)) {
                        t.data = fill(&input.data, n);
                    }
                }
            }
            TensorEdit::Retype(i, ty) => {
                if let Some(i) = at(*i) {
                    let t = &mut tensors[i];
                    t.type_id = *ty;
                    if let Some(n) = GgmlType::from_id(*ty).and_then(|ty| tensor_size(ty, &t.dims)) {
                        t.data = fill(&input.data, n);
                    }
                }
            }
            TensorEdit::Add { layer, name, dims, ty } => {
                let name = match layer {
                    Some(i) => format!("blk.{}.{}", i % 4, LAYER_TENSORS[*name as usize % LAYER_TENSORS.len()]),
                    None => MODEL_TENSORS[*name as usize % MODEL_TENSORS.len()].to_string(),
                };
                let dims = if dims.is_empty() { vec![d, n_vocab] } else { dims_of(dims) };
                let ty = GgmlType::ALL[*ty as usize % GgmlType::ALL.len()];
                let data = tensor_size(ty, &dims).map_or_else(Vec::new, |n| fill(&input.data, n));
                tensors.push(Tensor { name, dims, type_id: ty as u32, data, zeros: 0 });
            }
        }
    }
    w.tensors = tensors;
    w.bytes()
}

fn run(input: &Input, bytes: Vec<u8>) {
    let Ok(model) = Model::from_bytes(bytes) else { return };
    let model = Arc::new(model);
    let t = model.tokenizer();
    let Ok(mut ids) = t.encode_with_special(&input.prompt, input.parse_special) else { return };
    // A context of 1..=8 tokens, with room for one generated token after the prompt.
    let n_ctx = (1 + input.n_ctx as usize % 8).min(model.config.context_length);
    ids.truncate(n_ctx - 1);
    let opts = SessionOptions { n_ctx, n_batch: 1 + input.n_batch as usize % 4 };
    let Ok(mut session) = Session::with_options(model.clone(), &opts) else { return };
    let s = &input.sampling;
    let sampler = SamplerConfig {
        temperature: s.temperature as f32 / 64.0,
        top_k: s.top_k as usize,
        top_p: (s.top_p as f32 + 1.0) / 256.0,
        min_p: s.min_p as f32 / 255.0,
        repeat_penalty: (s.repeat_penalty as f32 + 1.0) / 64.0,
        presence_penalty: s.presence_penalty as f32 / 16.0,
        frequency_penalty: s.frequency_penalty as f32 / 16.0,
        penalty_last_n: s.penalty_last_n as usize,
        seed: s.seed,
    };
    let opts = GenerateOptions { max_tokens: 2, sampler, ..Default::default() };
    if let Ok(out) = session.generate(&ids, opts, None, |_| {}) {
        assert!(out.ids.len() <= 2 && out.ids.iter().all(|&id| (id as usize) < t.vocab_size()), "{out:?}");
        assert!(session.tokens().len() <= n_ctx);
    }
}

fuzz_target!(|input: Input| {
    let bytes = build(&input);
    run(&input, bytes);
});
