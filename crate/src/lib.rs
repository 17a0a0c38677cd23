//! ruvllm: LLM inference from GGUF files, natively and on wasm32.
//!
//! The modules follow the data flow: bytes -> [`gguf`] -> [`model`] (weights, forward) -> logits
//! -> [`sampler`] -> token ids -> [`tokenizer`] -> text. A [`Session`] holds one conversation's KV
//! cache; [`generate`] streams tokens from it.

pub mod chat_template;
pub mod clock;
pub mod constraint;
pub mod embed;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod gpu;
pub mod index;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod parallel;
pub mod quant;
pub(crate) mod record;
pub mod simd;
pub mod splitmix;
#[cfg(test)]
mod test_support;
pub mod tokenizer;
pub mod training;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use chat_template::tool_calls::{ToolCall, ToolChoice, ToolFormat, ToolSpec};
pub use chat_template::{ChatMessage, ChatTemplate, MessageToolCall, RenderOptions};
pub use embed::EmbedOptions;
pub use engine::generate::{FinishReason, GenerateOptions, Output, Stats, Step, Token};
pub use engine::sampler::SamplerConfig;
pub use engine::session::{Session, SessionOptions};
pub use error::{Error, GpuFault, Result};
pub use gpu::{Backend, GpuOptions};
pub use model::config::Pooling;
pub use model::lora::{AdapterSet, LoraAdapter};
pub use model::text::{ChatPrompt, TextModel, ToolUse, WeightsSummary};
pub use model::Model;
