//! The model's vocabulary as llguidance sees it: every token's bytes in a trie (control tokens marked as
//! special, so that grammars name them `<|im_end|>` and text never spells them), and our tokenizer for the
//! bytes a grammar forces.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

struct Vocabulary {
    trie: TokTrie,
    tokenizer: Tokenizer,
    /// Whether `tokenizer.encode` of a piece of text is the tokenization that text has inside a longer one.
    /// SentencePiece prefixes a space to what it encodes, so forced text goes through the trie instead.
    canonical: bool,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) if self.canonical => match self.tokenizer.encode(text, false) {
                Ok(ids) => ids,
                Err(_) => self.trie.greedy_tokenize(s),
            },
            _ => self.trie.greedy_tokenize(s),
        }
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}

/// llguidance's view of `tokenizer`. `eos` is the token a finished grammar allows (any end-of-generation token
/// ends a constrained generation too: `Constraint::mask_logits` treats them alike).
pub(super) fn tok_env(tokenizer: &Tokenizer, eos: u32) -> Result<TokEnv> {
    let n = tokenizer.vocab_size();
    let mut words = Vec::with_capacity(n);
    for id in 0..n as u32 {
        let bytes = tokenizer.token_bytes(id)?;
        if tokenizer.is_control(id) {
            let mut word = Vec::with_capacity(bytes.len() + 1);
            word.push(TokTrie::SPECIAL_TOKEN_MARKER);
            word.extend_from_slice(bytes);
            words.push(word);
        } else {
            words.push(bytes.to_vec());
        }
    }
    let info = TokRxInfo {
        vocab_size: u32::try_from(n).map_err(|_| Error::Tokenizer("vocabulary too large".into()))?,
        tok_eos: eos,
        tok_bos: tokenizer.bos(),
        tok_pad: None,
        tok_unk: None,
        tok_end_of_turn: None,
    };
    let trie = TokTrie::from(&info, &words);
    let canonical = !tokenizer.adds_space_prefix();
    Ok(Arc::new(Vocabulary { trie, tokenizer: tokenizer.clone(), canonical }))
}
