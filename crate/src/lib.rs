//! ruvllm: LLM inference from GGUF files, natively and on wasm32.
//!
//! The modules follow the data flow: bytes -> [`gguf`] -> [`model`] weights -> forward -> logits
//! -> [`sampler`] -> tokens -> [`tokenizer`] -> text. [`generate`] ties them into a streaming session.

pub mod chat_template;
pub mod error;
pub mod gguf;
pub mod quant;
pub mod sampler;
pub mod stop;
pub mod tokenizer;

pub use error::{Error, Result};
