//! Byte-level BPE pre-tokenizers: split text into words before the merges run, exactly as llama.cpp does for
//! each `tokenizer.ggml.pre` (llama-vocab.cpp picks a list of regexes; unicode.cpp applies them in turn, each
//! one splitting the pieces the previous one left).
//!
//! llama.cpp runs the GPT-2, Llama-3, Qwen2 and Qwen3.5 regexes through hand-written splitters and the others
//! through std::regex. Here every stage is hand-written; the regex stages reproduce ECMAScript's leftmost-first
//! semantics for the specific pattern on the text as llama.cpp hands it to std::regex (see [`Class`]), so no
//! regex engine (and no large Unicode tables) end up in the wasm.

use std::ops::Range;

use super::unicode::{category, is_letter, is_number, is_whitespace, Category};

/// One splitting stage. Names give the regex it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (llama.cpp's custom splitter).
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:
    /// llama.cpp's custom Llama-3 splitter (3 digits) and Qwen2's regex (1 digit), which matches identically.
    /// With `marks`, Qwen3.5's: `\p{L}+` is `[\p{L}\p{M}]+` and the punctuation run excludes `\p{M}` too
    /// (llama.cpp's custom qwen35 splitter).
    Llama3 { max_digits: usize, marks: bool },
    /// Tekken's (Mistral Nemo) and GPT-4o's (Phi-4-mini) regex as llama.cpp rewrites it for std::regex:
    /// `[^\r\n\p{L}\p{N}]?U*L+C|[^\r\n\p{L}\p{N}]?U+L*C|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
    /// where U is a letter not in `a-z`, L one not in `A-Z` (`(?=[\p{L}])([^a-z])`: a non-ASCII letter, collapsed to
    /// one stand-in, is both) and C, with `contractions` (GPT-4o), an optional `'s|'t|'re|'ve|'m|'ll|'d` in any case.
    Cased { max_digits: usize, contractions: bool },
    /// `X`: every char of the class on its own.
    Isolate(Class),
    /// `X+`: maximal runs of the class.
    Runs(Class),
    /// `\s?X+`: runs of the class, each with the whitespace char before it.
    SpaceThenRuns(Class),
    /// `\s+$`: the whitespace at the end of the piece.
    TrailingWhitespace,
    /// `[0-9][0-9][0-9]`: groups of three ASCII digits.
    DigitTriples,
}

/// A char class of a regex stage, as llama.cpp's std::regex sees it. Before matching, llama.cpp replaces every
/// non-ASCII whitespace char by U+000B (so `\s` is [`is_whitespace`], and no class below takes such a char,
/// not even U+3000 where a class's range spans it); with a `\p{..}` in the regex it also collapses each other
/// non-ASCII char to its category's stand-in, so `\p{L}` is [`is_letter`] and so on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// `[\r\n]`.
    Newline,
    /// `\n`.
    LineFeed,
    /// `\p{N}`.
    Number,
    /// `\p{L}`.
    Letter,
    /// `\p{P}`: ASCII's punctuation (not its symbols `$+<=>^`|~`) and non-ASCII punctuation.
    Punctuation,
    /// `[\p{P}\$\+<=>\^~\|]`: the default pre-tokenizer's, every ASCII punctuation or symbol but the backtick.
    DefaultPunctuation,
    /// `[\p{P}\$\+<=>\^~\|`]`: Falcon's, the default's and the backtick.
    FalconPunctuation,
    /// DeepSeek LLM's letters: `[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]` (cased letters of many scripts, not CJK).
    DeepseekLetter,
    /// DeepSeek LLM's punctuation: `[!-/:-~！-／：-～‘-‟　-。]` (ASCII's letters too, from `:-~`).
    DeepseekPunctuation,
    /// `[一-龥ࠀ-一가-퟿]`: U+0800..=U+9FA5 (CJK ideographs and every script between) and Hangul, U+AC00..=U+D7FF.
    Cjk,
}

