//! The engine: a request, from prompt ids to tokens. [`Session`](session::Session) holds one conversation;
//! [`Generation`](generate::Generation) is one request's state machine (the prompt's reuse of cached keys and
//! values, sampling with [`sampler`], [`stop`] strings, a grammar's mask); the evaluator (`evaluator.rs`) runs its
//! evals on the CPU or the GPU backend below. A chat request becomes prompt ids, the grammar of the answer and the
//! format to read its calls with on the model's text side (`model::text::TextModel::chat_prompt`), below.
//!
//! # Design
//!
//! `Generation` is the one driver, a state machine that evaluates nothing itself: it checks the prompt before anything
//! changes, keeps the cached prefix, then `next()` says what to do (evaluate one prefill batch or the last token, emit
//! a `Token`, or finish) and `feed()` takes the result back (sampling, stop strings, `Stats`). `step()` is that loop
//! over an `Evaluator` up to the next `Step`, so a caller can yield or cancel between steps, during a long prefill too.
//! `max_tokens: 0` stops after the prefill, sampling nothing: a conversation reopened from the prefix cache is put in
//! the session while its user types, so the next turn evaluates only its own tokens.
//! `Session` is the synchronous face over an `Evaluator`: `eval`, `score`, `start` + `next_step`, or `generate` with a
//! callback and a cancel flag.

pub(crate) mod evaluator;
pub mod generate;
pub mod sampler;
pub mod session;
pub mod stop;
