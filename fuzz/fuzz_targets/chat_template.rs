#![no_main]
//! Chat templates, compiled and rendered: a syntax error or a render error is fine; a panic, an abort, a hang
//! (libFuzzer's -timeout) or a memory blow-up (-rss_limit_mb) is not.
//!
//! The input is the template source up to its first NUL byte, so that a template file is a seed as it is and
//! libFuzzer's dictionary (fuzz/chat_template.dict) splices Jinja into it. The bytes after the NUL are the
//! conversation, through `arbitrary`; without them the template renders a fixed four-turn conversation. Each
//! conversation renders plainly and guarded (`render_guarded`: its control-token text marked as text).

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
    // Guarded: the messages' control-token text marked as text. The ranges must be in order, within the text and
    // on its character boundaries, whatever the template did to the messages (and their markers).
    let guarded = [conversation.bos_token.as_str(), conversation.eos_token.as_str(), "<|im_end|>"];
    if let Ok(prompt) = template.render_guarded(&messages, conversation.add_generation_prompt, &guarded) {
        let mut end = 0;
        for r in &prompt.guarded {
            assert!(end <= r.start && r.start <= r.end && r.end <= prompt.text.len(), "{:?}", prompt.guarded);
            assert!(prompt.text.is_char_boundary(r.start) && prompt.text.is_char_boundary(r.end));
            end = r.end;
        }
    }
});
