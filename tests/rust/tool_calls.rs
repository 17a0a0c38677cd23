//! Tool calls end to end: tools, calls and tool results rendered through real templates of each family
//! (tests/fixtures/templates: Qwen 3 for Hermes, Llama 3.2, Mistral Nemo; the default model's ChatML for the
//! generic form), each family's grammar holding a tiny fixture model to its calls (`required`, a named
//! function), the answer read back whole and streamed token by token to the same calls, and the real default
//! model calling a tool and answering from its result. Runs natively and on wasm32 (Chromium).

#[path = "support/mod.rs"]
mod support;

use ruvllm::chat_template::tool_calls::{assemble, ParsedAnswer, ToolCallStream, ToolDelta};
use ruvllm::{
    ChatMessage, ChatTemplate, FinishReason, GenerateOptions, MessageToolCall, Model, RenderOptions, SamplerConfig,
    Session, ToolCall, ToolChoice, ToolFormat, ToolSpec, ToolUse,
};
use std::sync::Arc;

use serde_json::{json, Value};
use support::test;
use support::tiny::{fixtures_dir, QWEN2};

const QWEN3: &str = include_str!("../fixtures/templates/Qwen-Qwen3-0.6B.jinja");
const LLAMA32: &str = include_str!("../fixtures/templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
const NEMO: &str = include_str!("../fixtures/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja");

fn tools() -> Vec<ToolSpec> {
    ToolSpec::parse_list(&json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"enum": ["Paris", "Rome", "Oslo"]},
                "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time now",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}
    ]))
    .unwrap()
}

