//! The vocabulary as llama.cpp's llama_vocab::impl::load builds it from GGUF metadata: token texts, scores and
//! attributes, the special token ids (with llama.cpp's text-based auto-detection), the end-of-generation set,
//! the special-token list used to split text, and each token's rendered bytes.

use std::collections::BTreeSet;

use super::bpe::{self, Bpe, Spelling};
use super::pretokenize::PreTokenizer;
use super::strings::StrTable;
use super::ugm::Ugm;
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};

/// Token attributes (llama_token_attr bits).
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;
}

/// `tokenizer.ggml.token_type` value -> attribute (llama_token_type; unknown values are UNDEFINED = 0).
fn attr_of_type(t: i64) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

/// The tokenizer algorithm, from `tokenizer.ggml.model`.
pub(crate) enum TokenizerKind {
    /// SentencePiece (`llama`).
    Spm,
    /// BPE by merge rank: byte-level (`gpt2`), or on UTF-8 with spaces as "▁" (`gemma4`).
    Bpe(Bpe),
    /// BERT's WordPiece (`bert`); `max_token_len` is the longest token text in bytes.
    WordPiece { max_token_len: usize },
    /// SentencePiece's unigram model (`t5`), its tables built once the tokens' attributes are final.
    Ugm(Box<Ugm>),
}

/// Special token ids. None is llama.cpp's LLAMA_TOKEN_NULL.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Specials {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

pub(crate) struct Vocab {
    pub(crate) kind: TokenizerKind,
    /// Token texts by id, found by text.
    texts: StrTable,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    pub(crate) specials: Specials,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    /// WordPiece: end a sequence with the separator ([SEP]).
    pub(crate) add_sep: bool,
    /// SentencePiece: prefix a space to text after BOS/special tokens; decoding drops one leading space.
    pub(crate) add_space_prefix: bool,
    /// llama.cpp's clean_up_tokenization_spaces pass on decode.
    pub(crate) clean_spaces: bool,
    eog: BTreeSet<u32>,
    /// Ids of CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first: the order text is split on them.
    pub(crate) special_tokens: Vec<u32>,
    /// Every token's rendered bytes (llama.cpp's token_to_piece with special = true), concatenated.
    pieces: Vec<u8>,
    piece_ends: Vec<usize>,
}

/// The per-`tokenizer.ggml.pre` settings llama.cpp applies to byte-level BPE.
struct PreSettings {
    pre: PreTokenizer,
    ignore_merges: bool,
    clean_spaces: bool,
    /// Some(true): add BOS by default (Llama 3); the GGUF's add_bos_token still overrides it.
    add_bos: Option<bool>,
    /// GLM-4 has no BOS.
    no_bos: bool,
}

/// The tokenizer models (`tokenizer.ggml.model`) the loader below knows, in the README's order ("Supported").
const TOKENIZER_MODELS: [&str; 5] = ["llama", "gpt2", "gemma4", "bert", "t5"];

