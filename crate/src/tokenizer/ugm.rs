//! SentencePiece's unigram model (`tokenizer.ggml.model = "t5"`: T5, XLM-RoBERTa, nomic-bert-moe), as llama.cpp's
//! llm_tokenizer_ugm.
//!
//! The text is first normalized: each prefix the precompiled character map (`tokenizer.ggml.precompiled_charsmap`,
//! SentencePiece's NFKC-like rules as a XOR-compressed compact double array, XCDA, and the replacement strings after
//! it) matches is replaced, longest first, user-defined tokens left as they are; spaces become "▁", one before the
//! text (`add_space_prefix`), runs of them merged (`remove_extra_whitespaces`). Then the Viterbi search: at each code
//! point, every token that starts there extends the best tokenization that ends there by its score (user-defined
//! tokens score 0); a code point no token covers alone is the unknown token, scored 10 below the lowest token. The
//! best path, read back from the end, is the ids, consecutive unknown tokens merged into one.

use super::vocab::{attr, Vocab};
use crate::error::{Error, Result};

/// What llama.cpp subtracts from the lowest token score for the unknown token.
const UNKNOWN_PENALTY: f32 = 10.0;

/// The tokenizer's tables, built once with the vocabulary (the default: none yet).
#[derive(Default)]
pub(crate) struct Ugm {
    charsmap: Option<CharsMap>,
    remove_extra_whitespaces: bool,
    /// The unknown token's score: the lowest normal token's, less [`UNKNOWN_PENALTY`].
    unknown_score: f32,
    /// The longest text of a token the search takes (normal, user-defined, unused), and of a user-defined one, in
    /// bytes: where looking for longer ones stops.
    longest_token: usize,
    longest_user_defined: usize,
}

/// The precompiled character map: the XCDA's entries and the NUL-terminated replacement strings after them.
struct CharsMap {
    xcda: Vec<u32>,
    replacements: Vec<u8>,
}

impl Ugm {
    /// From the vocabulary's tokens (their texts' lengths `text_lens`, attributes `attrs` and `scores`) and the map's
    /// bytes, if any.
    pub(crate) fn new(
        text_lens: impl Iterator<Item = usize>,
        attrs: &[u16],
        scores: &[f32],
        charsmap: Option<&[u8]>,
        remove_extra_whitespaces: bool,
    ) -> Result<Ugm> {
        let mut min_score = f32::MAX;
        let (mut longest_token, mut longest_user_defined) = (0, 0);
        for (id, len) in text_lens.enumerate() {
            let a = attrs[id];
            if a & attr::NORMAL != 0 {
                min_score = min_score.min(scores[id]);
            }
            if a & (attr::NORMAL | attr::USER_DEFINED | attr::UNUSED) != 0 {
                longest_token = longest_token.max(len);
            }
            if a & attr::USER_DEFINED != 0 {
                longest_user_defined = longest_user_defined.max(len);
            }
        }
        Ok(Ugm {
            charsmap: charsmap.map(CharsMap::parse).transpose()?,
            remove_extra_whitespaces,
            unknown_score: min_score - UNKNOWN_PENALTY,
            longest_token,
            longest_user_defined,
        })
    }

    /// The ids of `text` (one fragment between special tokens), appended to `out`. `unk` is the unknown token.
    pub(crate) fn tokenize(&self, v: &Vocab, text: &str, unk: u32, out: &mut Vec<u32>) -> Result<()> {
        let normalized = self.normalize(v, text)?;
        let n = normalized.len();
        if n == 0 {
            return Ok(());
        }
        // best[i]: the best tokenization of normalized[..i]: its last token, where that token starts, its score.
        let mut best = vec![(unk, 0usize, f64::MIN); n + 1];
        best[0].2 = 0.0;
        let mut start = 0;
        while start < n {
            let cp_len = utf8_len(normalized[start]).min(n - start);
            let base = best[start].2;
            let mut whole_cp_token = false;
            for end in start + 1..=n.min(start + self.longest_token) {
                let Some(id) = std::str::from_utf8(&normalized[start..end]).ok().and_then(|t| v.token_id(t)) else {
                    continue;
                };
                let a = v.attr(id);
                if a & (attr::NORMAL | attr::USER_DEFINED | attr::UNUSED) == 0 {
                    continue;
                }
                whole_cp_token |= end - start == cp_len;
                let score = base + if a & attr::USER_DEFINED != 0 { 0.0 } else { v.score(id) as f64 };
                if score > best[end].2 {
                    best[end] = (id, start, score);
                }
            }
            if !whole_cp_token {
                let score = base + self.unknown_score as f64;
                if score > best[start + cp_len].2 {
                    best[start + cp_len] = (unk, start, score);
                }
            }
            start += cp_len;
        }
        let first = out.len();
        let (mut at, mut prev_unknown) = (n, false);
        loop {
            let (id, from, _) = best[at];
            let unknown = id == unk;
            if !(prev_unknown && unknown) {
                out.push(id);
            }
            if from == 0 {
                break;
            }
            prev_unknown = unknown;
            at = from;
        }
        out[first..].reverse();
        Ok(())
    }

