//! Streaming detokenization: token ids in, text out, never a broken UTF-8 sequence.

use super::Tokenizer;
use crate::error::Result;

/// Turns generated token ids into text as they arrive. Byte-level tokens can end in the middle of a character
/// (an emoji is often 2-4 tokens); those bytes are held until the character completes.
///
/// Each token contributes its raw piece, as llama.cpp's token_to_piece does when streaming: no leading-space
/// removal and no clean-up pass (those are [`Tokenizer::decode`]'s, which sees the whole sequence).
pub struct StreamDecoder {
    tokenizer: Tokenizer,
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub(crate) fn new(tokenizer: Tokenizer) -> StreamDecoder {
        StreamDecoder { tokenizer, pending: Vec::new() }
    }

    /// Add one token; returns the text that is now complete (possibly empty).
    /// Invalid UTF-8 (bytes that can never complete a character) comes out as U+FFFD, as in `finish`.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.pending.extend_from_slice(self.tokenizer.token_bytes(id)?);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("valid_up_to bytes are UTF-8"));
                    match e.error_len() {
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        self.pending.drain(..self.pending.len() - keep);
        Ok(out)
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    /// Flush what is held (an unfinished character becomes U+FFFD) and start over.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
