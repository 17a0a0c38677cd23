//! BERT's WordPiece (`tokenizer.ggml.model = "bert"`), as llama.cpp's llm_tokenizer_wpm_session: a basic
//! tokenizer (first code point of each code point's NFD form, which drops accents; lower case; whitespace splits
//! words; punctuation, ASCII symbols and CJK ideographs are words of their own; control code points and marks are
//! dropped),
//! then greedy longest-match of each word against the vocabulary.
//!
//! The vocabulary is in llama.cpp's "phantom space" form: a word-initial piece is stored as "▁piece", a
//! continuation ("##piece" in BERT's vocab.txt) as "piece". A word with a piece that matches nothing is one
//! [UNK].

use super::unicode::{category, is_whitespace, nfd_first, Category};
use super::vocab::Vocab;

/// U+2581, which marks the start of a word in the vocabulary.
const PHANTOM_SPACE: char = '\u{2581}';

/// Append the ids of `text` (no [CLS] or [SEP]) to `out`.
pub(crate) fn tokenize(v: &Vocab, text: &str, max_token_len: usize, out: &mut Vec<u32>) {
    for word in words(text) {
        let word = format!("{PHANTOM_SPACE}{word}");
        let bytes = word.as_bytes();
        let first = out.len();
        // Positions are bytes, as llama.cpp's: a candidate that cuts a code point is not UTF-8 and matches nothing.
        let mut i = 0;
        while i < bytes.len() {
            let longest = (i + 1..=bytes.len().min(i + max_token_len)).rev().find_map(|j| {
                let id = std::str::from_utf8(&bytes[i..j]).ok().and_then(|piece| v.token_id(piece))?;
                Some((j, id))
            });
            match longest {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(first);
                    break;
                }
            }
        }
        if out.len() == first {
            out.extend(v.unk());
        }
    }
}

/// llama.cpp's `preprocess`: the words of `text` after normalization.
fn words(text: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars().map(nfd_first) {
        if is_whitespace(c) {
            if !words.last().expect("never empty").is_empty() {
                words.push(String::new());
            }
            continue;
        }
        let class = category(c);
        // Marks of every kind (Mn, Mc, Me) are dropped: what llama.cpp does, checked with node-llama-cpp 3.22.1 on
        // "a\u{301}b", "a\u{20DD}b", "x\u{903}y" (each one word, "ab" or "xy").
        if c == '\0' || c == '\u{FFFD}' || class == Category::Control || class == Category::Mark {
            continue;
        }
        // The first code point of the lower case, as llama.cpp's unicode_tolower.
        let lower = c.to_lowercase().next().unwrap_or(c);
        let stands_alone =
            class == Category::Punctuation || (c < '\u{7F}' && class == Category::Symbol) || is_chinese_char(c);
        let word = words.last_mut().expect("never empty");
        if stands_alone {
            if !word.is_empty() {
                words.push(String::new());
            }
            words.last_mut().expect("never empty").push(lower);
            words.push(String::new());
        } else {
            word.push(lower);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// CJK ideographs, each a word of its own (BERT's `_is_chinese_char`, with the same 0x2B920 llama.cpp and HF use).
fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    #[test]
    fn words_split_lower_case_and_drop_accents() {
        assert_eq!(words("  Héllo, WORLD!  "), ["hello", ",", "world", "!"]);
        assert_eq!(words("北京是"), ["北", "京", "是"]);
        assert_eq!(words("a\u{0}b\u{200D}c $5"), ["abc", "$", "5"]);
        assert_eq!(words(""), Vec::<String>::new());
        assert_eq!(words("a\u{301}b a\u{20DD}b x\u{903}y नमस्ते"), ["ab", "ab", "xy", "नमसत"]);
    }
}