    /// The text as the search sees it (llama.cpp's normalize): bytes, since the map's replacements are the file's.
    fn normalize(&self, v: &Vocab, text: &str) -> Result<Vec<u8>> {
        const SPACE: &[u8] = "\u{2581}".as_bytes();
        let input = text.as_bytes();
        let mut out = Vec::with_capacity(input.len() * 3);
        let (mut space_prepended, mut in_word) = (false, false);
        let mut at = 0;
        while at < input.len() {
            let (piece, consumed) = self.normalize_prefix(v, &input[at..])?;
            for &c in piece {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (v.add_space_prefix && !space_prepended) || self.remove_extra_whitespaces {
                            out.extend_from_slice(SPACE);
                            space_prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !self.remove_extra_whitespaces {
                        out.extend_from_slice(SPACE);
                    }
                }
            }
            at += consumed;
        }
        Ok(out)
    }

    /// The normalized form of a prefix of `rest` (non-empty), and how many of its bytes that consumes: a user-defined
    /// token as it is, else the map's replacement of the longest prefix it has one for, else one char as it is (a
    /// byte that does not start a valid UTF-8 sequence: U+FFFD; a map's match may end inside a char).
    fn normalize_prefix<'a>(&'a self, v: &Vocab, rest: &'a [u8]) -> Result<(&'a [u8], usize)> {
        let user_defined = (1..=rest.len().min(self.longest_user_defined)).rev().find(|&len| {
            let token = std::str::from_utf8(&rest[..len]).ok().and_then(|t| v.token_id(t));
            token.is_some_and(|id| v.attr(id) & attr::USER_DEFINED != 0)
        });
        if let Some(len) = user_defined {
            return Ok((&rest[..len], len));
        }
        if let Some(map) = &self.charsmap {
            if let Some((len, offset)) = map.longest_match(rest)? {
                return Ok((map.replacement(offset)?, len));
            }
        }
        let len = utf8_len(rest[0]);
        match rest.get(..len).filter(|c| std::str::from_utf8(c).is_ok()) {
            Some(c) => Ok((c, len)),
            None => Ok(("\u{FFFD}".as_bytes(), 1)),
        }
    }
}

/// llama.cpp's unicode_len_utf8: the length of a UTF-8 sequence from its first byte (1 for a continuation byte).
fn utf8_len(first: u8) -> usize {
    const LEN: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LEN[(first >> 4) as usize]
}

fn err(msg: impl Into<String>) -> Error {
    Error::Tokenizer(msg.into())
}

impl CharsMap {
    /// The map's bytes: a little-endian u32, the XCDA's size in bytes, the XCDA's entries, then the replacements.
    fn parse(bytes: &[u8]) -> Result<CharsMap> {
        let size = bytes.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let xcda_end = size.and_then(|s| s.checked_add(4)).filter(|&end| end < bytes.len());
        let Some(xcda_end) = xcda_end else {
            return Err(err(format!(
                "tokenizer.ggml.precompiled_charsmap of {} bytes is shorter than the table it announces",
                bytes.len()
            )));
        };
        let xcda = bytes[4..xcda_end].chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(CharsMap { xcda, replacements: bytes[xcda_end..].to_vec() })
    }

    fn node(&self, index: u32) -> Result<u32> {
        self.xcda
            .get(index as usize)
            .copied()
            .ok_or_else(|| err("the precompiled charsmap's table points past its end"))
    }

    /// The longest prefix of `input` the map has a replacement for: its length and the replacement's offset. Each
    /// entry packs BASE in bits 10-30 (shifted left by 8 when bit 9 is set), LCHECK in bits 0-7 (and 31), LEAF in bit
    /// 8; a leaf's BASE leads to the entry holding the replacement's offset (Kanda 2018, as SentencePiece writes it).
    fn longest_match(&self, input: &[u8]) -> Result<Option<(usize, u32)>> {
        let base = |node: u32| (node >> 10) << ((node & (1 << 9)) >> 6);
        let mut found = None;
        let mut index = base(self.node(0)?);
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= c as u32;
            let node = self.node(index)?;
            if node & ((1 << 31) | 0xff) != c as u32 {
                break;
            }
            let leaf = (node >> 8) & 1 == 1;
            index ^= base(node);
            if leaf {
                found = Some((i + 1, self.node(index)? & ((1 << 31) - 1)));
            }
        }
        Ok(found)
    }

    /// The NUL-terminated replacement at `offset`.
    fn replacement(&self, offset: u32) -> Result<&[u8]> {
        let rest = self
            .replacements
            .get(offset as usize..)
            .ok_or_else(|| err("a precompiled charsmap replacement starts past the map's end"))?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| err("a precompiled charsmap replacement is not terminated"))?;
        Ok(&rest[..len])
    }
}