fn bpe_settings(pre: Option<&str>) -> Result<PreSettings> {
    let s = |pre, clean_spaces| PreSettings { pre, ignore_merges: false, clean_spaces, add_bos: None, no_bos: false };
    let Some(name) = pre else {
        return Ok(s(PreTokenizer::DEFAULT, true)); // llama.cpp warns and uses 'default'
    };
    Ok(match name {
        "default" => s(PreTokenizer::DEFAULT, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" => PreSettings { ignore_merges: true, add_bos: Some(true), ..s(PreTokenizer::LLAMA3, true) },
        "dbrx" | "smaug-bpe" => s(PreTokenizer::LLAMA3, true),
        "glm4" | "chatglm-bpe" => PreSettings { no_bos: true, ..s(PreTokenizer::LLAMA3, true) },
        // "gpt2" is not a value llama.cpp knows (it refuses the file); accepted here as the obvious alias.
        "gpt-2" | "gpt2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0"
        | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "exaone4" | "mpt" | "olmo"
        | "jais" => s(PreTokenizer::GPT2, true),
        "trillion" | "granite-docling" => s(PreTokenizer::GPT2, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => s(PreTokenizer::SMOLLM, true),
        "smollm" | "command-r" => s(PreTokenizer::SMOLLM, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => s(PreTokenizer::QWEN2, false),
        "megrez" | "stablelm2" => s(PreTokenizer::QWEN2, true),
        "qwen35" => s(PreTokenizer::QWEN35, false),
        "tekken" => PreSettings { ignore_merges: true, add_bos: Some(true), ..s(PreTokenizer::TEKKEN, false) },
        "gpt-4o" | "llama4" => s(PreTokenizer::GPT4O, false),
        "falcon" => s(PreTokenizer::FALCON, true),
        "deepseek-llm" => s(PreTokenizer::DEEPSEEK_LLM, false),
        "deepseek-coder" => s(PreTokenizer::DEEPSEEK_CODER, false),
        other => {
            return Err(Error::Tokenizer(format!(
                "unsupported pre-tokenizer '{other}' (tokenizer.ggml.pre); supported: default, gpt-2, smollm, \
                 llama-bpe/llama3, qwen2, qwen35, tekken, gpt-4o, falcon, deepseek-llm, deepseek-coder and the \
                 llama.cpp values that share their rules"
            )))
        }
    })
}

/// Texts llama.cpp recognises as special tokens when the metadata does not name them.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts that end generation whatever their ids.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

/// A metadata array, or None when the key is absent; an error when it is not an array.
fn array<'g>(g: &'g Gguf, key: &str) -> Result<Option<&'g [Value]>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_array().map(Some).ok_or_else(|| err(format!("{key} is not an array"))),
    }
}

fn string_array<'g>(g: &'g Gguf, key: &str) -> Result<Option<Vec<&'g str>>> {
    match array(g, key)? {
        None => Ok(None),
        Some(a) => a
            .iter()
            .map(Value::as_str)
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| err(format!("{key} is not an array of strings"))),
    }
}

fn bool_key(g: &Gguf, key: &str) -> Result<Option<bool>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or_else(|| err(format!("{key} is not a bool"))),
    }
}

/// Texts (found by text), scores and attributes of every token.
struct Tokens {
    texts: StrTable,
    scores: Vec<f32>,
    attrs: Vec<u16>,
}

fn read_tokens(g: &Gguf, texts_in: &[&str]) -> Result<Tokens> {
    let n = texts_in.len();
    let scores_in = array(g, "tokenizer.ggml.scores")?;
    let types_in = array(g, "tokenizer.ggml.token_type")?;
    for (key, a) in [("tokenizer.ggml.scores", scores_in), ("tokenizer.ggml.token_type", types_in)] {
        if let Some(a) = a.filter(|a| a.len() < n) {
            return Err(err(format!("{key} has {} entries for {n} tokens", a.len())));
        }
    }
    let bytes = texts_in.iter().map(|t| t.len()).sum();
    let mut t = Tokens {
        texts: StrTable::with_capacity(n, bytes),
        scores: Vec::with_capacity(n),
        attrs: Vec::with_capacity(n),
    };
    for (i, &text) in texts_in.iter().enumerate() {
        let empty;
        let text = if text.is_empty() {
            empty = format!("[EMPTY_{i}]");
            &empty
        } else {
            text
        };
        if let Some(prev) = t.texts.push(text) {
            return Err(err(format!("duplicate token in vocabulary: '{text}' has ids {prev} and {i}")));
        }
        t.scores.push(match scores_in {
            Some(a) => a[i].as_f32().ok_or_else(|| err(format!("tokenizer.ggml.scores[{i}] is not a number")))?,
            None => 0.0,
        });
        t.attrs.push(match types_in {
            Some(a) => attr_of_type(
                a[i].as_i64().ok_or_else(|| err(format!("tokenizer.ggml.token_type[{i}] is not an integer")))?,
            ),
            None => attr::NORMAL,
        });
    }
    Ok(t)
}

