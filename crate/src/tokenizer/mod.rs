//! Tokenizers built from GGUF metadata, token for token the same as llama.cpp (llama-vocab.cpp, unicode.cpp):
//! byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the pre-tokenizer `tokenizer.ggml.pre` names, Gemma 4's
//! BPE on UTF-8 with spaces as "▁" (`"gemma4"`), SentencePiece BPE (`"llama"`) with scores, byte fallback and the
//! space prefix, BERT's WordPiece (`"bert"`) and SentencePiece's unigram model (`"t5"`). llama.cpp's own tokenizer
//! tests (tests/rust/llama_vocabs.rs) check every vocabulary of its suite.
//!
//! Text flows: special-token split ([`Tokenizer::encode`] with `parse_special`) -> pre-tokenizer -> merges -> ids.
//! Back: ids -> each token's bytes -> text ([`Tokenizer::decode`], or [`StreamDecoder`] while generating).
//!
//! # Design
//!
//! Token for token the same as llama.cpp. `vocab.rs` reads tokens, types, special ids, the end-of-generation set and
//! the `TokenizerKind`; `bpe.rs` is BPE by merge rank (byte-level, or Gemma 4's spelling), `spm.rs` SentencePiece by score with `<0xXX>` byte
//! fallback, both over `symbols.rs`; `wordpiece.rs` is BERT's WordPiece (llama.cpp's basic tokenizer, then greedy
//! longest match); `ugm.rs` the unigram model (the precompiled character map, then a Viterbi search by score). `strings.rs`'s `StrTable` holds the token texts and the merges end to end, found by text through a
//! hash table of their indexes (no heap allocation per string: a vocabulary has up to hundreds of thousands). `pretokenize.rs` holds hand-written splitters equal to llama.cpp's regexes (smollm,
//! gpt-2, llama3, qwen2, qwen35, tekken, gpt-4o, falcon, deepseek-llm, deepseek-coder, gemma4, default), so no regex engine lands in the wasm; `unicode.rs` and `unicode_table.rs` (written by
//! `gen_unicode_table.py`) hold the Unicode 15.1 classes and the NFD map llama.cpp uses. `stream.rs` decodes token by token without
//! splitting a UTF-8 character. A new pre-tokenizer: `pretokenize.rs` and its name in `vocab.rs`.

mod bpe;
mod pretokenize;
mod spm;
mod stream;
mod strings;
mod symbols;
mod ugm;
mod unicode;
mod vocab;
mod wordpiece;

#[cfg(test)]
mod tests;

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gguf::Gguf;
pub use stream::StreamDecoder;
use vocab::{attr, TokenizerKind, Vocab};

/// A tokenizer. Cloning is cheap (the vocabulary is shared).
#[derive(Clone)]
pub struct Tokenizer {
    vocab: Arc<Vocab>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.vocab.kind {
            TokenizerKind::Spm => "SentencePiece",
            TokenizerKind::Bpe(b) if b.spelling == bpe::Spelling::ByteLevel => "byte-level BPE",
            TokenizerKind::Bpe(_) => "BPE",
            TokenizerKind::WordPiece { .. } => "WordPiece",
            TokenizerKind::Ugm(_) => "unigram",
        };
        f.debug_struct("Tokenizer").field("kind", &kind).field("vocab_size", &self.vocab_size()).finish()
    }
}

/// A piece of the input after the special-token split.
#[derive(Debug, PartialEq)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

