//! BPE by merge rank (`tokenizer.ggml.model = "gpt2"`, and `"gemma4"`), as llama.cpp's llm_tokenizer_bpe_session.
//!
//! Each pre-tokenized word is spelled as the vocabulary spells text ([`Spelling`]: GPT-2's byte alphabet, every
//! byte a printable char; or Gemma 4's UTF-8 with spaces as "▁"), then adjacent symbols are merged lowest merge
//! rank first (ties: leftmost) until no ranked pair is left.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::pretokenize::PreTokenizer;
use super::strings::StrTable;
use super::symbols::{self, Symbol};
use super::vocab::Vocab;

/// Bytes that GPT-2 keeps as their own code point; every other byte maps to 256, 257, ... in byte order.
const fn keeps_itself(b: u32) -> bool {
    (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
}

/// GPT-2's byte -> code point table.
const BYTE_TO_CHAR: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut next = 256u16;
    let mut b = 0;
    while b < 256 {
        table[b] = if keeps_itself(b as u32) {
            b as u16
        } else {
            next += 1;
            next - 1
        };
        b += 1;
    }
    table
};

/// The number of code points the byte alphabet uses: 256 plus the 68 remapped bytes.
const ALPHABET_END: usize = 256 + 68;

/// The inverse table: code point -> byte, for code points below ALPHABET_END.
const CHAR_TO_BYTE: [i16; ALPHABET_END] = {
    let mut table = [-1i16; ALPHABET_END];
    let mut b = 0;
    while b < 256 {
        table[BYTE_TO_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    table
};

pub(crate) fn byte_to_char(b: u8) -> char {
    // All table entries are below 324, valid scalar values.
    char::from_u32(BYTE_TO_CHAR[b as usize] as u32).expect("GPT-2 byte alphabet is ASCII/Latin-1/U+01xx")
}

pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let i = c as usize;
    (i < ALPHABET_END && CHAR_TO_BYTE[i] >= 0).then(|| CHAR_TO_BYTE[i] as u8)
}

/// A token's text in the byte alphabet -> the bytes it stands for. A char outside the alphabet is written out as
/// llama.cpp does (`[UNK_BYTE_0x..` + its UTF-8 in hex + the whole text + `]`), so a text of such chars grows with
/// the square of its length: see [`decoded_len`].
pub(crate) fn decode_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The length of `decode_text(text)`, computed without making it (saturating).
pub(crate) fn decoded_len(text: &str) -> usize {
    let unknown = |c: char| "[UNK_BYTE_0x".len() + 2 * c.len_utf8() + text.len() + 1;
    text.chars().fold(0usize, |n, c| n.saturating_add(if char_to_byte(c).is_some() { 1 } else { unknown(c) }))
}

/// How the vocabulary spells text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// GPT-2's byte alphabet; a piece outside the vocabulary falls back to its ASCII bytes' one-char tokens.
    ByteLevel,
    /// UTF-8 with each space as "▁" (llama.cpp's escape_whitespaces with byte_encode off: Gemma 4); a piece
    /// outside the vocabulary falls back to `<0xXX>` byte tokens, and a word of newlines that is a token is taken
    /// whole.
    EscapedSpaces,
}

pub(crate) struct Bpe {
    pub(crate) pre: PreTokenizer,
    pub(crate) spelling: Spelling,
    /// Llama-3 style: a word that is a token as a whole is taken as is, whatever the merges would do.
    pub(crate) ignore_merges: bool,
    /// The merges' texts `"left right"` (as stored in `tokenizer.ggml.merges`), in rank order: a merge's rank is
    /// the index `find` gives its text (the first of duplicates wins). llama.cpp splits a merge at the first space
    /// after its first byte; a merge without one can never apply, and never equals a looked-up `"left right"`.
    merges: StrTable,
}

impl Bpe {
    pub(crate) fn new(pre: PreTokenizer, spelling: Spelling, ignore_merges: bool, merges: &[&str]) -> Bpe {
        let mut table = StrTable::with_capacity(merges.len(), merges.iter().map(|m| m.len()).sum());
        for merge in merges {
            table.push(merge);
        }
        Bpe { pre, spelling, ignore_merges, merges: table }
    }

