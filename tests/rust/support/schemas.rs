//! The real-world JSON Schemas that constrained decoding is checked on (tests/fixtures/kubernetes-schemas.txt, read
//! from $RUVLLM_SCHEMAS), the request npm/test/grammar.test.mjs makes of each, and a validator of the answers (boon,
//! with format assertions, as ajv-formats asserts them). Native only: boon does not build for wasm32 as it is.

use ruvllm::constraint::GrammarSource;
use ruvllm::{ChatMessage, FinishReason, GenerateOptions, Output, RenderOptions, SamplerConfig, Session};
use serde_json::Value;

pub const MAX_TOKENS: usize = 160;

/// The first `n` schemas of the list, by file name; `None` (with a notice) without $RUVLLM_SCHEMAS.
pub fn kubernetes(n: usize) -> Option<Vec<(String, Value)>> {
    let Some(dir) = super::env("RUVLLM_SCHEMAS") else {
        eprintln!("skipped: RUVLLM_SCHEMAS is not set (scripts/fetch-schemas.sh)");
        return None;
    };
    let list = include_str!("../../fixtures/kubernetes-schemas.txt");
    let files: Vec<&str> = list.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).take(n).collect();
    assert_eq!(files.len(), n, "the list has {} schemas", files.len());
    Some(
        files
            .into_iter()
            .map(|f| (f.to_owned(), serde_json::from_slice(&super::read_file(&format!("{dir}/{f}"))).unwrap()))
            .collect(),
    )
}

/// Ask `session` for an example of `schema`'s kind, held to it: greedy with llama.cpp's classic repeat penalty (which
/// ends most loops inside strings), as the npm test asks.
pub fn answer(session: &mut Session, file: &str, schema: &Value) -> Output {
    let what = schema["title"].as_str().map_or_else(|| file.trim_end_matches(".json").to_owned(), str::to_owned);
    let messages = [ChatMessage::new("user", format!("Write an example {what} as JSON."))];
    let prompt = session.model().text().chat_prompt_ids(&messages, &RenderOptions::default(), false).unwrap();
    let opts = GenerateOptions {
        max_tokens: MAX_TOKENS,
        sampler: SamplerConfig { repeat_penalty: 1.1, ..SamplerConfig::greedy() },
        grammar: Some(GrammarSource::JsonSchema(schema.clone())),
        ..GenerateOptions::default()
    };
    session.reset();
    session.generate(&prompt, opts, None, |_| {}).unwrap()
}

/// Whether a finished answer is JSON valid under `schema`: `Some(why not)` when it is not, `None` when it is or did not
/// finish (an answer cut at the token limit is a prefix of one).
pub fn invalid(file: &str, schema: &Value, out: &Output) -> Option<String> {
    if out.finish != FinishReason::Stop {
        return None;
    }
    let mut compiler = boon::Compiler::new();
    compiler.enable_format_assertions();
    let mut schemas = boon::Schemas::new();
    compiler.add_resource("http://schemas.invalid/schema.json", schema.clone()).unwrap();
    let index = compiler.compile("http://schemas.invalid/schema.json", &mut schemas).unwrap();
    match serde_json::from_str::<Value>(&out.text) {
        Ok(v) => schemas.validate(&v, index).err().map(|e| format!("{file}: {e}: {}", out.text)),
        Err(e) => Some(format!("{file}: not JSON ({e}): {}", out.text)),
    }
}
