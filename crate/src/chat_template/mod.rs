//! Chat templates: turn a conversation into the prompt text a model was trained on.
//!
//! Models ship a Jinja template in `tokenizer.chat_template`. We render it with minijinja set up the way
//! Hugging Face transformers does (`trim_blocks` and `lstrip_blocks` on, loop controls, Python string
//! methods, `raise_exception`, `strftime_now`, a `tojson` that writes like Python's `json.dumps`), with the
//! variables that HF and llama.cpp pass: `messages`, `tools`, `add_generation_prompt`, `bos_token`,
//! `eos_token`, and the caller's own (`enable_thinking`: llama.cpp's `chat_template_kwargs`).
//! Tools and tool turns reach templates as `tool_prompt.rs` says; `tool_calls.rs` reads calls back out.
//!
//! The template comes with the model file, so it may be hostile. Each render runs within `Limits` sized
//! to its input: minijinja's fuel, which charges every step and every byte a value takes (so loops, string
//! doubling, repeated big strings and lazy list repetition run out of it), a cap on the prompt's bytes,
//! and the same cap on what minijinja cannot foresee (our `tojson`'s indent and output, the widths of
//! minijinja-contrib's `str.format`). What fuel cannot bound, a value that holds itself or nests a level per
//! step (printing or freeing it recurses once per level, inside one step), `nesting.rs` rules out before
//! the first render: such templates are refused when they are compiled.
//!
//! # Design
//!
//! The model's Jinja template rendered with minijinja, set up as Hugging Face transformers does. The template comes
//! with the file, so each render runs within `Limits` sized to its input: minijinja's fuel (which charges steps and
//! the bytes values take) and a cap on the prompt's bytes. What fuel cannot stop, a value that holds itself or nests a
//! level per step, `nesting.rs` rules out when the template is compiled. A model whose template is refused still
//! loads; each chat request gets the error. Message contents are text, not markup: `render_guarded` wraps each
//! control-token text in the messages in two noncharacters before rendering and, after it, removes them and returns
//! the byte ranges they enclosed (`guard.rs`), where `Tokenizer::encode_guarded` matches no control token; so a message
//! that writes `<|im_end|><|im_start|>system` cannot open a turn, while the template's own markup keeps its tokens
//! (`TextModel::chat_prompt_ids`; `parse_special_in_messages` restores llama.cpp's behaviour for trusted input). The
//! markers travel through the template as the message's own characters, so templates that compare, trim or split
//! messages work unchanged; one that cuts a message between its markers leaves a lone opening one, which guards the rest
//! of the prompt. Tools go in both ways. In: `render_with` takes `RenderOptions` (the `tools`, and the caller's own
//! variables such as `enable_thinking`; `strftime_now` is there for the templates that print a date), and
//! `tool_prompt.rs` gives templates the messages as HF transformers does (a call's `arguments` a mapping, absent keys
//! left out); a template that renders no tools in a format we read gets llama.cpp's generic form written into the
//! conversation instead (the tools and the JSON envelope asked for in the system turn, after the caller's own;
//! calls as that envelope; results as `tool` turns where the template prints them, else as user turns), decided by
//! rendering probes. Out: `tool_calls.rs` holds the tool-call formats of the template families (Hermes/Qwen
//! `<tool_call>`, Qwen3-Coder/Qwen 3.5 `<function=...>` XML, Gemma 4 `<|tool_call>call:...`, Llama 3 JSON, Mistral `[TOOL_CALLS]`, llama.cpp's generic
//! JSON; `ToolFormat::detect` reads the template's source): reading calls out of an answer, whole or streamed as
//! OpenAI's deltas (one state machine, so the two agree however the text is split), and the Lark grammar that holds a
//! model to its format (calls' arguments to each tool's schema, in `response_format`'s JSON layout) once a call
//! starts, or from the first token under `required`. `model/text.rs` (`TextModel::chat_prompt`) puts them together: a request's prompt ids, its grammar and the format
//! to read the answer with; the npm chat API turns the reader's deltas into OpenAI's `tool_calls` and chunk deltas.

use std::fmt;
use std::io;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Serde, Value};
use minijinja::{Environment, ErrorKind};

use crate::error::{Error, Result};
use crate::gguf::Gguf;

mod guard;
mod nesting;
mod strftime;
pub mod tool_calls;
mod tool_prompt;

use tool_calls::{ToolCall, ToolFormat, ToolSpec};

const TEMPLATE_NAME: &str = "chat_template";

