//! How tools and tool turns reach a template: the messages as templates read them, and, for templates that
//! do not render tools in a format we read (`ToolFormat::Generic`), the tools and tool turns written into
//! the conversation the way llama.cpp's generic handler asks for them.
//!
//! Templates read messages as HF transformers passes them: an assistant's call is
//! `{id, type: "function", function: {name, arguments}}` with `arguments` a mapping (Qwen, Llama 3 and
//! Mistral print it with `tojson`), where OpenAI's API carries it as JSON text. Keys a message does not have
//! are left out, not null: Llama 3's template tests `'tool_calls' in message`.

use serde_json::{json, Map, Value};

use super::tool_calls::ToolSpec;
use super::ChatMessage;

/// `m` as templates read it.
pub(super) fn message_view(m: &ChatMessage) -> Value {
    let mut view = Map::new();
    view.insert("role".into(), m.role.as_str().into());
    view.insert("content".into(), m.content.as_str().into());
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.function.name, "arguments": arguments_value(&c.function.arguments) },
                })
            })
            .collect();
        view.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        view.insert("tool_call_id".into(), id.as_str().into());
    }
    if let Some(name) = &m.name {
        view.insert("name".into(), name.as_str().into());
    }
    Value::Object(view)
}

/// The views of `messages` for Gemma 4's first templates, which read a model turn's tool results from its
/// `tool_responses` (`{name, response}` each) rather than from `tool` turns, as llama.cpp rewrites them
/// (`convert_tool_responses_gemma4`): an assistant's turn with calls takes the `tool` turns after it as its responses
/// (each named by the call in its place, else by its `name` or `tool_call_id`; its content parsed where it is JSON)
/// and, as its content, that of the assistant's turn after them where that one makes no call. Its own content goes,
/// as llama.cpp drops it: the model writes its text after the results, in the same turn, which the template leaves
/// open for it when the turn has no text.
pub(super) fn gemma4_turns(messages: &[ChatMessage]) -> Vec<Value> {
    let mut views = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        i += 1;
        if m.role != "assistant" || m.tool_calls.is_empty() {
            views.push(message_view(m));
            continue;
        }
        let mut view = Map::new();
        view.insert("role".into(), "assistant".into());
        let calls = message_view(m).get("tool_calls").cloned().unwrap_or_default();
        view.insert("tool_calls".into(), calls);
        let mut responses = Vec::new();
        while let Some(result) = messages.get(i).filter(|r| r.role == "tool") {
            let response =
                serde_json::from_str::<Value>(&result.content).unwrap_or_else(|_| result.content.as_str().into());
            let name = m.tool_calls.get(responses.len()).map(|c| c.function.name.as_str()).filter(|n| !n.is_empty());
            let name = name.or(result.name.as_deref()).or(result.tool_call_id.as_deref()).unwrap_or("");
            responses.push(json!({ "name": name, "response": response }));
            i += 1;
        }
        if !responses.is_empty() {
            view.insert("tool_responses".into(), Value::Array(responses));
        }
        if let Some(next) = messages.get(i).filter(|n| n.role == "assistant" && n.tool_calls.is_empty()) {
            if !next.content.is_empty() {
                view.insert("content".into(), next.content.as_str().into());
                i += 1;
            }
        }
        views.push(Value::Object(view));
    }
    views
}

/// A call's arguments as a mapping when they are a JSON object's text; otherwise the text itself.
fn arguments_value(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => arguments.into(),
    }
}

/// What the generic format asks of the model, with the tools it may call. `ToolFormat::Generic` reads
/// exactly these two envelopes (and its grammar holds the answer to them).
pub(super) fn generic_instructions(tools: &[ToolSpec]) -> String {
    let mut text = String::from(
        "You can call the following tools. Each is given as JSON with its name, what it does and the JSON \
         Schema of its arguments:\n",
    );
    for tool in tools {
        text.push_str(&tool.to_json()["function"].to_string());
        text.push('\n');
    }
    text.push_str(
        "\nRespond in JSON, either with `tool_calls` (a request to call tools) as \
         {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}, \
         or with `response` (your reply to the user) as {\"response\": \"<your reply>\"}. \
         Once a tool's result answers the question, reply with `response`.",
    );
    text
}

/// What a template without tools of its own does with the turns around them.
#[derive(Clone, Copy, Debug)]
pub(super) struct GenericTurns {
    /// It prints a system turn.
    pub system: bool,
    /// It prints a `tool` turn as it prints others (ChatML prints any role; small models answer from a
    /// `tool` turn where a user turn of JSON gets echoed).
    pub tool: bool,
}

