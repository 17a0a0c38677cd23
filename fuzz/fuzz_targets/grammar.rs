#![no_main]
//! Grammars from requests: JSON Schemas, GBNF, regular expressions and Lark compiled against the default model's
//! vocabulary, then run for a few steps (mask, pick an allowed token, commit, take the forced ones). A compile error
//! or an `E_GRAMMAR` step is fine; a panic, an abort (a stack overflow among them), a hang (libFuzzer's -timeout)
//! or a memory blow-up (-rss_limit_mb) is not.
//!
//! The input's first byte picks the kind; the rest up to a NUL byte is the grammar's text, so that a grammar file
//! with one byte in front is a seed; the bytes after the NUL pick the tokens among those allowed.
//!
//! File: $RUVLLM_MODEL (default ~/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf), whose tokenizer is read once.

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use ruvllm::constraint::{GrammarCompiler, GrammarSource};
use ruvllm::gguf::Gguf;
use ruvllm::tokenizer::Tokenizer;

fn compiler() -> &'static (Arc<GrammarCompiler>, usize) {
    static COMPILER: OnceLock<(Arc<GrammarCompiler>, usize)> = OnceLock::new();
    COMPILER.get_or_init(|| {
        let path = std::env::var("RUVLLM_MODEL").unwrap_or_else(|_| {
            format!("{}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf", std::env::var("HOME").unwrap_or_default())
        });
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let gguf = Gguf::parse(&bytes).expect("the default model parses");
        let tokenizer = Tokenizer::from_gguf(&gguf).expect("its tokenizer builds");
        let n = tokenizer.vocab_size();
        (Arc::new(GrammarCompiler::new(&tokenizer).expect("the compiler builds")), n)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else { return };
    let (text, picks) = match rest.iter().position(|&b| b == 0) {
        Some(nul) => (&rest[..nul], &rest[nul + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let source = match kind % 5 {
        0 => match serde_json::from_str(text) {
            Ok(schema) => GrammarSource::JsonSchema(schema),
            Err(_) => return,
        },
        1 => GrammarSource::Gbnf(text.into()),
        2 => GrammarSource::Regex(text.into()),
        3 => GrammarSource::Lark(text.into()),
        _ => GrammarSource::JsonObject,
    };
    let (compiler, n_vocab) = compiler();
    let Ok(mut constraint) = compiler.compile(&source) else { return };
    let mut logits = vec![0.0f32; *n_vocab];
    for &pick in picks.iter().take(8) {
        logits.fill(0.0);
        if constraint.mask_logits(&mut logits).is_err() {
            return;
        }
        let allowed: Vec<u32> = (0..logits.len() as u32).filter(|&id| logits[id as usize] == 0.0).collect();
        let Some(&id) = allowed.get(pick as usize % allowed.len().max(1)) else { return };
        if constraint.commit(id).is_err() {
            return;
        }
    }
});