impl Class {
    fn contains(self, c: char) -> bool {
        if !c.is_ascii() && is_whitespace(c) {
            return false; // U+000B to the regex
        }
        match self {
            Class::Newline => c == '\r' || c == '\n',
            Class::LineFeed => c == '\n',
            Class::Number => is_number(c),
            Class::Letter => is_letter(c),
            Class::Punctuation => category(c) == Category::Punctuation,
            Class::DefaultPunctuation => is_default_punctuation(c),
            Class::FalconPunctuation => c == '`' || is_default_punctuation(c),
            Class::DeepseekLetter => in_ranges(c, DEEPSEEK_LETTERS),
            Class::DeepseekPunctuation => in_ranges(c, DEEPSEEK_PUNCTUATION),
            Class::Cjk => matches!(c, '\u{0800}'..='\u{9FA5}' | '\u{AC00}'..='\u{D7FF}'),
        }
    }
}

/// Whether `c` is in one of `ranges` (inclusive, ascending, not overlapping).
fn in_ranges(c: char, ranges: &[(u32, u32)]) -> bool {
    let cp = c as u32;
    let i = ranges.partition_point(|&(_, last)| last < cp);
    ranges.get(i).is_some_and(|&(first, _)| first <= cp)
}

/// DeepSeek LLM's letter class, as llama-vocab.cpp writes it (adjacent single chars joined into ranges).
#[rustfmt::skip]
const DEEPSEEK_LETTERS: &[(u32, u32)] = &[
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF), (0x1C4, 0x293),
    (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A),
    (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5),
    (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57),
    (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115),
    (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134),
    (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F),
    (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB), (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943),
];

/// DeepSeek LLM's punctuation class, sorted: ASCII's `!-/` and `:-~`, `‘-‟`, `　-。`, fullwidth `！-／` and `：-～`.
const DEEPSEEK_PUNCTUATION: &[(u32, u32)] =
    &[(0x21, 0x2F), (0x3A, 0x7E), (0x2018, 0x201F), (0x3000, 0x3002), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E)];

/// A pre-tokenizer: the stages llama.cpp applies for a `tokenizer.ggml.pre` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizer {
    stages: &'static [Stage],
}

impl PreTokenizer {
    /// GPT-2 (`gpt-2`, `mpt`, `olmo`, ...).
    pub(crate) const GPT2: PreTokenizer = PreTokenizer { stages: &[Stage::Gpt2] };
    /// SmolLM, StarCoder, Command-R, ...: digits split one by one, then GPT-2.
    pub(crate) const SMOLLM: PreTokenizer = PreTokenizer { stages: &[Stage::Isolate(Class::Number), Stage::Gpt2] };
    pub(crate) const LLAMA3: PreTokenizer = PreTokenizer { stages: &[Stage::Llama3 { max_digits: 3, marks: false }] };
    pub(crate) const QWEN2: PreTokenizer = PreTokenizer { stages: &[Stage::Llama3 { max_digits: 1, marks: false }] };
    pub(crate) const QWEN35: PreTokenizer = PreTokenizer { stages: &[Stage::Llama3 { max_digits: 1, marks: true }] };
    /// Tekken (Mistral Nemo, Mistral Small 3): words split where a lowercase letter meets an uppercase one.
    pub(crate) const TEKKEN: PreTokenizer =
        PreTokenizer { stages: &[Stage::Cased { max_digits: 1, contractions: false }] };
    /// GPT-4o's (Phi-4-mini): Tekken's words with their contractions, digits three at a time.
    pub(crate) const GPT4O: PreTokenizer =
        PreTokenizer { stages: &[Stage::Cased { max_digits: 3, contractions: true }] };
    /// Falcon: punctuation runs (with the backtick), then GPT-2, then digit triples.
    pub(crate) const FALCON: PreTokenizer =
        PreTokenizer { stages: &[Stage::Runs(Class::FalconPunctuation), Stage::Gpt2, Stage::DigitTriples] };
    /// DeepSeek LLM: `[\r\n]`, `\s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+`, `\s?[!-/:-~！-／：-～‘-‟　-。]+`, `\s+$`,
    /// `[一-龥ࠀ-一가-퟿]+`, `\p{N}+`.
    pub(crate) const DEEPSEEK_LLM: PreTokenizer = PreTokenizer {
        stages: &[
            Stage::Isolate(Class::Newline),
            Stage::SpaceThenRuns(Class::DeepseekLetter),
            Stage::SpaceThenRuns(Class::DeepseekPunctuation),
            Stage::TrailingWhitespace,
            Stage::Runs(Class::Cjk),
            Stage::Runs(Class::Number),
        ],
    };
    /// DeepSeek Coder: `[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, `[一-龥ࠀ-一가-퟿]+`, `\p{N}`.
    pub(crate) const DEEPSEEK_CODER: PreTokenizer = PreTokenizer {
        stages: &[
            Stage::Isolate(Class::Newline),
            Stage::SpaceThenRuns(Class::Letter),
            Stage::SpaceThenRuns(Class::Punctuation),
            Stage::Runs(Class::Cjk),
            Stage::Isolate(Class::Number),
        ],
    };
    /// Gemma 4: `[^\n]+|[\n]+`, the runs of newlines and the text between them (its BPE merges whole lines).
    pub(crate) const GEMMA4: PreTokenizer = PreTokenizer { stages: &[Stage::Runs(Class::LineFeed)] };
    /// llama.cpp's fallback when `tokenizer.ggml.pre` is missing or `default`.
    pub(crate) const DEFAULT: PreTokenizer = PreTokenizer {
        stages: &[Stage::Runs(Class::DefaultPunctuation), Stage::Gpt2, Stage::Runs(Class::Number), Stage::DigitTriples],
    };

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
            Stage::Llama3 { max_digits, marks } => self.llama3(start, max_digits, marks),
            Stage::Cased { max_digits, contractions } => self.cased(start, max_digits, contractions),
            Stage::Isolate(class) => self.isolate(start, class),
            Stage::Runs(class) => self.runs(start, class),
            Stage::SpaceThenRuns(class) => self.space_then_runs(start, class),
            Stage::TrailingWhitespace => self.trailing_whitespace(start),
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