/// One turn of a conversation, in OpenAI's shape: a `content` of null reads as empty; an assistant's turn
/// may hold the `tool_calls` it made, and a `tool` turn answers one of them (`tool_call_id`, and the
/// tool's `name` where the caller gives it).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub content: String,
    #[serde(default, deserialize_with = "null_as_default", skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<MessageToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A call an assistant's turn made: OpenAI's `{id, type: 'function', function: {name, arguments}}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MessageToolCall {
    #[serde(default)]
    pub id: String,
    pub function: ToolCall,
}

fn null_as_default<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into(), ..ChatMessage::default() }
    }
}

/// What a render is given besides the messages.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderOptions {
    /// End the text where the assistant's reply begins.
    pub add_generation_prompt: bool,
    /// The tools the model may call. Empty: the template's `tools` is left undefined (Llama 3's template
    /// announces tools whenever `tools` is defined).
    pub tools: Vec<ToolSpec>,
    /// More template variables, as llama.cpp's `chat_template_kwargs` (`enable_thinking: false`). They may
    /// not take the names of the variables above.
    pub variables: serde_json::Map<String, serde_json::Value>,
}

impl Default for RenderOptions {
    fn default() -> RenderOptions {
        RenderOptions { add_generation_prompt: true, tools: Vec::new(), variables: serde_json::Map::new() }
    }
}

/// The variables a render sets itself.
const RESERVED: [&str; 5] = ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"];

