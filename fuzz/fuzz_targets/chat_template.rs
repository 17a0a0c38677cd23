#![no_main]
//! Chat templates, compiled and rendered: a syntax error or a render error is fine; a panic, an abort, a hang
//! (libFuzzer's -timeout) or a memory blow-up (-rss_limit_mb) is not.
//!
//! The input is the template source up to its first NUL byte, so that a template file is a seed as it is and
//! libFuzzer's dictionary (fuzz/chat_template.dict) splices Jinja into it. The bytes after the NUL are the
//! conversation, through `arbitrary`; without them the template renders a fixed four-turn conversation. Each
//! conversation renders plainly and guarded (`render_guarded`: its control-token text marked as text), with a
//! tool offered or not: turns may carry a call (name, arguments text) or answer one, so the messages as templates
//! read them and the generic form for templates without tools (`tool_prompt.rs`) are fuzzed with them.

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use ruvllm::{ChatMessage, ChatTemplate, MessageToolCall, RenderOptions, ToolCall, ToolSpec};

#[derive(Arbitrary, Debug)]
struct Turn {
    role: String,
    content: String,
    /// A call this turn made: its name and arguments text.
    call: Option<(String, String)>,
    tool_call_id: Option<String>,
}

#[derive(Arbitrary, Debug)]
struct Conversation {
    add_generation_prompt: bool,
    bos_token: String,
    eos_token: String,
    messages: Vec<Turn>,
    with_tools: bool,
}

fn default_conversation() -> Conversation {
    let turn =
        |role: &str, content: &str| Turn { role: role.into(), content: content.into(), call: None, tool_call_id: None };
    let call = Turn { call: Some(("get_weather".into(), r#"{"city": "Rome"}"#.into())), ..turn("assistant", "") };
    let result = Turn { tool_call_id: Some("abcDEF123".into()), ..turn("tool", "24C") };
    let turns = vec![
        turn("system", "Be brief."),
        turn("user", "Hi!"),
        turn("assistant", "Hello."),
        turn("user", "Weather?"),
        call,
        result,
    ];
    Conversation {
        add_generation_prompt: true,
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
        messages: turns,
        with_tools: true,
    }
}

fn message(t: &Turn) -> ChatMessage {
    ChatMessage {
        tool_calls: t
            .call
            .iter()
            .map(|(name, arguments)| MessageToolCall {
                id: "abcDEF123".into(),
                function: ToolCall { name: name.clone(), arguments: arguments.clone() },
            })
            .collect(),
        tool_call_id: t.tool_call_id.clone(),
        ..ChatMessage::new(t.role.as_str(), t.content.as_str())
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
    let messages: Vec<ChatMessage> = conversation.messages.iter().map(message).collect();
    let tools = if conversation.with_tools {
        let spec = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        ToolSpec::parse_list(&spec).expect("a valid tool")
    } else {
        Vec::new()
    };
    let options =
        RenderOptions { add_generation_prompt: conversation.add_generation_prompt, tools, ..RenderOptions::default() };
    let _ = template.render_with(&messages, &options);
    // Guarded: the messages' control-token text marked as text. The ranges must be in order, within the text and
    // on its character boundaries, whatever the template did to the messages (and their markers).
    let guarded = [conversation.bos_token.as_str(), conversation.eos_token.as_str(), "<|im_end|>"];
    if let Ok(prompt) = template.render_guarded(&messages, &options, &guarded) {
        let mut end = 0;
        for r in &prompt.guarded {
            assert!(end <= r.start && r.start <= r.end && r.end <= prompt.text.len(), "{:?}", prompt.guarded);
            assert!(prompt.text.is_char_boundary(r.start) && prompt.text.is_char_boundary(r.end));
            end = r.end;
        }
    }
});
