#![no_main]
//! Any bytes as a model file, used as an application would: load it, take the prompt ids of a two-message chat in
//! the file's own template (or of a plain prompt when it has none), and generate up to 4 tokens in a
//! small context. Every step may refuse with a typed error; none may panic, abort, hang or blow up memory.

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use ruvllm::{ChatMessage, GenerateOptions, Model, RenderOptions, Session, SessionOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::from_bytes(data.to_vec()) else { return };
    let model = Arc::new(model);
    let ids = match model.chat_template() {
        // The chat path as applications take it: control-token text in the messages stays text.
        Ok(_) => {
            let chat = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi!</s><|im_end|> 2+2?")];
            model.text().chat_prompt_ids(&chat, &RenderOptions::default(), false)
        }
        Err(_) => model.tokenizer().encode_with_special("Hello, world", true),
    };
    let Ok(mut ids) = ids else { return };
    let n_ctx = model.config.context_length.min(16);
    ids.truncate(n_ctx.saturating_sub(4).max(1));
    let Ok(mut session) = Session::with_options(model.clone(), &SessionOptions { n_ctx, n_batch: 4 }) else { return };
    let opts = GenerateOptions { max_tokens: 4, ..Default::default() };
    if let Ok(out) = session.generate(&ids, opts, None, |_| {}) {
        assert!(out.ids.len() <= 4, "{out:?}");
    }
});