/// A user's question, the assistant's call (id `call_id`) and the tool's result.
fn history(call_id: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("user", "What is the weather in Paris?"),
        ChatMessage {
            tool_calls: vec![MessageToolCall {
                id: call_id.into(),
                function: ToolCall { name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() },
            }],
            ..ChatMessage::new("assistant", "")
        },
        ChatMessage { tool_call_id: Some(call_id.into()), ..ChatMessage::new("tool", r#"{"temperature": 18}"#) },
    ]
}

fn with_tools() -> RenderOptions {
    RenderOptions { tools: tools(), ..RenderOptions::default() }
}

#[test]
fn each_family_renders_its_tools_calls_and_results() {
    let qwen = ChatTemplate::new(QWEN3, "", "<|im_end|>").unwrap();
    assert_eq!(qwen.tool_format(), ToolFormat::Hermes);
    let text = qwen.render_with(&history("call_1"), &with_tools()).unwrap();
    assert!(text.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), "{text}");
    assert!(
        text.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
        "{text}"
    );
    assert!(
        text.contains("<|im_start|>user\n<tool_response>\n{\"temperature\": 18}\n</tool_response><|im_end|>"),
        "{text}"
    );
    // `chat_template_kwargs` reach the template: Qwen 3 closes an empty thought when thinking is off.
    let mut no_thinking = with_tools();
    no_thinking.variables.insert("enable_thinking".into(), false.into());
    assert!(qwen.render_with(&history("c"), &no_thinking).unwrap().ends_with("<think>\n\n</think>\n\n"));
    let mut reserved = with_tools();
    reserved.variables.insert("messages".into(), json!([]));
    assert!(qwen.render_with(&history("c"), &reserved).is_err());

    let llama = ChatTemplate::new(LLAMA32, "<|begin_of_text|>", "<|eot_id|>").unwrap();
    assert_eq!(llama.tool_format(), ToolFormat::Llama3);
    let text = llama.render_with(&history("call_1"), &with_tools()).unwrap();
    assert!(text.contains("Environment: ipython\n"), "{text}");
    assert!(text.contains("\"name\": \"get_weather\""), "{text}");
    assert!(text.contains("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"), "{text}");
    assert!(text.contains("<|start_header_id|>ipython<|end_header_id|>\n\n"), "{text}");
    // `strftime_now` gives today's date, not the template's fallback of 26 Jul 2024.
    let date = text.split("Today Date: ").nth(1).and_then(|t| t.split('\n').next()).unwrap();
    assert!(date.len() == 11 && date.ends_with(&today_year()) && date != "26 Jul 2024", "{date}");
    // Without tools the template is told nothing of them.
    let plain = llama.render(&[ChatMessage::new("user", "Hi")], true).unwrap();
    assert!(!plain.contains("ipython"), "{plain}");

    let nemo = ChatTemplate::new(NEMO, "<s>", "</s>").unwrap();
    assert_eq!(nemo.tool_format(), ToolFormat::Mistral);
    let text = nemo.render_with(&history("abcDEF123"), &with_tools()).unwrap();
    assert!(
        text.contains("[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
        "{text}"
    );
    assert!(
        text.contains("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>"),
        "{text}"
    );
    assert!(
        text.contains("[TOOL_RESULTS]{\"content\": {\"temperature\": 18}, \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]"),
        "{text}"
    );
    // The template's own rule on call ids is its error.
    assert!(nemo.render_with(&history("call_1"), &with_tools()).is_err());

    // A template without tools (the default model's ChatML): the generic form, after the caller's system prompt.
    let smol = support::default_model();
    let chatml = smol.chat_template().unwrap();
    assert_eq!(chatml.tool_format(), ToolFormat::Generic);
    let mut messages = vec![ChatMessage::new("system", "You are a pirate. Answer in rhymes.")];
    messages.extend(history("call_1"));
    let text = chatml.render_with(&messages, &with_tools()).unwrap();
    assert!(
        text.starts_with(
            "<|im_start|>system\nYou are a pirate. Answer in rhymes.\n\nYou can call the following tools."
        ),
        "{text}"
    );
    assert!(text.contains("<|im_start|>assistant\n{\"tool_calls\":[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}]}<|im_end|>"), "{text}");
    // ChatML prints any role: the result stays a `tool` turn.
    assert!(text.contains("<|im_start|>tool\n{\"temperature\": 18}<|im_end|>\n<|im_start|>assistant\n"), "{text}");
    // A template that knows only user and assistant gets the results as a user turn of `tool_response`s.
    let strict = ChatTemplate::new(MISTRAL_V01, "<s>", "</s>").unwrap();
    let text = strict.render_with(&history("call_1"), &with_tools()).unwrap();
    assert!(text.contains("[INST] {\"tool_response\":{\"tool\":\"get_weather\",\"tool_call_id\":\"call_1\",\"content\":{\"temperature\":18}}} [/INST]"), "{text}");
    assert!(text.starts_with("<s>[INST] You can call the following tools."), "{text}");
}

/// Mistral 7B Instruct v0.1's template: user and assistant turns only, alternating, and no system turn.
const MISTRAL_V01: &str = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

fn today_year() -> String {
    let days = (ruvllm::clock::unix_ms() / 86_400_000.0) as i64;
    // Close enough for a year: the test checks the template printed a current date.
    (1970 + (days as f64 / 365.2425) as i64).to_string()
}

/// Generate under `choice` and read the answer whole and token by token; both must give the same calls.
fn answer(model: &Arc<Model>, messages: &[ChatMessage], tool_use: &ToolUse, sampler: SamplerConfig) -> ParsedAnswer {
    let choice = &tool_use.choice;
    let prompt = model.text().chat_prompt(messages, &with_tools(), tool_use, false).unwrap();
    let format = prompt.tool_format.expect("tools are offered");
    assert_eq!(format, model.chat_template().unwrap().tool_format());
    let grammar = prompt.grammar.clone();
    assert!(grammar.is_some(), "{choice:?}");
    let mut session = Session::new(model.clone());
    let opts = GenerateOptions { max_tokens: 200, sampler, grammar, ..GenerateOptions::default() };
    let mut stream = ToolCallStream::new(format);
    let mut deltas = Vec::new();
    let out = session.generate(&prompt.ids, opts, None, |t| deltas.extend(stream.push(&t.text))).unwrap();
    deltas.extend(stream.finish());
    let parsed = format.parse(&out.text);
    // Calls start in order and only a started call's arguments follow, as a client indexing its list needs.
    let mut started = 0;
    for d in &deltas {
        match d {
            ToolDelta::CallStart { index, .. } => {
                assert_eq!(*index, started, "calls start in order");
                started += 1;
            }
            ToolDelta::Arguments { index, .. } => assert!(*index < started, "{d:?} before its call"),
            ToolDelta::Content(_) => {}
        }
    }
    assert_eq!(assemble(deltas), parsed, "streamed and whole readings differ on {:?}", out.text);
    assert_eq!(out.finish, FinishReason::Stop, "{choice:?} under {format:?}: {:?}", out.text);
    parsed
}

/// Each call names a tool and its arguments hold to that tool's schema.
fn check_calls(parsed: &ParsedAnswer, what: &str) {
    assert!(!parsed.tool_calls.is_empty(), "{what}: no call in {parsed:?}");
    for call in &parsed.tool_calls {
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| panic!("{what}: {e} in {call:?}"));
        let args = args.as_object().unwrap_or_else(|| panic!("{what}: arguments are not an object: {call:?}"));
        match call.name.as_str() {
            "get_weather" => {
                assert!(["Paris", "Rome", "Oslo"].contains(&args["city"].as_str().unwrap_or("")), "{what}: {call:?}");
                assert!(args.keys().all(|k| k == "city" || k == "unit"), "{what}: {call:?}");
            }
            "get_time" => assert!(args.is_empty(), "{what}: {call:?}"),
            other => panic!("{what}: a call to {other}"),
        }
    }
}