/// The longest template source compiled: real ones are a few KiB (Qwen 3's, Llama 3.2's and Mistral Nemo's in
/// tests/fixtures/templates are 4 KiB each), and a template comes from outside (a GGUF's metadata, a load option),
/// so its cost is bounded before parsing.
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// A compiled chat template with the model's BOS/EOS token texts.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    tool_format: ToolFormat,
    /// Gemma 4's first templates: a model turn's tool results are its `tool_responses`, not `tool` turns
    /// (`tool_prompt::gemma4_turns`). Its later templates (marked "OpenAI Chat Completions") read `tool` turns.
    tool_responses_in_turn: bool,
    /// Which turns it prints, for the generic tool form: probed at the first render that needs it.
    generic_turns: std::sync::OnceLock<tool_prompt::GenericTurns>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile `source` once. Syntax errors and a source over [`MAX_TEMPLATE_BYTES`] give `Error::ChatTemplate`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(Error::ChatTemplate(format!(
                "the template is {} bytes, more than the {MAX_TEMPLATE_BYTES} a chat template may have",
                source.len()
            )));
        }
        let mut env = Environment::new();
        // As HF transformers renders chat templates.
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(template_error)?;
        env.set_syntax(syntax.clone());
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |format: String| strftime::format(&format, crate::clock::unix_ms()));
        env.add_template_owned(TEMPLATE_NAME, source.to_owned()).map_err(template_error)?;
        nesting::check(source, syntax).map_err(Error::ChatTemplate)?;
        let tool_format = ToolFormat::detect(source);
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            tool_format,
            tool_responses_in_turn: tool_format == ToolFormat::Gemma4
                && !source.contains("{#- OpenAI Chat Completions:"),
            generic_turns: std::sync::OnceLock::new(),
        })
    }

    /// From `tokenizer.chat_template` in GGUF metadata; bos/eos token texts from
    /// `tokenizer.ggml.tokens[bos/eos id]` (empty when the model declares no such token).
    pub fn from_gguf(g: &Gguf) -> Result<ChatTemplate> {
        let source = g
            .get_str("tokenizer.chat_template")
            .ok_or_else(|| Error::ChatTemplate("model has no chat template; pass one explicitly".into()))?;
        let bos = special_token_text(g, "tokenizer.ggml.bos_token_id")?;
        let eos = special_token_text(g, "tokenizer.ggml.eos_token_id")?;
        ChatTemplate::new(source, bos, eos).map_err(|e| match e {
            Error::ChatTemplate(m) => Error::ChatTemplate(format!("the model's chat template: {m}")),
            e => e,
        })
    }

    /// Render a plain conversation; with `add_generation_prompt` the text ends where the assistant's reply begins.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, &RenderOptions { add_generation_prompt, ..RenderOptions::default() })
    }

    /// Render `messages` with `options`' tools and variables.
    pub fn render_with(&self, messages: &[ChatMessage], options: &RenderOptions) -> Result<String> {
        self.render_marked(messages, options, &[])
    }

    /// How this template's model writes tool calls (`Generic` where the template renders no tools in a
    /// format we read: then tools and tool turns are written into the conversation, `tool_prompt.rs`).
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// [`render_with`](Self::render_with), with every occurrence of a `guarded` text (the model's control
    /// tokens) in the caller's strings (messages, tools) marked as text (see `guard.rs`): the template's own
    /// markup stays markup.
    pub fn render_guarded(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
        guarded: &[&str],
    ) -> Result<GuardedPrompt> {
        let (text, guarded) = guard::unmark(&self.render_marked(messages, options, guarded)?);
        Ok(GuardedPrompt { text, guarded })
    }

    /// The render, with the caller's strings marked (`guard::mark`) when `guarded` is not empty.
    fn render_marked(&self, messages: &[ChatMessage], options: &RenderOptions, guarded: &[&str]) -> Result<String> {
        if let Some(name) = RESERVED.iter().find(|n| options.variables.contains_key(**n)) {
            return Err(Error::InvalidArgument(format!("the template variable '{name}' is set by the render")));
        }
        let generic;
        let (messages, tools) = if self.tool_format == ToolFormat::Generic {
            // A conversation without tools or their turns is rendered as it is: no probe.
            let needed = !options.tools.is_empty() || messages.iter().any(|m| m.role == "tool");
            let turns = if needed {
                *self.generic_turns.get_or_init(|| tool_prompt::GenericTurns {
                    system: self.renders_turn("system"),
                    tool: self.renders_turn("tool"),
                })
            } else {
                tool_prompt::GenericTurns { system: false, tool: false }
            };
            generic = tool_prompt::generic(messages, &options.tools, turns);
            (generic.as_slice(), &[][..])
        } else {
            (messages, options.tools.as_slice())
        };
        let mut context = options.variables.clone();
        let views = match self.tool_responses_in_turn {
            true => tool_prompt::gemma4_turns(messages),
            false => messages.iter().map(tool_prompt::message_view).collect(),
        };
        context.insert("messages".into(), serde_json::Value::Array(views));
        if !tools.is_empty() {
            context.insert("tools".into(), tools.iter().map(ToolSpec::to_json).collect());
        }
        if !guarded.is_empty() {
            for key in ["messages", "tools"] {
                context.get_mut(key).into_iter().for_each(|v| mark_strings(v, guarded));
            }
        }
        self.render_context(context, messages.len(), options.add_generation_prompt)
    }

    /// Render with `context` (the messages, tools and caller's variables) within the limits of its size.
    fn render_context(
        &self,
        mut context: serde_json::Map<String, serde_json::Value>,
        n_messages: usize,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let input = serde_json::to_string(&context).map_or(usize::MAX, |json| json.len());
        let limits = Limits::for_input(n_messages, input.saturating_add(self.bos_token.len() + self.eos_token.len()));
        context.insert("add_generation_prompt".into(), add_generation_prompt.into());
        context.insert("bos_token".into(), self.bos_token.as_str().into());
        context.insert("eos_token".into(), self.eos_token.as_str().into());

        let env = limits.environment(&self.env);
        let template = env.get_template(TEMPLATE_NAME).map_err(template_error)?;
        let mut out = Capped::new(limits.bytes);
        let rendered = template.render_captured_to(Value::from(Serde(&context)), &mut out).map(drop);
        match rendered {
            Err(_) if out.full => {
                Err(Error::ChatTemplate(format!("the rendered prompt exceeds {} bytes", limits.bytes)))
            }
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(Error::ChatTemplate(format!(
                "the template used up its budget of {} steps (a step pays for 64 bytes made)",
                limits.fuel
            ))),
            Err(e) => Err(template_error(e)),
            Ok(_) => Ok(String::from_utf8(out.bytes).expect("minijinja writes whole strs")),
        }
    }

    /// Whether the template prints a turn of `role` with its content: a system turn first, a tool turn
    /// after a user's and an assistant's (Gemma's template raises on either; some drop them).
    fn renders_turn(&self, role: &str) -> bool {
        const PROBE: &str = "\u{FDD2}probe\u{FDD2}";
        let probe = match role {
            "system" => vec![ChatMessage::new("system", PROBE), ChatMessage::new("user", "?")],
            _ => vec![ChatMessage::new("user", "?"), ChatMessage::new("assistant", "!"), ChatMessage::new(role, PROBE)],
        };
        let mut context = serde_json::Map::new();
        context.insert("messages".into(), probe.iter().map(tool_prompt::message_view).collect());
        self.render_context(context, probe.len(), true).is_ok_and(|text| text.contains(PROBE))
    }
}

