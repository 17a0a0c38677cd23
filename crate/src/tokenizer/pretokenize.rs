//! Byte-level BPE pre-tokenizers: split text into words before the merges run, exactly as llama.cpp does for
//! each `tokenizer.ggml.pre` (llama-vocab.cpp picks a list of regexes; unicode.cpp applies them in turn, each
//! one splitting the pieces the previous one left).
//!
//! llama.cpp runs the GPT-2 and Llama-3 regexes through hand-written splitters and the others through
//! std::regex. Here every stage is hand-written; the regex stages reproduce ECMAScript's leftmost-first
//! semantics for the specific pattern, so no regex engine (and no large Unicode tables) end up in the wasm.

use std::ops::Range;

use super::unicode::{category, is_letter, is_number, is_whitespace, Category};

/// One splitting stage. Names give the regex it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (llama.cpp's custom splitter).
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:
    /// llama.cpp's custom Llama-3 splitter (3 digits) and Qwen2's regex (1 digit), which matches identically.
    Llama3 { max_digits: usize },
    /// `\p{N}`: every number on its own.
    IsolateNumbers,
    /// `\p{N}+`: runs of numbers.
    NumberRuns,
    /// `[\p{P}\$\+<=>\^~\|]+`: runs of punctuation and a few ASCII symbols.
    PunctuationRuns,
    /// `[0-9][0-9][0-9]`: groups of three ASCII digits.
    DigitTriples,
}

/// A pre-tokenizer: the stages llama.cpp applies for a `tokenizer.ggml.pre` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizer {
    stages: &'static [Stage],
}

impl PreTokenizer {
    /// GPT-2 (`gpt-2`, `mpt`, `olmo`, ...).
    pub(crate) const GPT2: PreTokenizer = PreTokenizer { stages: &[Stage::Gpt2] };
    /// SmolLM, StarCoder, Command-R, ...: digits split one by one, then GPT-2.
    pub(crate) const SMOLLM: PreTokenizer = PreTokenizer { stages: &[Stage::IsolateNumbers, Stage::Gpt2] };
    pub(crate) const LLAMA3: PreTokenizer = PreTokenizer { stages: &[Stage::Llama3 { max_digits: 3 }] };
    pub(crate) const QWEN2: PreTokenizer = PreTokenizer { stages: &[Stage::Llama3 { max_digits: 1 }] };
    /// llama.cpp's fallback when `tokenizer.ggml.pre` is missing or `default`.
    pub(crate) const DEFAULT: PreTokenizer =
        PreTokenizer { stages: &[Stage::PunctuationRuns, Stage::Gpt2, Stage::NumberRuns, Stage::DigitTriples] };

    /// Split `text` into words (slices of `text`, in order, covering all of it).
    pub(crate) fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let chars: Vec<char> = text.chars().collect();
        let mut pieces: Vec<Range<usize>> = std::iter::once(0..chars.len()).collect(); // the whole text
        for &stage in self.stages {
            let mut out = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let s = Splitter { chars: &chars, end: piece.end, prev_end: piece.start, out: &mut out };
                s.run(stage, piece.start);
            }
            pieces = out;
        }
        // Char indices -> byte offsets.
        let mut byte_at: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
        byte_at.push(text.len());
        pieces.into_iter().map(|r| &text[byte_at[r.start]..byte_at[r.end]]).collect()
    }
}

/// Splits one piece `[prev_end, end)` of `chars`, appending the sub-pieces to `out`.
struct Splitter<'a> {
    chars: &'a [char],
    end: usize,
    /// End of the last emitted sub-piece.
    prev_end: usize,
    out: &'a mut Vec<Range<usize>>,
}

