//! What the MicroLoRA benches share (`microlora.rs`, `learning_stream.rs`, each including this file with `#[path]`):
//! their command-line options, chat examples as training takes them, the everyday questions whose own answers an
//! adapter protects, and the unrelated text forgetting is measured on.

use std::sync::Arc;

use ruvllm::{ChatMessage, GenerateOptions, Model, SamplerConfig, Session};
use serde_json::Value;

/// A chat example: its tokens, and where its answer starts.
pub type Example = (Vec<u32>, usize);

/// The bench's options (`--name value`), cargo's `--bench` left out.
pub struct Args(Vec<String>);

impl Args {
    pub fn from_env() -> Args {
        Args(std::env::args().skip(1).filter(|a| a != "--bench").collect())
    }

    pub fn opt(&self, name: &str) -> Option<String> {
        self.0.iter().position(|a| a == name).and_then(|i| self.0.get(i + 1)).cloned()
    }

    pub fn num(&self, name: &str, default: f64) -> Result<f64, String> {
        self.opt(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: not a number: {v}")))
    }

    /// A model's path: `name`'s value, else the environment variable `env`.
    pub fn path(&self, name: &str, env: &str) -> Result<String, String> {
        self.opt(name).or_else(|| std::env::var(env).ok()).ok_or(format!("{name} is required (or set {env})"))
    }
}

/// Everyday questions whose answers, the base model's own, an adapter is asked to keep (`MicroLora::protect`).
pub const PROTECT: [&str; 8] = [
    "What causes the seasons on Earth?",
    "Give me three tips for a good night's sleep.",
    "How do I make a cup of tea?",
    "Write a Python function that adds two numbers.",
    "What is photosynthesis?",
    "Tell me a short story about a cat.",
    "Why is the sky blue?",
    "How many legs does a spider have?",
];

/// `answer` to `question` as a chat example.
pub fn example(model: &Model, question: &str, answer: &str) -> Result<Example, String> {
    let template = model.chat_template().map_err(|e| e.to_string())?;
    let user = [ChatMessage::new("user", question)];
    let prompt = template.render(&user, true).map_err(|e| e.to_string())?;
    let whole =
        template.render(&[user[0].clone(), ChatMessage::new("assistant", answer)], false).map_err(|e| e.to_string())?;
    let tok = model.tokenizer();
    let first = tok.encode(&prompt, true).map_err(|e| e.to_string())?.len();
    let mut ids = tok.encode(&whole, true).map_err(|e| e.to_string())?;
    // The template's text after the answer's end-of-turn token is not part of what is taught.
    let end = ids[first..].iter().position(|&t| tok.is_eog(t)).map_or(ids.len(), |i| first + i + 1);
    ids.truncate(end);
    Ok((ids, first))
}

/// The base model's own answers (greedy, 48 tokens) to `questions`, as examples to protect.
pub fn own_answers(model: &Arc<Model>, questions: &[&str]) -> Result<Vec<Example>, String> {
    let template = model.chat_template().map_err(|e| e.to_string())?;
    let mut own = Vec::new();
    for question in questions {
        let prompt = template.render(&[ChatMessage::new("user", *question)], true).map_err(|e| e.to_string())?;
        let ids = model.tokenizer().encode(&prompt, true).map_err(|e| e.to_string())?;
        let opts = GenerateOptions { max_tokens: 48, sampler: SamplerConfig::greedy(), ..GenerateOptions::default() };
        let out = Session::new(model.clone()).generate(&ids, opts, None, |_| {}).map_err(|e| e.to_string())?;
        own.push(([ids.clone(), out.ids].concat(), ids.len()));
    }
    Ok(own)
}

/// Text the adapters are not taught: the reference prompts with their continuations (llama.cpp's greedy text,
/// `logits.json` in $RUVLLM_REFERENCE_DIR, else ../shared/reference), each continuation the part measured.
pub fn reference_continuations() -> Result<Vec<Example>, String> {
    let dir = std::env::var("RUVLLM_REFERENCE_DIR").unwrap_or_else(|_| "../shared/reference".into());
    let text = std::fs::read_to_string(format!("{dir}/logits.json")).map_err(|e| format!("{dir}/logits.json: {e}"))?;
    let reference: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    Ok(reference["prompts"]
        .as_array()
        .ok_or("logits.json has no prompts")?
        .iter()
        .map(|p| {
            let prompt = ids(&p["prompt_ids"]);
            let first = prompt.len();
            ([prompt, ids(&p["continuation"]["ids"])].concat(), first)
        })
        .collect())
}

pub fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