/// Every string in `v` marked (`guard::mark`); keys are the caller's field names and stay as they are.
fn mark_strings(v: &mut serde_json::Value, guarded: &[&str]) {
    match v {
        serde_json::Value::String(s) => *s = guard::mark(s, guarded),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| mark_strings(v, guarded)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| mark_strings(v, guarded)),
        _ => {}
    }
}

/// A rendered prompt whose message contents must be tokenized as text: the byte ranges of `text` in which no
/// control token may be matched (`Tokenizer::encode_guarded`).
#[derive(Clone, Debug, PartialEq)]
pub struct GuardedPrompt {
    pub text: String,
    pub guarded: Vec<std::ops::Range<usize>>,
}

/// What one render may use, from the size of its input.
struct Limits {
    /// minijinja's fuel. An instruction costs one, and each byte a value or the output takes costs 1/64
    /// (minijinja charges the values it makes, checks the big allocations it can foresee before making
    /// them, and charges the items its filters visit). Real templates take 25-35 instructions a message and
    /// copy each message's text a few times; the allowance is 100 000 instructions, 1 000 a message, and
    /// room to copy the input 64 times, so a hostile loop, string doubling or list repetition runs out of
    /// fuel within some tens of megabytes of work.
    fuel: u64,
    /// Bytes of the rendered prompt, and the most our own `tojson` may write. A template emits each message
    /// once with some scaffolding (counted as 256 bytes a message) and fixed text (a default system
    /// prompt): four times that and a MiB more is far beyond what real templates write.
    bytes: usize,
}

impl Limits {
    const BASE_FUEL: u64 = 100_000;
    const FUEL_PER_MESSAGE: u64 = 1_000;
    /// One fuel pays for 64 bytes: input copied 64 times costs one fuel per input byte.
    const FUEL_PER_INPUT_BYTE: u64 = 1;
    const BASE_BYTES: usize = 1 << 20;
    const BYTES_PER_MESSAGE: usize = 256;

    /// Limits for `n_messages` messages whose variables take `input` bytes as JSON.
    fn for_input(n_messages: usize, input: usize) -> Limits {
        let input = input.saturating_add(Limits::BYTES_PER_MESSAGE.saturating_mul(n_messages));
        let fuel = Limits::BASE_FUEL
            .saturating_add(Limits::FUEL_PER_MESSAGE.saturating_mul(n_messages as u64))
            .saturating_add(Limits::FUEL_PER_INPUT_BYTE.saturating_mul(input as u64));
        Limits { fuel, bytes: Limits::BASE_BYTES.saturating_add(input.saturating_mul(4)) }
    }

    /// `base` with these limits: the fuel, and what minijinja cannot foresee the size of bounded by `bytes`:
    /// our `tojson`, and the widths in minijinja-contrib's Python `str.format`.
    fn environment(&self, base: &Environment<'static>) -> Environment<'static> {
        let mut env = base.clone();
        env.set_fuel(Some(self.fuel));
        let max = self.bytes;
        env.add_filter("tojson", move |value: &Value, kwargs: Kwargs| tojson(value, kwargs, max));
        env.set_unknown_method_callback(move |state, value, method, args| {
            if let ("format", Some(format)) = (method, value.as_str()) {
                within(format_widths(format), max, "str.format")?;
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
        env
    }
}

/// Refuse a size or count of `n` over the render's limit of `max`, before anything is made of it.
fn within(n: usize, max: usize, what: &str) -> std::result::Result<(), minijinja::Error> {
    if n > max {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("{what}: {n} is over this prompt's limit of {max} bytes"),
        ));
    }
    Ok(())
}

/// The numbers written in a format string, added up: at least the widths and precisions its conversions
/// ask for (numbers in its plain text only make the bound stricter).
fn format_widths(format: &str) -> usize {
    format
        .split(|c: char| !c.is_ascii_digit())
        .filter(|digits| !digits.is_empty())
        .map(|digits| digits.parse::<usize>().unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

/// A byte sink that refuses to grow past `max` bytes (and remembers that it did).
struct Capped {
    bytes: Vec<u8>,
    max: usize,
    full: bool,
}

impl Capped {
    fn new(max: usize) -> Capped {
        Capped { bytes: Vec::new(), max, full: false }
    }
}

impl io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if b.len() > self.max - self.bytes.len() {
            self.full = true;
            return Err(io::Error::other(format!("more than {} bytes", self.max)));
        }
        self.bytes.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn special_token_text<'g>(g: &'g Gguf, id_key: &str) -> Result<&'g str> {
    let Some(id) = g.get_u64(id_key) else {
        return Ok("");
    };
    let tokens = g
        .get_str_array("tokenizer.ggml.tokens")
        .ok_or_else(|| Error::Tokenizer("metadata key tokenizer.ggml.tokens is missing".into()))?;
    let n_tokens = tokens.len();
    usize::try_from(id)
        .ok()
        .and_then(|i| tokens.get(i).copied())
        .ok_or_else(|| Error::Tokenizer(format!("{id_key} = {id} is outside the vocabulary of {n_tokens} tokens")))
}

/// The message a template passed to `raise_exception`, carried as the minijinja error's source.
#[derive(Debug)]
struct Raised(String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, "template raised an exception").with_source(Raised(msg)))
}