impl Splitter<'_> {
    fn run(mut self, stage: Stage, start: usize) {
        match stage {
            Stage::Gpt2 => self.gpt2(start),
            Stage::Llama3 { max_digits } => self.llama3(start, max_digits),
            Stage::IsolateNumbers => self.isolate(start, is_number),
            Stage::NumberRuns => self.runs(start, is_number),
            Stage::PunctuationRuns => self.runs(start, is_default_punctuation),
            Stage::DigitTriples => self.digit_triples(start),
        }
        let end = self.end;
        self.emit(end); // whatever the stage did not match is a piece of its own
    }

    /// The char at `pos`, or None outside the piece (llama.cpp's OUT_OF_RANGE).
    fn at(&self, pos: usize) -> Option<char> {
        if pos < self.end {
            Some(self.chars[pos])
        } else {
            None
        }
    }
    fn letter(&self, pos: usize) -> bool {
        self.at(pos).is_some_and(is_letter)
    }
    fn number(&self, pos: usize) -> bool {
        self.at(pos).is_some_and(is_number)
    }
    fn space(&self, pos: usize) -> bool {
        self.at(pos).is_some_and(is_whitespace)
    }
    /// `[^\s\p{L}\p{N}]`: any char of the piece that is not whitespace, letter or number.
    fn other(&self, pos: usize) -> bool {
        self.at(pos).is_some_and(|c| !(is_whitespace(c) || is_letter(c) || is_number(c)))
    }

    /// Emit the sub-piece from the previous end to `end`; returns its length.
    fn emit(&mut self, end: usize) -> usize {
        debug_assert!(self.prev_end <= end && end <= self.end);
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(self.prev_end..end);
        }
        self.prev_end = end;
        len
    }

    /// `'s|'t|'m|'d` (2 chars) or `'re|'ve|'ll` (3 chars) at `pos`, with `lower` applied to the letters.
    fn contraction(&self, pos: usize, lower: fn(char) -> char) -> Option<usize> {
        if self.at(pos) != Some('\'') {
            return None;
        }
        let c1 = lower(self.at(pos + 1)?);
        if matches!(c1, 's' | 't' | 'm' | 'd') {
            return Some(2);
        }
        let c2 = lower(self.at(pos + 2)?);
        matches!((c1, c2), ('r', 'e') | ('v', 'e') | ('l', 'l')).then_some(3)
    }

    fn gpt2(&mut self, start: usize) {
        let mut pos = start;
        while pos < self.end {
            let c = self.chars[pos];
            if let Some(n) = self.contraction(pos, |c| c) {
                pos += self.emit(pos + n);
                continue;
            }
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
            let first = if c == ' ' { pos + 1 } else { pos };
            let class: Option<fn(&Self, usize) -> bool> = if self.letter(first) {
                Some(Self::letter)
            } else if self.number(first) {
                Some(Self::number)
            } else if self.other(first) {
                Some(Self::other)
            } else {
                None
            };
            if let Some(class) = class {
                pos = first;
                while class(self, pos) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            pos = self.whitespace_or_char(pos);
        }
    }

    /// The last alternatives of the gpt-2 and llama3 regexes at `pos`: `\s+(?!\S)|\s+`, a whitespace run, less its
    /// last char when a non-space follows inside the piece; else the char alone (no alternative matches). Returns
    /// where the next piece starts.
    fn whitespace_or_char(&mut self, pos: usize) -> usize {
        let n = (pos..self.end).take_while(|&p| self.space(p)).count();
        let end = if n == 0 {
            pos + 1
        } else if n > 1 && pos + n < self.end {
            pos + n - 1
        } else {
            pos + n
        };
        self.emit(end);
        end
    }

    fn llama3(&mut self, start: usize, max_digits: usize) {
        let mut pos = start;
        while pos < self.end {
            let c = self.chars[pos];
            // (?i:'s|'t|'re|'ve|'m|'ll|'d). Only ASCII letters can lowercase into these (llama.cpp uses the full
            // Unicode lowercase map, but no other code point maps to s, t, r, e, v, m, l or d).
            if let Some(n) = self.contraction(pos, |c| c.to_ascii_lowercase()) {
                pos += self.emit(pos + n);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(c == '\r' || c == '\n' || is_number(c)) && (is_letter(c) || self.letter(pos + 1)) {
                pos += 1;
                while self.letter(pos) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if is_number(c) {
                let mut run_start = pos;
                while self.number(pos) {
                    pos += 1;
                    if pos - run_start >= max_digits {
                        self.emit(pos);
                        run_start = pos;
                    }
                }
                self.emit(pos);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`. A lone space at the end of the piece also lands here (llama.cpp tests
            // the class of the char after the space, which is none); the regex would give the same single-space
            // piece through `\s+(?!\S)`.
            let first = if c == ' ' { pos + 1 } else { pos };
            if self.other(first) || (c == ' ' && first == self.end) {
                pos = first;
                while self.other(pos) {
                    pos += 1;
                }
                while matches!(self.at(pos), Some('\r' | '\n')) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n.
            let n = (pos..self.end).take_while(|&p| self.space(p)).count();
            if let Some(last_newline) = (pos..pos + n).rev().find(|&p| matches!(self.chars[p], '\r' | '\n')) {
                pos = last_newline + 1;
                self.emit(pos);
                continue;
            }
            pos = self.whitespace_or_char(pos);
        }
    }

    /// Each char matching `class` alone, the runs between them as pieces (a regex `X` with `X` one char).
    fn isolate(&mut self, start: usize, class: fn(char) -> bool) {
        for pos in start..self.end {
            if class(self.chars[pos]) {
                self.emit(pos);
                self.emit(pos + 1);
            }
        }
    }

    /// Maximal runs of chars matching `class`, and the runs between them (a regex `X+`).
    fn runs(&mut self, start: usize, class: fn(char) -> bool) {
        let mut pos = start;
        while pos < self.end {
            if class(self.chars[pos]) {
                self.emit(pos);
                while pos < self.end && class(self.chars[pos]) {
                    pos += 1;
                }
                self.emit(pos);
            } else {
                pos += 1;
            }
        }
    }

    /// Leftmost non-overlapping groups of three ASCII digits.
    fn digit_triples(&mut self, start: usize) {
        let mut pos = start;
        while pos + 3 <= self.end {
            if self.chars[pos..pos + 3].iter().all(char::is_ascii_digit) {
                self.emit(pos);
                self.emit(pos + 3);
                pos += 3;
            } else {
                pos += 1;
            }
        }
    }
}

/// `[\p{P}\$\+<=>\^~\|]` as llama.cpp evaluates it: ASCII punctuation and symbols except the backtick,
/// and any non-ASCII punctuation (non-ASCII symbols are not included).
fn is_default_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation() && c != '`';
    }
    category(c) == Category::Punctuation
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    fn split(pre: &PreTokenizer, text: &str) -> Vec<String> {
        pre.split(text).into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn gpt2_splits_words_spaces_and_contractions() {
        let p = PreTokenizer::GPT2;
        assert_eq!(split(&p, "Hello world"), ["Hello", " world"]);
        // Case-sensitive contractions: 'S is not one.
        assert_eq!(split(&p, "it's IT'S"), ["it", "'s", " IT", "'", "S"]);
        // \s+(?!\S): the space before a word joins the word.
        assert_eq!(split(&p, "a   b"), ["a", "  ", " b"]);
        assert_eq!(split(&p, "a   "), ["a", "   "]);
        assert_eq!(split(&p, " 123abc!?"), [" 123", "abc", "!?"]);
        assert_eq!(split(&p, "x\n\n y"), ["x", "\n\n", " y"]);
        assert_eq!(split(&p, ""), Vec::<String>::new());
    }

    #[test]
    fn smollm_isolates_every_digit_first() {
        let p = PreTokenizer::SMOLLM;
        assert_eq!(split(&p, "is 2024!"), ["is", " ", "2", "0", "2", "4", "!"]);
        // Non-ASCII numbers too (Arabic-Indic digits, superscripts).
        assert_eq!(split(&p, "x²٣y"), ["x", "²", "٣", "y"]);
    }

    #[test]
    fn llama3_tricky_strings() {
        let p = PreTokenizer::LLAMA3;
        // Case-insensitive contractions; a leading non-letter joins the word.
        assert_eq!(split(&p, "IT'S we'RE"), ["IT", "'S", " we", "'RE"]);
        assert_eq!(split(&p, "$hello (world)"), ["$hello", " (", "world", ")"]);
        // Numbers in groups of three.
        assert_eq!(split(&p, "1234567"), ["123", "456", "7"]);
        // Punctuation takes the newlines that follow it; whitespace runs end after their last newline.
        assert_eq!(split(&p, "end.\n\nNext"), ["end", ".\n\n", "Next"]);
        assert_eq!(split(&p, "a \n \n  b"), ["a", " \n \n", " ", " b"]);
        assert_eq!(split(&p, "x\r\n"), ["x", "\r\n"]);
        // Trailing spaces stay together; before a word the last one joins it.
        assert_eq!(split(&p, "a    b   "), ["a", "   ", " b", "   "]);
        // A newline cannot lead a word.
        assert_eq!(split(&p, "\nword"), ["\n", "word"]);
        assert_eq!(split(&p, "a ."), ["a", " ."]);
        assert_eq!(split(&p, "a "), ["a", " "]);
        // Tab before a word: [^\r\n\p{L}\p{N}]? takes it.
        assert_eq!(split(&p, "\tif"), ["\tif"]);
        assert_eq!(split(&p, "你好，世界"), ["你好", "，世界"]);
        assert_eq!(split(&p, "naïve café"), ["naïve", " café"]);
    }

    #[test]
    fn qwen2_splits_digits_one_by_one() {
        let p = PreTokenizer::QWEN2;
        assert_eq!(split(&p, "abc 2024"), ["abc", " ", "2", "0", "2", "4"]);
        assert_eq!(split(&p, "x=10;\n\n"), ["x", "=", "1", "0", ";\n\n"]);
        assert_eq!(split(&p, "don't  stop\t\n"), ["don", "'t", " ", " stop", "\t\n"]);
        // Non-ASCII whitespace (no-break space) acts as whitespace and as a word's leading char.
        assert_eq!(split(&p, "a\u{A0}\u{A0}b"), ["a", "\u{A0}", "\u{A0}b"]);
        assert_eq!(split(&p, "👍🏽ok"), ["👍🏽", "ok"]);
    }

    #[test]
    fn default_pipeline() {
        let p = PreTokenizer::DEFAULT;
        // Punctuation runs first (a backtick is not one of them), then GPT-2, then numbers, then digit triples.
        assert_eq!(split(&p, "hi, 12345 `x`"), ["hi", ",", " ", "123", "45", " `", "x", "`"]);
        assert_eq!(split(&p, " 12345 `x`"), [" ", "123", "45", " `", "x", "`"]);
        assert_eq!(split(&p, "a+=b"), ["a", "+=", "b"]);
    }
}
