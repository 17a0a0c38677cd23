#![no_main]
//! Any bytes as a model file, used as an application would: load it, render a two-message chat with the
//! file's own template (or take a plain prompt when it has none), tokenize, and generate up to 4 tokens in a
//! small context. Every step may refuse with a typed error; none may panic, abort, hang or blow up memory.

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use ruvllm::{ChatMessage, GenerateOptions, Model, Session, SessionOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::from_bytes(data.to_vec()) else { return };
    let model = Arc::new(model);
    let prompt = match model.chat_template() {
        Ok(template) => {
            let chat = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi! What is 2+2?")];
            match template.render(&chat, true) {
                Ok(prompt) => prompt,
                Err(_) => return,
            }
        }
        Err(_) => "Hello, world".to_string(),
    };
    let Ok(mut ids) = model.tokenizer().encode_with_special(&prompt, true) else { return };
    let n_ctx = model.config.context_length.min(16);
    ids.truncate(n_ctx.saturating_sub(4).max(1));
    let Ok(mut session) = Session::with_options(model.clone(), &SessionOptions { n_ctx, n_batch: 4 }) else { return };
    let opts = GenerateOptions { max_tokens: 4, ..Default::default() };
    if let Ok(out) = session.generate(&ids, opts, None, |_| {}) {
        assert!(out.ids.len() <= 4, "{out:?}");
    }
});