    /// Rank of merging `left` and `right`, keyed as the merge text. `key` is scratch space.
    fn rank(&self, left: &str, right: &str, key: &mut String) -> Option<u32> {
        // A merge's left part never has a space after its first byte (that is where the text is split), so such
        // a `left` would look up a different merge.
        if left.as_bytes().iter().skip(1).any(|&b| b == b' ') {
            return None;
        }
        key.clear();
        key.push_str(left);
        key.push(' ');
        key.push_str(right);
        self.merges.find(key)
    }

    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut key = String::new();
        let escaped;
        let text = match self.spelling {
            Spelling::ByteLevel => text,
            // Before the split, as llama.cpp; the only pre-tokenizer used with it splits at newlines alone.
            Spelling::EscapedSpaces => {
                escaped = text.replace(' ', "\u{2581}");
                &escaped
            }
        };
        for word in self.pre.split(text) {
            let encoded: String = match self.spelling {
                Spelling::ByteLevel => word.bytes().map(byte_to_char).collect(),
                Spelling::EscapedSpaces => word.to_owned(),
            };
            let whole = match self.spelling {
                Spelling::ByteLevel => self.ignore_merges,
                // llama.cpp's Gemma 4 fix: a run of newlines is one token where the vocabulary has it.
                Spelling::EscapedSpaces => self.ignore_merges || encoded.bytes().all(|b| b == b'\n'),
            };
            if whole {
                if let Some(id) = vocab.token_id(&encoded) {
                    out.push(id);
                    continue;
                }
            }
            for sym in self.merge(&encoded, &mut key) {
                let piece = &encoded[sym.start..sym.start + sym.len];
                match vocab.token_id(piece) {
                    Some(id) => out.push(id),
                    // A merge produced text that is not in the vocabulary: llama.cpp looks up each byte of the
                    // piece as a byte token and drops the bytes that are not one (byte-level: the one-byte text,
                    // which only an ASCII byte can be).
                    None => match self.spelling {
                        Spelling::ByteLevel => {
                            for b in piece.bytes().filter(u8::is_ascii) {
                                let mut buf = [0u8; 4];
                                out.extend(vocab.token_id(char::from(b).encode_utf8(&mut buf)));
                            }
                        }
                        Spelling::EscapedSpaces => {
                            for b in piece.bytes() {
                                out.extend(vocab.token_id(&format!("<0x{b:02X}>")));
                            }
                        }
                    },
                }
            }
        }
    }

    /// Merge the symbols of one encoded word; returns the final symbols in order.
    fn merge(&self, word: &str, key: &mut String) -> Vec<Symbol> {
        let mut symbols = symbols::chars(word);

        // Min-heap on (rank, left index); the lengths tell a stale entry (a side merged since) from a live one.
        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<_>, symbols: &[Symbol], left: usize, right: usize, key: &mut String| {
            let (l, r) = (symbols[left], symbols[right]);
            let lt = &word[l.start..l.start + l.len];
            let rt = &word[r.start..r.start + r.len];
            if let Some(rank) = self.rank(lt, rt, key) {
                queue.push(Reverse((rank, left, right, l.len, r.len)));
            }
        };
        for i in 1..symbols.len() {
            push(&mut queue, &symbols, i - 1, i, key);
        }

        while let Some(Reverse((_, left, right, left_len, right_len))) = queue.pop() {
            if symbols[left].len != left_len || symbols[right].len != right_len || left_len == 0 || right_len == 0 {
                continue;
            }
            let (prev, next) = symbols::merge(&mut symbols, left, right);
            if let Some(prev) = prev {
                push(&mut queue, &symbols, prev, left, key);
            }
            if let Some(next) = next {
                push(&mut queue, &symbols, left, next, key);
            }
        }
        symbols.into_iter().filter(|s| s.len > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn byte_alphabet_round_trips() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
        assert_eq!(decode_text("ĠhiĊ"), b" hi\n");
        assert_eq!(decode_text("a€"), b"a[UNK_BYTE_0xe282aca\xe2\x82\xac]");
    }
}
