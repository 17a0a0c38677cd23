#![no_main]
//! Chat templates, compiled and rendered: a syntax error or a render error is fine; a panic, an abort, a hang
//! (libFuzzer's -timeout) or a memory blow-up (-rss_limit_mb) is not.
//!
//! The input is the template source up to its first NUL byte, so that a template file is a seed as it is and
//! libFuzzer's dictionary (fuzz/chat_template.dict) splices Jinja into it. The bytes after the NUL are the
//! conversation, through `arbitrary`; without them the template renders a fixed four-turn conversation.
//!
//! Templates that could make a value hold itself are skipped: printing such a cycle overflows the stack, a
//! known limit that chat_template.rs documents (minijinja has no hook to stop it), and one the fuzzer would
//! otherwise find again and again instead of exploring.

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
    if may_make_a_cycle(source) {
        return;
    }
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

/// Whether an assignment to a namespace attribute (`{% set a.b = ... %}`) has a bare name on its right
/// (`ns`, `loop`, an alias, `[ns]`): the only way a template can make a value that holds itself. Names
/// followed by `.`, `[` or `(` (attributes, items, calls), filter and test names and Jinja's keywords are
/// not bare.
fn may_make_a_cycle(source: &str) -> bool {
    const KEYWORDS: &[&str] = &["true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else"];
    source.split("{%").skip(1).any(|block| {
        let block = block.split("%}").next().unwrap_or("").trim_start_matches(['-', '+', ' ', '\n', '\t']);
        let Some(rest) = block.strip_prefix("set") else { return false };
        let Some((target, value)) = rest.split_once('=') else { return false };
        if !target.contains('.') {
            return false;
        }
        let bytes = value.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'\'' || c == b'"' {
                // Skip a string literal.
                i += 1 + value[i + 1..].find(c as char).unwrap_or(value.len());
                continue;
            }
            if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &value[start..i];
                let before = value[..start].trim_end();
                // `x.name`, `x | filter`, `x is test` (or `is not test`): not a variable.
                let attribute_filter_or_test = before.ends_with(['.', '|']) || before.ends_with(" is") || before.ends_with(" is not");
                let next = value[i..].trim_start().chars().next();
                let bare = !attribute_filter_or_test && !matches!(next, Some('.' | '[' | '('));
                if bare && !KEYWORDS.contains(&word) {
                    return true;
                }
                continue;
            }
            i += 1;
        }
        false
    })
}
