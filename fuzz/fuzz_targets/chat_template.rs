#![no_main]
//! Chat templates, compiled and rendered: a syntax error or a render error is fine; a panic, an abort, a hang
//! (libFuzzer's -timeout) or a memory blow-up (-rss_limit_mb) is not.
//!
//! The input is the template source up to its first NUL byte, so that a template file is a seed as it is and
//! libFuzzer's dictionary (fuzz/chat_template.dict) splices Jinja into it. The bytes after the NUL are the
//! conversation, through `arbitrary`; without them the template renders a fixed four-turn conversation.

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use ruvllm::{ChatMessage, ChatTemplate};

#[derive(Arbitrary, Debug)]
struct Conversation {
    add_generation_prompt: bool,
    bos_token: String,
    eos_token: String,
    messages: Vec<(String, String)>,
}

fn default_conversation() -> Conversation {
    let turns = [("system", "Be brief."), ("user", "Hi!"), ("assistant", "Hello."), ("user", "What is 2+2?")];
    Conversation {
        add_generation_prompt: true,
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
        messages: turns.iter().map(|&(r, c)| (r.into(), c.into())).collect(),
    }
}

fuzz_target!(|data: &[u8]| {
    let (source, rest) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let Ok(source) = std::str::from_utf8(source) else { return };
    let conversation = if rest.is_empty() {
        default_conversation()
    } else {
        let Ok(c) = Conversation::arbitrary_take_rest(Unstructured::new(rest)) else { return };
        c
    };
    let Ok(template) = ChatTemplate::new(source, &conversation.bos_token, &conversation.eos_token) else { return };
    let messages: Vec<ChatMessage> = conversation.messages.iter().map(|(r, c)| ChatMessage::new(r, c)).collect();
    let _ = template.render(&messages, conversation.add_generation_prompt);
});
