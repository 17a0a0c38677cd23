//! The text a merging tokenizer (BPE, SentencePiece) works on, as llama.cpp holds it: one symbol per char
//! to start with, in a doubly linked list; a merge grows the left symbol and leaves the right one empty.

/// A byte range `start..start + len` of the text, linked to its neighbours (`len == 0`: merged away).
#[derive(Clone, Copy)]
pub(super) struct Symbol {
    pub start: usize,
    pub len: usize,
    pub prev: Option<usize>,
    pub next: Option<usize>,
}

/// One symbol per char of `text`, linked in order.
pub(super) fn chars(text: &str) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, c) in text.char_indices() {
        let i = symbols.len();
        symbols.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: None });
        if i > 0 {
            symbols[i - 1].next = Some(i);
        }
    }
    symbols
}

/// Merges symbol `right` into its left neighbour `left`, and returns `left`'s neighbours now: the pairs
/// with them are the new merge candidates.
pub(super) fn merge(symbols: &mut [Symbol], left: usize, right: usize) -> (Option<usize>, Option<usize>) {
    let r = symbols[right];
    symbols[left].len += r.len;
    symbols[right].len = 0;
    symbols[left].next = r.next;
    if let Some(next) = r.next {
        symbols[next].prev = Some(left);
    }
    (symbols[left].prev, r.next)
}