    /// `\p{L}` (`[\p{L}\p{M}]` with `marks`).
    fn word(&self, pos: usize, marks: bool) -> bool {
        self.at(pos).is_some_and(|c| is_letter(c) || (marks && category(c) == Category::Mark))
    }

    fn llama3(&mut self, start: usize, max_digits: usize, marks: bool) {
        let mut pos = start;
        while pos < self.end {
            let c = self.chars[pos];
            // (?i:'s|'t|'re|'ve|'m|'ll|'d). Only ASCII letters can lowercase into these (llama.cpp uses the full
            // Unicode lowercase map, but no other code point maps to s, t, r, e, v, m, l or d).
            if let Some(n) = self.contraction(pos, |c| c.to_ascii_lowercase()) {
                pos += self.emit(pos + n);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+ (a leading mark is not \p{L}, so it may be the optional char)
            if !(c == '\r' || c == '\n' || is_number(c)) && (self.word(pos, marks) || self.word(pos + 1, marks)) {
                pos += 1;
                while self.word(pos, marks) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if is_number(c) {
                pos = self.digit_groups(pos, max_digits);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `[\p{M}]` not among them with `marks`.
            if let Some(end) = self.punctuation(pos, |s, p| s.other(p) && !s.word(p, marks), &['\r', '\n']) {
                pos = end;
                continue;
            }
            pos = self.newlines_or_whitespace(pos);
        }
    }

    fn cased(&mut self, start: usize, max_digits: usize, contractions: bool) {
        let mut pos = start;
        while pos < self.end {
            let c = self.chars[pos];
            // [^\r\n\p{L}\p{N}]?U*L+ | [^\r\n\p{L}\p{N}]?U+L*: with a letter after the optional char, one of them
            // matches with it.
            let first = if !(c == '\r' || c == '\n' || is_letter(c) || is_number(c)) { pos + 1 } else { pos };
            if self.letter(first) {
                pos = self.cased_word(first);
                if contractions {
                    pos += self.contraction(pos, |c| c.to_ascii_lowercase()).unwrap_or(0);
                }
                self.emit(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if is_number(c) {
                pos = self.digit_groups(pos, max_digits);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
            if let Some(end) = self.punctuation(pos, Self::other, &['\r', '\n', '/']) {
                pos = end;
                continue;
            }
            pos = self.newlines_or_whitespace(pos);
        }
    }

    /// `\p{N}{1,max_digits}` from the number at `pos`, each group a piece; returns the run's end.
    fn digit_groups(&mut self, mut pos: usize, max_digits: usize) -> usize {
        let run_end = (pos..self.end).take_while(|&p| self.number(p)).count() + pos;
        while pos < run_end {
            pos = (pos + max_digits).min(run_end);
            self.emit(pos);
        }
        pos
    }

    /// ` ?X+[T]*` at `pos`, X the chars `other` takes and T `trailing`: the piece's end, or None when no X follows
    /// (the optional space). A lone space at the end of the piece also lands here (llama.cpp's splitters test the
    /// class of the char after the space, which is none); the regex would give the same single-space piece through
    /// `\s+(?!\S)`.
    fn punctuation(&mut self, pos: usize, other: impl Fn(&Self, usize) -> bool, trailing: &[char]) -> Option<usize> {
        let space = self.at(pos) == Some(' ');
        let mut end = if space { pos + 1 } else { pos };
        if !(other(self, end) || (space && end == self.end)) {
            return None;
        }
        while other(self, end) {
            end += 1;
        }
        while self.at(end).is_some_and(|c| trailing.contains(&c)) {
            end += 1;
        }
        self.emit(end);
        Some(end)
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`: the whitespace run up to and including its last `\r` or `\n`, else
    /// [`Self::whitespace_or_char`]. Returns where the next piece starts.
    fn newlines_or_whitespace(&mut self, pos: usize) -> usize {
        let n = (pos..self.end).take_while(|&p| self.space(p)).count();
        match (pos..pos + n).rev().find(|&p| matches!(self.chars[p], '\r' | '\n')) {
            Some(last_newline) => {
                self.emit(last_newline + 1);
                last_newline + 1
            }
            None => self.whitespace_or_char(pos),
        }
    }

    /// The end of `U*L+|U+L*` from the letter at `first`, as the regex backtracks: the longest run of U (letters not
    /// in a-z) that an L (a letter not in A-Z) follows, then the run of L; else the run of U alone.
    fn cased_word(&self, first: usize) -> usize {
        let upper = |p: usize| self.at(p).is_some_and(|c| is_letter(c) && !c.is_ascii_lowercase());
        let lower = |p: usize| self.at(p).is_some_and(|c| is_letter(c) && !c.is_ascii_uppercase());
        let u_end = (first..self.end).take_while(|&p| upper(p)).count() + first;
        match (first..=u_end).rev().find(|&q| lower(q)) {
            Some(q) => (q..self.end).take_while(|&p| lower(p)).count() + q,
            None => u_end,
        }
    }

    /// Each char of `class` alone, the runs between them as pieces (a regex `X` with `X` one char).
    fn isolate(&mut self, start: usize, class: Class) {
        for pos in start..self.end {
            if class.contains(self.chars[pos]) {
                self.emit(pos);
                self.emit(pos + 1);
            }
        }
    }

    /// The end of the run of `class` from `pos` (`pos` itself when there is none).
    fn run_end(&self, mut pos: usize, class: Class) -> usize {
        while self.at(pos).is_some_and(|c| class.contains(c)) {
            pos += 1;
        }
        pos
    }

    /// Maximal runs of `class`, and the runs between them (a regex `X+`).
    fn runs(&mut self, start: usize, class: Class) {
        let mut pos = start;
        while pos < self.end {
            let end = self.run_end(pos, class);
            if end > pos {
                self.emit(pos);
                self.emit(end);
                pos = end;
            } else {
                pos += 1;
            }
        }
    }

    /// `\s?X+`, leftmost first: a match starts at the first char of `class`, or at the whitespace char before it
    /// (no whitespace char is in any class, so `\s?` never has to give its char back to `X+`).
    fn space_then_runs(&mut self, start: usize, class: Class) {
        let mut pos = start;
        while pos < self.end {
            let first = if self.space(pos) { pos + 1 } else { pos };
            let end = self.run_end(first, class);
            if end > first {
                self.emit(pos);
                self.emit(end);
                pos = end;
            } else {
                pos += 1;
            }
        }
    }

    /// `\s+$`: `$` is the end of the piece (the regex runs on each piece alone, without multiline), so the match is
    /// the piece's trailing whitespace, all of it.
    fn trailing_whitespace(&mut self, start: usize) {
        let mut first = self.end;
        while first > start && self.space(first - 1) {
            first -= 1;
        }
        self.emit(first);
        let end = self.end;
        self.emit(end);
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
    fn qwen35_letters_take_marks() {
        // A combining mark continues a word (Qwen2: it ends one, and leads the next).
        assert_eq!(split(&PreTokenizer::QWEN2, "e\u{301}x"), ["e", "\u{301}x"]);
        assert_eq!(split(&PreTokenizer::QWEN35, "e\u{301}x"), ["e\u{301}x"]);
        // ... and is no punctuation: a space before it leads it as a word.
        assert_eq!(split(&PreTokenizer::QWEN2, " \u{301}!"), [" \u{301}!"]);
        assert_eq!(split(&PreTokenizer::QWEN35, " \u{301}!"), [" \u{301}", "!"]);
        assert_eq!(split(&PreTokenizer::QWEN35, "नमस्ते 42"), ["नमस्ते", " ", "4", "2"]);
    }

    #[test]
    fn falcon_punctuation_takes_the_backtick() {
        let p = PreTokenizer::FALCON;
        // The backtick is punctuation here (not in the default): a run of its own before GPT-2 sees the space.
        assert_eq!(split(&p, "a `b`"), ["a", " ", "`", "b", "`"]);
        assert_eq!(split(&PreTokenizer::DEFAULT, "a `b`"), ["a", " `", "b", "`"]);
        assert_eq!(split(&p, "c+=1234"), ["c", "+=", "123", "4"]);
    }

    #[test]
    fn deepseek_coder_stages() {
        let p = PreTokenizer::DEEPSEEK_CODER;
        assert_eq!(
            split(&p, "Hello, world!\n123 中文"),
            ["Hello", ",", " world", "!", "\n", "1", "2", "3", " ", "中文"]
        );
        // \s?: one whitespace char leads a run; a newline is always alone.
        assert_eq!(split(&p, "a  b\n\nc"), ["a", " ", " b", "\n", "\n", "c"]);
        // \p{P} is not ASCII's symbols: " +=" is what no stage matched.
        assert_eq!(split(&p, "x += (y)"), ["x", " +=", " (", "y", ")"]);
    }

    #[test]
    fn deepseek_llm_stages() {
        let p = PreTokenizer::DEEPSEEK_LLM;
        assert_eq!(
            split(&p, "Hello, world!\n123 中文  "),
            ["Hello", ",", " world", "!", "\n", "123", " ", "中文", "  "]
        );
        // é is in the letter class but not in the punctuation class, which splits the word again (its `:-~`
        // takes ASCII letters).
        assert_eq!(split(&p, "café"), ["caf", "é"]);
        // U+3000 is whitespace to the regex, so not in the class range `　-。` that spans it.
        assert_eq!(split(&p, "a。\u{3000}"), ["a", "。", "\u{3000}"]);
        // The punctuation stage takes "\u{3000}。" (a whitespace char, then the class); the CJK stage's range
        // U+0800..=U+9FA5 takes "。" and leaves the space.
        assert_eq!(split(&p, "x\u{3000}。"), ["x", "\u{3000}", "。"]);
    }

    #[test]
    fn gemma4_splits_at_newline_runs_only() {
        let p = PreTokenizer::GEMMA4;
        assert_eq!(split(&p, "a b\n\nc\r\n"), ["a b", "\n\n", "c\r", "\n"]);
    }

    #[test]
    fn ascii_punctuation_is_the_collapsed_regex_list() {
        // llama.cpp's `\p{P}` keeps ASCII as is and lists these chars for it: Unicode's ASCII punctuation.
        for c in (0..0x80u8).map(char::from) {
            assert_eq!(Class::Punctuation.contains(c), "!\"#%&'()*,-./:;?@[\\]_{}".contains(c), "{c:?}");
        }
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
