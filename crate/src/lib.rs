//! ruvllm: LLM inference from GGUF files, natively and on wasm32.
//!
//! The modules follow the data flow: bytes -> [`gguf`] -> [`model`] (weights, forward) -> logits
//! -> [`sampler`] -> token ids -> [`tokenizer`] -> text. A [`Session`] holds one conversation's KV
//! cache; [`generate`] streams tokens from it.

pub mod chat;
pub mod chat_template;
pub mod clock;
pub mod constraint;
pub mod embed;
pub mod error;
pub(crate) mod evaluator;
pub mod generate;
pub mod gguf;
pub mod gpu;
pub mod index;
pub mod kernels;
pub mod kv_cache;
pub mod lora;
pub mod memory;
pub mod model;
pub mod parallel;
pub mod quant;
pub mod sampler;
pub mod session;
pub mod simd;
pub mod stop;
#[cfg(test)]
mod test_support;
pub mod tokenizer;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
#[cfg(target_arch = "wasm32")]
mod wasm_chat;
#[cfg(all(target_arch = "wasm32", feature = "gpu"))]
pub mod wasm_gpu;
#[cfg(target_arch = "wasm32")]
pub mod wasm_index;
#[cfg(target_arch = "wasm32")]
pub mod wasm_lora;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub mod wasm_threads;

pub use chat::{ChatPrompt, ToolUse};
pub use chat_template::tool_calls::{ToolCall, ToolChoice, ToolFormat, ToolSpec};
pub use chat_template::{ChatMessage, ChatTemplate, MessageToolCall, RenderOptions};
pub use embed::EmbedOptions;
pub use error::{Error, GpuFault, Result};
pub use generate::{FinishReason, GenerateOptions, Output, Stats, Step, Token};
pub use gpu::{Backend, GpuOptions};
pub use lora::{AdapterSet, LoraAdapter};
pub use model::config::Pooling;
pub use model::Model;
pub use sampler::SamplerConfig;
pub use session::{Session, SessionOptions};