/// Special ids from metadata, over the type's defaults. A default out of range is dropped, a value out of range
/// is ignored (both with a warning in llama.cpp).
fn read_special_ids(g: &Gguf, n: usize, sp: &mut Specials) -> Result<()> {
    type Slot = fn(&mut Specials) -> &mut Option<u32>;
    let keys: [(&str, Slot); 17] = [
        ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
        ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
        ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
        ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
        ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
        ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
        ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
        ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
        ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
        ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
        ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
        ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
        // deprecated names, read after the current ones
        ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
    ];
    for (key, slot) in keys {
        let id = slot(sp);
        if id.is_some_and(|v| v as usize >= n) {
            *id = None;
        }
        if let Some(v) = g.get(key) {
            let v = v.as_u64().ok_or_else(|| err(format!("{key} is not a non-negative integer")))?;
            if v < n as u64 {
                *id = Some(v as u32);
            }
        }
    }
    Ok(())
}

/// Where the metadata names no eot/eom/FIM token, take the one with a well-known text and mark it CONTROL.
/// llama.cpp walks a hash map; we walk ids in order, so where several texts match, the lowest id wins.
fn detect_specials_by_text(t: &mut Tokens, sp: &mut Specials) {
    for (i, text) in t.texts.iter().enumerate() {
        for (slot, list) in [
            (&mut sp.eot, EOT_TEXTS),
            (&mut sp.eom, EOM_TEXTS),
            (&mut sp.fim_pre, FIM_PRE_TEXTS),
            (&mut sp.fim_suf, FIM_SUF_TEXTS),
            (&mut sp.fim_mid, FIM_MID_TEXTS),
            (&mut sp.fim_pad, FIM_PAD_TEXTS),
            (&mut sp.fim_rep, FIM_REP_TEXTS),
            (&mut sp.fim_sep, FIM_SEP_TEXTS),
        ] {
            if slot.is_none() && list.contains(&text) {
                *slot = Some(i as u32);
                t.attrs[i] |= attr::CONTROL;
            }
        }
    }
}

