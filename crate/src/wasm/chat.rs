//! The chat request as JavaScript sends it (`{messages, tools?, tool_choice?, parallel_tool_calls?,
//! chat_template_kwargs?, add_generation_prompt?}`, OpenAI's names), for every engine's text side, and `ToolCallParser`: the calls read out of
//! an answer as it streams (`ToolCallStream`).

use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::chat_template::tool_calls::{ToolCallStream, ToolChoice, ToolDelta, ToolFormat, ToolSpec};
use crate::constraint::GrammarSource;
use crate::model::text::TextModel;
use crate::wasm::{js_error, json, parse};
use crate::{ChatMessage, RenderOptions, ToolUse};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsChatRequest {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Option<serde_json::Value>,
    #[serde(default)]
    tool_choice: Option<serde_json::Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
}

impl JsChatRequest {
    fn read(request_json: &str) -> Result<(Vec<ChatMessage>, RenderOptions, ToolUse), JsValue> {
        let r: JsChatRequest = parse(request_json, "chat request")?;
        let tools = match &r.tools {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(list) => ToolSpec::parse_list(list).map_err(js_error)?,
        };
        let choice = ToolChoice::parse(r.tool_choice.as_ref(), &tools).map_err(js_error)?;
        let options = RenderOptions {
            add_generation_prompt: r.add_generation_prompt.unwrap_or(true),
            tools,
            variables: r.chat_template_kwargs.unwrap_or_default(),
        };
        Ok((r.messages, options, ToolUse { choice, parallel: r.parallel_tool_calls.unwrap_or(true) }))
    }
}

/// The request's prompt text, as the template renders it (tools included).
pub(crate) fn apply_chat_template(text: &TextModel, request_json: &str) -> Result<String, JsValue> {
    let (messages, options, tool_use) = JsChatRequest::read(request_json)?;
    text.chat_prompt_text(&messages, &options, &tool_use).map_err(js_error)
}

/// `TextModel::chat_prompt` as JSON: `{ids, grammar (Lark text or null), tool_format (null: no tools offered)}`.
pub(crate) fn chat_prompt(
    text: &TextModel,
    request_json: &str,
    parse_special_in_messages: bool,
) -> Result<String, JsValue> {
    let (messages, options, tool_use) = JsChatRequest::read(request_json)?;
    let prompt = text.chat_prompt(&messages, &options, &tool_use, parse_special_in_messages).map_err(js_error)?;
    let grammar = match prompt.grammar {
        Some(GrammarSource::Lark(text)) => Some(text),
        _ => None,
    };
    Ok(json(&serde_json::json!({
        "ids": prompt.ids,
        "grammar": grammar,
        "tool_format": prompt.tool_format.map(ToolFormat::name),
    })))
}

/// Reads one answer's tool calls as its text streams in: `push` each piece, then `finish` once. Each returns
/// the deltas it settled as JSON: `[{content}, {index, name}, {index, arguments}]` (a call's start, then its
/// arguments' text).
#[wasm_bindgen]
pub struct ToolCallParser {
    stream: ToolCallStream,
}

#[wasm_bindgen]
impl ToolCallParser {
    /// `format`: a `tool_format` of `chatPrompt`; `tools_json`: the request's `tools` (OpenAI's list, as JSON), whose
    /// parameter schemas type the values of formats that write them untyped (`qwen_xml`).
    #[wasm_bindgen(constructor)]
    pub fn new(format: &str, tools_json: Option<String>) -> Result<ToolCallParser, JsValue> {
        let format = ToolFormat::from_name(format).ok_or_else(|| {
            js_error(crate::Error::InvalidArgument(format!("no tool-call format is named {format:?}")))
        })?;
        let tools = match tools_json {
            None => Vec::new(),
            Some(json) => ToolSpec::parse_list(&parse(&json, "tools")?).map_err(js_error)?,
        };
        Ok(ToolCallParser { stream: ToolCallStream::with_tools(format, &tools) })
    }

    pub fn push(&mut self, text: &str) -> String {
        deltas_json(self.stream.push(text))
    }

    pub fn finish(&mut self) -> String {
        deltas_json(self.stream.finish())
    }
}

fn deltas_json(deltas: Vec<ToolDelta>) -> String {
    let items: Vec<serde_json::Value> = deltas
        .into_iter()
        .map(|d| match d {
            ToolDelta::Content(text) => serde_json::json!({ "content": text }),
            ToolDelta::CallStart { index, name } => serde_json::json!({ "index": index, "name": name }),
            ToolDelta::Arguments { index, text } => serde_json::json!({ "index": index, "arguments": text }),
        })
        .collect();
    json(&items)
}