#[test]
fn each_family_holds_a_tiny_model_to_its_calls_read_whole_and_streamed() {
    let bytes = support::read_file(&format!("{}/{QWEN2}", fixtures_dir()));
    let ask = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Weather in Oslo?")];
    // The fixture's own template is ChatML without tools: the generic form.
    for (template, format) in [
        (Some(QWEN3), ToolFormat::Hermes),
        (Some(LLAMA32), ToolFormat::Llama3),
        (Some(NEMO), ToolFormat::Mistral),
        (None, ToolFormat::Generic),
    ] {
        let model = Model::from_bytes(bytes.clone()).unwrap();
        let model = Arc::new(match template {
            Some(source) => model.with_chat_template(source).unwrap(),
            None => model,
        });
        assert_eq!(model.chat_template().unwrap().tool_format(), format);
        for (i, sampler) in
            [SamplerConfig::greedy(), SamplerConfig { temperature: 1.2, seed: 5, ..SamplerConfig::default() }]
                .into_iter()
                .enumerate()
        {
            let what = format!("{format:?}, sampler {i}");
            // One call (`parallel_tool_calls: false`): with random weights, a model let to call again may
            // never stop.
            let required = ToolUse { choice: ToolChoice::Required, parallel: false };
            let parsed = answer(&model, &ask, &required, sampler.clone());
            check_calls(&parsed, &format!("{what}, required"));
            assert_eq!(parsed.tool_calls.len(), 1, "{what}: {parsed:?}");
            let named = ToolUse { choice: ToolChoice::Function("get_time".into()), parallel: true };
            let parsed = answer(&model, &ask, &named, sampler);
            check_calls(&parsed, &format!("{what}, get_time"));
            assert_eq!(parsed.tool_calls.len(), 1, "{what}: {parsed:?}");
            assert_eq!(parsed.tool_calls[0].name, "get_time", "{what}");
        }
        // `none` offers no tools: no grammar, no format.
        let none = ToolUse { choice: ToolChoice::None, parallel: true };
        let plain = model.text().chat_prompt(&ask, &with_tools(), &none, false).unwrap();
        assert_eq!((plain.grammar, plain.tool_format), (None, None));
        assert_eq!(plain.ids, model.text().chat_prompt_ids(&ask, &RenderOptions::default(), false).unwrap());
    }
}

/// The default model (a template without tools: the generic form) calls the tool it is made to, behind a
/// custom system prompt, then answers from the tool's result.
#[test]
fn the_default_model_calls_a_tool_and_answers_from_its_result() {
    let model = support::default_model();
    let mut messages = vec![
        ChatMessage::new("system", "You are a weather assistant. Keep answers short."),
        ChatMessage::new("user", "What is the weather like in Rome today?"),
    ];
    let required = ToolUse { choice: ToolChoice::Required, parallel: true };
    let call = answer(&model, &messages, &required, SamplerConfig::greedy());
    check_calls(&call, "required");
    assert_eq!(call.tool_calls[0].name, "get_weather", "{call:?}");
    assert_eq!(call.content, "");
    let args: Value = serde_json::from_str(&call.tool_calls[0].arguments).unwrap();
    assert_eq!(args["city"], "Rome", "{call:?}");

    messages.push(ChatMessage {
        tool_calls: vec![MessageToolCall { id: "call_1".into(), function: call.tool_calls[0].clone() }],
        ..ChatMessage::new("assistant", "")
    });
    messages.push(ChatMessage {
        tool_call_id: Some("call_1".into()),
        ..ChatMessage::new("tool", r#"{"temperature": 24, "sky": "sunny"}"#)
    });
    // The tools are still offered (`auto`): the model answers, in the generic form's `response`.
    let answer = answer(&model, &messages, &ToolUse::default(), SamplerConfig::greedy());
    assert!(answer.tool_calls.is_empty(), "{answer:?}");
    assert!(answer.content.contains("24") && answer.content.contains("Rome"), "{answer:?}");
}