/// The end-of-generation set (llama.cpp's special_eog_ids), adjusting attributes on the way as llama.cpp does.
fn end_of_generation_set(t: &mut Tokens, sp: &Specials) -> BTreeSet<u32> {
    let mut eog = BTreeSet::new();
    eog.extend(sp.fim_pad);
    eog.extend(sp.fim_rep);
    eog.extend(sp.fim_sep);
    for (i, text) in t.texts.iter().enumerate() {
        if EOG_TEXTS.contains(&text) {
            eog.insert(i as u32);
            t.attrs[i] |= attr::CONTROL; // a text-detected EOG token is a control token, whatever its type
        }
    }
    // gpt-oss: these are always rendered.
    for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
        if let Some(id) = t.texts.find(text) {
            t.attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend(sp.eos);
    eog.extend(sp.eot);
    eog.extend(sp.eom);
    let in_eog = |eog: &BTreeSet<u32>, text: &str| t.texts.find(text).filter(|id| eog.contains(id));
    // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
    if let Some(end) = in_eog(&eog, "<|end|>") {
        let call = in_eog(&eog, "<|call|>").is_some() || in_eog(&eog, "<|calls|>").is_some();
        if call && (in_eog(&eog, "<|return|>").is_some() || in_eog(&eog, "<|flush|>").is_some()) {
            eog.remove(&end);
            t.attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // gemma4 / paddleocr: "</s>" is not an EOG token when "<|tool_response>" is.
    if let (Some(_), Some(s)) = (in_eog(&eog, "<|tool_response>"), in_eog(&eog, "</s>")) {
        eog.remove(&s);
        t.attrs[s as usize] = attr::NORMAL;
    }
    eog
}

impl Vocab {
    pub(crate) fn from_gguf(g: &Gguf) -> Result<Vocab> {
        let kind_name =
            g.get_str("tokenizer.ggml.model").ok_or_else(|| err("metadata key tokenizer.ggml.model is missing"))?;
        let pre_name = g.get_str("tokenizer.ggml.pre");
        let texts_in = string_array(g, "tokenizer.ggml.tokens")?
            .ok_or_else(|| err("metadata key tokenizer.ggml.tokens is missing"))?;
        let n = texts_in.len();
        if n == 0 || n > u32::MAX as usize / 2 {
            return Err(err(format!("the vocabulary has {n} tokens")));
        }

        // The tokenizer kind and its defaults (llama.cpp's per-type special ids and flags).
        let mut sp = Specials::default();
        let (kind, mut add_bos, mut add_eos, mut add_space_prefix, clean_spaces);
        let mut add_sep = false;
        // The unigram model's precompiled character map and whitespace setting, for its tables below.
        let mut ugm = None;
        match kind_name {
            "llama" => {
                kind = TokenizerKind::Spm;
                (sp.bos, sp.eos, sp.unk) = (Some(1), Some(2), Some(0));
                (add_bos, add_eos, add_space_prefix, clean_spaces) = (true, false, true, false);
            }
            "gpt2" => {
                let merges = string_array(g, "tokenizer.ggml.merges")?
                    .ok_or_else(|| err("byte-level BPE vocabulary without tokenizer.ggml.merges"))?;
                let s = bpe_settings(pre_name)?;
                kind = TokenizerKind::Bpe(Bpe::new(s.pre, Spelling::ByteLevel, s.ignore_merges, &merges));
                sp.eos = Some(11);
                sp.bos = if s.no_bos { None } else { Some(11) };
                (add_bos, add_eos, add_space_prefix, clean_spaces) =
                    (s.add_bos.unwrap_or(false), false, false, s.clean_spaces);
            }
            "gemma4" => {
                // llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4, whatever tokenizer.ggml.pre says: no special ids by
                // default, and BOS always added (its workaround for Gemma 4 files that say otherwise, below).
                let merges = string_array(g, "tokenizer.ggml.merges")?
                    .ok_or_else(|| err("gemma4 BPE vocabulary without tokenizer.ggml.merges"))?;
                kind = TokenizerKind::Bpe(Bpe::new(PreTokenizer::GEMMA4, Spelling::EscapedSpaces, false, &merges));
                (add_bos, add_eos, add_space_prefix, clean_spaces) = (true, false, false, true);
            }
            "bert" => {
                let max_token_len = texts_in.iter().map(|t| t.len()).max().unwrap_or(0);
                kind = TokenizerKind::WordPiece { max_token_len };
                // llama.cpp's WPM defaults: [CLS] is the BOS, [SEP] ends a sequence, no EOS.
                (sp.bos, sp.unk, sp.sep, sp.pad, sp.mask) = (Some(101), Some(100), Some(102), Some(0), Some(103));
                (add_bos, add_eos, add_space_prefix, clean_spaces) = (true, false, false, true);
                add_sep = true;
            }
            "t5" => {
                kind = TokenizerKind::Ugm(Box::default());
                (sp.eos, sp.unk, sp.pad) = (Some(1), Some(2), Some(0));
                (add_bos, add_eos, add_space_prefix, clean_spaces) = (false, true, false, false);
                let charsmap = match array(g, "tokenizer.ggml.precompiled_charsmap")? {
                    None => None,
                    Some(a) => Some(
                        a.iter()
                            .map(|v| match *v {
                                Value::U8(b) => Some(b),
                                Value::I8(b) => Some(b as u8),
                                _ => None,
                            })
                            .collect::<Option<Vec<u8>>>()
                            .ok_or_else(|| err("tokenizer.ggml.precompiled_charsmap is not an array of bytes"))?,
                    ),
                };
                let remove_extra_whitespaces = bool_key(g, "tokenizer.ggml.remove_extra_whitespaces")?.unwrap_or(false);
                ugm = Some((charsmap, remove_extra_whitespaces));
            }
            other => {
                return Err(err(format!(
                    "unsupported tokenizer model '{other}' (tokenizer.ggml.model); supported: {}",
                    TOKENIZER_MODELS.join(", ")
                )))
            }
        }
        if let Some(v) = bool_key(g, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }

        let mut tokens = read_tokens(g, &texts_in)?;
        read_special_ids(g, n, &mut sp)?;
        if let Some(v) = bool_key(g, "tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = bool_key(g, "tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        if kind_name == "gemma4" {
            add_bos = true;
        }
        if add_bos && sp.bos.is_none() {
            return Err(err("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set"));
        }
        if add_eos && sp.eos.is_none() {
            return Err(err("tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set"));
        }
        if add_sep && sp.sep.is_none() {
            return Err(err("a WordPiece vocabulary needs tokenizer.ggml.seperator_token_id"));
        }
        if ugm.is_some() && sp.unk.is_none() {
            return Err(err("a unigram (t5) vocabulary needs tokenizer.ggml.unknown_token_id"));
        }
        detect_specials_by_text(&mut tokens, &mut sp);
        let eog = end_of_generation_set(&mut tokens, &sp);

        let Tokens { texts, scores, attrs } = tokens;
        let mut special_tokens: Vec<u32> = (0..n as u32)
            .filter(|&id| attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        // llama.cpp's std::sort leaves equal lengths in unspecified order; ids ascending here.
        special_tokens.sort_by_key(|&id| std::cmp::Reverse(texts.get(id).map_or(0, str::len)));

        let mut vocab = Vocab {
            kind,
            texts,
            scores,
            attrs,
            specials: sp,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            eog,
            special_tokens,
            pieces: Vec::new(),
            piece_ends: Vec::with_capacity(n),
        };
        // A byte-level token's chars outside the byte alphabet render as llama.cpp writes them, the whole text again
        // for each: a vocabulary of long such tokens, a few hundred KB of file, would render to gigabytes. Real
        // vocabularies render to about their own size; the rendered pieces may take that plus 16 MiB.
        let budget = vocab.texts.total_len().saturating_add(16 << 20);
        let mut rendered = 0usize;
        for id in 0..n {
            rendered = rendered.saturating_add(vocab.rendered_len(id));
            if rendered > budget {
                return Err(err(format!(
                    "token {id}'s text renders past {budget} bytes for the whole vocabulary (chars outside the \
                     byte-level alphabet are written out with the whole text)"
                )));
            }
            let piece = vocab.render(id);
            vocab.pieces.extend_from_slice(&piece);
            vocab.piece_ends.push(vocab.pieces.len());
        }
        vocab.set_model_specific_attrs(g, pre_name.unwrap_or(""));
        if let Some((charsmap, remove_extra_whitespaces)) = ugm {
            let lens = vocab.texts.iter().map(str::len);
            let tables = Ugm::new(lens, &vocab.attrs, &vocab.scores, charsmap.as_deref(), remove_extra_whitespaces)?;
            vocab.kind = TokenizerKind::Ugm(Box::new(tables));
        }
        Ok(vocab)
    }

    /// Strip flags llama.cpp sets by model name (these GGUFs do not carry them).
    fn set_model_specific_attrs(&mut self, g: &Gguf, pre: &str) {
        let name = g.get_str("general.name").unwrap_or("").to_lowercase();
        let arch = g.get_str("general.architecture").unwrap_or("");
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"].iter().any(|p| pre.contains(p))
            || ["nomic-bert-moe", "jina-bert-v3"].iter().any(|a| arch.contains(a))
        {
            self.set_attr("<mask>", attr::LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for &id in &self.special_tokens {
                self.attrs[id as usize] |= attr::RSTRIP;
            }
            self.set_attr("</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                self.set_attr(t, attr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            self.set_attr("[MASK]", attr::LSTRIP, true);
        }
    }

    fn set_attr(&mut self, text: &str, bit: u16, on: bool) {
        if let Some(id) = self.texts.find(text) {
            let a = &mut self.attrs[id as usize];
            *a = if on { *a | bit } else { *a & !bit };
        }
    }

    /// llama.cpp's token_to_piece(special = true), uncached.
    /// The length of `render(id)`, at most (exact for byte-level tokens, which are the ones that can grow).
    fn rendered_len(&self, id: usize) -> usize {
        let text = self.texts.get(id as u32).expect("id in range");
        match self.kind {
            TokenizerKind::Bpe(ref b) if b.spelling == Spelling::ByteLevel && self.attrs[id] & attr::NORMAL != 0 => {
                bpe::decoded_len(text)
            }
            _ => text.len().max(1),
        }
    }

    fn render(&self, id: usize) -> Vec<u8> {
        let a = self.attrs[id];
        let text = self.texts.get(id as u32).expect("id in range");
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::NORMAL != 0 {
            return match self.kind {
                TokenizerKind::Bpe(ref b) if b.spelling == Spelling::ByteLevel => bpe::decode_text(text),
                TokenizerKind::Spm
                | TokenizerKind::Ugm(_)
                | TokenizerKind::WordPiece { .. }
                | TokenizerKind::Bpe(_) => text.replace('\u{2581}', " ").into_bytes(),
            };
        }
        if a & attr::BYTE != 0 {
            return vec![parse_byte_token(text)];
        }
        Vec::new() // UNDEFINED and UNUSED tokens render as nothing
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.texts.find(text)
    }
    pub(crate) fn text(&self, id: u32) -> Option<&str> {
        self.texts.get(id)
    }
    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores[id as usize]
    }
    pub(crate) fn attr(&self, id: u32) -> u16 {
        self.attrs[id as usize]
    }
    pub(crate) fn unk(&self) -> Option<u32> {
        self.specials.unk
    }
    pub(crate) fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }
    pub(crate) fn eog_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.eog.iter().copied()
    }
    /// The bytes token `id` renders to; None when out of range.
    pub(crate) fn piece(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let end = *self.piece_ends.get(i)?;
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] };
        Some(&self.pieces[start..end])
    }
}

/// The byte of a `<0xXX>` token, read as llama.cpp does (strtol on the two chars after `<0x`).
fn parse_byte_token(text: &str) -> u8 {
    let hex = text.get(3..5).or_else(|| text.get(3..)).unwrap_or("");
    let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
    u8::from_str_radix(&digits, 16).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{bpe_settings, TOKENIZER_MODELS};
    use crate::test_support::{readme_supported, test};
    use crate::tokenizer::pretokenize::PreTokenizer;

    #[test]
    fn the_readme_lists_every_tokenizer_model_and_pre_tokenizer_family() {
        let listed = readme_supported("Tokenizers");
        let (models, pres): (Vec<&str>, Vec<&str>) = listed.iter().partition(|n| TOKENIZER_MODELS.contains(n));
        assert_eq!(models, TOKENIZER_MODELS, "README.md's tokenizer models, in order");
        let reached: Vec<PreTokenizer> = pres
            .iter()
            .map(|&name| bpe_settings(Some(name)).unwrap_or_else(|e| panic!("README.md lists '{name}': {e}")).pre)
            .collect();
        let families = [
            PreTokenizer::DEFAULT,
            PreTokenizer::GPT2,
            PreTokenizer::SMOLLM,
            PreTokenizer::LLAMA3,
            PreTokenizer::QWEN2,
            PreTokenizer::QWEN35,
            PreTokenizer::TEKKEN,
            PreTokenizer::GPT4O,
            PreTokenizer::FALCON,
            PreTokenizer::DEEPSEEK_LLM,
            PreTokenizer::DEEPSEEK_CODER,
        ];
        for family in families {
            assert!(reached.contains(&family), "README.md names no pre-tokenizer of {family:?}");
        }
    }
}
