//! The engine: a request, from prompt ids to tokens. [`Session`](session::Session) holds one conversation;
//! [`Generation`](generate::Generation) is one request's state machine (the prompt's reuse of cached keys and
//! values, sampling with [`sampler`], [`stop`] strings, a grammar's mask); the evaluator (`evaluator.rs`) runs its
//! evals on the CPU or the GPU backend below. [`chat`] turns a chat request with tools into prompt ids, the
//! grammar of the answer and the format to read its calls with.

pub mod chat;
pub(crate) mod evaluator;
pub mod generate;
pub mod sampler;
pub mod session;
pub mod stop;
