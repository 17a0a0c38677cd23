//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp's llm_tokenizer_spm_session.
//!
//! The text (spaces already written as "▁") starts as one symbol per char. The adjacent pair whose
//! concatenation is the highest-scoring token is merged first (ties: leftmost), until no pair is a token.
//! A final symbol that is not a token is written as byte tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::symbols::{self, Symbol};
use super::vocab::Vocab;
use crate::error::{Error, Result};

/// A candidate merge of two adjacent symbols into the token with `score`; `len` is the merged byte length,
/// which tells a stale candidate (one side merged elsewhere since) from a live one.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap: higher score first, then the leftmost. NaN scores compare equal, as in C++.
        self.score.partial_cmp(&other.score).unwrap_or(Ordering::Equal).then(other.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}

pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
    let mut symbols = symbols::chars(text);

    let mut queue = BinaryHeap::new();
    let push = |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
        let (l, r) = (symbols[left], symbols[right]);
        let merged = &text[l.start..l.start + l.len + r.len]; // adjacent symbols are contiguous in the text
        if let Some(id) = vocab.token_id(merged) {
            queue.push(Bigram { left, right, score: vocab.score(id), len: merged.len() });
        }
    };
    for i in 1..symbols.len() {
        push(&mut queue, &symbols, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
            continue;
        }
        let (prev, next) = symbols::merge(&mut symbols, b.left, b.right);
        if let Some(prev) = prev {
            push(&mut queue, &symbols, prev, b.left);
        }
        if let Some(next) = next {
            push(&mut queue, &symbols, b.left, next);
        }
    }

    // Every merged symbol is a token (merges only make tokens), so only single chars can miss.
    for s in symbols.iter().filter(|s| s.len > 0) {
        let piece = &text[s.start..s.start + s.len];
        match vocab.token_id(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    out.push(byte_token(vocab, b)?);
                }
            }
        }
    }
    Ok(())
}

/// The token for a raw byte: `<0xXX>`, else the byte as a one-char token (llama.cpp's byte_to_token). Where the
/// vocabulary has neither, llama.cpp throws; we fall back to the unknown token, as SentencePiece does.
fn byte_token(vocab: &Vocab, b: u8) -> Result<u32> {
    if let Some(id) = vocab.token_id(&format!("<0x{b:02X}>")) {
        return Ok(id);
    }
    if b.is_ascii() {
        if let Some(id) = vocab.token_id(char::from(b).encode_utf8(&mut [0u8; 4])) {
            return Ok(id);
        }
    }
    vocab.unk().ok_or_else(|| {
        Error::Tokenizer(format!(
            "the vocabulary has no token for byte 0x{b:02X} (no <0x{b:02X}> and no unknown token)"
        ))
    })
}
