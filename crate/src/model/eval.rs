//! What an eval call asks of a backend, below both (the CPU forward pass and the GPU session) and the evaluator
//! that drives them: the checks of its tokens, and what it returns ([`Want`]: nothing, the last row of logits, every
//! row, or only the last row's argmax, which the GPU reads back alone). A forward call computes rows of logits
//! ([`LogitsFor`]); an eval call is one or more of them (`forward::batches`), and `Want::rows` says which rows.

use crate::error::{Error, Result};
use crate::model::forward::LogitsFor;

/// What an eval call must return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Nothing: the tokens only go into the cache (a prefill batch before the last).
    Nothing,
    /// The last token's logits.
    Last,
    /// Every token's logits.
    All,
    /// The argmax of the last token's logits (on the GPU only the id is read back).
    Argmax,
}

impl Want {
    /// The rows of logits the whole call needs.
    pub(crate) fn rows(self) -> LogitsFor {
        match self {
            Want::Nothing => LogitsFor::None,
            Want::Last | Want::Argmax => LogitsFor::Last,
            Want::All => LogitsFor::All,
        }
    }
}

/// The checks of an eval call of `tokens` at positions `pos0..` in a context of `n_ctx`.
pub(crate) fn check_eval(tokens: &[u32], pos0: usize, n_ctx: usize, vocab_size: usize) -> Result<()> {
    if tokens.is_empty() {
        return Err(Error::InvalidArgument("eval needs at least one token".into()));
    }
    if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab_size) {
        return Err(Error::TokenOutOfRange { id, vocab_size });
    }
    let needed = pos0 + tokens.len();
    if needed > n_ctx {
        return Err(Error::ContextOverflow { needed, context: n_ctx });
    }
    Ok(())
}