/// The template's own message when it raised one, else minijinja's with the error that caused it (an
/// error inside an include carries the included template's as its source, and so on).
fn template_error(e: minijinja::Error) -> Error {
    let mut root = std::error::Error::source(&e);
    while let Some(cause) = root.and_then(|r| r.source()) {
        root = Some(cause);
    }
    match root {
        None => Error::ChatTemplate(e.to_string()),
        Some(r) => match r.downcast_ref::<Raised>() {
            Some(raised) => Error::ChatTemplate(raised.0.clone()),
            None => Error::ChatTemplate(format!("{e}: {r}")),
        },
    }
}

/// `tojson` as HF transformers defines it: Python's `json.dumps(x, ensure_ascii=False, indent=None)`,
/// so `", "` and `": "` separators and no HTML escaping (minijinja's built-in is compact and HTML-safe).
/// Like HF, the options are keyword arguments (`indent`, `ensure_ascii`). The JSON may take `max` bytes.
fn tojson(value: &Value, kwargs: Kwargs, max: usize) -> std::result::Result<Value, minijinja::Error> {
    let indent = kwargs.get::<Option<usize>>("indent")?;
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    kwargs.assert_all_used()?;

    let mut out = Capped::new(max);
    let written = match indent {
        Some(n) => {
            within(n, max, "tojson indent")?;
            let spaces = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(spaces.as_bytes());
            serde::Serialize::serialize(value, &mut serde_json::Serializer::with_formatter(&mut out, fmt))
        }
        None => serde::Serialize::serialize(value, &mut serde_json::Serializer::with_formatter(&mut out, PythonJson)),
    };
    written
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e))?;
    let json = String::from_utf8(out.bytes)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, "JSON is not UTF-8").with_source(e))?;
    Ok(Value::from_safe_string(if ensure_ascii { escape_non_ascii(&json) } else { json }))
}

/// Python's default `json.dumps` separators.
struct PythonJson;