impl Tokenizer {
    /// Build the tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.
    ///
    /// A `tokenizer.ggml.pre` this crate does not implement is an [`Error::Tokenizer`] (as in current llama.cpp,
    /// which refuses such files); a missing one means llama.cpp's `default` pre-tokenizer.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer> {
        Ok(Tokenizer { vocab: Arc::new(Vocab::from_gguf(g)?) })
    }

    /// Text -> token ids. Never adds BOS/EOS.
    ///
    /// With `parse_special`, control tokens written in the text (`<|im_start|>`) become their ids; without, they
    /// are tokenized as plain text. User-defined tokens are always matched (as in llama.cpp).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        self.tokenize(text, false, parse_special, &[])
    }

    /// [`encode`](Self::encode), plus BOS/EOS (WordPiece: [CLS]/[SEP]) where `tokenizer.ggml.add_bos_token` / `add_eos_token` (or the
    /// tokenizer type's default) ask for them: llama.cpp's `add_special = true`.
    pub fn encode_with_special(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        self.tokenize(text, true, parse_special, &[])
    }

    /// A chat prompt's ids: [`encode_with_special`](Self::encode_with_special) with special tokens parsed, but
    /// for the byte ranges `guarded` (the messages' own text, `ChatTemplate::render_guarded`), where no control
    /// token is matched, as if those bytes were tokenized without `parse_special`.
    pub fn encode_guarded(&self, text: &str, guarded: &[Range<usize>]) -> Result<Vec<u32>> {
        self.tokenize(text, true, true, guarded)
    }

    /// The texts of the control (and unknown) tokens: what `parse_special` turns into their ids.
    pub fn control_texts(&self) -> Vec<&str> {
        let v = &self.vocab;
        let control = v.special_tokens.iter().filter(|&&id| v.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0);
        control.filter_map(|&id| v.text(id)).collect()
    }

    /// Token ids -> text, as llama.cpp's detokenize with special tokens rendered: control tokens appear as their
    /// text, SentencePiece drops the first token's leading space, and vocabularies that ask for it get
    /// llama.cpp's clean-up of spaces before punctuation. Bytes that are not UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// [`decode`](Self::decode) without the UTF-8 conversion.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let v = &self.vocab;
        let mut out = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let mut piece = self.token_bytes(id)?;
            if i == 0 && v.add_space_prefix {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            out.extend_from_slice(piece);
        }
        if v.clean_spaces {
            clean_up_spaces(&mut out);
        }
        Ok(out)
    }

    /// The bytes token `id` renders to (special tokens as their text).
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.vocab.piece(id).ok_or(Error::TokenOutOfRange { id, vocab_size: self.vocab_size() })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.specials.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.specials.eos
    }

    /// Whether [`encode_with_special`](Self::encode_with_special) starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether encoding a text prefixes a space to it (SentencePiece's `add_space_prefix`): then the ids of a piece
    /// of text are not the ids it has inside a longer text.
    pub fn adds_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// Whether generation ends at `id`: the eos/eot/eom ids, the FIM pad/repo/separator ids and the tokens
    /// llama.cpp recognises by text (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.is_eog(id)
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        self.vocab.eog_ids().collect()
    }

    /// Whether `id` is a control or unknown token: those llama.cpp hides when rendering without `special`.
    /// False for out-of-range ids.
    pub fn is_control(&self, id: u32) -> bool {
        id < self.vocab_size() as u32 && self.vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0
    }

    /// The id of the token whose vocabulary text is exactly `text` (byte-level BPE texts are in GPT-2's byte
    /// alphabet, e.g. "Ġthe"; SentencePiece texts use "▁" for spaces).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.token_id(text)
    }

    /// The vocabulary text of token `id` (see [`token_id`](Self::token_id)).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// A streaming decoder for generated tokens.
    pub fn decoder(&self) -> StreamDecoder {
        StreamDecoder::new(self.clone())
    }

    /// llama.cpp's llama_vocab::impl::tokenize.
    fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        guarded: &[Range<usize>],
    ) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let mut out = Vec::new();
        if add_special && v.add_bos {
            out.extend(v.specials.bos); // from_gguf checked that it is set
        }
        let fragments = self.split_special(text, parse_special, guarded);
        match &v.kind {
            TokenizerKind::Spm => {
                let mut after_special = true; // the text start counts as after a special token
                for f in fragments {
                    match f {
                        Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 4);
                            if v.add_space_prefix && after_special {
                                s.push(' ');
                            }
                            s.push_str(t);
                            spm::tokenize(v, &s.replace(' ', "\u{2581}"), &mut out)?;
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
            }
            TokenizerKind::Bpe(bpe) => {
                for f in fragments {
                    match f {
                        Fragment::Text(t) => bpe.tokenize(v, t, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            &TokenizerKind::WordPiece { max_token_len } => {
                for f in fragments {
                    match f {
                        Fragment::Text(t) => wordpiece::tokenize(v, t, max_token_len, &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            TokenizerKind::Ugm(ugm) => {
                let unk = v.unk().expect("from_gguf checked that a unigram vocabulary has an unknown token");
                for f in fragments {
                    match f {
                        Fragment::Text(t) => ugm.tokenize(v, t, unk, &mut out)?,
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.specials.eos);
        }
        if add_special && v.add_sep {
            out.extend(v.specials.sep); // from_gguf checked that it is set
        }
        Ok(out)
    }

    /// llama.cpp's tokenizer_st_partition: split the text on special tokens, longest first. Control and unknown
    /// tokens only with `parse_special`, and never where they overlap a byte range of `guarded`; user-defined
    /// tokens always.
    fn split_special<'t>(&self, text: &'t str, parse_special: bool, guarded: &[Range<usize>]) -> Vec<Fragment<'t>> {
        let v = &self.vocab;
        let mut fragments = Vec::new();
        if !text.is_empty() {
            fragments.push(Fragment::Text(text));
        }
        for &id in &v.special_tokens {
            let a = v.attr(id);
            let control = a & (attr::CONTROL | attr::UNKNOWN) != 0;
            if !parse_special && control {
                continue;
            }
            let token = v.text(id).expect("special token ids are in range");
            // Whether a match at byte `at` of `text` overlaps guarded text.
            let is_guarded = |at: usize| control && guarded.iter().any(|r| r.start < at + token.len() && at < r.end);
            // Cheap skip: most special tokens occur nowhere in the text.
            if !fragments.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(token))) {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for f in fragments {
                let Fragment::Text(mut rest) = f else {
                    next.push(f);
                    continue;
                };
                // Where the search goes on in `rest`: past the guarded matches it skipped.
                let mut from = 0;
                while let Some(found) = rest[from..].find(token) {
                    let at = from + found;
                    // (Fragments are slices of `text`: their offset in it is their pointers' distance.)
                    if is_guarded(rest.as_ptr() as usize - text.as_ptr() as usize + at) {
                        from = at + rest[at..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    from = 0;
                    let mut left = &rest[..at];
                    if a & attr::LSTRIP != 0 {
                        left = left.trim_end_matches(is_c_space);
                    }
                    if !left.is_empty() {
                        next.push(Fragment::Text(left));
                    }
                    next.push(Fragment::Token(id));
                    rest = &rest[at + token.len()..];
                    if a & attr::RSTRIP != 0 {
                        rest = rest.trim_start_matches(is_c_space);
                    }
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }
}

/// C's isspace in the "C" locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// llama.cpp's clean_spaces pass of detokenize (clean_up_tokenization_spaces), byte for byte.
fn clean_up_spaces(text: &mut Vec<u8>) {
    // 1: " ?", " !", " .", " ," lose the space.
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // 2: " ' " becomes "'" (a single apostrophe between spaces loses both).
    let t = &mut out;
    let n = t.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = t[i];
        if x == b'\'' && i + 1 < n && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1; // the space before
            i += 1;
            t[i] = 0; // the space after: skipped, and no longer a space for the next check
        }
        t[total] = x;
        total += 1;
        i += 1;
    }
    t.truncate(total);
    // 3: " 's", " 'm", " 're", " 've" lose the space.
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = t[i + 1];
            let x2 = if i + 2 < n { Some(t[i + 2]) } else { None };
            if matches!(x1, b's' | b'm') || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))) {
                total -= 1;
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
    *text = std::mem::take(t);
}