/// `messages` for a template that renders no tools of its own: the tools' instructions in the system
/// message (appended to the caller's own, which stays first; in the first user message where the template
/// takes no system turn), each call the assistant made as the generic envelope, and tool results as `tool`
/// turns where the template prints them, else each run of them as one user turn of `{"tool_response": ...}`
/// lines (some templates know only user and assistant, and insist that they alternate).
pub(super) fn generic(messages: &[ChatMessage], tools: &[ToolSpec], turns: GenericTurns) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        if m.role == "tool" && turns.tool {
            out.push(ChatMessage::new("tool", m.content.as_str()));
        } else if m.role == "tool" {
            let mut response = Map::new();
            if let Some(name) = m.name.as_ref().or_else(|| called_name(messages, m.tool_call_id.as_deref())) {
                response.insert("tool".into(), name.as_str().into());
            }
            if let Some(id) = &m.tool_call_id {
                response.insert("tool_call_id".into(), id.as_str().into());
            }
            response.insert("content".into(), arguments_value(&m.content));
            let line = json!({ "tool_response": response }).to_string();
            match out.last_mut() {
                Some(prev) if prev.role == "user" && prev.content.starts_with("{\"tool_response\"") => {
                    prev.content.push('\n');
                    prev.content.push_str(&line);
                }
                _ => out.push(ChatMessage::new("user", line)),
            }
        } else if !m.tool_calls.is_empty() {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| json!({ "name": c.function.name, "arguments": arguments_value(&c.function.arguments) }))
                .collect();
            let envelope = json!({ "tool_calls": calls }).to_string();
            let content = if m.content.trim().is_empty() { envelope } else { format!("{}\n{envelope}", m.content) };
            out.push(ChatMessage::new(m.role.as_str(), content));
        } else {
            out.push(m.clone());
        }
    }
    if tools.is_empty() {
        return out;
    }
    let instructions = generic_instructions(tools);
    let first_is = |role: &str| out.first().is_some_and(|m| m.role == role);
    if first_is("system") {
        let system = &mut out[0].content;
        *system = if system.trim().is_empty() { instructions } else { format!("{system}\n\n{instructions}") };
    } else if turns.system || !first_is("user") {
        out.insert(0, ChatMessage::new("system", instructions));
    } else {
        out[0].content = format!("{instructions}\n\n{}", out[0].content);
    }
    out
}

/// The name of the call `id` refers to, from the assistant turns.
fn called_name<'m>(messages: &'m [ChatMessage], id: Option<&str>) -> Option<&'m String> {
    let id = id?;
    messages.iter().flat_map(|m| &m.tool_calls).find(|c| c.id == id).map(|c| &c.function.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat_template::tool_calls::ToolCall;
    use crate::chat_template::MessageToolCall;
    use crate::test_support::test;

    fn weather() -> Vec<ToolSpec> {
        ToolSpec::parse_list(&json!([{"type": "function", "function": {"name": "get_weather",
            "description": "The weather in a city", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]))
        .unwrap()
    }

    fn called(id: &str, arguments: &str) -> ChatMessage {
        ChatMessage {
            tool_calls: vec![MessageToolCall {
                id: id.into(),
                function: ToolCall { name: "get_weather".into(), arguments: arguments.into() },
            }],
            ..ChatMessage::new("assistant", "")
        }
    }

    fn result(id: &str, content: &str) -> ChatMessage {
        ChatMessage { tool_call_id: Some(id.into()), ..ChatMessage::new("tool", content) }
    }

    #[test]
    fn views_carry_arguments_as_mappings_and_leave_absent_keys_out() {
        let plain = message_view(&ChatMessage::new("user", "hi"));
        assert_eq!(plain, json!({"role": "user", "content": "hi"}));
        let call = message_view(&called("call_1", r#"{"city":"Paris"}"#));
        assert_eq!(call["tool_calls"][0]["function"]["arguments"], json!({"city": "Paris"}));
        assert_eq!(call["tool_calls"][0]["type"], "function");
        // Arguments that are not an object's JSON stay text.
        let odd = message_view(&called("c", "not json"));
        assert_eq!(odd["tool_calls"][0]["function"]["arguments"], "not json");
        assert_eq!(message_view(&result("call_1", "18C"))["tool_call_id"], "call_1");
    }

    #[test]
    fn generic_conversation_keeps_the_system_prompt_first_and_writes_calls_and_results_as_envelopes() {
        let tools = weather();
        let history = [
            ChatMessage::new("system", "You are terse."),
            ChatMessage::new("user", "Weather in Paris and Rome?"),
            called("call_1", r#"{"city": "Paris"}"#),
            result("call_1", r#"{"temperature": 18}"#),
            result("call_2", "sunny"),
        ];
        let out = generic(&history, &tools, GenericTurns { system: true, tool: false });
        assert_eq!(out.len(), 4);
        assert!(
            out[0].content.starts_with("You are terse.\n\nYou can call the following tools."),
            "{}",
            out[0].content
        );
        assert!(out[0].content.contains(r#""name":"get_weather""#));
        assert_eq!(out[2].content, r#"{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]}"#);
        assert_eq!(out[3].role, "user");
        assert_eq!(
            out[3].content,
            "{\"tool_response\":{\"tool\":\"get_weather\",\"tool_call_id\":\"call_1\",\"content\":{\"temperature\":18}}}\n\
             {\"tool_response\":{\"tool_call_id\":\"call_2\",\"content\":\"sunny\"}}"
        );
        // Without a system turn the instructions open one, or the first user turn where the template has none.
        let asked = [ChatMessage::new("user", "Weather?")];
        let all = GenericTurns { system: true, tool: true };
        assert_eq!(generic(&asked, &tools, all)[0].role, "system");
        let merged = generic(&asked, &tools, GenericTurns { system: false, tool: false });
        assert_eq!(merged.len(), 1);
        assert!(merged[0].content.ends_with("\n\nWeather?"));
        // No tools: the history is converted, nothing is added.
        assert_eq!(generic(&asked, &[], all), asked);
        // Where the template prints `tool` turns, results stay tool turns, of their content.
        let kept = generic(&history, &tools, all);
        assert_eq!((kept[3].role.as_str(), kept[3].content.as_str()), ("tool", r#"{"temperature": 18}"#));
        assert_eq!(kept.len(), 5);
    }
}