impl serde_json::ser::Formatter for PythonJson {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// Non-ASCII only occurs inside JSON strings, so escaping it afterwards is safe (UTF-16, as Python does).
fn escape_non_ascii(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template`, copied from the GGUF (tested against the file below).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    // Prompt texts of /work/shared/reference/logits.json (llama.cpp reference), rendered from the template above.
    const FRANCE_PROMPT: &str = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    const POEM_PROMPT: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWrite a short poem about the ocean.<|im_end|>\n<|im_start|>assistant\n";

    // Llama 3 Instruct's template (HF meta-llama/Meta-Llama-3-8B-Instruct).
    const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

    // Mistral 7B Instruct v0.1's template: alternation enforced through raise_exception.
    const MISTRAL: &str = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

    // Qwen2.5 Instruct's template without its tool-calling branches: multi-line, with `{%-` whitespace control.
    const QWEN25: &str = r#"{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    // Block tags on their own lines: only trim_blocks + lstrip_blocks (as HF sets them) give compact output.
    const TRIM_PROBE: &str = "{% for m in messages %}\n  {% if m.role == 'user' %}\nU: {{ m.content }}\n  {% else %}\nA: {{ m.content }}\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}\nA:{% endif %}\n";

    fn user(text: &str) -> ChatMessage {
        ChatMessage::new("user", text)
    }

    #[test]
    fn smollm2_chatml_matches_llama_cpp_reference_prompts() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        // With a system turn the template's default system prompt is skipped.
        let with_system = [
            ChatMessage::new("system", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
            user("Write a short poem about the ocean."),
        ];
        assert_eq!(t.render(&with_system, true).unwrap(), POEM_PROMPT);
        // Without one, the template inserts its default system prompt.
        let default_system = t.render(&[user("Write a short poem about the ocean.")], true).unwrap();
        assert_eq!(default_system, POEM_PROMPT);
        let no_gen = t.render(&[user("hi")], false).unwrap();
        assert!(no_gen.ends_with("<|im_start|>user\nhi<|im_end|>\n"), "{no_gen:?}");
    }

    /// The reference France prompt has no system turn although the template would add one: llama.cpp's
    /// fixture tokenized the ChatML text directly. Check the exact text with a system-less ChatML template.
    #[test]
    fn plain_chatml_renders_reference_france_prompt() {
        let chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let t = ChatTemplate::new(chatml, "", "").unwrap();
        assert_eq!(t.render(&[user("What is the capital of France?")], true).unwrap(), FRANCE_PROMPT);
    }

    #[test]
    fn llama3_adds_bos_and_trims_content() {
        let t = ChatTemplate::new(LLAMA3, "<|begin_of_text|>", "<|eot_id|>").unwrap();
        let msgs = [ChatMessage::new("system", "Be brief."), user("  Hello!\n")];
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn mistral_renders_and_raises_on_bad_role_order() {
        let t = ChatTemplate::new(MISTRAL, "<s>", "</s>").unwrap();
        let ok = [user("Hi"), ChatMessage::new("assistant", "Hello."), user("Bye")];
        assert_eq!(t.render(&ok, false).unwrap(), "<s>[INST] Hi [/INST]Hello.</s>[INST] Bye [/INST]");

        let bad = [user("Hi"), user("Again")];
        let e = t.render(&bad, false).unwrap_err();
        assert_eq!(
            e,
            Error::ChatTemplate("Conversation roles must alternate user/assistant/user/assistant/...".into())
        );
        let e = t.render(&[ChatMessage::new("system", "x")], false).unwrap_err();
        assert!(matches!(e, Error::ChatTemplate(ref m) if m.contains("roles must alternate")), "{e}");
    }

    #[test]
    fn qwen25_and_block_whitespace_like_hf() {
        // Expected texts: Jinja2 3.1.6 with HF's settings (trim_blocks, lstrip_blocks, loopcontrols).
        let conversation = [user("Hi"), ChatMessage::new("assistant", "Hello."), user("Bye")];
        let t = ChatTemplate::new(QWEN25, "", "<|im_end|>").unwrap();
        assert_eq!(
            t.render(&conversation, true).unwrap(),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n\
             <|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = [ChatMessage::new("system", "S"), user("Hi")];
        assert_eq!(
            t.render(&with_system, false).unwrap(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );

        let t = ChatTemplate::new(TRIM_PROBE, "", "").unwrap();
        assert_eq!(t.render(&conversation, true).unwrap(), "U: Hi\nA: Hello.\nU: Bye\nA:");
    }

    #[test]
    fn python_string_methods_and_loop_controls() {
        let src = "{% for m in messages %}{% if m.content.startswith('skip') %}{% continue %}{% endif %}\
                   [{{ m.role.upper() }}:{{ m.content.strip() }}]{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let msgs = [user("  a "), user("skip me"), ChatMessage::new("assistant", "b\n")];
        assert_eq!(t.render(&msgs, false).unwrap(), "[USER:a][ASSISTANT:b]");
    }

    #[test]
    fn tojson_writes_like_python_json_dumps() {
        // Expected texts: Jinja2 with HF's tojson (json.dumps).
        let render = |src: &str| ChatTemplate::new(src, "", "").unwrap().render(&[user("<é>")], false).unwrap();
        assert_eq!(render("{{ messages[0] | tojson }}"), r#"{"role": "user", "content": "<é>"}"#);
        assert_eq!(
            render("{{ messages | tojson(ensure_ascii=true) }}"),
            r#"[{"role": "user", "content": "<\u00e9>"}]"#
        );
        assert_eq!(render("{{ messages[0] | tojson(indent=1) }}"), "{\n \"role\": \"user\",\n \"content\": \"<é>\"\n}");
    }

    #[test]
    fn syntax_errors_are_chat_template_errors() {
        let e = ChatTemplate::new("{% for m in messages %}{{ m.content }}", "", "").unwrap_err();
        assert!(matches!(e, Error::ChatTemplate(_)), "{e}");
        assert_eq!(e.code(), "E_CHAT_TEMPLATE");
    }

    #[test]
    fn a_template_past_the_size_bound_is_refused_before_parsing() {
        let text = "x".repeat(MAX_TEMPLATE_BYTES);
        assert_eq!(ChatTemplate::new(&text, "", "").unwrap().render(&[], false).unwrap(), text);
        let e = ChatTemplate::new(&format!("{text}x"), "", "").unwrap_err();
        assert!(matches!(e, Error::ChatTemplate(_)), "{e}");
        assert!(e.to_string().contains(&format!("{} bytes", MAX_TEMPLATE_BYTES + 1)), "{e}");
    }

    #[test]
    fn from_gguf_without_template_is_an_error() {
        // Minimal GGUF v3: no tensors, one metadata key (general.architecture = "llama").
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        let key = b"general.architecture";
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(&8u32.to_le_bytes()); // string
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(b"llama");
        let g = Gguf::parse(&b).unwrap();
        let e = ChatTemplate::from_gguf(&g).unwrap_err();
        assert_eq!(e, Error::ChatTemplate("model has no chat template; pass one explicitly".into()));
    }

    /// Render `src` over one message, which must fail promptly with E_CHAT_TEMPLATE; the message.
    fn refused(src: &str) -> String {
        let t0 = crate::clock::now_ms();
        let e = ChatTemplate::new(src, "", "").unwrap().render(&[user("hi")], true).unwrap_err();
        let ms = crate::clock::now_ms() - t0;
        assert_eq!(e.code(), "E_CHAT_TEMPLATE", "{src}: {e}");
        // Loose on purpose: this catches a hang, it does not time the limits.
        assert!(ms < 5000.0, "{src}: {ms} ms");
        e.to_string()
    }

    #[test]
    fn size_arguments_are_bounded() {
        for src in [
            "{{ messages[0] | tojson(indent=4294967295) }}",
            "{{ messages[0] | tojson(indent=2000000000) }}",
            "{{ 'a' | indent(4294967295) }}",
            "{{ 'a\nb' | indent(width=2000000000, first=true) }}",
            "{{ '%999999999s' | format('a') }}",
            "{{ '%.999999999f' | format(1.5) }}",
            "{{ '{:>4294967295}'.format('a') }}",
            "{{ 'a' * 4294967295 }}",
            "{{ range(1000000000) | length }}",
        ] {
            refused(src);
        }
        // Within the limits the same filters work as before.
        let t = ChatTemplate::new(
            "{{ 'a\nb' | indent(2) }}|{{ '%5s' | format('x') }}|{{ messages | batch(2) | list | length }}",
            "",
            "",
        );
        assert_eq!(t.unwrap().render(&[user("hi")], false).unwrap(), "a\n  b|    x|1");
    }

    #[test]
    fn loops_recursion_and_output_are_bounded() {
        // 10^10 steps of nested loops.
        let msg = refused("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
        assert!(msg.contains("used up its budget"), "{msg}");
        // Unbounded recursion, through a macro and a recursive loop. (`include` is not compiled in: a chat
        // template is one template.)
        assert_eq!(ChatTemplate::new("x{% include 'chat_template' %}", "", "").unwrap_err().code(), "E_CHAT_TEMPLATE");
        for src in [
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
        ] {
            let msg = refused(src);
            assert!(msg.contains("recursion"), "{src}: {msg}");
        }
        // 100 MB of output.
        refused("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    }

    #[test]
    fn values_that_grow_in_few_steps_are_bounded() {
        for src in [
            // A string doubled 40 times (a TB), in 40 steps.
            "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s | replace('a', 'aa') %}{% endfor %}",
            "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = [ns.s, ns.s] | join %}{% endfor %}",
            // A 100 MB string made again and again without being written.
            "{% for i in range(100000) %}{% set s = 'x' * 100000000 %}{% endfor %}",
            // A lazy list of 10^12 items, searched.
            "{{ 0 in [1] * 1000000000000 }}",
        ] {
            refused(src);
        }
    }

    #[test]
    fn long_conversations_fit_the_limits() {
        let turns: Vec<ChatMessage> =
            (0..10_000).map(|i| ChatMessage::new(["user", "assistant"][i % 2], "x".repeat(i % 1000))).collect();
        for src in [SMOLLM2, LLAMA3, MISTRAL, QWEN25] {
            let out = ChatTemplate::new(src, "<s>", "</s>").unwrap().render(&turns, true).unwrap();
            assert!(out.len() > 5_000_000, "{}", out.len());
        }
        // One message as long as a whole context window's text, indented and as JSON.
        let long = [user(&"word ".repeat(200_000))];
        let src = "{{ messages[0].content | indent(4) }}{{ messages | tojson(indent=2) }}";
        assert!(ChatTemplate::new(src, "", "").unwrap().render(&long, false).is_ok());
    }

    #[test]
    fn values_that_hold_themselves_or_nest_without_bound_are_refused_when_compiled() {
        for src in [
            // Cycles: printing them recursed until the stack overflowed (found by the chat_template fuzz target).
            "{% set ns = namespace() %}{% set ns.n = ns %}{{ ns }}",
            "{% set ns = namespace() %}{% set x = [ns] %}{% set ns.x = x %}{{ ns }}",
            "{% set ns = namespace() %}{% set alias = ns %}{% set ns.me = alias %}{{ ns ~ '' }}",
            "{% set mk = namespace %}{% set a = mk() %}{% set a.self = a %}{{ a }}",
            "{% set ns = namespace() %}{% for x in [1, 2] %}{% if loop.changed(ns) %}{% set ns.l = loop %}{% endif %}{% endfor %}",
            // A level of nesting per step: freeing or printing the value recursed once per level.
            "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
            "{% set ns = namespace(l=1) %}{% for i in range(9) %}{% set t = ns.l %}{% set ns.l = {'a': t} %}{% endfor %}",
            "{% set ns = namespace(l=1) %}{% for i in range(9) %}{% set ns.l = ns.l.items() %}{% endfor %}",
            "{% set ns = namespace(l=1) %}{% for i in range(9) %}{% set ns.l = ns.l | batch(1) %}{% endfor %}",
            "{% set ns = namespace(l=1) %}{% for i in range(9) %}{% set ns.l = dict(x=ns.l) %}{% endfor %}",
            "{% set n = namespace(p=none) %}{% for i in range(9) %}{% set n = namespace(p=n) %}{% endfor %}{{ n }}",
            "{% macro keep(x) %}{% set ns.l = [x] %}{% endmacro %}{% set ns = namespace(l=1) %}{% for i in range(9) %}{{ keep(ns.l) }}{% endfor %}",
            "{% set ns = namespace(l=1) %}{% for i in range(9) %}{% for x in [ns.l] %}{% set ns.l = (x, 1) %}{% endfor %}{% endfor %}",
        ] {
            let e = ChatTemplate::new(src, "", "").unwrap_err();
            assert_eq!(e.code(), "E_CHAT_TEMPLATE", "{src}");
            assert!(e.to_string().contains("holds itself or nests without bound"), "{src}: {e}");
        }
    }

    #[test]
    fn namespaces_as_real_templates_use_them_are_accepted() {
        // Qwen3's way to find the last user query, DeepSeek's system prompt, a list of strings built up, a
        // joined pair, and values from a namespace printed or tested at once.
        let cases = [
            (
                "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\
                 {%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}\
                 {%- if ns.multi_step_tool and message.role == 'user' and not message.content.startswith('<tool') %}\
                 {%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}\
                 {{- ns.last_query_index }}",
                "0",
            ),
            (
                "{% set ns = namespace(system_prompt='', is_first_sp=true) %}{%- for message in messages %}\
                 {%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}\
                 {% set ns.is_first_sp = false %}{%- else %}\
                 {% set ns.system_prompt = ns.system_prompt + '|' + message['content'] %}{%- endif %}{%- endfor %}\
                 {{ ns.system_prompt }}",
                "hi|there",
            ),
            (
                "{% set ns = namespace(roles=[]) %}{% for m in messages %}{% set ns.roles = ns.roles + [m.role] %}\
                 {% endfor %}{{ ns.roles | join(',') }}|{{ [ns.roles, ns.roles] | length }}|{{ ns }}",
                "user,assistant|2|{'roles': ['user', 'assistant']}",
            ),
            ("{% set ns = namespace(s='a') %}{% set ns.s = [ns.s, ns.s] | join %}{{ ns.s }}", "aa"),
        ];
        let messages = [user("hi"), ChatMessage::new("assistant", "there")];
        for (src, want) in cases {
            let t = ChatTemplate::new(src, "", "").unwrap_or_else(|e| panic!("{src}: {e}"));
            assert_eq!(t.render(&messages, false).unwrap(), want, "{src}");
        }
    }

    // The real model's own template is tested in tests/rust/reference.rs (natively and on wasm32).
}
