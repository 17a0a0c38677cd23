//! Tool calls (OpenAI's `tools`): the formats models write them in, reading them back out of an answer (whole,
//! or streamed the way OpenAI streams them), and the llguidance grammars that hold a model to its format.
//!
//! The formats, by family:
//! - `Hermes` (Hermes 2 Pro, Hermes 3, Qwen 2.5, Qwen 3):
//!   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block per call, anywhere in the answer.
//! - `Llama3` (Llama 3.1, 3.2, 3.3 JSON tool calls): `{"name": ..., "parameters": {...}}` opening the answer or
//!   after `<|python_tag|>`; several separated by `;`.
//! - `Mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Nemo, Small 3.0/3.1) or, in the 2025
//!   templates, `[TOOL_CALLS]name[ARGS]{...}` once per call (optionally `name[CALL_ID]id[ARGS]{...}`).
//! - `QwenXml` (Qwen3-Coder, Qwen 3.5; Nemotron 3 Nano's and StepFun 3.5's templates write it too):
//!   `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>`, one block
//!   per call, after any text. A value is the text up to the first `</parameter>`, less one newline after its opening
//!   tag and one before the closing one. It becomes JSON as llama.cpp reads it (common/parsers/qwen3-coder.cpp), by
//!   the JSON types its parameter's schema allows: only strings, the text is the string; no strings, the text is
//!   JSON; both, it is JSON when it is a value of one of the other types, else the string. (Where llama.cpp fails the
//!   parse, a value that should be JSON and is not, it is the string here; but where no string is allowed, Python's
//!   `True`, `False` and `None`, as the template writes them, are JSON's.) So reading it needs the tools
//!   ([`ToolCallStream::with_tools`], [`ToolFormat::parse_with_tools`]); without them any parameter may be anything.
//!   With the tools, the first call may also open with a whole `<function=NAME>` of one of them, without its
//!   `<tool_call>` (Qwen3-Coder omits it at times; llama.cpp reads it so). The grammar, as llama.cpp's, takes the
//!   required parameters in any order, then the others in any order (each once; llama.cpp's lets them repeat).
//! - `Gemma4` (Gemma 4): `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>` once per call, one after another, after
//!   any text. Its own syntax, read as llama.cpp's gemma4 parser does (common/parsers/gemma4.cpp, its JSON from
//!   `gemma4_to_json` in common/chat-peg-parser.cpp): keys bare (any chars but `:` and `}`), strings between `<|"|>`
//!   quotes (any text but the quote, unescaped), numbers, `true`, `false` and `null` as JSON's, objects and arrays
//!   nested; whitespace allowed after brackets, commas and colons. The arguments become JSON as they are read, so
//!   they need no tools. Deviations: whitespace is also allowed before a comma or a closing bracket and before
//!   `<tool_call|>`; Python's `None`, as the template writes a null, is JSON's; text after the calls is content
//!   (llama.cpp's parser ends at the last call). A thought
//!   channel (`<|channel>thought...<channel|>`, with thinking on) is content here, as other formats' `<think>`.
//! - `Generic`: llama.cpp's fallback for templates without tool support: the whole answer is
//!   `{"tool_calls": [{"name": ..., "arguments": {...}}]}` (or `{"tool_call": {...}}`) or `{"response": "..."}`.
//!   The prompt must ask for that; llama.cpp adds a system message: "Respond in JSON format, either with
//!   `tool_call` (a request to call tools) or with `response` reply to the user's request".
//!
//! Reading is one state machine fed a char at a time, [`ToolCallStream`]; [`ToolFormat::parse`] runs it over
//! the whole answer, so a streamed answer always assembles to what `parse` gives, however it was split. The
//! machine settles each piece of text at the first char that settles it, and never revises:
//! - Content goes out as soon as it cannot be the start of a call marker. Content is trimmed at both ends, so
//!   whitespace waits until more content follows it.
//! - A call commits, and is emitted, once its name is known and its arguments object has begun; its
//!   arguments then stream as they come, compact (whitespace between JSON tokens dropped). `QwenXml`'s arguments
//!   begin at the call's first whole `<parameter=NAME>` (or at `</function>`, for a call without parameters); a
//!   string value streams as it comes, escaped, but for what may begin `\n</parameter>`; any other value goes out
//!   whole when its `</parameter>` comes. `Gemma4`'s arguments begin at the `{` after the name; a string streams
//!   as it comes, escaped, but for what may begin its closing `<|"|>`.
//! - Before it commits, a call that turns out malformed is content, marker and all.
//! - After it commits, the call keeps what it streamed. If its JSON then breaks, or the answer ends inside it
//!   (a generation cut at its token limit), the text from the break on is content again. Under the grammars
//!   below only the cut can happen, and OpenAI's API behaves the same way: the arguments stop where it stopped.
//!
//! Call ids are left to the caller (the deltas carry each call's index). Mistral's templates read only the
//! last 9 chars of an id and refuse ids shorter than that, so ids should end in 9 or more alphanumerics.

use std::borrow::Cow;
use std::fmt::Write as _;

use llguidance::derivre::Regex;
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// How a model family writes tool calls (the module doc shows each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3,
    Mistral,
    /// Qwen3-Coder's and Qwen 3.5's `<function=NAME>` with `<parameter=P>` XML inside `<tool_call>`; its values are
    /// typed by the tools' schemas.
    QwenXml,
    /// Gemma 4's `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`, strings between `<|"|>` quotes.
    Gemma4,
    Generic,
}

/// A tool the model may call: OpenAI's `{type: 'function', function: {name, description?, parameters?}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object; `{"type": "object", "properties": {}}` when the request gives none.
    pub parameters: Value,
}

/// OpenAI's `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Function(String),
}

/// One call, as OpenAI reports it: `arguments` is JSON text, compact.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// An answer split into its text and its calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedAnswer {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
}

/// A piece of a streamed answer. Concatenating the `Content`s gives `ParsedAnswer::content`; a call is its
/// `CallStart` and the concatenation of the `Arguments` with its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolDelta {
    Content(String),
    CallStart { index: usize, name: String },
    Arguments { index: usize, text: String },
}

impl ToolSpec {
    /// OpenAI's `tools` array. Names are OpenAI's: 1 to 64 of `a-z A-Z 0-9 _ -`, each used once (so a name
    /// is safe to write into a prompt or a grammar). Errors name the offending field, as `tools[2].function.name`.
    pub fn parse_list(tools: &Value) -> Result<Vec<ToolSpec>> {
        let bad = |field: &str, what: &str| Error::InvalidArgument(format!("{field}: {what}"));
        let list = tools.as_array().ok_or_else(|| bad("tools", "expected an array"))?;
        let mut specs: Vec<ToolSpec> = Vec::with_capacity(list.len());
        for (i, tool) in list.iter().enumerate() {
            let at = format!("tools[{i}]");
            let tool = tool.as_object().ok_or_else(|| bad(&at, "expected an object"))?;
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad(&format!("{at}.type"), "expected \"function\""));
            }
            let function = tool
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| bad(&format!("{at}.function"), "expected an object"))?;
            let field = format!("{at}.function.name");
            let name = function.get("name").and_then(Value::as_str).ok_or_else(|| bad(&field, "expected a string"))?;
            if name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(bad(&field, "expected 1 to 64 of a-z, A-Z, 0-9, '_' and '-'"));
            }
            if specs.iter().any(|s| s.name == name) {
                return Err(bad(&field, &format!("{name:?} names two tools")));
            }
            let description = match function.get("description") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(bad(&format!("{at}.function.description"), "expected a string")),
            };
            let parameters = match function.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(_) => return Err(bad(&format!("{at}.function.parameters"), "expected a JSON Schema object")),
            };
            specs.push(ToolSpec { name: name.to_owned(), description, parameters });
        }
        Ok(specs)
    }

    /// The tool as OpenAI's request gives it, as chat templates read `tools`.
    pub fn to_json(&self) -> Value {
        let mut function = json!({ "name": self.name });
        if let Some(d) = &self.description {
            function["description"] = d.as_str().into();
        }
        function["parameters"] = self.parameters.clone();
        json!({ "type": "function", "function": function })
    }
}

impl ToolChoice {
    /// OpenAI's `tool_choice`, checked against the request's `tools`. Absent (or null) it is `Auto` when there
    /// are tools and `None` when there are none, as in OpenAI's API.
    pub fn parse(choice: Option<&Value>, tools: &[ToolSpec]) -> Result<ToolChoice> {
        let bad = |field: &str, what: &str| Err(Error::InvalidArgument(format!("{field}: {what}")));
        match choice {
            None | Some(Value::Null) => Ok(if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto }),
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" if tools.is_empty() => bad("tool_choice", "\"required\" needs tools"),
                "required" => Ok(ToolChoice::Required),
                _ => bad("tool_choice", "expected \"auto\", \"none\" or \"required\""),
            },
            Some(Value::Object(o)) => {
                if o.get("type").and_then(Value::as_str) != Some("function") {
                    return bad("tool_choice.type", "expected \"function\"");
                }
                let Some(name) = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) else {
                    return bad("tool_choice.function.name", "expected a string");
                };
                if !tools.iter().any(|t| t.name == name) {
                    return bad("tool_choice.function.name", &format!("no tool is named {name:?}"));
                }
                Ok(ToolChoice::Function(name.to_owned()))
            }
            Some(_) => bad("tool_choice", "expected a string or {type: \"function\", function: {name}}"),
        }
    }
}

impl ToolFormat {
    /// The format of a chat template's tool calls, from the markers in its Jinja source. Templates with no
    /// tool calls, or with a format not read here, get `Generic`.
    pub fn detect(template_source: &str) -> ToolFormat {
        let has = |s: &str| template_source.contains(s);
        if has("[TOOL_CALLS]") {
            ToolFormat::Mistral
        // As llama.cpp picks its Gemma 4 parser (common/chat.cpp): the template writes calls after this text.
        } else if has("'<|tool_call>call:'") {
            ToolFormat::Gemma4
        // As llama.cpp picks its Qwen3-Coder parser (common/chat.cpp): a template that glues the tags together,
        // `<tool_call><function=`, writes some other format.
        } else if has("<tool_call>") && has("<function=") && has("<parameter=") && !has("<tool_call><function=") {
            ToolFormat::QwenXml
        // `<tool_call>` also wraps other formats: GLM's `<arg_key>` pairs.
        } else if has("<tool_call>") && !has("<function=") && !has("<arg_key>") {
            ToolFormat::Hermes
        // Llama 3.1/3.3 render builtin tools after `<|python_tag|>`; 3.1 to 3.3 all ask for and render `"parameters"`.
        } else if has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\"")) {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The format's name: `hermes`, `llama3`, `mistral`, `qwen_xml`, `gemma4` or `generic`.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
            ToolFormat::QwenXml => "qwen_xml",
            ToolFormat::Gemma4 => "gemma4",
            ToolFormat::Generic => "generic",
        }
    }

    /// The format named `name` (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<ToolFormat> {
        [
            ToolFormat::Hermes,
            ToolFormat::Llama3,
            ToolFormat::Mistral,
            ToolFormat::QwenXml,
            ToolFormat::Gemma4,
            ToolFormat::Generic,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }

    /// Splits a whole answer into content and calls: what a [`ToolCallStream`] given the whole answer emits.
    /// `QwenXml` reads every parameter as possibly anything: [`parse_with_tools`](Self::parse_with_tools) types
    /// them by the tools offered.
    pub fn parse(&self, text: &str) -> ParsedAnswer {
        self.parse_with_tools(text, &[])
    }

    /// [`parse`](Self::parse), with the tools the answer may call: what a [`ToolCallStream::with_tools`] given the
    /// whole answer emits.
    pub fn parse_with_tools(&self, text: &str, tools: &[ToolSpec]) -> ParsedAnswer {
        let mut stream = ToolCallStream::with_tools(*self, tools);
        let mut deltas = stream.push(text);
        deltas.extend(stream.finish());
        assemble(deltas)
    }

    /// The text that opens a call anywhere in the answer.
    fn marker(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes | ToolFormat::QwenXml => Some("<tool_call>"),
            ToolFormat::Llama3 => Some("<|python_tag|>"),
            ToolFormat::Mistral => Some("[TOOL_CALLS]"),
            ToolFormat::Gemma4 => Some(GEMMA_OPEN),
            ToolFormat::Generic => None,
        }
    }

    /// Whether a JSON object opening the answer is read: a call (Llama 3) or the envelope (Generic).
    fn opens_with_json(self) -> bool {
        matches!(self, ToolFormat::Llama3 | ToolFormat::Generic)
    }
}

/// The answer that `deltas` make up, as a client assembles OpenAI's streamed chunks (a delta of a call not yet
/// started is dropped: [`ToolCallStream`] never emits one).
pub fn assemble(deltas: impl IntoIterator<Item = ToolDelta>) -> ParsedAnswer {
    let mut answer = ParsedAnswer::default();
    for delta in deltas {
        match delta {
            ToolDelta::Content(text) => answer.content.push_str(&text),
            ToolDelta::CallStart { name, .. } => answer.tool_calls.push(ToolCall { name, arguments: String::new() }),
            ToolDelta::Arguments { index, text } => {
                if let Some(call) = answer.tool_calls.get_mut(index) {
                    call.arguments.push_str(&text);
                }
            }
        }
    }
    answer
}

/// Reads one generation's answer as it streams. Build one per generation, `push` the text as it is decoded
/// (special tokens such as `<tool_call>`, `[TOOL_CALLS]` and `<|python_tag|>` included as their text), then
/// `finish` once at the end. Whatever the text, it never panics, and every char of it ends up in a delta
/// but whitespace that trimming or compact arguments drop and the wrapping of calls (markers, the name's key
/// and quotes, keys other than name and arguments). Names are not checked against the tools: the grammar does.
pub struct ToolCallStream {
    format: ToolFormat,
    /// `QwenXml`'s parameters and the types their values may have.
    tools: Vec<XmlTool>,
    mode: Mode,
    /// Nothing but whitespace read so far: Llama 3 and Generic read a JSON object only when it opens the answer.
    at_start: bool,
    sink: Sink,
}

enum Mode {
    /// Plain text. `held` may be the start of the call marker: it waits until it is the marker or cannot be.
    Text { held: String },
    /// Boxed: a region is far larger than plain text's state.
    Call(Box<Region>),
}

impl ToolCallStream {
    /// A reader of `format` that does not know the tools: `QwenXml` reads each parameter as possibly anything (a
    /// value that is JSON, but for a JSON string, is that JSON).
    pub fn new(format: ToolFormat) -> ToolCallStream {
        ToolCallStream::with_tools(format, &[])
    }

    /// A reader of `format` for an answer that may call `tools`. Only `QwenXml` reads them: its values are typed
    /// by each tool's parameters schema (see the module doc); other formats read the same with or without them.
    pub fn with_tools(format: ToolFormat, tools: &[ToolSpec]) -> ToolCallStream {
        let tools = if format == ToolFormat::QwenXml { tools.iter().map(XmlTool::new).collect() } else { Vec::new() };
        ToolCallStream {
            format,
            tools,
            mode: Mode::Text { held: String::new() },
            at_start: true,
            sink: Sink::default(),
        }
    }

    /// The deltas that `text`, read after everything pushed before it, settles.
    pub fn push(&mut self, text: &str) -> Vec<ToolDelta> {
        self.feed(text.to_owned());
        std::mem::take(&mut self.sink.out)
    }

    /// The end of the answer: what was held back, settled.
    pub fn finish(&mut self) -> Vec<ToolDelta> {
        // An unfinished call gives back what it holds, read again as text, which may open another call: repeat
        // until plain text is left. Each round reads less text than the one before, so this ends.
        while matches!(self.mode, Mode::Call(_)) {
            let rest = self.abandon();
            self.feed(rest);
        }
        // Text held as a possible marker's start is not one.
        let held = self.abandon();
        self.sink.content(&held);
        self.sink.pending_space.clear();
        std::mem::take(&mut self.sink.out)
    }

    fn feed(&mut self, mut text: String) {
        let mut at = 0;
        while let Some(c) = text[at..].chars().next() {
            match self.step(c) {
                None => at += c.len_utf8(),
                // A call failed at `c`: read what it held again, then `c`. The text given back started after the
                // failed call's marker (or, for JSON opening the answer, can no longer open one), so it is
                // shorter than the text that call read: this ends.
                Some(again) => {
                    text = again + &text[at..];
                    at = 0;
                }
            }
        }
    }

    /// Reads `c`; `Some` is text to read again before `c`, which was not read.
    fn step(&mut self, c: char) -> Option<String> {
        match &mut self.mode {
            Mode::Call(region) => match region.step(c, self.format, &self.tools, &mut self.sink) {
                Step::Continue => None,
                Step::Done => {
                    self.mode = Mode::Text { held: String::new() };
                    None
                }
                Step::Fail => Some(self.abandon()),
            },
            Mode::Text { .. } => {
                self.text_char(c);
                None
            }
        }
    }

    fn text_char(&mut self, c: char) {
        if self.at_start && c == '{' && self.format.opens_with_json() {
            self.at_start = false;
            let mut region = Region::new(self.format, "".into());
            // `{` opens the object that region reads: it always takes it.
            let _ = region.step(c, self.format, &self.tools, &mut self.sink);
            self.mode = Mode::Call(Box::new(region));
            return;
        }
        self.at_start &= c.is_whitespace();
        let Mode::Text { held } = &mut self.mode else { return };
        let Some(marker) = self.format.marker() else {
            self.sink.content(c.encode_utf8(&mut [0; 4]));
            return;
        };
        // `QwenXml`'s first call may come without its `<tool_call>`, from a whole `<function=NAME>` of a tool
        // (Qwen3-Coder omits it at times; llama.cpp reads it so, and not a bare `<function=` alone, which code in
        // the content may write).
        let openers: &[XmlTool] = match (self.format, self.sink.calls) {
            (ToolFormat::QwenXml, 0) => &self.tools,
            _ => &[],
        };
        let bare = |held: &str| openers.iter().position(|t| t.opener.starts_with(held));
        held.push(c);
        // Release from the front whatever cannot begin a marker (the empty string always can).
        while !marker.starts_with(held.as_str()) && bare(held).is_none() {
            let first = held.remove(0);
            self.sink.content(first.encode_utf8(&mut [0; 4]));
        }
        if held == marker {
            self.mode = Mode::Call(Box::new(Region::new(self.format, marker.into())));
        } else if let Some(t) = openers.iter().position(|t| t.opener == *held) {
            let opener = std::mem::take(held);
            self.mode = Mode::Call(Box::new(Region::bare_function(opener, t, &self.tools)));
        }
    }

    /// Ends the open call at a char it cannot take, or at the end of the answer, and returns what it held, to
    /// be read again as text. A call that emitted nothing gives back its marker as content: it was never a call.
    fn abandon(&mut self) -> String {
        match std::mem::replace(&mut self.mode, Mode::Text { held: String::new() }) {
            Mode::Call(region) => {
                if !region.committed {
                    self.sink.content(&region.marker);
                }
                region.held
            }
            Mode::Text { held } => held,
        }
    }
}

/// Where deltas go. Content is trimmed at both ends: leading whitespace is dropped, and whitespace after
/// content waits for more content (or is dropped at the end).
#[derive(Default)]
struct Sink {
    out: Vec<ToolDelta>,
    content_started: bool,
    pending_space: String,
    calls: usize,
}

impl Sink {
    fn content(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                if self.content_started {
                    self.pending_space.push(c);
                }
                continue;
            }
            self.content_started = true;
            let mut piece = std::mem::take(&mut self.pending_space);
            piece.push(c);
            match self.out.last_mut() {
                Some(ToolDelta::Content(last)) => last.push_str(&piece),
                _ => self.out.push(ToolDelta::Content(piece)),
            }
        }
    }

    fn start_call(&mut self, name: String) -> usize {
        let index = self.calls;
        self.calls += 1;
        self.out.push(ToolDelta::CallStart { index, name });
        index
    }

    fn arguments(&mut self, index: usize, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.out.last_mut() {
            Some(ToolDelta::Arguments { index: i, text: last }) if *i == index => last.push_str(text),
            _ => self.out.push(ToolDelta::Arguments { index, text: text.to_owned() }),
        }
    }
}

/// A stretch of the answer that holds calls: from its marker (or the JSON opening the answer) to its end.
struct Region {
    /// The text that opened it; empty for JSON opening the answer.
    marker: Cow<'static, str>,
    /// Whether it emitted anything (a call, or Generic's response).
    committed: bool,
    /// What it read since it last emitted: text given back if it fails.
    held: String,
    phase: Phase,
}

enum Phase {
    /// Mistral, after the marker: whitespace, then `[` (a JSON array of calls) or a tool's name.
    MistralLead,
    /// Mistral's newer form: the name, then `[ARGS]` (or `[CALL_ID]` and an id first; or `{` straight after
    /// the name). `tag` is the part of a `[...]` tag read so far.
    MistralName {
        name: String,
        id: Option<String>,
        tag: String,
    },
    Json(JsonCalls),
    /// `QwenXml`, after the marker, to the call's `</function>`.
    Xml(XmlCall),
    /// `Gemma4`, after the marker, to the arguments' closing `}`.
    Gemma(GemmaCall),
    /// After a call: whitespace, then the closing `tag` (`matched` bytes of it read): Hermes after the call's JSON
    /// and `QwenXml` after `</function>` (`</tool_call>`), `Gemma4` after the arguments (`<tool_call|>`).
    Close {
        tag: &'static str,
        matched: usize,
    },
    /// Llama 3, after a call's JSON: whitespace, `;`, whitespace and the next call; anything else ends it.
    LlamaNext {
        semicolon: bool,
    },
}

enum Step {
    /// `c` was read.
    Continue,
    /// `c` was read and ended the region.
    Done,
    /// The region cannot take `c`, which was not read.
    Fail,
}

/// Whether a region's char was emitted (or settled as part of an emitted call) or only held.
enum Progress {
    Held,
    Emitted,
    /// Emitted what came before, but the last this many chars read (this one among them) are held.
    Keep(usize),
}

const HERMES_CLOSE: &str = "</tool_call>";

impl Region {
    fn new(format: ToolFormat, marker: Cow<'static, str>) -> Region {
        let phase = match format {
            ToolFormat::Mistral => Phase::MistralLead,
            ToolFormat::Generic => Phase::Json(JsonCalls::new(Slot::Envelope, None)),
            ToolFormat::Hermes | ToolFormat::Llama3 => Phase::Json(JsonCalls::new(Slot::Call, None)),
            ToolFormat::QwenXml => Phase::Xml(XmlCall::default()),
            ToolFormat::Gemma4 => Phase::Gemma(GemmaCall::default()),
        };
        Region { marker, committed: false, held: String::new(), phase }
    }

    /// A `QwenXml` call opened by `opener`, its `<function=NAME>` without `<tool_call>` before it, of `tools[tool]`.
    fn bare_function(opener: String, tool: usize, tools: &[XmlTool]) -> Region {
        let call = XmlCall {
            state: XmlState::Next { tag: String::new() },
            name: tools[tool].name.clone(),
            tool: Some(tool),
            ..XmlCall::default()
        };
        Region { marker: opener.into(), committed: false, held: String::new(), phase: Phase::Xml(call) }
    }

    fn step(&mut self, c: char, format: ToolFormat, tools: &[XmlTool], sink: &mut Sink) -> Step {
        let progress = match &mut self.phase {
            Phase::Xml(call) => match call.step(c, tools, sink) {
                None => return Step::Fail,
                Some(progress) => {
                    if call.closed {
                        self.phase = Phase::Close { tag: HERMES_CLOSE, matched: 0 };
                    }
                    progress
                }
            },
            Phase::Gemma(call) => match call.step(c, sink) {
                None => return Step::Fail,
                Some(progress) => {
                    if call.closed {
                        self.phase = Phase::Close { tag: GEMMA_CLOSE, matched: 0 };
                    }
                    progress
                }
            },
            Phase::Json(json) => match json.step(c, sink) {
                Err(()) => return Step::Fail,
                Ok(JsonStep::Held) => Progress::Held,
                Ok(JsonStep::Emitted) => Progress::Emitted,
                Ok(JsonStep::Complete) => {
                    self.committed = true;
                    self.held.clear();
                    self.phase = match format {
                        ToolFormat::Hermes => Phase::Close { tag: HERMES_CLOSE, matched: 0 },
                        ToolFormat::Llama3 => Phase::LlamaNext { semicolon: false },
                        ToolFormat::Mistral | ToolFormat::Generic | ToolFormat::QwenXml | ToolFormat::Gemma4 => {
                            return Step::Done
                        }
                    };
                    return Step::Continue;
                }
            },
            Phase::Close { tag, matched } => {
                if *matched == 0 && c.is_whitespace() {
                    Progress::Held
                } else if tag[*matched..].starts_with(c) {
                    *matched += c.len_utf8();
                    if *matched == tag.len() {
                        return Step::Done;
                    }
                    Progress::Held
                } else {
                    return Step::Fail;
                }
            }
            Phase::LlamaNext { semicolon } => {
                if c.is_whitespace() {
                    Progress::Held
                } else if c == ';' && !*semicolon {
                    *semicolon = true;
                    Progress::Held
                } else if c == '{' && *semicolon {
                    self.phase = Phase::Json(JsonCalls::new(Slot::Call, None));
                    return self.step(c, format, tools, sink);
                } else {
                    return Step::Fail;
                }
            }
            Phase::MistralLead => {
                if c.is_whitespace() {
                    Progress::Held
                } else if c == '[' {
                    self.phase = Phase::Json(JsonCalls::new(Slot::CallList, None));
                    return self.step(c, format, tools, sink);
                } else if is_name_char(c) {
                    self.phase = Phase::MistralName { name: c.to_string(), id: None, tag: String::new() };
                    Progress::Held
                } else {
                    return Step::Fail;
                }
            }
            Phase::MistralName { name, id, tag } => {
                if !tag.is_empty() || c == '[' {
                    tag.push(c);
                    if tag == "[ARGS]" {
                        self.phase = Phase::Json(JsonCalls::new(Slot::ArgsRoot, Some(std::mem::take(name))));
                    } else if tag == "[CALL_ID]" && id.is_none() {
                        *id = Some(String::new());
                        tag.clear();
                    } else if !("[ARGS]".starts_with(tag.as_str())
                        || id.is_none() && "[CALL_ID]".starts_with(tag.as_str()))
                    {
                        return Step::Fail;
                    }
                    Progress::Held
                } else if let Some(id) = id {
                    if !c.is_ascii_alphanumeric() {
                        return Step::Fail;
                    }
                    id.push(c);
                    Progress::Held
                } else if is_name_char(c) {
                    name.push(c);
                    Progress::Held
                } else if c == '{' {
                    self.phase = Phase::Json(JsonCalls::new(Slot::ArgsRoot, Some(std::mem::take(name))));
                    return self.step(c, format, tools, sink);
                } else {
                    return Step::Fail;
                }
            }
        };
        match progress {
            Progress::Held => self.held.push(c),
            Progress::Emitted => {
                self.committed = true;
                self.held.clear();
            }
            Progress::Keep(n) => {
                self.committed = true;
                self.held.push(c);
                // What is held is the last chars read.
                let from = match n.checked_sub(1) {
                    Some(back) => self.held.char_indices().rev().nth(back).map_or(0, |(i, _)| i),
                    None => self.held.len(),
                };
                self.held.drain(..from);
            }
        }
        Step::Continue
    }
}

const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER_OPEN: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";

/// A tool as `QwenXml` reads its calls: the JSON types each parameter's value may have.
struct XmlTool {
    name: String,
    parameters: Vec<(String, Types)>,
    /// `<function=NAME>`, which opens a first call without `<tool_call>`.
    opener: String,
}

impl XmlTool {
    fn new(spec: &ToolSpec) -> XmlTool {
        let root = &spec.parameters;
        let parameters = match root.get("properties") {
            Some(Value::Object(properties)) => {
                properties.iter().map(|(name, schema)| (name.clone(), Types::of_schema(schema, root))).collect()
            }
            _ => Vec::new(),
        };
        XmlTool { name: spec.name.clone(), parameters, opener: format!("{FUNCTION_OPEN}{}>", spec.name) }
    }
}

/// `QwenXml`'s call, from after `<tool_call>` to its `</function>`.
#[derive(Default)]
struct XmlCall {
    state: XmlState,
    /// The function's name.
    name: String,
    /// Its tool among the stream's, once the name is whole.
    tool: Option<usize>,
    /// The call's index once emitted.
    index: Option<usize>,
    /// Whether a parameter was read (the next is after a comma).
    any_parameter: bool,
    /// `</function>` was read.
    closed: bool,
}

enum XmlState {
    /// Whitespace, then `<function=`, `tag` of it read.
    Open { tag: String },
    /// The function's name, to its `>`.
    Name,
    /// After `<function=NAME>` or a parameter: whitespace, then `<parameter=` or `</function>`, `tag` of one read.
    Next { tag: String },
    /// A parameter's name, to its `>`.
    Parameter { name: String },
    /// A value of strings only, streamed: `first` until its first char (a newline there is dropped), `tail` the
    /// chars held as a possible `\n</parameter>`.
    Text { first: bool, tail: String },
    /// Any other value, held whole to its `</parameter>`.
    Value { raw: String, types: Types },
}

impl Default for XmlState {
    fn default() -> XmlState {
        XmlState::Open { tag: String::new() }
    }
}

impl XmlCall {
    /// Reads `c`: `None` when the call cannot take it.
    fn step(&mut self, c: char, tools: &[XmlTool], sink: &mut Sink) -> Option<Progress> {
        match &mut self.state {
            XmlState::Open { tag } => {
                if tag.is_empty() && c.is_whitespace() {
                    return Some(Progress::Held);
                }
                tag.push(c);
                if !FUNCTION_OPEN.starts_with(tag.as_str()) {
                    return None;
                }
                if tag == FUNCTION_OPEN {
                    self.state = XmlState::Name;
                }
            }
            XmlState::Name => {
                if c == '>' && !self.name.is_empty() {
                    self.tool = tools.iter().position(|t| t.name == self.name);
                    self.state = XmlState::Next { tag: String::new() };
                } else if is_name_char(c) {
                    self.name.push(c);
                } else {
                    return None;
                }
            }
            XmlState::Next { tag } => {
                if tag.is_empty() && c.is_whitespace() {
                    return Some(Progress::Held);
                }
                tag.push(c);
                if tag == PARAMETER_OPEN {
                    self.state = XmlState::Parameter { name: String::new() };
                } else if tag == FUNCTION_CLOSE {
                    self.emit(if self.any_parameter { "}" } else { "{}" }, sink);
                    self.closed = true;
                    return Some(Progress::Emitted);
                } else if !PARAMETER_OPEN.starts_with(tag.as_str()) && !FUNCTION_CLOSE.starts_with(tag.as_str()) {
                    return None;
                }
            }
            XmlState::Parameter { name } => match c {
                '>' if !name.is_empty() => {
                    let name = std::mem::take(name);
                    let types = self
                        .tool
                        .and_then(|t| tools[t].parameters.iter().find(|(p, _)| *p == name))
                        .map_or(Types::ANY, |&(_, types)| types);
                    let mut text = String::from(if self.any_parameter { "," } else { "{" });
                    text.push_str(&Value::from(name).to_string());
                    text.push(':');
                    if types == Types::STRING {
                        text.push('"');
                        self.state = XmlState::Text { first: true, tail: String::new() };
                    } else {
                        self.state = XmlState::Value { raw: String::new(), types };
                    }
                    self.any_parameter = true;
                    self.emit(&text, sink);
                    return Some(Progress::Emitted);
                }
                '<' | '>' | '\n' => return None,
                _ => name.push(c),
            },
            XmlState::Text { first, tail } => {
                // The newline after the opening tag is the format's, not the value's.
                if std::mem::take(first) && c == '\n' {
                    return Some(Progress::Emitted);
                }
                tail.push(c);
                if tail == PARAMETER_CLOSE || tail.strip_prefix('\n') == Some(PARAMETER_CLOSE) {
                    self.state = XmlState::Next { tag: String::new() };
                    self.emit("\"", sink);
                    return Some(Progress::Emitted);
                }
                let mut out = String::new();
                while !may_close(tail) {
                    push_escaped(&mut out, tail.remove(0));
                }
                if out.is_empty() {
                    return Some(Progress::Held);
                }
                let kept = tail.chars().count();
                self.emit(&out, sink);
                return Some(Progress::Keep(kept));
            }
            XmlState::Value { raw, types } => {
                raw.push(c);
                if let Some(value) = raw.strip_suffix(PARAMETER_CLOSE) {
                    let json = typed_value(value, *types);
                    self.state = XmlState::Next { tag: String::new() };
                    self.emit(&json, sink);
                    return Some(Progress::Emitted);
                }
            }
        }
        Some(Progress::Held)
    }

    /// `text` of the arguments, the call's start first if it was not emitted.
    fn emit(&mut self, text: &str, sink: &mut Sink) {
        let index = match self.index {
            Some(index) => index,
            None => *self.index.insert(sink.start_call(self.name.clone())),
        };
        sink.arguments(index, text);
    }
}

/// Whether `tail` may be the start of a string value's end: `</parameter>`, or a newline and it.
fn may_close(tail: &str) -> bool {
    PARAMETER_CLOSE.starts_with(tail) || tail.strip_prefix('\n').is_some_and(|t| PARAMETER_CLOSE.starts_with(t))
}

/// A value's text, between its tags, as JSON: see the module doc.
fn typed_value(raw: &str, types: Types) -> String {
    let text = raw.strip_prefix('\n').unwrap_or(raw);
    let text = text.strip_suffix('\n').unwrap_or(text);
    // The template writes a boolean or a null as Python's `str` does (HF renders it so, and so do we): read back
    // where no string is allowed.
    let python = match text.trim() {
        "True" => Some("true"),
        "False" => Some("false"),
        "None" => Some("null"),
        _ => None,
    };
    if let Some(literal) = python.filter(|_| !types.has(Types::STRING)) {
        return literal.to_owned();
    }
    match compact_json(text) {
        Some((json, of)) if !types.has(Types::STRING) || (of != Types::STRING && types.has(of)) => json,
        _ => {
            let mut json = String::from('"');
            text.chars().for_each(|c| push_escaped(&mut json, c));
            json.push('"');
            json
        }
    }
}

/// `c` as a JSON string writes it (as serde_json does).
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        c if (c as u32) < 0x20 => out.push_str(&escape_control(c)),
        c => out.push(c),
    }
}

/// `text` as one JSON value, compact (raw control chars in its strings escaped, as in arguments), and its type;
/// `None` when it is not one JSON value.
fn compact_json(text: &str) -> Option<(String, Types)> {
    // The scanner reads objects and arrays: the value is read as an array's one item.
    let mut json = Json::default();
    json.push('[')?;
    let mut out = String::new();
    for c in text.chars() {
        match json.push(c)? {
            Tok::Space => {}
            Tok::Comma if json.stack.len() == 1 => return None,
            Tok::StrChar(_) if (c as u32) < 0x20 => out.push_str(&escape_control(c)),
            _ => out.push(c),
        }
    }
    json.push(']')?;
    if json.expect != Expect::Done {
        return None;
    }
    let of = match out.chars().next()? {
        '{' => Types::OBJECT,
        '[' => Types::ARRAY,
        '"' => Types::STRING,
        't' | 'f' => Types::BOOLEAN,
        'n' => Types::NULL,
        _ => Types::NUMBER,
    };
    Some((out, of))
}

/// The JSON types a value may have (llama.cpp's `common_chat_schema::type_set`; integers are numbers here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Types(u8);

impl Types {
    const NULL: Types = Types(1);
    const BOOLEAN: Types = Types(2);
    const NUMBER: Types = Types(4);
    const STRING: Types = Types(8);
    const ARRAY: Types = Types(16);
    const OBJECT: Types = Types(32);
    const ANY: Types = Types(63);

    fn has(self, t: Types) -> bool {
        self.0 & t.0 != 0
    }

    /// The types of the values `schema` (found in `root`, which its `$ref`s point into) allows, as llama.cpp's
    /// `common_chat_schema::value_types` (common/json-schema.cpp) works them out.
    fn of_schema(schema: &Value, root: &Value) -> Types {
        Types::of(schema, root, 0)
    }

    fn of(schema: &Value, root: &Value, depth: usize) -> Types {
        // A `$ref` cycle, or a schema nested past belief: anything.
        let Some(o) = schema.as_object().filter(|_| depth < 32) else { return Types::ANY };
        let union = |list: &Value| {
            list.as_array().map_or(Types::ANY, |l| Types(l.iter().fold(0, |t, s| t | Types::of(s, root, depth + 1).0)))
        };
        if let Some(target) = o.get("$ref") {
            let target = target.as_str().and_then(|r| r.strip_prefix('#')).and_then(|p| root.pointer(p));
            return target.map_or(Types::ANY, |t| Types::of(t, root, depth + 1));
        }
        if let Some(list) = o.get("oneOf").or_else(|| o.get("anyOf")) {
            return union(list);
        }
        match o.get("type") {
            Some(Value::Array(types)) => {
                // `{"type": [a, b], ...}` is `{"anyOf": [{"type": a, ...}, {"type": b, ...}]}`.
                let alternatives = types.iter().map(|t| {
                    let mut alternative = o.clone();
                    alternative.insert("type".into(), t.clone());
                    Value::Object(alternative)
                });
                return union(&Value::Array(alternatives.collect()));
            }
            _ if o.contains_key("const") => return Types::of_value(&o["const"]),
            _ => {}
        }
        if let Some(values) = o.get("enum") {
            return values.as_array().map_or(Types::ANY, |l| Types(l.iter().fold(0, |t, v| t | Types::of_value(v).0)));
        }
        match o.get("type").and_then(Value::as_str) {
            Some("object") => Types::OBJECT,
            Some("string") => Types::STRING,
            Some("array") => Types::ARRAY,
            Some("integer" | "number") => Types::NUMBER,
            Some("boolean") => Types::BOOLEAN,
            Some("null") => Types::NULL,
            Some(_) => Types::ANY,
            // Without a type, the keywords say.
            None if o.contains_key("properties")
                || o.get("additionalProperties").is_some_and(|a| *a != Value::Bool(true)) =>
            {
                Types::OBJECT
            }
            None if o.contains_key("allOf") => o["allOf"]
                .as_array()
                .map_or(Types::ANY, |l| Types(l.iter().fold(Types::ANY.0, |t, s| t & Types::of(s, root, depth + 1).0))),
            None if o.contains_key("items") || o.contains_key("prefixItems") => Types::ARRAY,
            None if ["pattern", "minLength", "maxLength"].iter().any(|k| o.contains_key(*k))
                || o.get("format")
                    .and_then(Value::as_str)
                    .is_some_and(|f| matches!(f, "date" | "time" | "date-time") || f.starts_with("uuid")) =>
            {
                Types::STRING
            }
            None => Types::ANY,
        }
    }

    fn of_value(v: &Value) -> Types {
        match v {
            Value::Null => Types::NULL,
            Value::Bool(_) => Types::BOOLEAN,
            Value::Number(_) => Types::NUMBER,
            Value::String(_) => Types::STRING,
            Value::Array(_) => Types::ARRAY,
            Value::Object(_) => Types::OBJECT,
        }
    }
}

const GEMMA_OPEN: &str = "<|tool_call>";
const GEMMA_CLOSE: &str = "<tool_call|>";
/// What opens a `Gemma4` call after its marker, before the function's name.
const GEMMA_CALL: &str = "call:";
/// `Gemma4`'s string quote (one token in its vocabulary), before and after a string.
const GEMMA_QUOTE: &str = "<|\"|>";

/// `Gemma4`'s call, from after `<|tool_call>` to its arguments' closing `}`, written out as JSON as it is read.
#[derive(Default)]
struct GemmaCall {
    state: GemmaState,
    /// The function's name.
    name: String,
    /// The call's index once emitted.
    index: Option<usize>,
    /// The open objects (`true`) and arrays, innermost last.
    stack: Vec<bool>,
    /// The arguments' closing `}` was read.
    closed: bool,
}

enum GemmaState {
    /// `call:`, this many bytes of it read.
    Call(usize),
    /// The function's name, to the `{` that opens its arguments.
    Name,
    /// After `{`: whitespace, then `}` or a key.
    ObjectStart,
    /// After `,` in an object: whitespace, then a key.
    KeyNext,
    /// A key, to its `:`: any chars but `:` and `}`, as llama.cpp reads them.
    Key(String),
    /// After `[`: whitespace, then `]` or a value.
    ArrayStart,
    /// Whitespace, then a value; this many bytes of an opening `<|"|>` read.
    Value(usize),
    /// Inside a string: `tail` the chars held as a possible closing `<|"|>`.
    Str {
        tail: String,
    },
    Number(Num),
    /// The rest of `true`, `false` or `null`.
    Word(&'static str),
    /// Python's `None`, as the template writes a null: this many bytes of it read, held until whole.
    PyNone(usize),
    /// After a value: whitespace, then `,` or the closing bracket.
    After,
}

impl Default for GemmaState {
    fn default() -> GemmaState {
        GemmaState::Call(0)
    }
}

impl GemmaCall {
    /// Reads `c`: `None` when the call cannot take it.
    fn step(&mut self, c: char, sink: &mut Sink) -> Option<Progress> {
        use GemmaState as S;
        match &mut self.state {
            S::Call(matched) => {
                if !GEMMA_CALL[*matched..].starts_with(c) {
                    return None;
                }
                *matched += c.len_utf8();
                if *matched == GEMMA_CALL.len() {
                    self.state = S::Name;
                }
            }
            S::Name => {
                if c == '{' && !self.name.is_empty() {
                    // The arguments begin: the call commits.
                    return self.open(c, sink);
                }
                if !is_name_char(c) {
                    return None;
                }
                self.name.push(c);
            }
            S::ObjectStart | S::KeyNext | S::ArrayStart | S::After if c.is_whitespace() => {}
            S::ObjectStart if c == '}' => return self.close(c, sink),
            S::ObjectStart | S::KeyNext => {
                if c == ':' || c == '}' {
                    return None;
                }
                self.state = S::Key(c.to_string());
            }
            S::Key(key) => match c {
                ':' => {
                    let mut text = String::from('"');
                    key.chars().for_each(|k| push_escaped(&mut text, k));
                    text.push_str("\":");
                    self.state = S::Value(0);
                    self.emit(&text, sink);
                    return Some(Progress::Emitted);
                }
                '}' => return None,
                _ => key.push(c),
            },
            S::ArrayStart if c == ']' => return self.close(c, sink),
            S::ArrayStart => {
                self.state = S::Value(0);
                return self.step(c, sink);
            }
            S::Value(quote) => {
                if *quote > 0 || c == '<' {
                    if !GEMMA_QUOTE[*quote..].starts_with(c) {
                        return None;
                    }
                    *quote += c.len_utf8();
                    if *quote == GEMMA_QUOTE.len() {
                        self.state = S::Str { tail: String::new() };
                        self.emit("\"", sink);
                        return Some(Progress::Emitted);
                    }
                    return Some(Progress::Held);
                }
                self.state = match c {
                    _ if c.is_whitespace() => return Some(Progress::Held),
                    '{' | '[' => return self.open(c, sink),
                    '-' => S::Number(Num::Minus),
                    '0' => S::Number(Num::Zero),
                    '1'..='9' => S::Number(Num::Int),
                    't' => S::Word("rue"),
                    'f' => S::Word("alse"),
                    'n' => S::Word("ull"),
                    'N' => {
                        self.state = S::PyNone(1);
                        return Some(Progress::Held);
                    }
                    _ => return None,
                };
                self.emit(c.encode_utf8(&mut [0; 4]), sink);
                return Some(Progress::Emitted);
            }
            S::Str { tail } => {
                tail.push(c);
                if tail == GEMMA_QUOTE {
                    self.state = S::After;
                    self.emit("\"", sink);
                    return Some(Progress::Emitted);
                }
                let mut out = String::new();
                while !GEMMA_QUOTE.starts_with(tail.as_str()) {
                    push_escaped(&mut out, tail.remove(0));
                }
                if out.is_empty() {
                    return Some(Progress::Held);
                }
                let kept = tail.chars().count();
                self.emit(&out, sink);
                return Some(Progress::Keep(kept));
            }
            S::Number(n) => match n.next(c) {
                Some(next) => {
                    *n = next;
                    self.emit(c.encode_utf8(&mut [0; 4]), sink);
                    return Some(Progress::Emitted);
                }
                // The number ended before `c`.
                None if n.complete() => {
                    self.state = S::After;
                    return self.step(c, sink);
                }
                None => return None,
            },
            S::Word(rest) => {
                let rest = rest.strip_prefix(c)?;
                self.state = if rest.is_empty() { S::After } else { S::Word(rest) };
                self.emit(c.encode_utf8(&mut [0; 4]), sink);
                return Some(Progress::Emitted);
            }
            S::PyNone(matched) => {
                if !"None"[*matched..].starts_with(c) {
                    return None;
                }
                *matched += 1;
                if *matched == "None".len() {
                    self.state = S::After;
                    self.emit("null", sink);
                    return Some(Progress::Emitted);
                }
            }
            S::After => match c {
                ',' => {
                    self.state = if self.stack.last() == Some(&true) { S::KeyNext } else { S::Value(0) };
                    self.emit(",", sink);
                    return Some(Progress::Emitted);
                }
                '}' | ']' => return self.close(c, sink),
                _ => return None,
            },
        }
        Some(Progress::Held)
    }

    /// `{` or `[`.
    fn open(&mut self, c: char, sink: &mut Sink) -> Option<Progress> {
        self.stack.push(c == '{');
        self.state = if c == '{' { GemmaState::ObjectStart } else { GemmaState::ArrayStart };
        self.emit(c.encode_utf8(&mut [0; 4]), sink);
        Some(Progress::Emitted)
    }

    /// `}` or `]`: it must close the innermost open bracket.
    fn close(&mut self, c: char, sink: &mut Sink) -> Option<Progress> {
        if self.stack.pop()? != (c == '}') {
            return None;
        }
        self.state = GemmaState::After;
        self.closed = self.stack.is_empty();
        self.emit(c.encode_utf8(&mut [0; 4]), sink);
        Some(Progress::Emitted)
    }

    /// `text` of the arguments, the call's start first if it was not emitted.
    fn emit(&mut self, text: &str, sink: &mut Sink) {
        let index = match self.index {
            Some(index) => index,
            None => *self.index.insert(sink.start_call(self.name.clone())),
        };
        sink.arguments(index, text);
    }
}

/// Chars of a tool name as Mistral writes it: OpenAI's, and `.`.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Reads the JSON that holds calls (a call object, an array of them, Generic's envelope, or the bare
/// arguments of Mistral's newer form) a char at a time, emitting each call once its name is known and its
/// arguments have begun.
struct JsonCalls {
    json: Json,
    /// What each open object or array is, innermost last (the scanner's stack, annotated).
    frames: Vec<Frame>,
    /// What the top-level value must be.
    top: Slot,
    /// What the string or scalar being read is.
    leaf: Leaf,
    /// The call object being read.
    call: CallState,
    /// Whether anything was emitted.
    committed: bool,
}

/// What a value is, from where it stands.
#[derive(Clone, Copy, PartialEq)]
enum Slot {
    Call,
    CallList,
    Envelope,
    /// A call's arguments object itself.
    ArgsRoot,
    /// Anything inside the arguments.
    Args,
    Name,
    Response,
    Skip,
}

/// The meaning of the key being read in an object.
#[derive(Clone, Copy, PartialEq)]
enum Key {
    None,
    Name,
    Args,
    ToolCalls,
    ToolCall,
    Response,
    Other,
}

struct Frame {
    slot: Slot,
    key: Key,
}

enum Leaf {
    Key(String),
    Name(String),
    Response,
    Args,
    Skip,
}

#[derive(Default)]
struct CallState {
    /// The whole name, once read.
    name: Option<String>,
    /// `Some` once the arguments object began: its compact text not yet emitted.
    args: Option<String>,
    /// The call's index once emitted.
    index: Option<usize>,
}

enum JsonStep {
    Held,
    Emitted,
    /// The char ended the top-level value, and something was emitted.
    Complete,
}

type Read = std::result::Result<JsonStep, ()>;

impl JsonCalls {
    fn new(top: Slot, name: Option<String>) -> JsonCalls {
        JsonCalls {
            json: Json::default(),
            frames: Vec::new(),
            top,
            leaf: Leaf::Skip,
            call: CallState { name, ..CallState::default() },
            committed: false,
        }
    }

    fn step(&mut self, c: char, sink: &mut Sink) -> Read {
        match self.json.push(c).ok_or(())? {
            Tok::Space => Ok(JsonStep::Held),
            Tok::Open => self.open(c, sink),
            Tok::Close => self.close(c, sink),
            Tok::Colon | Tok::Comma => match self.frames.last() {
                Some(Frame { slot: Slot::Args | Slot::ArgsRoot, .. }) => self.capture(c.encode_utf8(&mut [0; 4]), sink),
                _ => Ok(JsonStep::Held),
            },
            Tok::StrOpen { key: true } => match self.frames.last().map(|f| f.slot) {
                Some(Slot::Call | Slot::Envelope) => {
                    self.leaf = Leaf::Key(String::new());
                    Ok(JsonStep::Held)
                }
                Some(Slot::Args | Slot::ArgsRoot) => {
                    self.leaf = Leaf::Args;
                    self.capture("\"", sink)
                }
                _ => {
                    self.leaf = Leaf::Skip;
                    Ok(JsonStep::Held)
                }
            },
            tok @ (Tok::StrOpen { key: false } | Tok::Scalar { first: true }) => {
                let string = matches!(tok, Tok::StrOpen { .. });
                match self.slot_here() {
                    Slot::Name if string => {
                        self.leaf = Leaf::Name(String::new());
                        Ok(JsonStep::Held)
                    }
                    // Generic's response is content: it commits at its opening quote.
                    Slot::Response if string => {
                        self.leaf = Leaf::Response;
                        self.committed = true;
                        Ok(JsonStep::Emitted)
                    }
                    Slot::Args => {
                        self.leaf = Leaf::Args;
                        self.capture(c.encode_utf8(&mut [0; 4]), sink)
                    }
                    Slot::Skip => {
                        self.leaf = Leaf::Skip;
                        Ok(JsonStep::Held)
                    }
                    _ => Err(()),
                }
            }
            Tok::Scalar { first: false } => match self.leaf {
                Leaf::Args => self.capture(c.encode_utf8(&mut [0; 4]), sink),
                _ => Ok(JsonStep::Held),
            },
            Tok::StrChar(decoded) => match &mut self.leaf {
                Leaf::Key(s) | Leaf::Name(s) => {
                    s.extend(decoded);
                    Ok(JsonStep::Held)
                }
                // A char of an escape that is not yet whole stays held, so a cut escape is given back, not lost.
                Leaf::Response => match decoded {
                    Some(d) => {
                        sink.content(d.encode_utf8(&mut [0; 4]));
                        Ok(JsonStep::Emitted)
                    }
                    None => Ok(JsonStep::Held),
                },
                // The scanner lets raw control chars through strings (models write them in code); OpenAI's
                // arguments are JSON, so they go out escaped.
                Leaf::Args if (c as u32) < 0x20 => self.capture(&escape_control(c), sink),
                Leaf::Args => self.capture(c.encode_utf8(&mut [0; 4]), sink),
                Leaf::Skip => Ok(JsonStep::Held),
            },
            Tok::StrClose => match std::mem::replace(&mut self.leaf, Leaf::Skip) {
                Leaf::Key(key) => {
                    let meaning = self.meaning(&key);
                    if let Some(frame) = self.frames.last_mut() {
                        frame.key = meaning;
                    }
                    Ok(JsonStep::Held)
                }
                Leaf::Name(name) if name.is_empty() => Err(()),
                Leaf::Name(name) => {
                    self.call.name = Some(name);
                    if self.call.args.is_some() {
                        self.commit(sink);
                        return Ok(JsonStep::Emitted);
                    }
                    Ok(JsonStep::Held)
                }
                Leaf::Response => Ok(JsonStep::Emitted),
                Leaf::Args => self.capture("\"", sink),
                Leaf::Skip => Ok(JsonStep::Held),
            },
        }
    }

    /// What a value starting here is.
    fn slot_here(&self) -> Slot {
        let Some(frame) = self.frames.last() else { return self.top };
        match (frame.slot, frame.key) {
            (Slot::Call, Key::Name) => Slot::Name,
            (Slot::Call, Key::Args) => Slot::ArgsRoot,
            (Slot::CallList, _) => Slot::Call,
            (Slot::Envelope, Key::ToolCalls) => Slot::CallList,
            (Slot::Envelope, Key::ToolCall) => Slot::Call,
            (Slot::Envelope, Key::Response) => Slot::Response,
            (Slot::Args | Slot::ArgsRoot, _) => Slot::Args,
            _ => Slot::Skip,
        }
    }

    /// What `key` means in the innermost object. A call's second `name` or `arguments` is ignored.
    fn meaning(&self, key: &str) -> Key {
        match self.frames.last().map(|f| f.slot) {
            Some(Slot::Call) => match key {
                "name" if self.call.name.is_none() => Key::Name,
                "arguments" | "parameters" if self.call.args.is_none() => Key::Args,
                _ => Key::Other,
            },
            Some(Slot::Envelope) => match key {
                "tool_calls" => Key::ToolCalls,
                "tool_call" => Key::ToolCall,
                "response" => Key::Response,
                _ => Key::Other,
            },
            _ => Key::Other,
        }
    }

    fn open(&mut self, c: char, sink: &mut Sink) -> Read {
        let object = c == '{';
        let slot = match (self.slot_here(), object) {
            (Slot::Call, true) => {
                self.call = CallState::default();
                Slot::Call
            }
            (Slot::CallList, false) => Slot::CallList,
            (Slot::Envelope, true) => Slot::Envelope,
            (Slot::ArgsRoot, true) => Slot::ArgsRoot,
            (Slot::Args, _) => Slot::Args,
            (Slot::Skip, _) => Slot::Skip,
            _ => return Err(()),
        };
        self.frames.push(Frame { slot, key: Key::None });
        match slot {
            Slot::ArgsRoot => {
                self.call.args = Some(String::new());
                let step = self.capture("{", sink);
                if self.call.name.is_some() {
                    self.commit(sink);
                    return Ok(JsonStep::Emitted);
                }
                step
            }
            Slot::Args => self.capture(if object { "{" } else { "[" }, sink),
            _ => Ok(JsonStep::Held),
        }
    }

    fn close(&mut self, c: char, sink: &mut Sink) -> Read {
        let frame = self.frames.pop().ok_or(())?;
        let step = match frame.slot {
            Slot::Args | Slot::ArgsRoot => self.capture(c.encode_utf8(&mut [0; 4]), sink)?,
            // A call object that never had both a name and arguments is not a call.
            Slot::Call if self.call.index.is_none() => return Err(()),
            Slot::Call => JsonStep::Emitted,
            _ if self.committed => JsonStep::Emitted,
            _ => JsonStep::Held,
        };
        if self.frames.is_empty() {
            return if self.committed { Ok(JsonStep::Complete) } else { Err(()) };
        }
        Ok(step)
    }

    /// `text` belongs to the arguments: emitted if the call is, kept until it is otherwise.
    fn capture(&mut self, text: &str, sink: &mut Sink) -> Read {
        match self.call.index {
            Some(index) => {
                sink.arguments(index, text);
                Ok(JsonStep::Emitted)
            }
            None => {
                self.call.args.get_or_insert_with(String::new).push_str(text);
                Ok(JsonStep::Held)
            }
        }
    }

    /// Emits the call: its name is known and its arguments have begun.
    fn commit(&mut self, sink: &mut Sink) {
        let index = sink.start_call(self.call.name.clone().unwrap_or_default());
        if let Some(args) = self.call.args.as_mut() {
            sink.arguments(index, &std::mem::take(args));
        }
        self.call.index = Some(index);
        self.committed = true;
    }
}

/// A control char as JSON writes it inside a string.
fn escape_control(c: char) -> String {
    match c {
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        '\u{8}' => "\\b".into(),
        '\u{c}' => "\\f".into(),
        _ => format!("\\u{:04x}", c as u32),
    }
}

/// A JSON syntax checker fed a char at a time. The top-level value must be an object or an array, so the end
/// of every value is seen. One leniency: raw control chars inside strings (see `JsonCalls::step`).
#[derive(Default)]
struct Json {
    /// Open containers, innermost last: `true` for an object.
    stack: Vec<bool>,
    expect: Expect,
    leaf: JsonLeaf,
}

#[derive(Clone, Copy, Default, PartialEq)]
enum Expect {
    #[default]
    Value,
    /// After `[`.
    ValueOrEnd,
    /// After `{`.
    KeyOrEnd,
    Key,
    Colon,
    CommaOrEnd,
    Done,
}

#[derive(Clone, Copy, Default)]
enum JsonLeaf {
    #[default]
    None,
    Str {
        key: bool,
        escape: Escape,
    },
    Number(Num),
    /// The rest of `true`, `false` or `null`.
    Word(&'static str),
}

#[derive(Clone, Copy)]
enum Escape {
    None,
    Backslash,
    /// `\u` and `digits` hex digits of `code`; `high` is the high surrogate a low one must follow.
    Hex {
        digits: u8,
        code: u32,
        high: Option<u32>,
    },
    /// After a high surrogate: `\` then `u` must follow.
    AfterHigh(u32),
    AfterHighBackslash(u32),
}

#[derive(Clone, Copy, PartialEq)]
enum Num {
    Minus,
    Zero,
    Int,
    Point,
    Fraction,
    E,
    ESign,
    Exponent,
}

impl Num {
    fn next(self, c: char) -> Option<Num> {
        use Num::*;
        Some(match (self, c) {
            (Minus, '0') => Zero,
            (Minus | Int, '1'..='9') | (Int, '0') => Int,
            (Zero | Int, '.') => Point,
            (Point | Fraction, '0'..='9') => Fraction,
            (Zero | Int | Fraction, 'e' | 'E') => E,
            (E, '+' | '-') => ESign,
            (E | ESign | Exponent, '0'..='9') => Exponent,
            _ => return None,
        })
    }

    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Fraction | Num::Exponent)
    }
}

enum Tok {
    /// Whitespace between tokens.
    Space,
    /// `{` or `[`.
    Open,
    /// `}` or `]`.
    Close,
    Colon,
    Comma,
    StrOpen {
        key: bool,
    },
    /// A char inside a string, with the char it stands for once an escape is whole.
    StrChar(Option<char>),
    StrClose,
    /// A char of a number or of `true`, `false`, `null`.
    Scalar {
        first: bool,
    },
}

impl Json {
    /// `None`: `c` cannot come next.
    fn push(&mut self, c: char) -> Option<Tok> {
        match self.leaf {
            JsonLeaf::Str { key, escape } => return self.string(c, key, escape),
            JsonLeaf::Number(n) => match n.next(c) {
                Some(n) => {
                    self.leaf = JsonLeaf::Number(n);
                    return Some(Tok::Scalar { first: false });
                }
                // The number ended before `c`, which is read below.
                None if n.complete() => {
                    self.leaf = JsonLeaf::None;
                    self.expect = Expect::CommaOrEnd;
                }
                None => return None,
            },
            JsonLeaf::Word(rest) => {
                let rest = rest.strip_prefix(c)?;
                self.leaf = if rest.is_empty() {
                    self.expect = Expect::CommaOrEnd;
                    JsonLeaf::None
                } else {
                    JsonLeaf::Word(rest)
                };
                return Some(Tok::Scalar { first: false });
            }
            JsonLeaf::None => {}
        }
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            return (self.expect != Expect::Done).then_some(Tok::Space);
        }
        match self.expect {
            Expect::ValueOrEnd if c == ']' => self.close(false),
            Expect::Value | Expect::ValueOrEnd => match c {
                '{' | '[' => {
                    self.stack.push(c == '{');
                    self.expect = if c == '{' { Expect::KeyOrEnd } else { Expect::ValueOrEnd };
                    Some(Tok::Open)
                }
                _ if self.stack.is_empty() => None,
                '"' => {
                    self.leaf = JsonLeaf::Str { key: false, escape: Escape::None };
                    Some(Tok::StrOpen { key: false })
                }
                '-' | '0'..='9' => {
                    self.leaf = JsonLeaf::Number(match c {
                        '-' => Num::Minus,
                        '0' => Num::Zero,
                        _ => Num::Int,
                    });
                    Some(Tok::Scalar { first: true })
                }
                't' | 'f' | 'n' => {
                    self.leaf = JsonLeaf::Word(match c {
                        't' => "rue",
                        'f' => "alse",
                        _ => "ull",
                    });
                    Some(Tok::Scalar { first: true })
                }
                _ => None,
            },
            Expect::KeyOrEnd if c == '}' => self.close(true),
            Expect::KeyOrEnd | Expect::Key => (c == '"').then(|| {
                self.leaf = JsonLeaf::Str { key: true, escape: Escape::None };
                Tok::StrOpen { key: true }
            }),
            Expect::Colon => (c == ':').then(|| {
                self.expect = Expect::Value;
                Tok::Colon
            }),
            Expect::CommaOrEnd => match c {
                ',' => {
                    self.expect = if self.stack.last() == Some(&true) { Expect::Key } else { Expect::Value };
                    Some(Tok::Comma)
                }
                '}' => self.close(true),
                ']' => self.close(false),
                _ => None,
            },
            Expect::Done => None,
        }
    }

    fn close(&mut self, object: bool) -> Option<Tok> {
        if self.stack.last() != Some(&object) {
            return None;
        }
        self.stack.pop();
        self.expect = if self.stack.is_empty() { Expect::Done } else { Expect::CommaOrEnd };
        Some(Tok::Close)
    }

    fn string(&mut self, c: char, key: bool, escape: Escape) -> Option<Tok> {
        let (escape, decoded) = match escape {
            Escape::None => match c {
                '"' => {
                    self.leaf = JsonLeaf::None;
                    self.expect = if key { Expect::Colon } else { Expect::CommaOrEnd };
                    return Some(Tok::StrClose);
                }
                '\\' => (Escape::Backslash, None),
                _ => (Escape::None, Some(c)),
            },
            Escape::Backslash => match c {
                '"' | '\\' | '/' => (Escape::None, Some(c)),
                'b' => (Escape::None, Some('\u{8}')),
                'f' => (Escape::None, Some('\u{c}')),
                'n' => (Escape::None, Some('\n')),
                'r' => (Escape::None, Some('\r')),
                't' => (Escape::None, Some('\t')),
                'u' => (Escape::Hex { digits: 0, code: 0, high: None }, None),
                _ => return None,
            },
            Escape::Hex { digits, code, high } => {
                let code = code * 16 + c.to_digit(16)?;
                if digits < 3 {
                    (Escape::Hex { digits: digits + 1, code, high }, None)
                } else {
                    match high {
                        Some(high) if (0xDC00..0xE000).contains(&code) => {
                            (Escape::None, Some(char::from_u32(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))?))
                        }
                        Some(_) => return None,
                        None if (0xD800..0xDC00).contains(&code) => (Escape::AfterHigh(code), None),
                        // A lone low surrogate is no char: refused, as serde_json does.
                        None => (Escape::None, Some(char::from_u32(code)?)),
                    }
                }
            }
            Escape::AfterHigh(high) if c == '\\' => (Escape::AfterHighBackslash(high), None),
            Escape::AfterHighBackslash(high) if c == 'u' => {
                (Escape::Hex { digits: 0, code: 0, high: Some(high) }, None)
            }
            Escape::AfterHigh(_) | Escape::AfterHighBackslash(_) => return None,
        };
        self.leaf = JsonLeaf::Str { key, escape };
        Some(Tok::StrChar(decoded))
    }
}

// Grammars.

impl ToolFormat {
    /// An llguidance Lark grammar holding the answer to this format: under `Auto`, free text with calls
    /// allowed; under `Required`, one or more calls from the first token; under `Function`, that function's
    /// call alone. A call's name must be one of `tools` and its arguments must match that tool's
    /// `parameters` schema (`%json`). `None` for `ToolChoice::None`, for no tools, or for a function not
    /// among them: no constraint.
    ///
    /// `special_token` gives the id of a marker text (`<tool_call>`, `</tool_call>`, `[TOOL_CALLS]`, `[ARGS]`,
    /// `<|python_tag|>`) that is one special token in this model's vocabulary, and `None` where the model
    /// writes it as plain text (Qwen 2.5 has `<tool_call>` as a token, other ChatML models do not). Tokens are
    /// written by id, `<[id]>`: `<[TOOL_CALLS]>` would read as an id range.
    ///
    /// Calls are written as the families' templates render them (json.dumps spacing), arguments too
    /// (`constraint::with_json_layout`, as `response_format`'s JSON). `QwenXml` holds each parameter on its own, as
    /// llama.cpp's grammar does: text where its schema allows strings, `%json` of its schema where it does not
    /// (`xml_functions`). Text before calls under `Required` (a reasoning model's `<think>` block) is not allowed: a
    /// caller that wants it wraps `start`.
    pub fn grammar(
        &self,
        tools: &[ToolSpec],
        choice: &ToolChoice,
        parallel: bool,
        special_token: &dyn Fn(&str) -> Option<u32>,
    ) -> Option<String> {
        let tools: Vec<&ToolSpec> = match choice {
            ToolChoice::None => return None,
            ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
            ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).take(1).collect(),
        };
        if tools.is_empty() {
            return None;
        }
        let token = |text: &str| match special_token(text) {
            Some(id) => format!("<[{id}]>"),
            None => lark_string(text),
        };
        // At most one call: a named function, or OpenAI's `parallel_tool_calls: false`.
        let one = matches!(choice, ToolChoice::Function(_)) || !parallel;
        let mut g = String::new();
        // Each tool's arguments are their own `%json`, so that `$ref`s in its schema resolve against its root.
        // (`QwenXml` writes each parameter on its own, `Gemma4` its own syntax.)
        for (i, tool) in tools.iter().enumerate().filter(|_| !matches!(self, ToolFormat::QwenXml | ToolFormat::Gemma4))
        {
            let _ = writeln!(g, "args{i}: %json {}", arguments_schema(&tool.parameters));
        }
        // `{"name": "NAME", "<key>": ARGS}` for each tool, as alternatives.
        let calls = |key: &str| {
            let alternatives: Vec<String> = (0..tools.len())
                .map(|i| {
                    let head = format!("{{\"name\": {}, \"{key}\": ", Value::from(tools[i].name.as_str()));
                    format!("{} args{i} \"}}\"", lark_string(&head))
                })
                .collect();
            alternatives.join(" | ")
        };
        match self {
            ToolFormat::Hermes => {
                let _ = writeln!(g, "body: {}", calls("arguments"));
                let rest = format!("\"\\n\" body \"\\n\" {}", token(HERMES_CLOSE));
                marked_calls(&mut g, "<tool_call>", &rest, "\"\\n\" ", choice, one, special_token);
            }
            ToolFormat::QwenXml => {
                xml_functions(&mut g, &tools);
                let rest = format!("\"\\n\" body {}", token(HERMES_CLOSE));
                marked_calls(&mut g, "<tool_call>", &rest, "\"\\n\" ", choice, one, special_token);
            }
            ToolFormat::Gemma4 => {
                gemma_functions(&mut g, &tools, special_token(GEMMA_QUOTE));
                let rest = format!("body {}", token(GEMMA_CLOSE));
                marked_calls(&mut g, GEMMA_OPEN, &rest, "", choice, one, special_token);
            }
            ToolFormat::Mistral => {
                // Both forms (the parser reads both): the JSON array and `name[ARGS]{...}`.
                let _ = writeln!(g, "item: {}", calls("arguments"));
                let more = if one { "" } else { " (\", \" item)*" };
                let _ = writeln!(g, "array: \" \"? \"[\" item{more} \"]\"");
                let args_tag = token("[ARGS]");
                let named: Vec<String> =
                    (0..tools.len()).map(|i| format!("{} {args_tag} args{i}", lark_string(&tools[i].name))).collect();
                let _ = writeln!(g, "named: {}", named.join(" | "));
                marked_calls(&mut g, "[TOOL_CALLS]", "(array | named)", "", choice, one, special_token);
            }
            ToolFormat::Llama3 => {
                let _ = writeln!(g, "body: {}", calls("parameters"));
                let tag = token("<|python_tag|>");
                let more = if one { "" } else { " (\"; \" body)*" };
                match choice {
                    ToolChoice::Auto => {
                        let _ = writeln!(g, "start: TEXT | {tag}? calls");
                        let _ = writeln!(g, "calls: body{more}");
                        // An answer opening with `{` is a call to `parse`, and `<|python_tag|>` opens one
                        // anywhere: free text may do neither.
                        let _ = writeln!(
                            g,
                            "TEXT: /\\s*/ | (/\\s*[^{{\\s](.|\\n)*/ & ~/(?s:.*){}(?s:.*)/)",
                            regex_escape("<|python_tag|>")
                        );
                    }
                    _ => {
                        let _ = writeln!(g, "start: {tag}? body{more}");
                    }
                }
            }
            ToolFormat::Generic => {
                let _ = writeln!(g, "call: {}", calls("arguments"));
                let more = if one { "" } else { " (\", \" call)*" };
                let _ = writeln!(g, "calls: {} call{more} \"]}}\"", lark_string("{\"tool_calls\": ["));
                if matches!(choice, ToolChoice::Auto) {
                    let _ = writeln!(g, "start: calls | {} response \"}}\"", lark_string("{\"response\": "));
                    let _ = writeln!(g, "response: %json {{\"type\": \"string\"}}");
                } else {
                    let _ = writeln!(g, "start: calls");
                }
            }
        }
        Some(g)
    }
}

/// `QwenXml`'s `body`: one of `tools`' calls from its `<function=NAME>\n` to its `</function>\n`, each parameter
/// as `<parameter=P>\nVALUE\n</parameter>\n`: the required ones first, in any order (as llama.cpp's grammar: Qwen does
/// not always keep the schema's), then any of the others in any order, each once (llama.cpp lets them repeat); past
/// [`MAX_ANY_ORDER`] of either, in the schema's order (`properties`, then the `required` ones it does not describe).
/// Each value as its schema says, in the form llama.cpp's grammar gives
/// it (common/parsers/qwen3-coder.cpp): a value of strings only is text without `</parameter>` (or one of its `enum`
/// or its `const`), a value that may be no string is that JSON (`%json`, in `response_format`'s layout), and one
/// that may be either is text too.
fn xml_functions(g: &mut String, tools: &[&ToolSpec]) {
    let close = lark_string("\n</parameter>\n");
    let mut text = false;
    let mut functions = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let root = &tool.parameters;
        let required: Vec<&str> = match root.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut parameters: Vec<(&str, &Value)> = match root.get("properties") {
            Some(Value::Object(properties)) => properties.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            _ => Vec::new(),
        };
        for name in &required {
            if !parameters.iter().any(|(p, _)| p == name) {
                parameters.push((name, &Value::Bool(true)));
            }
        }
        let mut parts = vec![lark_string(&format!("<function={}>\n", tool.name))];
        for (j, (name, schema)) in parameters.iter().enumerate() {
            let value = match xml_value(schema, root) {
                XmlValue::Text => {
                    text = true;
                    "XML_TEXT \"\\n\"".to_owned()
                }
                XmlValue::Literals(values) => {
                    let values: Vec<String> = values.iter().map(|v| lark_string(v)).collect();
                    format!("({}) {close}", values.join(" | "))
                }
                XmlValue::Json(schema) => {
                    let _ = writeln!(g, "v{i}_{j}: %json {schema}");
                    format!("v{i}_{j} {close}")
                }
            };
            let _ = writeln!(g, "p{i}_{j}: {} {value}", lark_string(&format!("<parameter={name}>\n")));
        }
        // The required parameters in any order, then the others in any order, each once.
        let (required_rules, optional_rules): (Vec<_>, Vec<_>) =
            (0..parameters.len()).partition(|&j| required.contains(&parameters[j].0));
        for (prefix, rules, all) in [("req", required_rules, true), ("opt", optional_rules, false)] {
            let rules: Vec<String> = rules.iter().map(|j| format!("p{i}_{j}")).collect();
            if let Some(expression) = any_order(g, &format!("{prefix}{i}"), &rules, all) {
                parts.push(expression);
            }
        }
        parts.push(lark_string("</function>\n"));
        let _ = writeln!(g, "f{i}: {}", parts.join(" "));
        functions.push(format!("f{i}"));
    }
    let _ = writeln!(g, "body: {}", functions.join(" | "));
    if text {
        // Text to the first `</parameter>`, which must follow a newline: one lexeme, so that it ends there.
        let close = regex_escape(PARAMETER_CLOSE);
        let _ = writeln!(g, "XML_TEXT: /(?s:.*)\\n{close}/ & ~/(?s:.*){close}(?s:.+)/");
    }
}

/// The most parameters [`any_order`] lets come in any order (llama.cpp's `COMMON_CHAT_MAX_PERMUTE`): a rule per
/// subset of them.
const MAX_ANY_ORDER: usize = 6;

/// An expression for each of `items` (rule names) once, in any order: all of them, or (`all` false) any of them;
/// its rules, named from `prefix`, into `g` (one per subset of the items left). Past [`MAX_ANY_ORDER`] items, in
/// their order. `None` for no items.
fn any_order(g: &mut String, prefix: &str, items: &[String], all: bool) -> Option<String> {
    let optional = if all { "" } else { "?" };
    match items.len() {
        0 => return None,
        n if n > MAX_ANY_ORDER || n == 1 => {
            return Some(items.iter().map(|item| format!("{item}{optional}")).collect::<Vec<_>>().join(" "));
        }
        _ => {}
    }
    let full = (1usize << items.len()) - 1;
    for left in 1..=full {
        let alternatives: Vec<String> = (0..items.len())
            .filter(|b| left & (1 << b) != 0)
            .map(|b| match left & !(1 << b) {
                0 => items[b].clone(),
                rest => format!("{} {prefix}_{rest}{optional}", items[b]),
            })
            .collect();
        let _ = writeln!(g, "{prefix}_{left}: {}", alternatives.join(" | "));
    }
    Some(format!("{prefix}_{full}{optional}"))
}

/// How the grammar writes a `QwenXml` value.
enum XmlValue {
    Text,
    Literals(Vec<String>),
    Json(Value),
}

/// The value of a parameter of `schema`, in its tool's parameters schema `root`.
fn xml_value(schema: &Value, root: &Value) -> XmlValue {
    let types = Types::of_schema(schema, root);
    if types == Types::STRING {
        let target = match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
            Some(pointer) => root.pointer(pointer).unwrap_or(schema),
            None => schema,
        };
        let values = match (target.get("enum"), target.get("const")) {
            (Some(Value::Array(values)), _) => values.iter().map(Value::as_str).collect::<Option<Vec<&str>>>(),
            (None, Some(value)) => value.as_str().map(|v| vec![v]),
            _ => None,
        };
        match values {
            Some(values) if !values.iter().any(|v| v.contains(PARAMETER_CLOSE)) => {
                XmlValue::Literals(values.into_iter().map(str::to_owned).collect())
            }
            _ => XmlValue::Text,
        }
    } else if types.has(Types::STRING) {
        XmlValue::Text
    } else {
        // The schema alone, with its tool's definitions, which its `$ref`s point into.
        let mut schema = schema.clone();
        if let Value::Object(o) = &mut schema {
            for key in ["$defs", "definitions"] {
                if let Some(defs) = root.get(key) {
                    o.entry(key).or_insert_with(|| defs.clone());
                }
            }
        }
        XmlValue::Json(crate::constraint::with_json_layout(&schema).unwrap_or(schema))
    }
}

/// `Gemma4`'s `body`: one of `tools`' calls from its `call:NAME` to its arguments' `}`, written as the template
/// writes them: compact, keys bare and in sorted order (its `dictsort`), the required ones always there, strings
/// between `<|"|>` quotes (text that does not spell one), numbers, booleans and nulls as JSON's (`%json` of their
/// schema), each value as its schema says (`GemmaValues`). `quote`: the quote's token, where it is a special one.
fn gemma_functions(g: &mut String, tools: &[&ToolSpec], quote: Option<u32>) {
    let mut values = GemmaValues { rules: String::new(), quote, count: 0, refs: Vec::new(), any: false, text: false };
    let mut functions = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let root = &tool.parameters;
        let args = match root.as_object() {
            Some(o) => values.object(o, root, i, 0),
            None => values.any(),
        };
        let _ = writeln!(values.rules, "f{i}: {} {args}", lark_string(&format!("{GEMMA_CALL}{}", tool.name)));
        functions.push(format!("f{i}"));
    }
    let _ = writeln!(g, "body: {}", functions.join(" | "));
    g.push_str(&values.rules);
    if values.text {
        let q = regex_escape(GEMMA_QUOTE);
        match quote {
            // The quotes are tokens, which the text's bytes cannot make: it ends where the closing one comes.
            Some(id) => {
                let _ = writeln!(g, "gstr: <[{id}]> GTEXT? <[{id}]>");
                let _ = writeln!(g, "GTEXT: /(?s:.+)/ & ~/(?s:.*){q}(?s:.*)/");
            }
            // Text to the first closing quote: one lexeme, so that it ends there.
            None => {
                let _ = writeln!(g, "gstr: {} GTEXT", lark_string(GEMMA_QUOTE));
                let _ = writeln!(g, "GTEXT: /(?s:.*){q}/ & ~/(?s:.*){q}(?s:.+)/");
            }
        }
    }
    if values.any {
        // Any value, as llama.cpp's grammar reads them (keys of names' chars here).
        let _ = writeln!(g, "gv: gstr | gdict | garr | GNUM | \"true\" | \"false\" | \"null\"");
        let _ = writeln!(g, "gdict: \"{{\" (gkv (\",\" gkv)*)? \"}}\"");
        let _ = writeln!(g, "gkv: GKEY \":\" gv");
        let _ = writeln!(g, "garr: \"[\" (gv (\",\" gv)*)? \"]\"");
        let _ = writeln!(g, "GKEY: /[A-Za-z0-9_$@.\\-]+/");
        let _ = writeln!(g, "GNUM: /-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?/");
    }
}

/// The largest count a grammar holds a string's length or an array's items to; past it the bound is not held (a
/// counted repetition that large would only slow the grammar's compile).
const MAX_BOUND: u64 = 1000;

/// `o`'s `min` and `max` counts as given (non-negative integers up to [`MAX_BOUND`]; others, or a minimum above the
/// maximum, not held): (0, None) where there are none.
fn bounds(o: &serde_json::Map<String, Value>, min: &str, max: &str) -> (u64, Option<u64>) {
    let count = |key: &str| o.get(key).and_then(Value::as_u64).filter(|&n| n <= MAX_BOUND);
    match (count(min).unwrap_or(0), count(max)) {
        (lo, Some(hi)) if lo > hi => (0, None),
        bounds => bounds,
    }
}

/// Lark rules of `Gemma4`'s values, from JSON Schemas: `type` (a list of them too), `properties` and `required`,
/// `items`, `minItems` and `maxItems`, strings' `minLength`, `maxLength`, `pattern` and `format` (those of
/// [`format_regex`]), `enum`, `const`, `anyOf`/`oneOf` and `$ref`s into the tool's schema; other keywords of numbers,
/// booleans and nulls as `%json` holds them; a schema it does not read (`allOf`, `not`, or none) takes any value.
/// Not held: a `pattern` the grammar's regexes do not take ([`pattern_regex`]), other formats, arrays'
/// `prefixItems` and `uniqueItems`, and bounds past [`MAX_BOUND`].
struct GemmaValues {
    rules: String,
    /// The quote's token, where it is a special one.
    quote: Option<u32>,
    /// Rules made, for their names.
    count: usize,
    /// The rule of each `$ref` followed: (tool, reference, rule).
    refs: Vec<(usize, String, String)>,
    /// Whether `gv` (any value) or `gstr` (a string) is used.
    any: bool,
    text: bool,
}

impl GemmaValues {
    /// A Lark expression for the values of `schema`, a schema in tool `tool`'s parameters `root`.
    fn value(&mut self, schema: &Value, root: &Value, tool: usize, depth: usize) -> String {
        // Past a depth of 32 (a schema nested beyond reason), or not a schema: any value.
        let Some(o) = schema.as_object().filter(|_| depth < 32) else { return self.any() };
        if let Some(reference) = o.get("$ref").and_then(Value::as_str) {
            if let Some((_, _, rule)) = self.refs.iter().find(|(t, r, _)| *t == tool && r == reference) {
                return rule.clone();
            }
            let Some(target) = reference.strip_prefix('#').and_then(|p| root.pointer(p)) else { return self.any() };
            // A rule of its own, named before it is made: a schema may refer to itself.
            let rule = self.rule();
            self.refs.push((tool, reference.to_owned(), rule.clone()));
            let expression = self.value(target, root, tool, depth + 1);
            let _ = writeln!(self.rules, "{rule}: {expression}");
            return rule;
        }
        if let Some(Value::Array(list)) = o.get("anyOf").or_else(|| o.get("oneOf")) {
            let alternatives: Vec<String> = list.iter().map(|s| self.value(s, root, tool, depth + 1)).collect();
            return self.alternatives(alternatives);
        }
        if let Some(value) = o.get("const") {
            return self.literal(value).unwrap_or_else(|| self.any());
        }
        if let Some(Value::Array(values)) = o.get("enum") {
            let alternatives: Vec<String> = values.iter().filter_map(|v| self.literal(v)).collect();
            return self.alternatives(alternatives);
        }
        match o.get("type") {
            Some(Value::Array(types)) => {
                let alternatives: Vec<String> = types
                    .iter()
                    .map(|t| {
                        let mut alternative = o.clone();
                        alternative.insert("type".into(), t.clone());
                        self.value(&Value::Object(alternative), root, tool, depth + 1)
                    })
                    .collect();
                self.alternatives(alternatives)
            }
            Some(Value::String(t)) => match t.as_str() {
                "string" => self.string(o),
                "object" => self.object(o, root, tool, depth),
                "array" => self.array(o, root, tool, depth),
                "integer" | "number" | "boolean" | "null" => {
                    // Written as JSON writes them: `%json` holds them to their schema (ranges, enums).
                    let rule = self.rule();
                    let _ = writeln!(self.rules, "{rule}: %json {}", Value::Object(o.clone()));
                    rule
                }
                _ => self.any(),
            },
            _ if o.contains_key("properties") => self.object(o, root, tool, depth),
            _ if o.contains_key("items") => self.array(o, root, tool, depth),
            _ => self.any(),
        }
    }

    /// An object of `o`'s `properties` in sorted order (as the template's `dictsort` writes them: case aside),
    /// each optional one but the `required`; without properties, any object (`{}` where `additionalProperties`
    /// is false).
    fn object(&mut self, o: &serde_json::Map<String, Value>, root: &Value, tool: usize, depth: usize) -> String {
        let required: Vec<&str> = match o.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut properties: Vec<(&str, &Value)> = match o.get("properties") {
            Some(Value::Object(properties)) => properties.iter().map(|(k, v)| (k.as_str(), v)).collect(),
            _ => Vec::new(),
        };
        for name in &required {
            if !properties.iter().any(|(p, _)| p == name) {
                properties.push((name, &Value::Bool(true)));
            }
        }
        if properties.is_empty() {
            return match o.get("additionalProperties") {
                Some(Value::Bool(false)) => lark_string("{}"),
                _ => {
                    self.any = true;
                    "gdict".to_owned()
                }
            };
        }
        properties.sort_by(|a, b| a.0.to_lowercase().cmp(&b.0.to_lowercase()).then(a.0.cmp(b.0)));
        let members: Vec<(String, bool)> = properties
            .iter()
            .map(|&(name, schema)| {
                let value = self.value(schema, root, tool, depth + 1);
                (format!("{} {value}", lark_string(&format!("{name}:"))), required.contains(&name))
            })
            .collect();
        // `first{k}`: the members from the k-th on, none written before them; `rest{k}`: the same after one was
        // written (each after a comma). Every rule writes something: one that may write nothing is optional where
        // it is used.
        let n = self.count;
        self.count += 1;
        let optional_from = |k: usize| members[k..].iter().all(|(_, required)| !required);
        for k in (0..members.len()).rev() {
            let (member, required) = &members[k];
            let then = match k + 1 < members.len() {
                true => format!(" o{n}_rest{}{}", k + 1, if optional_from(k + 1) { "?" } else { "" }),
                false => String::new(),
            };
            let skip = !required && k + 1 < members.len();
            if k > 0 {
                let skip = if skip { format!(" | o{n}_rest{}", k + 1) } else { String::new() };
                let _ = writeln!(self.rules, "o{n}_rest{k}: \",\" {member}{then}{skip}");
            }
            // Used by the first member and by those after an optional one.
            if k == 0 || !members[k - 1].1 {
                let skip = if skip { format!(" | o{n}_first{}", k + 1) } else { String::new() };
                let _ = writeln!(self.rules, "o{n}_first{k}: {member}{then}{skip}");
            }
        }
        format!("\"{{\" o{n}_first0{} \"}}\"", if optional_from(0) { "?" } else { "" })
    }

    /// A string, quoted, of `minLength` to `maxLength` chars, matching `pattern` and `format`, where `o` says.
    fn string(&mut self, o: &serde_json::Map<String, Value>) -> String {
        let (lo, hi) = bounds(o, "minLength", "maxLength");
        let pattern = o.get("pattern").and_then(Value::as_str).map(pattern_regex);
        let format = o.get("format").and_then(Value::as_str).and_then(format_regex);
        // Each as the grammar's regex syntax reads it (a pattern it does not take is not held).
        let mut compiled: Vec<(String, Regex)> =
            pattern.into_iter().chain(format).filter_map(|r| Regex::new(&r).ok().map(|c| (r, c))).collect();
        if (lo, hi) == (0, None) && compiled.is_empty() {
            self.text = true;
            return "gstr".to_owned();
        }
        // The empty text where the length and the regexes allow it.
        let empty = lo == 0 && compiled.iter_mut().all(|(_, r)| r.is_match(""));
        let regexes: Vec<String> = compiled.into_iter().map(|(r, _)| r).collect();
        let q = regex_escape(GEMMA_QUOTE);
        let n = self.count;
        self.count += 1;
        let chars = |lo: u64| format!("(?s:.{{{lo},{}}})", hi.map_or(String::new(), |h| h.to_string()));
        match self.quote {
            // Between quote tokens, the text (of at least one char: an empty string is no lexeme).
            Some(id) => {
                let held: String = regexes.iter().map(|r| format!(" & /{r}/")).collect();
                let _ = writeln!(self.rules, "GTEXT{n}: /{}/ & ~/(?s:.*){q}(?s:.*)/{held}", chars(lo.max(1)));
                let text = if empty { format!("GTEXT{n}?") } else { format!("GTEXT{n}") };
                format!("<[{id}]> {text} <[{id}]>")
            }
            // The text and its closing quote, one lexeme that ends at the first quote.
            None => {
                let held: String = regexes.iter().map(|r| format!(" & /(?:{r}){q}/")).collect();
                let lo = if empty { lo } else { lo.max(1) };
                let _ = writeln!(self.rules, "GTEXT{n}: /{}{q}/ & ~/(?s:.*){q}(?s:.+)/{held}", chars(lo));
                format!("{} GTEXT{n}", lark_string(GEMMA_QUOTE))
            }
        }
    }

    /// An array of `o`'s `items` (any values without them), of `minItems` to `maxItems` where `o` says.
    fn array(&mut self, o: &serde_json::Map<String, Value>, root: &Value, tool: usize, depth: usize) -> String {
        let item = match o.get("items") {
            Some(items @ Value::Object(_)) => self.value(items, root, tool, depth + 1),
            _ => self.any(),
        };
        let (lo, hi) = bounds(o, "minItems", "maxItems");
        // The items after the first: `lo - 1` to `hi - 1` of them.
        let more = match (lo.saturating_sub(1), hi.map(|h| h.saturating_sub(1))) {
            (_, Some(0)) => String::new(),
            (0, None) => format!(" (\",\" {item})*"),
            (a, b) => format!(" (\",\" {item}){{{a},{}}}", b.map_or(String::new(), |b| b.to_string())),
        };
        let items = match (lo, hi) {
            (_, Some(0)) => String::new(),
            (0, _) => format!(" ({item}{more})?"),
            _ => format!(" {item}{more}"),
        };
        let rule = self.rule();
        let _ = writeln!(self.rules, "{rule}: \"[\"{items} \"]\"");
        rule
    }

    /// `value` itself, as the template writes it (`format_argument`); `None` where it cannot be written (a
    /// string that holds the quote).
    fn literal(&mut self, value: &Value) -> Option<String> {
        let mut text = String::new();
        gemma_text(value, &mut text)?;
        Some(match self.quote {
            None => lark_string(&text),
            Some(id) => {
                let pieces: Vec<String> = text
                    .split(GEMMA_QUOTE)
                    .enumerate()
                    .flat_map(|(i, piece)| {
                        let quote = (i > 0).then(|| format!("<[{id}]>"));
                        quote.into_iter().chain((!piece.is_empty()).then(|| lark_string(piece)))
                    })
                    .collect();
                format!("({})", pieces.join(" "))
            }
        })
    }

    fn alternatives(&mut self, alternatives: Vec<String>) -> String {
        match alternatives.len() {
            0 => self.any(),
            _ => format!("({})", alternatives.join(" | ")),
        }
    }

    fn any(&mut self) -> String {
        self.any = true;
        self.text = true;
        "gv".to_owned()
    }

    /// A new rule's name.
    fn rule(&mut self) -> String {
        self.count += 1;
        format!("v{}", self.count - 1)
    }
}

/// `value` as `Gemma4`'s template writes it (`format_argument`, keys bare, sorted), onto `out`; `None` for a
/// string that holds the quote, which cannot be written.
fn gemma_text(value: &Value, out: &mut String) -> Option<()> {
    match value {
        Value::String(s) if s.contains(GEMMA_QUOTE) => return None,
        Value::String(s) => {
            out.push_str(GEMMA_QUOTE);
            out.push_str(s);
            out.push_str(GEMMA_QUOTE);
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                gemma_text(item, out)?;
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| a.to_lowercase().cmp(&b.to_lowercase()).then(a.cmp(b)));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(key);
                out.push(':');
                gemma_text(&o[key], out)?;
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
    Some(())
}

/// The `start` of a grammar whose calls each begin with `marker` and go on as `rest`.
fn marked_calls(
    g: &mut String,
    marker: &str,
    rest: &str,
    separator: &str,
    choice: &ToolChoice,
    one: bool,
    special_token: &dyn Fn(&str) -> Option<u32>,
) {
    let no_marker = format!("~/(?s:.*){}(?s:.*)/", regex_escape(marker));
    let open = match (choice, special_token(marker)) {
        (ToolChoice::Auto, Some(id)) => {
            // The special token cannot come out of TEXT's bytes; TEXT may not spell its text either, which
            // `parse` would read as a call.
            let _ = writeln!(g, "start: TEXT? (call TEXT?){}", if one { "?" } else { "*" });
            let _ = writeln!(g, "TEXT: /(.|\\n)+/ & {no_marker}");
            format!("<[{id}]>")
        }
        (ToolChoice::Auto, None) => {
            // A plain-text marker: a lazy lexeme ends the free text at the marker's first occurrence, so
            // what follows is held to the call (llguidance docs/syntax.md, "Tool calling"). A greedy TEXT
            // would swallow the marker and run on. After the one call allowed, text may not spell another.
            if one {
                let _ = writeln!(g, "start: call? tail");
                let _ = writeln!(g, "tail: TAIL");
                let _ = writeln!(g, "TAIL: /(.|\\n)*/ & {no_marker}");
            } else {
                let _ = writeln!(g, "start: call* tail");
                let _ = writeln!(g, "tail: TEXT");
            }
            let _ = writeln!(g, "TEXT: /(.|\\n)*/");
            let _ = writeln!(g, "head[lazy]: TEXT {}", lark_string(marker));
            "head".to_owned()
        }
        (_, id) => {
            // Calls one after another as the templates render them (Hermes: a newline between): free
            // whitespace after a call would let a model write it until its token limit instead of ending.
            let more = if one { String::new() } else { format!(" ({separator}call)*") };
            let _ = writeln!(g, "start: call{more}");
            id.map_or_else(|| lark_string(marker), |id| format!("<[{id}]>"))
        }
    };
    let _ = writeln!(g, "call: {open} {rest}");
}

/// A tool's parameters schema as the grammar uses it: arguments are an object, so a schema that does not
/// say what type it is gets `"type": "object"` (an empty schema would let a call's arguments be a number).
fn arguments_schema(parameters: &Value) -> Value {
    let mut schema = parameters.clone();
    if let Value::Object(o) = &mut schema {
        o.entry("type").or_insert_with(|| json!("object"));
    }
    // The layout of `response_format`'s JSON: free whitespace would let a small model spend its tokens on it.
    crate::constraint::with_json_layout(&schema).unwrap_or(schema)
}

/// A JSON Schema `pattern` as a regex of the grammar's (llguidance's, `derivre`'s syntax) that a whole string
/// matches: the pattern matches somewhere in it (JSON Schema's patterns are not anchored), or at its start or end
/// where it begins with `^` or ends with `$`. [`GemmaValues::string`] leaves unheld one the grammar's regex syntax
/// does not parse, anchors elsewhere among them (derivre has no look-around).
fn pattern_regex(pattern: &str) -> String {
    let (start, body) = match pattern.strip_prefix('^') {
        Some(body) => (true, body),
        None => (false, pattern),
    };
    // A `$` at the end that no odd run of backslashes escapes.
    let escaped = |body: &str| body.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1;
    let (end, body) = match body.strip_suffix('$') {
        Some(rest) if !escaped(rest) => (true, rest),
        _ => (false, body),
    };
    // `/` ends a Lark regex: escaped (an escape the regex syntax takes for any punctuation).
    let mut body_escaped = String::with_capacity(body.len());
    let mut backslash = false;
    for c in body.chars() {
        if c == '/' && !backslash {
            body_escaped.push('\\');
        }
        backslash = c == '\\' && !backslash;
        body_escaped.push(c);
    }
    let any = "(?s:.*)";
    let whole = format!("{}(?:{body_escaped}){}", if start { "" } else { any }, if end { "" } else { any });
    whole
}

/// The regex of a string of JSON Schema `format` `name` (RFC 3339's `date`, `time` and `date-time`, `uuid`,
/// `ipv4`), `None` for the formats not held.
fn format_regex(name: &str) -> Option<String> {
    const DATE: &str = "[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])";
    const TIME: &str =
        "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    Some(match name {
        "date" => DATE.to_owned(),
        "time" => TIME.to_owned(),
        "date-time" => format!("{DATE}[Tt]{TIME}"),
        "uuid" => "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".to_owned(),
        "ipv4" => format!("{OCTET}(?:\\.{OCTET}){{3}}"),
        _ => return None,
    })
}

/// A Lark string literal: llguidance reads them as JSON strings.
fn lark_string(text: &str) -> String {
    Value::from(text).to_string()
}

/// `text` matched literally inside a Lark `/.../` regex.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        // `<` and `>` stay bare: escaped, the regex crate reads them as word boundaries.
        if "\\.+*?()|[]{}^$#&-~/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{test, Rng};

    use ToolFormat::{Gemma4, Generic, Hermes, Llama3, Mistral, QwenXml};

    fn answer(content: &str, calls: &[(&str, &str)]) -> ParsedAnswer {
        ParsedAnswer {
            content: content.to_owned(),
            tool_calls: calls
                .iter()
                .map(|&(name, arguments)| ToolCall { name: name.to_owned(), arguments: arguments.to_owned() })
                .collect(),
        }
    }

    /// `format.parse(text)` is `content` and `calls`.
    fn parses(format: ToolFormat, text: &str, content: &str, calls: &[(&str, &str)]) {
        assert_eq!(format.parse(text), answer(content, calls), "{format:?} {text:?}");
    }

    #[test]
    fn hermes() {
        let one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
        parses(Hermes, one, "", &[("get_weather", r#"{"city":"Paris","unit":"celsius"}"#)]);
        // Qwen's parallel calls: one block each.
        let two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";
        parses(Hermes, two, "", &[("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"CET"}"#)]);
        // Text before a call, and after it.
        let text = format!("Let me look that up.\n\n{one}\nOne moment.");
        parses(
            Hermes,
            &text,
            "Let me look that up.\n\n\nOne moment.",
            &[("get_weather", r#"{"city":"Paris","unit":"celsius"}"#)],
        );
        // Hermes 2 Pro writes the arguments first; other keys are ignored.
        parses(
            Hermes,
            "<tool_call>\n{\"arguments\": {\"q\": [1, 2.5e3, true, null, {\"k\": \"v\"}]}, \"id\": 7, \"name\": \"search\"}\n</tool_call>",
            "",
            &[("search", r#"{"q":[1,2.5e3,true,null,{"k":"v"}]}"#)],
        );
        // Escapes stay as written; raw control chars inside strings (code arguments) come out escaped.
        parses(
            Hermes,
            "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"print(\\\"h\\u00e9\\\")\n\tx = 1\"}}\n</tool_call>",
            "",
            &[("run", r#"{"code":"print(\"h\u00e9\")\n\tx = 1"}"#)],
        );
        // A missing closing tag at the end loses nothing.
        parses(Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", "", &[("f", "{}")]);
        parses(Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\nDone.", "Done.", &[("f", "{}")]);
        // No tool marker: all content, trimmed.
        parses(Hermes, "  The answer is {\"a\": 1} < 2 <tool \n", "The answer is {\"a\": 1} < 2 <tool", &[]);
    }

    #[test]
    fn hermes_malformed() {
        // Before a call has both its name and the start of its arguments, a malformed one is content.
        for text in [
            "<tool_call>\nI will call the weather tool.\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"args\": {\"city\": \"Paris\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>",
            "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
            "<tool_call>\n[{\"name\": \"f\", \"arguments\": {}}]\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\"",
            "<tool_call>",
        ] {
            parses(Hermes, text, text.trim(), &[]);
        }
        // A call read past that point keeps what was streamed; the text from the break on is content again.
        parses(
            Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\" \"unit\": \"c\"}}\n</tool_call>",
            "\"unit\": \"c\"}}\n</tool_call>",
            &[("get_weather", r#"{"city":"Paris""#)],
        );
        // An answer cut inside the arguments (the token limit): the arguments stop where it stopped.
        parses(
            Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
            "",
            &[("get_weather", r#"{"city":"Par"#)],
        );
        // A malformed call, then a good one: the first is content, the second a call.
        parses(
            Hermes,
            "<tool_call>oops <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>oops",
            &[("f", "{}")],
        );
    }

    #[test]
    fn llama3() {
        let one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
        parses(Llama3, one, "", &[("get_weather", r#"{"city":"Paris"}"#)]);
        parses(Llama3, &format!("\n\n{one}"), "", &[("get_weather", r#"{"city":"Paris"}"#)]);
        parses(Llama3, &format!("<|python_tag|>{one}"), "", &[("get_weather", r#"{"city":"Paris"}"#)]);
        // The `type` key some Llama outputs carry is ignored; `arguments` is read too.
        parses(
            Llama3,
            "{\"type\": \"function\", \"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}",
            "",
            &[("get_time", r#"{"zone":"UTC"}"#)],
        );
        // Llama 3.2's several calls, separated by `;`.
        parses(
            Llama3,
            &format!("{one}; {{\"name\": \"get_time\", \"parameters\": {{}}}}"),
            "",
            &[("get_weather", r#"{"city":"Paris"}"#), ("get_time", "{}")],
        );
        // After text, only `<|python_tag|>` opens a call.
        parses(Llama3, &format!("Sure. <|python_tag|>{one}"), "Sure.", &[("get_weather", r#"{"city":"Paris"}"#)]);
        parses(Llama3, &format!("Sure. {one}"), &format!("Sure. {one}"), &[]);
        // JSON that is not a call is content, as is what follows a call that is neither `;` nor a call.
        parses(Llama3, "{\"city\": \"Paris\", \"temp\": 21}", "{\"city\": \"Paris\", \"temp\": 21}", &[]);
        parses(
            Llama3,
            &format!("{one}\nThe call above."),
            "The call above.",
            &[("get_weather", r#"{"city":"Paris"}"#)],
        );
        parses(Llama3, &format!("{one}; and more"), "; and more", &[("get_weather", r#"{"city":"Paris"}"#)]);
        parses(
            Llama3,
            "<|python_tag|>brave_search.call(query=\"x\")",
            "<|python_tag|>brave_search.call(query=\"x\")",
            &[],
        );
    }

    #[test]
    fn mistral() {
        // Nemo and Small 3.x: a JSON array (the `id` Nemo writes is ignored; ids are the caller's).
        parses(
            Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"}]",
            "",
            &[("get_weather", r#"{"city":"Paris"}"#)],
        );
        parses(
            Mistral,
            "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}]",
            "",
            &[("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"CET"}"#)],
        );
        // The 2025 templates: `name[ARGS]{...}` after each marker, optionally with `[CALL_ID]`.
        parses(
            Mistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{\"zone\": \"CET\"}",
            "",
            &[("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"CET"}"#)],
        );
        parses(Mistral, "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}", "", &[("get_weather", r#"{"city":"Paris"}"#)]);
        parses(
            Mistral,
            "I'll check. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
            "I'll check.",
            &[("get_weather", r#"{"city":"Paris"}"#)],
        );
        // Malformed: content.
        for text in [
            "[TOOL_CALLS] I can't call that.",
            "[TOOL_CALLS][1, 2]",
            "[TOOL_CALLS][]",
            "[TOOL_CALLS]get_weather[ARG]{}",
            "[TOOL_CALLS]get_weather[CALL_ID]a-b[ARGS]{}",
            "[TOOL_CALLS]get weather[ARGS]{}",
            "[TOOL_CALLS]get_weather[ARGS]\"Paris\"",
        ] {
            parses(Mistral, text, text, &[]);
        }
        // After the first call of an array committed, a broken second one is content again.
        parses(
            Mistral,
            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"nom\": \"b\"}]",
            ", {\"nom\": \"b\"}]",
            &[("a", "{}")],
        );
    }

    #[test]
    fn generic() {
        parses(
            Generic,
            "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}, \"id\": \"call_1\"}]}",
            "",
            &[("get_weather", r#"{"city":"Paris"}"#), ("get_time", r#"{"zone":"CET"}"#)],
        );
        // llama.cpp's non-parallel form.
        parses(Generic, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}", "", &[("f", r#"{"x":1}"#)]);
        // The response is the content, unescaped (and trimmed).
        parses(
            Generic,
            "{\"response\": \"It is \\\"sunny\\\" \\u2600\\ufe0f \\ud83d\\ude00\\n\"}",
            "It is \"sunny\" \u{2600}\u{fe0f} \u{1F600}",
            &[],
        );
        // A model that ignored the format, or JSON that is not the envelope: content.
        for text in ["It is sunny.", "{\"answer\": 42}", "{\"tool_calls\": []}", "{\"response\": 5}"] {
            parses(Generic, text, text, &[]);
        }
        parses(Generic, "{\"response\": \"Hi\"} and more", "Hi and more", &[]);
        // The response commits at its opening quote: what follows a break in it is content again.
        parses(Generic, "{\"response\": \"Hi \\ud800x\"}", "Hi \\ud800x\"}", &[]);
    }

    /// Tools for `QwenXml`, whose values are typed by their schemas.
    fn xml_tools() -> Vec<ToolSpec> {
        ToolSpec::parse_list(&json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
                "required": ["city"]}}},
            {"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object", "properties": {
                "loud": {"type": "boolean"}, "labels": {"type": "array", "items": {"type": "string"}},
                "options": {"$ref": "#/$defs/options"}, "note": {"type": ["string", "null"]},
                "when": {"anyOf": [{"type": "string"}, {"type": "number"}]}, "anything": {}},
                "$defs": {"options": {"type": "object"}}}}},
            {"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {
                "code": {"type": "string"}}, "required": ["code"]}}},
            {"type": "function", "function": {"name": "ping"}},
        ]))
        .unwrap()
    }

    /// A `QwenXml` call of `name` with `parameters`, as the template renders it.
    fn xml_call(name: &str, parameters: &[(&str, &str)]) -> String {
        let mut call = format!("<tool_call>\n<function={name}>\n");
        for (p, value) in parameters {
            call.push_str(&format!("<parameter={p}>\n{value}\n</parameter>\n"));
        }
        call + "</function>\n</tool_call>"
    }

    /// `QwenXml`'s `parse_with_tools(text, xml_tools())` is `content` and `calls`.
    fn parses_xml(text: &str, content: &str, calls: &[(&str, &str)]) {
        assert_eq!(QwenXml.parse_with_tools(text, &xml_tools()), answer(content, calls), "{text:?}");
    }

    #[test]
    fn qwen_xml() {
        // llama.cpp's test-chat.cpp cases, for Qwen3-Coder and Qwen 3.5.
        let one = xml_call("get_weather", &[("city", "Paris"), ("days", "3")]);
        parses_xml(&one, "", &[("get_weather", r#"{"city":"Paris","days":3}"#)]);
        // Text before the calls; calls one after another, as the template renders them.
        let two = format!("{one}\n{}", xml_call("run", &[("code", "print(1)")]));
        parses_xml(
            &format!("Let me check.\n\n{two}"),
            "Let me check.",
            &[("get_weather", r#"{"city":"Paris","days":3}"#), ("run", r#"{"code":"print(1)"}"#)],
        );
        // Text after a call is content too.
        parses_xml(&format!("{one}\nDone."), "Done.", &[("get_weather", r#"{"city":"Paris","days":3}"#)]);
        // A call without parameters.
        parses_xml(&xml_call("ping", &[]), "", &[("ping", "{}")]);
        // The schema types the values: a string parameter's text is the string, whatever it looks like.
        parses_xml(
            &xml_call("get_weather", &[("city", "42"), ("unit", "celsius"), ("days", "7")]),
            "",
            &[("get_weather", r#"{"city":"42","unit":"celsius","days":7}"#)],
        );
        // Booleans, arrays and objects are JSON (compact); a `$ref` is followed.
        parses_xml(
            &xml_call(
                "set_alarm",
                &[("loud", "true"), ("labels", "[\"a\", \"b\"]"), ("options", "{\"snooze\": {\"minutes\": 5}}")],
            ),
            "",
            &[("set_alarm", r#"{"loud":true,"labels":["a","b"],"options":{"snooze":{"minutes":5}}}"#)],
        );
        // A parameter that may be a string or something else is JSON where it is a value of the other types, else
        // the string (a JSON string too); one without a schema, or a parameter the schema does not name, may be
        // anything.
        parses_xml(
            &xml_call(
                "set_alarm",
                &[("note", "null"), ("when", "7.5"), ("anything", "{\"k\": [1, null]}"), ("extra", "false")],
            ),
            "",
            &[("set_alarm", r#"{"note":null,"when":7.5,"anything":{"k":[1,null]},"extra":false}"#)],
        );
        parses_xml(
            &xml_call("set_alarm", &[("note", "wake up"), ("when", "\"noon\""), ("anything", "[1, 2")]),
            "",
            &[("set_alarm", r#"{"note":"wake up","when":"\"noon\"","anything":"[1, 2"}"#)],
        );
        // A value that should be JSON and is not is the string (llama.cpp fails the parse).
        parses_xml(&xml_call("get_weather", &[("days", "three")]), "", &[("get_weather", r#"{"days":"three"}"#)]);
        // The template writes booleans and nulls as Python does: read back where no string is allowed.
        parses_xml(
            &xml_call("set_alarm", &[("loud", "False"), ("note", "None"), ("anything", "True")]),
            "",
            &[("set_alarm", r#"{"loud":false,"note":"None","anything":"True"}"#)],
        );
        // Values span lines; only the newline after the opening tag and the one before the closing tag are the
        // format's (a value ending in a newline keeps it); quotes, backslashes, tabs and tags inside are text.
        parses_xml(
            &xml_call("run", &[("code", "def hello():\n\tprint(\"Hello, \\\\ world!\")\n\nhello()")]),
            "",
            &[("run", r#"{"code":"def hello():\n\tprint(\"Hello, \\\\ world!\")\n\nhello()"}"#)],
        );
        parses_xml(&xml_call("run", &[("code", "#include\n")]), "", &[("run", r##"{"code":"#include\n"}"##)]);
        parses_xml(&xml_call("run", &[("code", "\n  x")]), "", &[("run", r#"{"code":"\n  x"}"#)]);
        parses_xml(
            &xml_call("run", &[("code", "<html>\n <b>格</b>\n</html>")]),
            "",
            &[("run", r#"{"code":"<html>\n <b>格</b>\n</html>"}"#)],
        );
        parses_xml(&xml_call("run", &[("code", "")]), "", &[("run", r#"{"code":""}"#)]);
        // The format's newlines may be missing.
        parses_xml(
            "<tool_call><function=run><parameter=code>x</parameter></function></tool_call>",
            "",
            &[("run", r#"{"code":"x"}"#)],
        );
        // Without the tools, any value may be anything: a string parameter's `42` is a number.
        assert_eq!(
            QwenXml.parse(&xml_call("get_weather", &[("city", "42"), ("unit", "celsius")])),
            answer("", &[("get_weather", r#"{"city":42,"unit":"celsius"}"#)])
        );
    }

    /// A first call without its `<tool_call>` (Qwen3-Coder at times), from a whole `<function=NAME>` of a tool, as
    /// llama.cpp reads it: the call, with or without `</tool_call>` after it; whole or streamed a char at a time.
    /// Not a bare opener: an unknown name, `<function=` alone, or one after a first call (content).
    #[test]
    fn qwen_xml_first_call_without_tool_call() {
        let weather = r#"{"city":"Paris","days":3}"#;
        let body = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>";
        for text in [format!("Let me check.\n{body}\n</tool_call>"), format!("Let me check.\n{body}")] {
            parses_xml(&text, "Let me check.", &[("get_weather", weather)]);
            let mut stream = ToolCallStream::with_tools(QwenXml, &xml_tools());
            let mut deltas: Vec<ToolDelta> = text.chars().flat_map(|c| stream.push(&c.to_string())).collect();
            deltas.extend(stream.finish());
            assert_eq!(assemble(deltas), answer("Let me check.", &[("get_weather", weather)]), "{text:?}");
        }
        // Then a call with its marker.
        let run = xml_call("run", &[("code", "x")]);
        parses_xml(
            &format!("{body}\n</tool_call>\n{run}"),
            "",
            &[("get_weather", weather), ("run", r#"{"code":"x"}"#)],
        );
        // Not openers.
        let unknown = "<function=nope>\n<parameter=a>\n1\n</parameter>\n</function>";
        parses_xml(unknown, unknown, &[]);
        parses_xml("#include <functional>\nint f();", "#include <functional>\nint f();", &[]);
        let second = format!("{run}\n{body}");
        parses_xml(&second, body, &[("run", r#"{"code":"x"}"#)]);
        // Without the tools, nothing is a bare opener.
        assert_eq!(QwenXml.parse(&format!("{body}\n</tool_call>")).tool_calls, vec![]);
    }

    #[test]
    fn qwen_xml_malformed() {
        // Before a call has its name and its first parameter's name (or its `</function>`), a malformed one is
        // content.
        for text in [
            "<tool_call>\nI will call the weather tool.\n</tool_call>",
            "<tool_call>\n<function=get weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            "<tool_call>\n<function=>\n</function>\n</tool_call>",
            "<tool_call>\n<function=run>\nprint(1)\n</function>\n</tool_call>",
            "<tool_call>\n<function=run>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>",
            "<tool_call>\n<function=run>\n<parameter=co\nde>\nx\n</parameter>\n</function>\n</tool_call>",
            "<tool_call>\n{\"name\": \"run\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n<function=run>\n<parameter=code",
            "<tool_call>",
        ] {
            parses_xml(text, text.trim(), &[]);
        }
        // After that the call keeps what it streamed; the text from the break on is content again.
        parses_xml(
            "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\noops</function>\n</tool_call>",
            "oops</function>\n</tool_call>",
            &[("get_weather", r#"{"days":3"#)],
        );
        parses_xml(&format!("{}\n</tool_call> more", xml_call("ping", &[])), "</tool_call> more", &[("ping", "{}")]);
        // An answer cut inside a call: a string value stops where it stopped (but for what may begin its closing
        // tag); a value held whole is content.
        parses_xml(
            "<tool_call>\n<function=run>\n<parameter=code>\nprint(\"hi\")\n</para",
            "</para",
            &[("run", r#"{"code":"print(\"hi\")"#)],
        );
        parses_xml("<tool_call>\n<function=run>\n<parameter=code>\na<<", "<", &[("run", r#"{"code":"a<"#)]);
        parses_xml(
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3",
            "3",
            &[("get_weather", r#"{"city":"Paris","days":"#)],
        );
        // A missing closing tag at the end loses nothing.
        parses_xml(
            "<tool_call>\n<function=run>\n<parameter=code>\nx\n</parameter>\n</function>",
            "",
            &[("run", r#"{"code":"x"}"#)],
        );
        // A malformed call, then a good one.
        parses_xml(
            &format!("<tool_call>\n<function=run oops {}", xml_call("ping", &[])),
            "<tool_call>\n<function=run oops",
            &[("ping", "{}")],
        );
    }

    /// An assistant turn's call, as OpenAI's messages carry it.
    fn call(id: &str, name: &str, arguments: &str) -> crate::chat_template::MessageToolCall {
        crate::chat_template::MessageToolCall {
            id: id.into(),
            function: ToolCall { name: name.into(), arguments: arguments.into() },
        }
    }

    /// Qwen 3.5's template, as llama.cpp's tests have it (models/templates/Qwen3.5-4B.jinja).
    const QWEN35: &str = include_str!("../../../tests/fixtures/templates/Qwen3.5-4B.jinja");

    #[test]
    fn qwen_xml_renders_calls_and_results() {
        use crate::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
        let template = ChatTemplate::new(QWEN35, "", "<|im_end|>").unwrap();
        assert_eq!(template.tool_format(), QwenXml);
        let messages = [
            ChatMessage::new("user", "Weather in Paris for 3 days? And wake me."),
            ChatMessage {
                tool_calls: vec![
                    call("call_1", "get_weather", r#"{"city":"Paris","days":3}"#),
                    call("call_2", "set_alarm", r#"{"loud":true,"labels":["a","b"],"note":"wake\nup"}"#),
                ],
                ..ChatMessage::new("assistant", "Let me check.")
            },
            ChatMessage { tool_call_id: Some("call_1".into()), ..ChatMessage::new("tool", r#"{"temperature": 18}"#) },
            ChatMessage { tool_call_id: Some("call_2".into()), ..ChatMessage::new("tool", "set") },
        ];
        let tools = ToolSpec::parse_list(&json!([{"type": "function", "function": {"name": "get_weather",
            "description": "The weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]))
        .unwrap();
        let options = RenderOptions { tools, ..RenderOptions::default() };
        let text = template.render_with(&messages, &options).unwrap();
        // Written out from the template: the tools, then each turn; the call's arguments in their order, a mapping
        // or a list as JSON (`tojson`), anything else as `string` writes it (a boolean as Python's `True`, as HF
        // renders it); the results in one user turn.
        let expected = concat!(
            "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n",
            r#"{"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}"#,
            "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n",
            "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n",
            "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n",
            "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n",
            "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n",
            "- Required parameters MUST be specified\n",
            "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n",
            "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n",
            "</IMPORTANT><|im_end|>\n",
            "<|im_start|>user\nWeather in Paris for 3 days? And wake me.<|im_end|>\n",
            "<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check.\n\n",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n",
            "<tool_call>\n<function=set_alarm>\n<parameter=loud>\nTrue\n</parameter>\n<parameter=labels>\n[\"a\", \"b\"]\n</parameter>\n<parameter=note>\nwake\nup\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
            "<|im_start|>user\n<tool_response>\n{\"temperature\": 18}\n</tool_response>\n<tool_response>\nset\n</tool_response><|im_end|>\n",
            "<|im_start|>assistant\n<think>\n",
        );
        assert_eq!(text, expected);
        // The calls read back from the assistant's turn as they were made (typed by the tools' schemas).
        let turn = text.split("<|im_start|>assistant\n<think>\n\n</think>\n\n").nth(1).unwrap();
        let turn = turn.split("<|im_end|>").next().unwrap();
        assert_eq!(
            QwenXml.parse_with_tools(turn, &xml_tools()),
            answer(
                "Let me check.",
                &[
                    ("get_weather", r#"{"city":"Paris","days":3}"#),
                    ("set_alarm", r#"{"loud":true,"labels":["a","b"],"note":"wake\nup"}"#)
                ]
            )
        );
    }

    /// Gemma 4's template, as its GGUF carries it (llama.cpp's models/ggml-vocab-gemma-4.gguf).
    const GEMMA4: &str = include_str!("../../../tests/fixtures/templates/google-gemma-4.jinja");

    #[test]
    fn gemma4_renders_calls_and_results() {
        use crate::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
        let template = ChatTemplate::new(GEMMA4, "<bos>", "<eos>").unwrap();
        assert_eq!(template.tool_format(), Gemma4);
        let messages = [
            ChatMessage::new("user", "Weather in Paris for 3 days? And wake me."),
            ChatMessage {
                tool_calls: vec![
                    call("call_1", "get_weather", r#"{"city":"Paris","days":3}"#),
                    call(
                        "call_2",
                        "set_alarm",
                        r#"{"loud":true,"labels":["a","b"],"options":{"snooze":null,"at":-1.5}}"#,
                    ),
                ],
                ..ChatMessage::new("assistant", "Let me check.")
            },
            ChatMessage { tool_call_id: Some("call_1".into()), ..ChatMessage::new("tool", r#"{"temperature": 18}"#) },
            ChatMessage { tool_call_id: Some("call_2".into()), ..ChatMessage::new("tool", "set") },
        ];
        let tools = ToolSpec::parse_list(&json!([{"type": "function", "function": {"name": "get_weather",
            "description": "The weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
            "days": {"type": "integer", "description": "How many"}}, "required": ["city"]}}}]))
        .unwrap();
        let options = RenderOptions { tools, add_generation_prompt: true, ..RenderOptions::default() };
        let text = template.render_with(&messages, &options).unwrap();
        // Written out from the template: the tools as declarations in its own syntax, keys sorted; the calls, their
        // arguments sorted, strings quoted, a null as Python writes it; the results in the same model turn (this
        // template reads them from the turn's `tool_responses`, where they are moved from the `tool` turns, as
        // llama.cpp does; its own text goes, as llama.cpp drops it), a JSON result as a mapping, any other under
        // `value`; the turn left open for the model's text after them.
        let expected = concat!(
            "<bos><|turn>system\n<|tool>declaration:get_weather{description:<|\"|>The weather<|\"|>,parameters:{",
            "properties:{city:{type:<|\"|>STRING<|\"|>},days:{description:<|\"|>How many<|\"|>,type:<|\"|>INTEGER<|\"|>}},",
            "required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n",
            "<|turn>user\nWeather in Paris for 3 days? And wake me.<turn|>\n",
            "<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>",
            "<|tool_call>call:set_alarm{labels:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],loud:true,options:{at:-1.5,snooze:None}}<tool_call|>",
            "<|tool_response>response:get_weather{temperature:18}<tool_response|>",
            "<|tool_response>response:set_alarm{value:<|\"|>set<|\"|>}<tool_response|>",
            "<|channel>thought\n<channel|>",
        );
        assert_eq!(text, expected);
        // The model's answer after the results closes that turn; the next user turn opens another.
        let mut later = messages.to_vec();
        later.extend([ChatMessage::new("assistant", "18 degrees."), ChatMessage::new("user", "Thanks.")]);
        let text = template.render_with(&later, &options).unwrap();
        let tail = "set<|\"|>}<tool_response|>18 degrees.<turn|>\n<|turn>user\nThanks.<turn|>\n<|turn>model\n";
        assert!(text.contains(tail), "{text}");
        assert!(!text.contains("Let me check.") && !text.contains("<|turn>tool"), "{text}");
        // The calls read back from the model's turn as they were made (Python's `None` is JSON's null).
        let turn = text.split("<|turn>model\n").nth(1).unwrap().split("<|tool_response>").next().unwrap();
        assert_eq!(
            Gemma4.parse(turn),
            answer(
                "",
                &[
                    ("get_weather", r#"{"city":"Paris","days":3}"#),
                    ("set_alarm", r#"{"labels":["a","b"],"loud":true,"options":{"at":-1.5,"snooze":null}}"#)
                ]
            )
        );
    }

    /// `Gemma4.parse(text)` is `content` and `calls` (with and without tools: they change nothing).
    fn parses_gemma(text: &str, content: &str, calls: &[(&str, &str)]) {
        parses(Gemma4, text, content, calls);
        assert_eq!(Gemma4.parse_with_tools(text, &xml_tools()), answer(content, calls), "{text:?}");
    }

    #[test]
    fn gemma4() {
        // llama.cpp's test-chat.cpp cases for Gemma 4.
        let q = |s: &str| format!("<|\"|>{s}<|\"|>");
        let call = |name: &str, args: &str| format!("<|tool_call>call:{name}{{{args}}}<tool_call|>");
        parses_gemma(&call("get_time", &format!("city:{}", q("London"))), "", &[("get_time", r#"{"city":"London"}"#)]);
        parses_gemma(&call("empty_args", ""), "", &[("empty_args", "{}")]);
        parses_gemma(
            &format!("Hello, world!\nWhat's up?{}", call("get_time", &format!("city:{}", q("Paris")))),
            "Hello, world!\nWhat's up?",
            &[("get_time", r#"{"city":"Paris"}"#)],
        );
        parses_gemma(
            &format!("{}{}", call("get_time", &format!("city:{}", q("London"))), call("get_weather", "city:5")),
            "",
            &[("get_time", r#"{"city":"London"}"#), ("get_weather", r#"{"city":5}"#)],
        );
        for (value, json) in [("42", "42"), ("-7", "-7"), ("3.14", "3.14"), ("1.5e10", "1.5e10"), ("true", "true")] {
            parses_gemma(&call("f", &format!("x:{value}")), "", &[("f", &format!("{{\"x\":{json}}}"))]);
        }
        parses_gemma(&call("f", "x:false,y:null"), "", &[("f", r#"{"x":false,"y":null}"#)]);
        parses_gemma(
            &call("todo_list", &format!("todos:[{},{}]", q("buy milk"), q("walk dog"))),
            "",
            &[("todo_list", r#"{"todos":["buy milk","walk dog"]}"#)],
        );
        parses_gemma(
            &call("set_config", &format!("config:{{theme:{},count:3}}", q("dark"))),
            "",
            &[("set_config", r#"{"config":{"theme":"dark","count":3}}"#)],
        );
        parses_gemma(&call("f", "a:[],b:{}"), "", &[("f", r#"{"a":[],"b":{}}"#)]);
        // Nested deeper; strings hold quotes, backslashes, newlines, braces and `<|` as text, escaped as JSON.
        parses_gemma(
            &call("f", &format!("a:[[1,{{b:[{},null]}}],{{}}],s:{}", q("x"), q("say \"hi\" \\ {a:1}\n\t<|x|> <|\"|"))),
            "",
            &[("f", r#"{"a":[[1,{"b":["x",null]}],{}],"s":"say \"hi\" \\ {a:1}\n\t<|x|> <|\"|"}"#)],
        );
        parses_gemma(&call("f", &format!("s:{}", q(""))), "", &[("f", r#"{"s":""}"#)]);
        // Keys are any chars but `:` and `}` (escaped as JSON), a space before the colon too, as llama.cpp reads
        // them; whitespace between the other tokens is free.
        parses_gemma(
            &call("f", &format!(" a b\" : {} ,\n c: [ 1 , 2 ] ", q("v"))),
            "",
            &[("f", r#"{"a b\" ":"v","c":[1,2]}"#)],
        );
        // Python's `None`, as the template writes a null, is JSON's.
        parses_gemma(&call("f", "x:None,y:[None]"), "", &[("f", r#"{"x":null,"y":[null]}"#)]);
        // Text after the calls is content; a missing closing tag at the end loses nothing.
        parses_gemma(&format!("{}\nDone.", call("f", "")), "Done.", &[("f", "{}")]);
        parses_gemma("<|tool_call>call:f{x:1}", "", &[("f", r#"{"x":1}"#)]);
        parses_gemma("<|tool_call>call:f{x:1} \n<tool_call|>", "", &[("f", r#"{"x":1}"#)]);
        // No marker: all content.
        parses_gemma("Use call:f{x:1} <|tool <tool_call|>", "Use call:f{x:1} <|tool <tool_call|>", &[]);
    }

    #[test]
    fn gemma4_malformed() {
        // Before a call has its name and its arguments' `{`, a malformed one is content.
        for text in [
            "<|tool_call>",
            "<|tool_call>call:",
            "<|tool_call>call:{}<tool_call|>",
            "<|tool_call>get_time{}<tool_call|>",
            "<|tool_call> call:f{}<tool_call|>",
            "<|tool_call>call:get time{}<tool_call|>",
            "<|tool_call>call:f[1]<tool_call|>",
            "<|tool_call>{\"name\": \"f\", \"arguments\": {}}<tool_call|>",
            "<|tool_call>call:get_weather",
        ] {
            parses_gemma(text, text.trim(), &[]);
        }
        // After that the call keeps what it streamed; the text from the break on is content again.
        for (text, content, args) in [
            ("<|tool_call>call:f{a:1 b:2}<tool_call|>", "b:2}<tool_call|>", r#"{"a":1"#),
            ("<|tool_call>call:f{city:Paris}<tool_call|>", "Paris}<tool_call|>", r#"{"city":"#),
            ("<|tool_call>call:f{a:[1}}<tool_call|>", "}}<tool_call|>", r#"{"a":[1"#),
            ("<|tool_call>call:f{a:1,}<tool_call|>", "}<tool_call|>", r#"{"a":1,"#),
            ("<|tool_call>call:f{a:tru}<tool_call|>", "}<tool_call|>", r#"{"a":tru"#),
            ("<|tool_call>call:f{a:-}<tool_call|>", "}<tool_call|>", r#"{"a":-"#),
            ("<|tool_call>call:f{a:\"x\"}<tool_call|>", "\"x\"}<tool_call|>", r#"{"a":"#),
            ("<|tool_call>call:f{a:<|\"x}<tool_call|>", "<|\"x}<tool_call|>", r#"{"a":"#),
            ("<|tool_call>call:f{}}<tool_call|>", "}<tool_call|>", "{}"),
            ("<|tool_call>call:f{} oops", "oops", "{}"),
            ("<|tool_call>call:f{a:Nope}", "Nope}", r#"{"a":"#),
        ] {
            parses_gemma(text, content, &[("f", args)]);
        }
        // An answer cut inside a call: a string stops where it stopped (but for what may begin its closing quote);
        // a key not yet whole is content.
        parses_gemma("<|tool_call>call:f{s:<|\"|>Par", "", &[("f", r#"{"s":"Par"#)]);
        parses_gemma("<|tool_call>call:f{s:<|\"|>a<|\"", "<|\"", &[("f", r#"{"s":"a"#)]);
        parses_gemma("<|tool_call>call:f{s:<|\"|>a<<|", "<|", &[("f", r#"{"s":"a<"#)]);
        parses_gemma("<|tool_call>call:f{s:<|\"|>a<|\"|>,ke", "ke", &[("f", r#"{"s":"a","#)]);
        parses_gemma("<|tool_call>call:f{n:12", "", &[("f", r#"{"n":12"#)]);
        // A malformed call, then a good one.
        parses_gemma(
            "<|tool_call>call:f oops <|tool_call>call:g{}<tool_call|>",
            "<|tool_call>call:f oops",
            &[("g", "{}")],
        );
    }

    #[test]
    fn detect() {
        // Short excerpts of the real templates: the lines that render tool calls or ask for them.
        let qwen25 = r#"{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
            {{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}"#;
        let hermes2pro = r#"{{- "For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n" }}
            {{- "<tool_call>\n" }}{{- '{"arguments": <args-dict>, "name": <function-name>}\n' }}{{- '</tool_call><|im_end|>' }}"#;
        let llama31 = r#"{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {{- '{"name": "' + tool_call.name + '", ' }}{{- '"parameters": ' }}{{- tool_call.arguments | tojson }}"#;
        let llama32 = r#"{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
            {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}"#;
        let nemo = r#"{{- "[AVAILABLE_TOOLS][" }}{%- for tool in tools %}{%- endfor %}{{- "[/AVAILABLE_TOOLS]" }}
            {{- "[TOOL_CALLS][" }}{%- for tool_call in message.tool_calls %}{{- ', "id": "' + tool_call.id + '"}' }}{%- endfor %}"#;
        let small32 = r#"{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}"#;
        let chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
        let llama3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}";
        let qwen3_coder = r#"{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
            {{- '<parameter=' + args_name + '>\n' }}"#;
        // GLM 4.6 wraps `<arg_key>` pairs in `<tool_call>`; Seed-OSS writes `<parameter=` in its own tags.
        let glm = r#"{{- '<tool_call>' + tc.name -}}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>{% endfor %}"#;
        let seed_oss =
            r#"{{- '<seed:tool_call>\n<function=' + tool_call.name + '>\n' }}{{- '<parameter=' + arg_name + '>' }}"#;
        // A template writing the XML without newlines between its tags is some other format.
        let glued = r#"{{- '<tool_call><function=' ~ tool_call.name ~ '>' }}{{- '<parameter=' ~ k ~ '>' }}"#;
        let nemotron =
            r#"{{- '<|start_header_id|>' -}}{{- '<TOOLCALL>[' -}}{{- '{"name": "' + fn.name + '", "arguments": ' -}}"#;
        let gemma4 = r#"{{- '<|tool_call>call:' + function['name'] + '{' -}}"#;
        // Gemma 3's template has no tools.
        let gemma3 = "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix + message['content'] | trim) }}";
        for (source, format) in [
            (qwen25, Hermes),
            (hermes2pro, Hermes),
            (llama31, Llama3),
            (llama32, Llama3),
            (nemo, Mistral),
            (small32, Mistral),
            (chatml, Generic),
            (llama3, Generic),
            (qwen3_coder, QwenXml),
            (QWEN35, QwenXml),
            (glm, Generic),
            (seed_oss, Generic),
            (glued, Generic),
            (nemotron, Generic),
            (gemma4, Gemma4),
            (GEMMA4, Gemma4),
            (gemma3, Generic),
        ] {
            assert_eq!(ToolFormat::detect(source), format, "{source}");
        }
        // The names the bindings pass.
        assert_eq!(Gemma4.name(), "gemma4");
        for format in [Hermes, Llama3, Mistral, QwenXml, Gemma4, Generic] {
            assert_eq!(ToolFormat::from_name(format.name()), Some(format));
        }
    }

    #[test]
    fn streams_early() {
        use ToolDelta::*;
        let mut s = ToolCallStream::new(Hermes);
        // Content goes out at once, but for a possible marker's start (and whitespace, which waits for more).
        assert_eq!(s.push("Let me check. <tool"), [Content("Let me check.".into())]);
        assert_eq!(s.push("ing"), [Content(" <tooling".into())]);
        assert_eq!(s.push(" <tool_c"), []);
        // The call goes out once its name is known and its arguments begin, then its arguments as they come.
        assert_eq!(s.push("all>\n{\"name\": \"get_weather\", "), []);
        assert_eq!(
            s.push("\"arguments\": {\"ci"),
            [CallStart { index: 0, name: "get_weather".into() }, Arguments { index: 0, text: "{\"ci".into() }]
        );
        assert_eq!(s.push("ty\": \"Paris\"}"), [Arguments { index: 0, text: "ty\":\"Paris\"}".into() }]);
        assert_eq!(
            s.push("}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}"),
            [CallStart { index: 1, name: "f".into() }, Arguments { index: 1, text: "{}".into() }]
        );
        assert_eq!(s.finish(), []);

        // Generic's response streams as content.
        let mut s = ToolCallStream::new(Generic);
        assert_eq!(s.push(" {\"response\": \"It is"), [Content("It is".into())]);
        assert_eq!(s.push(" sunny\\"), [Content(" sunny".into())]);
        assert_eq!(s.push("n\"}"), []);
        assert_eq!(s.finish(), []);

        // `QwenXml`: the call goes out at its first parameter's whole name; a string value streams, escaped, but
        // for what may begin its closing tag; another value goes out whole at its closing tag.
        let mut s = ToolCallStream::with_tools(QwenXml, &xml_tools());
        assert_eq!(
            s.push("Checking.\n<tool_call>\n<function=get_weather>\n<parameter=ci"),
            [Content("Checking.".into())]
        );
        assert_eq!(
            s.push("ty>\nPa"),
            [CallStart { index: 0, name: "get_weather".into() }, Arguments { index: 0, text: "{\"city\":\"Pa".into() }]
        );
        assert_eq!(s.push("ris \"X\"\n</par"), [Arguments { index: 0, text: "ris \\\"X\\\"".into() }]);
        assert_eq!(s.push("ty"), [Arguments { index: 0, text: "\\n</party".into() }]);
        assert_eq!(
            s.push("\n</parameter>\n<parameter=days>\n1"),
            [Arguments { index: 0, text: "\",\"days\":".into() }]
        );
        assert_eq!(s.push("4\n</parameter>"), [Arguments { index: 0, text: "14".into() }]);
        assert_eq!(s.push("\n</function>\n</tool_call>"), [Arguments { index: 0, text: "}".into() }]);
        assert_eq!(s.push("\n<tool_call>\n<function=ping>\n</funct"), []);
        assert_eq!(
            s.push("ion>"),
            [CallStart { index: 1, name: "ping".into() }, Arguments { index: 1, text: "{}".into() }]
        );
        assert_eq!(s.finish(), []);

        // `Gemma4`: the call goes out at its arguments' `{`, its arguments as JSON as they come; a string streams
        // but for what may begin its closing quote; a key goes out whole at its colon.
        let mut s = ToolCallStream::new(Gemma4);
        assert_eq!(s.push("Checking. <|tool"), [Content("Checking.".into())]);
        assert_eq!(s.push("_call>call:get_wea"), []);
        assert_eq!(
            s.push("ther{ci"),
            [CallStart { index: 0, name: "get_weather".into() }, Arguments { index: 0, text: "{".into() }]
        );
        assert_eq!(s.push("ty:<|\"|"), [Arguments { index: 0, text: "\"city\":".into() }]);
        assert_eq!(s.push(">Pa"), [Arguments { index: 0, text: "\"Pa".into() }]);
        assert_eq!(s.push("ris \"X\"<|"), [Arguments { index: 0, text: "ris \\\"X\\\"".into() }]);
        assert_eq!(s.push("x"), [Arguments { index: 0, text: "<|x".into() }]);
        assert_eq!(s.push("<|\"|>,days:1"), [Arguments { index: 0, text: "\",\"days\":1".into() }]);
        assert_eq!(s.push("4,on:Non"), [Arguments { index: 0, text: "4,\"on\":".into() }]);
        assert_eq!(s.push("e}<tool_call"), [Arguments { index: 0, text: "null}".into() }]);
        assert_eq!(
            s.push("|><|tool_call>call:ping{"),
            [CallStart { index: 1, name: "ping".into() }, Arguments { index: 1, text: "{".into() }]
        );
        assert_eq!(s.push("}"), [Arguments { index: 1, text: "}".into() }]);
        assert_eq!(s.finish(), []);
    }

    /// Answers for the streaming invariant: the tests' examples and awkward cases.
    const ANSWERS: &[&str] = &[
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": -1.5e-3}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"zone\": \"CET\"}, \"name\": \"get_time\"}\n</tool_call>",
        "Let me see <tool_cal <tool_call> <tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"<tool_call> \\\"\\u00e9\\ud83d\\ude00 é😀\"}}</tool_call>tail  ",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\" \"unit\": 1}}\n</tool_call> after",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"g\", \"parameters\": {}} ;{\"x\"",
        "  <|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"a\": [true, false, null]}}<|eom_id|>",
        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"a1b2c3d4e\"}, {\"name\": \"b\", \"arguments\": {}}] [TOOL_CALLS]c[CALL_ID]x1[ARGS] {\"y\": \"[ARGS]\"}[TOOL_CALLS][TOOL_CALLS]d{}",
        "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"q\": \"\\\\\"}}], \"response\": \"and \\\"text\\\"\\t\"} trailing",
        "{\"response\": \"cut \\ud83d",
        "plain text, no calls at all\n\n",
    ];

    /// `QwenXml` answers for the streaming invariant (every format reads them, and `ANSWERS`).
    const XML_ANSWERS: &[&str] = &[
        "Let me see.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão \"Paulo\" \\ 😀\n\n</parameter>\n<parameter=days>\n 3 \n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=set_alarm>\n<parameter=labels>\n[\"a\", \"b\"]\n</parameter>\n<parameter=note>\nnull\n</parameter>\n<parameter=when>\nnoon\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=run>\n<parameter=code>\n\n\n</param\n</parameter\n\n</parameter>\n</function>\n</tool_call> after",
        "<tool_call>\n<function=run>\n<parameter=code>\nx = \"</tool_call>\"\n</parameter>\n<parameter=code>\n\t\u{0}\n</parameter>\n</function></tool_call><tool_call><function=ping></function>",
        "<tool_call> <function=get_weather> <parameter=days>\nthree\n</parameter> oops </function>",
        "<tool_call>\n<function=ping>\n</function>\n</tool_cal <tool_call>\n<function=f>\n<parameter=a b>\n{\"x\": [1, {\"y\": \"</parameter\"}]}\n</parameter>\n</function>",
    ];

    /// `Gemma4` answers for the streaming invariant (every format reads them, and the others).
    const GEMMA_ANSWERS: &[&str] = &[
        "Let me see.\n\n<|tool_call>call:get_weather{city:<|\"|>São \"Paulo\" \\ 😀\n<|\"|>,days:3,n:[-1.5e-3,true,false,null,None,{a:{}}],u:<|\"|><|\"|>}<tool_call|><|tool_call>call:ping{}<tool_call|> after",
        "<|tool_call>call:f{ k :[ <|\"|>a<|\"|> , 1 ] , m:{x:<|\"|><|\"<|\"|<|\"|>}}\n<tool_call|>\n<|tool_call>call:g{a:1 b}<tool_call|>",
        "<|tool_call>call:f{a:tr}<|tool_call>call:g{a:[1}}<|tool_call>call:{}<|tool_call>call:h{s:<|\"|>cut <|\"",
        "<|tool_call <|tool_call>call: f{} <|tool_call>call:f{a:Nonsense} <tool_call|> <|tool_call>call:f{x:-}",
    ];

    /// Feeds `pieces` one at a time, checking that the deltas are well formed; returns what they make up.
    fn stream(format: ToolFormat, tools: &[ToolSpec], pieces: &[&str]) -> ParsedAnswer {
        let mut s = ToolCallStream::with_tools(format, tools);
        let mut deltas = Vec::new();
        for piece in pieces {
            deltas.extend(s.push(piece));
        }
        deltas.extend(s.finish());
        let mut calls = 0;
        for delta in &deltas {
            match delta {
                ToolDelta::Content(text) => assert!(!text.is_empty()),
                ToolDelta::CallStart { index, .. } => {
                    assert_eq!(*index, calls, "calls are numbered in order");
                    calls += 1;
                }
                ToolDelta::Arguments { index, text } => assert!(*index < calls && !text.is_empty()),
            }
        }
        assert!(s.finish().is_empty(), "finish settles everything");
        assemble(deltas)
    }

    /// However `text` is split, the deltas make up `parse(text)`: split char by char and at random. Returns
    /// how many calls `parse` found.
    fn check_splits(format: ToolFormat, tools: &[ToolSpec], text: &str, rng: &mut Rng, random_splits: usize) -> usize {
        let whole = format.parse_with_tools(text, tools);
        let chars: Vec<&str> = text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()]).collect();
        assert_eq!(stream(format, tools, &chars), whole, "{format:?}, char by char: {text:?}");
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
        for _ in 0..random_splits {
            let mut cuts: Vec<usize> = bounds.iter().copied().filter(|_| rng.next_u64().is_multiple_of(4)).collect();
            cuts.push(text.len());
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts {
                pieces.push(&text[from..cut]);
                from = cut;
            }
            assert_eq!(stream(format, tools, &pieces), whole, "{format:?}, split as {pieces:?}");
        }
        whole.tool_calls.len()
    }

    #[test]
    fn any_split_assembles_to_parse() {
        let mut rng = Rng::new(37);
        let xml_tools = xml_tools();
        for format in [Hermes, Llama3, Mistral, QwenXml, Gemma4, Generic] {
            // `QwenXml` with the tools (typed values) and without (every value may be anything).
            let tool_sets: &[&[ToolSpec]] = if format == QwenXml { &[&xml_tools, &[]] } else { &[&[]] };
            for tools in tool_sets {
                for text in ANSWERS.iter().chain(XML_ANSWERS).chain(GEMMA_ANSWERS) {
                    check_splits(format, tools, text, &mut rng, 40);
                    // Every cut of the answer too (a generation stopped anywhere).
                    for (i, _) in text.char_indices() {
                        check_splits(format, tools, &text[..i], &mut rng, 1);
                    }
                }
            }
        }
    }

    #[test]
    fn any_split_of_random_text_assembles_to_parse() {
        // Random mixes of the formats' pieces: markers, JSON fragments, escapes, text.
        const PIECES: &[&str] = &[
            "<tool_call>",
            "</tool_call>",
            "\n",
            " ",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            ";",
            "\"",
            "\\",
            "\"name\"",
            "\"arguments\"",
            "\"parameters\"",
            "\"f\"",
            "1",
            "-2.5e+3",
            "true",
            "nul",
            "\"response\"",
            "\"tool_calls\"",
            "\"tool_call\"",
            "[TOOL_CALLS]",
            "[ARGS]",
            "[CALL_ID]",
            "get_weather",
            "<|python_tag|>",
            "\\u00e9",
            "\\ud83d",
            "\\ude00",
            "é",
            "😀",
            "text",
            "{\"name\": \"f\", \"arguments\": {",
            "\u{0}",
            "\t",
            // Whole calls, so that some answers hold calls among the noise.
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1]}}\n</tool_call>",
            "{\"name\": \"f\", \"parameters\": {}}",
            "[TOOL_CALLS]f[ARGS]{\"a\": 1}",
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
            "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}]}",
            // `QwenXml`'s tags, whole and in part, and calls.
            "<function=",
            "<function=get_weather>",
            "<parameter=",
            "<parameter=city>",
            "<parameter=days>",
            "</parameter>",
            "\n</parameter>\n",
            "</param",
            "</function>",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
            "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            // `Gemma4`'s tokens, whole and in part, and calls.
            "<|tool_call>",
            "<tool_call|>",
            "call:",
            "call:f{",
            "<|\"|>",
            "<|\"",
            "<|",
            "None",
            "a:",
            "<|tool_call>call:f{a:<|\"|>x<|\"|>,b:[1,{c:null}]}<tool_call|>",
            "<|tool_call>call:get_weather{city:<|\"|>",
        ];
        let mut rng = Rng::new(7);
        let xml_tools = xml_tools();
        for format in [Hermes, Llama3, Mistral, QwenXml, Gemma4, Generic] {
            let tools: &[ToolSpec] = if format == QwenXml { &xml_tools } else { &[] };
            let mut calls = 0;
            for _ in 0..600 {
                let n = 1 + rng.next_u64() as usize % 24;
                let text: String = (0..n).map(|_| PIECES[rng.next_u64() as usize % PIECES.len()]).collect();
                calls += check_splits(format, tools, &text, &mut rng, 3);
            }
            assert!(calls >= 5, "{format:?}: only {calls} calls in the random answers");
        }
    }

    #[test]
    fn tool_specs() {
        let tools = json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Weather now.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "ping"}},
        ]);
        let specs = ToolSpec::parse_list(&tools).unwrap();
        assert_eq!(specs[0].name, "get_weather");
        assert_eq!(specs[0].description.as_deref(), Some("Weather now."));
        assert_eq!(specs[1].parameters, json!({"type": "object", "properties": {}}));
        for (bad, field) in [
            (json!({}), "tools:"),
            (json!([5]), "tools[0]:"),
            (json!([{"type": "code_interpreter"}]), "tools[0].type:"),
            (json!([{"type": "function"}]), "tools[0].function:"),
            (json!([{"type": "function", "function": {"description": "x"}}]), "tools[0].function.name:"),
            (json!([{"type": "function", "function": {"name": "get weather"}}]), "tools[0].function.name:"),
            (json!([{"type": "function", "function": {"name": "x".repeat(65)}}]), "tools[0].function.name:"),
            (
                json!([{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]),
                "tools[1].function.name:",
            ),
            (
                json!([{"type": "function", "function": {"name": "a", "description": 1}}]),
                "tools[0].function.description:",
            ),
            (
                json!([{"type": "function", "function": {"name": "a", "parameters": "{}"}}]),
                "tools[0].function.parameters:",
            ),
        ] {
            match ToolSpec::parse_list(&bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.starts_with(field), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }

        assert_eq!(ToolChoice::parse(None, &specs).unwrap(), ToolChoice::Auto);
        assert_eq!(ToolChoice::parse(None, &[]).unwrap(), ToolChoice::None);
        assert_eq!(ToolChoice::parse(Some(&json!("none")), &specs).unwrap(), ToolChoice::None);
        assert_eq!(ToolChoice::parse(Some(&json!("required")), &specs).unwrap(), ToolChoice::Required);
        let named = json!({"type": "function", "function": {"name": "ping"}});
        assert_eq!(ToolChoice::parse(Some(&named), &specs).unwrap(), ToolChoice::Function("ping".into()));
        for (bad, field) in [
            (json!("always"), "tool_choice:"),
            (json!(1), "tool_choice:"),
            (json!({"type": "tool", "function": {"name": "ping"}}), "tool_choice.type:"),
            (json!({"type": "function"}), "tool_choice.function.name:"),
            (json!({"type": "function", "function": {"name": "pong"}}), "tool_choice.function.name:"),
        ] {
            match ToolChoice::parse(Some(&bad), &specs) {
                Err(Error::InvalidArgument(m)) => assert!(m.starts_with(field), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(ToolChoice::parse(Some(&json!("required")), &[]).is_err());
    }

    mod grammar {
        use super::*;
        use crate::test_support::test;
        use llguidance::api::TopLevelGrammar;
        use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
        use llguidance::{Matcher, ParserFactory};
        use std::sync::Arc;

        /// The test vocabulary: the 256 bytes, then these special tokens (the last is EOS).
        const SPECIALS: &[&str] = &[
            "<tool_call>",
            "</tool_call>",
            "[TOOL_CALLS]",
            "[ARGS]",
            "<|python_tag|>",
            "<|tool_call>",
            "<tool_call|>",
            "<|\"|>",
            "<|eot_id|>",
        ];

        fn factory() -> ParserFactory {
            let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
            // toktrie marks special tokens with a leading 0xFF byte.
            words.extend(SPECIALS.iter().map(|s| [&[0xFF], s.as_bytes()].concat()));
            let info = TokRxInfo {
                vocab_size: words.len() as u32,
                tok_eos: words.len() as u32 - 1,
                tok_bos: None,
                tok_pad: None,
                tok_unk: None,
                tok_end_of_turn: None,
            };
            let env: TokEnv = Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words)));
            let mut factory = ParserFactory::new_simple(&env).unwrap();
            factory.quiet();
            factory
        }

        fn special_id(text: &str) -> Option<u32> {
            SPECIALS.iter().position(|s| *s == text).map(|i| 256 + i as u32)
        }

        /// `text` as the model would write it: a special token where the vocabulary has one, bytes elsewhere.
        fn tokens(text: &str, specials: bool) -> Vec<u32> {
            let mut out = Vec::new();
            let mut rest = text.as_bytes();
            while let Some(&byte) = rest.first() {
                match SPECIALS.iter().find(|s| specials && rest.starts_with(s.as_bytes())) {
                    Some(s) => {
                        out.extend(special_id(s));
                        rest = &rest[s.len()..];
                    }
                    None => {
                        out.push(u32::from(byte));
                        rest = &rest[1..];
                    }
                }
            }
            out
        }

        fn accepts(factory: &ParserFactory, grammar: &str, text: &str, specials: bool) -> bool {
            let mut m = Matcher::new(factory.create_parser(TopLevelGrammar::from_lark(grammar.to_owned())));
            assert_eq!(m.get_error(), None, "grammar:\n{grammar}");
            let tokens = tokens(text, specials);
            m.try_consume_tokens(&tokens).unwrap() == tokens.len() && m.is_accepting().unwrap()
        }

        fn tools() -> Vec<ToolSpec> {
            ToolSpec::parse_list(&json!([
                {"type": "function", "function": {"name": "get_weather", "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "A \"city\" {name} %json /x/"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"], "additionalProperties": false}}},
                // `$ref`s resolve against the tool's own schema.
                {"type": "function", "function": {"name": "get_time", "parameters": {
                    "type": "object", "properties": {"zone": {"$ref": "#/$defs/zone"}}, "required": ["zone"],
                    "$defs": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}}}},
                {"type": "function", "function": {"name": "ping"}},
                {"type": "function", "function": {"name": "set_alarm", "parameters": {
                    "type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "loud": {"type": "boolean"}, "labels": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": ["string", "null"]}, "repeat": {"$ref": "#/$defs/repeat"}}, "required": ["hour"],
                    "$defs": {"repeat": {"type": "object", "properties": {"days": {"type": "integer"}},
                        "required": ["days"], "additionalProperties": false}}}}},
                // Two required parameters (QwenXml takes them in any order).
                {"type": "function", "function": {"name": "move", "parameters": {
                    "type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                    "required": ["x", "y"]}}},
                // Counts: a string's length, an array's items; a string's pattern (anchored, and not: "/" in it
                // too) and format.
                {"type": "function", "function": {"name": "tag", "parameters": {
                    "type": "object", "properties": {"label": {"type": "string", "minLength": 2, "maxLength": 4},
                    "ids": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
                    "note": {"type": "string", "maxLength": 3}, "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"},
                    "path": {"type": "string", "pattern": "a/b"}, "day": {"type": "string", "format": "date"}},
                    "required": ["label"]}}},
            ]))
            .unwrap()
        }

        /// Under `format`'s grammar for `choice`, each of `good` is accepted and parses to calls of those
        /// names; each of `bad` is rejected. With the markers as special tokens and as plain text.
        fn check(format: ToolFormat, choice: ToolChoice, good: &[(&str, &[&str])], bad: &[&str]) {
            let factory = factory();
            let tools = tools();
            for specials in [true, false] {
                let lookup = |t: &str| if specials { special_id(t) } else { None };
                let grammar = format.grammar(&tools, &choice, true, &lookup).unwrap();
                for (text, names) in good {
                    assert!(
                        accepts(&factory, &grammar, text, specials),
                        "{choice:?} should accept {text:?}:\n{grammar}"
                    );
                    let parsed = format.parse_with_tools(text, &tools);
                    let called: Vec<&str> = parsed.tool_calls.iter().map(|c| c.name.as_str()).collect();
                    assert_eq!(&called, names, "{text:?}");
                    for call in &parsed.tool_calls {
                        assert!(serde_json::from_str::<Value>(&call.arguments).is_ok(), "{call:?}");
                    }
                }
                for text in bad {
                    assert!(
                        !accepts(&factory, &grammar, text, specials),
                        "{choice:?} should reject {text:?}:\n{grammar}"
                    );
                }
            }
        }

        const WEATHER: &str =
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}";
        const TIME: &str = "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}";

        #[test]
        fn one_call_without_parallel_calls() {
            let factory = factory();
            let llama = |call: &str| call.replace("\"arguments\"", "\"parameters\"");
            let cases = [
                (
                    Hermes,
                    format!("<tool_call>\n{WEATHER}\n</tool_call>"),
                    "\n<tool_call>\n".to_owned() + TIME + "\n</tool_call>",
                ),
                (Llama3, llama(WEATHER), format!("; {}", llama(TIME))),
                (Mistral, format!("[TOOL_CALLS][{WEATHER}"), format!(", {TIME}")),
                (Generic, format!("{{\"tool_calls\": [{WEATHER}"), format!(", {TIME}")),
                (QwenXml, XML_WEATHER.to_owned(), format!("\n{XML_TIME}")),
                (Gemma4, GEMMA_WEATHER.to_owned(), GEMMA_TIME.to_owned()),
            ];
            for (format, one, second) in cases {
                let close = match format {
                    Mistral => "]",
                    Generic => "]}",
                    _ => "",
                };
                for choice in [ToolChoice::Required, ToolChoice::Auto] {
                    let single = format.grammar(&tools(), &choice, false, &special_id).unwrap();
                    let parallel = format.grammar(&tools(), &choice, true, &special_id).unwrap();
                    let two = format!("{one}{second}{close}");
                    assert!(
                        accepts(&factory, &single, &format!("{one}{close}"), true),
                        "{format:?} {choice:?}:\n{single}"
                    );
                    assert!(!accepts(&factory, &single, &two, true), "{format:?} {choice:?} took two calls:\n{single}");
                    assert!(accepts(&factory, &parallel, &two, true), "{format:?} {choice:?}:\n{parallel}");
                }
            }
        }

        #[test]
        fn none_and_no_tools() {
            for format in [Hermes, Llama3, Mistral, QwenXml, Gemma4, Generic] {
                assert_eq!(format.grammar(&tools(), &ToolChoice::None, true, &special_id), None);
                assert_eq!(format.grammar(&[], &ToolChoice::Auto, true, &special_id), None);
                assert_eq!(format.grammar(&tools(), &ToolChoice::Function("pong".into()), true, &special_id), None);
            }
        }

        #[test]
        fn hermes() {
            let weather = format!("<tool_call>\n{WEATHER}\n</tool_call>");
            let time = format!("<tool_call>\n{TIME}\n</tool_call>");
            let ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";
            let both = format!("{weather}\n{time}");
            let unknown = "<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
            let bad_args = [
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>",
            ];
            let prose = "The weather in Paris is {usually} <b>mild</b>.";
            let mut bad = vec![unknown, "<tool_call>\nI'd call get_weather.", "Sure: <tool_call> {}"];
            bad.extend(bad_args);
            check(
                Hermes,
                ToolChoice::Auto,
                &[
                    ("", &[]),
                    (prose, &[]),
                    (&weather, &["get_weather"]),
                    (&format!("Let me check.\n{both}\nDone."), &["get_weather", "get_time"]),
                    (ping, &["ping"]),
                ],
                &bad,
            );
            let mut bad = vec![prose, "", "Sure.\n<tool_call>", unknown];
            bad.extend(bad_args);
            check(
                Hermes,
                ToolChoice::Required,
                &[(&weather, &["get_weather"]), (&both, &["get_weather", "get_time"])],
                &bad,
            );
            check(
                Hermes,
                ToolChoice::Function("get_time".into()),
                &[(&time, &["get_time"])],
                &[&weather, &both, prose, &format!("{time}\n{time}")],
            );
        }

        const XML_WEATHER: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>";
        const XML_TIME: &str =
            "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>";

        #[test]
        fn qwen_xml() {
            let weather = XML_WEATHER;
            let time = XML_TIME;
            let ping = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";
            let both = format!("{weather}\n{time}");
            // Values of strings only are text (a value may span lines, hold tags, end in a newline, be empty);
            // other values are JSON, to their schema; a value that may be either is text.
            let alarm =
                |parameters: &str| format!("<tool_call>\n<function=set_alarm>\n{parameters}</function>\n</tool_call>");
            let p = |name: &str, value: &str| format!("<parameter={name}>\n{value}\n</parameter>\n");
            let alarms = [
                alarm(&p("hour", "7")),
                alarm(&(p("hour", "23") + &p("loud", "false") + &p("labels", "[\"a\", \"b\"]") + &p("note", "null"))),
                alarm(&(p("hour", "0") + &p("note", "Wake up!\n<b>Now</b> </parameter\n"))),
                alarm(&(p("hour", "0") + &p("note", ""))),
                alarm(&(p("hour", "6") + &p("repeat", "{\"days\": 2}"))),
            ];
            let city = |value: &str| {
                format!("<tool_call>\n<function=get_weather>\n{}</function>\n</tool_call>", p("city", value))
            };
            let multiline = city("São\n\"Paulo\" {x}\n");
            let mv = |parameters: &str| format!("<tool_call>\n<function=move>\n{parameters}</function>\n</tool_call>");
            // The required parameters in any order; the others after them, in any order.
            let orders = [
                mv(&(p("x", "1") + &p("y", "2"))),
                mv(&(p("y", "2") + &p("x", "1"))),
                alarm(&(p("hour", "7") + &p("note", "x") + &p("loud", "true"))),
            ];
            let bad_calls = [
                "<tool_call>\n<function=get_wether>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>".to_owned(),
                // A required parameter missing, an enum's other value, parameters out of the schema's order, one
                // it does not have.
                "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>".to_owned(),
                weather.replace("celsius", "kelvin"),
                time.replace("UTC", "PST"),
                "<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>".to_owned(),
                alarm(&(p("hour", "7") + &p("volume", "3"))),
                // JSON values to their schema: a number in range, JSON's booleans.
                alarm(&p("hour", "seven")),
                alarm(&p("hour", "24")),
                alarm(&(p("hour", "7") + &p("loud", "True"))),
                alarm(&(p("hour", "7") + &p("repeat", "{\"weeks\": 2}"))),
                alarm(&(p("hour", "7") + &p("repeat", "{\"days\":2}"))),
                // Each required parameter once, before the others; each of those at most once.
                mv(&p("x", "1")),
                mv(&(p("x", "1") + &p("x", "2"))),
                mv(&(p("x", "1") + &p("y", "2") + &p("y", "3"))),
                alarm(&(p("hour", "7") + &p("loud", "true") + &p("loud", "false"))),
                // A text value holds no `</parameter>`; the tags' newlines are the template's.
                city("a</parameter>b"),
                weather.replace("<tool_call>\n", "<tool_call>"),
                weather.replace("Paris\n</parameter>", "Paris</parameter>"),
            ];
            let prose = "The weather in Paris is <b>mild</b>; <function=x> is no call.";
            let mut bad: Vec<&str> = vec!["<tool_call>\nI'd call get_weather.", "Sure: <tool_call> {}"];
            bad.extend(bad_calls.iter().map(String::as_str));
            let mut good: Vec<(&str, &[&str])> = vec![
                ("", &[]),
                (prose, &[]),
                (weather, &["get_weather"]),
                (ping, &["ping"]),
                (&multiline, &["get_weather"]),
            ];
            let with_text = format!("Let me check.\n\n{both}");
            good.push((&with_text, &["get_weather", "get_time"]));
            good.extend(alarms.iter().map(|a| (a.as_str(), &["set_alarm"][..])));
            good.extend(orders[..2].iter().map(|m| (m.as_str(), &["move"][..])));
            good.push((&orders[2], &["set_alarm"]));
            check(QwenXml, ToolChoice::Auto, &good, &bad);
            let mut required_bad = vec![prose, "", "Sure.\n<tool_call>", &with_text];
            required_bad.extend(bad_calls.iter().map(String::as_str));
            check(
                QwenXml,
                ToolChoice::Required,
                &[(weather, &["get_weather"]), (&both, &["get_weather", "get_time"]), (&alarms[1], &["set_alarm"])],
                &required_bad,
            );
            check(
                QwenXml,
                ToolChoice::Function("get_time".into()),
                &[(time, &["get_time"])],
                &[weather, &both, prose, &format!("{time}\n{time}")],
            );
            // What the grammar allows reads back typed by the schemas.
            let tools = tools();
            let args = |text: &str| QwenXml.parse_with_tools(text, &tools).tool_calls[0].arguments.clone();
            assert_eq!(args(&alarms[1]), r#"{"hour":23,"loud":false,"labels":["a","b"],"note":null}"#);
            assert_eq!(args(&alarms[2]), r#"{"hour":0,"note":"Wake up!\n<b>Now</b> </parameter\n"}"#);
            assert_eq!(args(&multiline), r#"{"city":"São\n\"Paulo\" {x}\n"}"#);
            assert_eq!(args(&alarms[4]), r#"{"hour":6,"repeat":{"days":2}}"#);
        }

        const GEMMA_WEATHER: &str =
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>";
        const GEMMA_TIME: &str = "<|tool_call>call:get_time{zone:<|\"|>UTC<|\"|>}<tool_call|>";

        #[test]
        fn gemma4() {
            let weather = GEMMA_WEATHER;
            let time = GEMMA_TIME;
            let ping = "<|tool_call>call:ping{}<tool_call|>";
            let both = format!("{weather}{time}");
            let q = |s: &str| format!("<|\"|>{s}<|\"|>");
            let alarm = |args: &str| format!("<|tool_call>call:set_alarm{{{args}}}<tool_call|>");
            // Keys in sorted order, the required ones there; strings quoted (any text but the quote: lines, tags,
            // braces, a quote's start; empty), other values as JSON's, each to its schema.
            let alarms = [
                alarm("hour:7"),
                alarm(&format!("hour:23,labels:[{},{}],loud:false,note:null,repeat:{{days:2}}", q("a"), q("b"))),
                alarm(&format!("hour:0,note:{}", q("Wake up!\n<b>Now</b> {x:1} <|\"|"))),
                alarm(&format!("hour:0,labels:[],note:{}", q(""))),
            ];
            let city = |value: &str| format!("<|tool_call>call:get_weather{{city:{value}}}<tool_call|>");
            let bad_calls = [
                weather.replace("get_weather", "get_wether"),
                // A required key missing, an enum's other value, keys out of order, one the schema does not have.
                "<|tool_call>call:get_weather{}<tool_call|>".to_owned(),
                format!("<|tool_call>call:get_weather{{unit:{}}}<tool_call|>", q("celsius")),
                weather.replace("celsius", "kelvin"),
                time.replace("UTC", "PST"),
                format!("<|tool_call>call:get_weather{{unit:{},city:{}}}<tool_call|>", q("celsius"), q("Paris")),
                alarm("hour:7,volume:3"),
                // Values to their schema: a number in range, JSON's booleans, a string quoted, objects to theirs.
                alarm("hour:24"),
                alarm("hour:seven"),
                alarm(&format!("hour:{}", q("7"))),
                alarm("hour:7,loud:True"),
                alarm("hour:7,note:None"),
                alarm("hour:7,repeat:{weeks:2}"),
                alarm(&format!("hour:7,labels:[1,{}]", q("b"))),
                // A string holds no quote; JSON is not the syntax; the template writes no spaces.
                city(&format!("{}b{}", q("a"), "<|\"|>")),
                city("\"Paris\""),
                "<|tool_call>call:get_weather{\"city\": \"Paris\"}<tool_call|>".to_owned(),
                city(&format!(" {}", q("Paris"))),
                weather.replace("<tool_call|>", ""),
            ];
            // Strings to their lengths, arrays to their counts.
            let tag = |args: &str| format!("<|tool_call>call:tag{{{args}}}<tool_call|>");
            let tags = [
                tag(&format!("label:{}", q("ab"))),
                tag(&format!("ids:[7],label:{},note:{}", q("abcd"), q(""))),
                tag(&format!("ids:[1,2],label:{},note:{}", q("São"), q("x y"))),
                tag(&format!("code:{},day:{},label:{},path:{}", q("AB-12"), q("2026-12-01"), q("ab"), q("x/a/b/y"))),
            ];
            let bad_calls: Vec<String> = bad_calls
                .into_iter()
                .chain([
                    tag(&format!("label:{}", q("a"))),
                    tag(&format!("label:{}", q("abcde"))),
                    tag(&format!("ids:[],label:{}", q("ab"))),
                    tag(&format!("ids:[1,2,3],label:{}", q("ab"))),
                    tag(&format!("label:{},note:{}", q("ab"), q("four"))),
                    tag(&format!("code:{},label:{}", q("ab-12"), q("ab"))),
                    tag(&format!("code:{},label:{}", q("AB-12x"), q("ab"))),
                    tag(&format!("code:{},label:{}", q(""), q("ab"))),
                    tag(&format!("day:{},label:{}", q("2026-13-01"), q("ab"))),
                    tag(&format!("label:{},path:{}", q("ab"), q("a-b"))),
                ])
                .collect();
            let prose = "The weather in Paris is {mild}; call:get_weather{} is no call.";
            let mut bad: Vec<&str> = vec!["<|tool_call>I'd call get_weather.", "Sure: <|tool_call> {}"];
            bad.extend(bad_calls.iter().map(String::as_str));
            let mut good: Vec<(&str, &[&str])> =
                vec![("", &[]), (prose, &[]), (weather, &["get_weather"]), (ping, &["ping"])];
            let with_text = format!("Let me check.\n\n{both}");
            good.push((&with_text, &["get_weather", "get_time"]));
            let multiline = city(&q("São\n\"Paulo\" {x}\n"));
            good.push((&multiline, &["get_weather"]));
            good.extend(alarms.iter().map(|a| (a.as_str(), &["set_alarm"][..])));
            good.extend(tags.iter().map(|t| (t.as_str(), &["tag"][..])));
            check(Gemma4, ToolChoice::Auto, &good, &bad);
            let mut required_bad = vec![prose, "", "Sure.\n<|tool_call>", &with_text];
            required_bad.extend(bad_calls.iter().map(String::as_str));
            check(
                Gemma4,
                ToolChoice::Required,
                &[(weather, &["get_weather"]), (&both, &["get_weather", "get_time"]), (&alarms[1], &["set_alarm"])],
                &required_bad,
            );
            check(
                Gemma4,
                ToolChoice::Function("get_time".into()),
                &[(time, &["get_time"])],
                &[weather, &both, prose, &format!("{time}{time}")],
            );
            // What the grammar allows reads back as JSON.
            let args = |text: &str| Gemma4.parse(text).tool_calls[0].arguments.clone();
            assert_eq!(
                args(&alarms[1]),
                r#"{"hour":23,"labels":["a","b"],"loud":false,"note":null,"repeat":{"days":2}}"#
            );
            assert_eq!(args(&alarms[2]), r#"{"hour":0,"note":"Wake up!\n<b>Now</b> {x:1} <|\"|"}"#);
            assert_eq!(args(&multiline), r#"{"city":"São\n\"Paulo\" {x}\n"}"#);
        }

        #[test]
        fn llama3() {
            let weather = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
            let time = "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}";
            let both = format!("{weather}; {time}");
            let tagged = format!("<|python_tag|>{weather}");
            let bad = [
                "{\"name\": \"get_wether\", \"parameters\": {\"city\": \"Paris\"}}",
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}",
                "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
            ];
            let mut auto_bad = vec!["{\"city\": \"Paris\"}", "Calling it: <|python_tag|>{}"];
            auto_bad.extend(bad);
            check(
                Llama3,
                ToolChoice::Auto,
                &[
                    ("", &[]),
                    ("It is sunny in Paris {today}.", &[]),
                    (weather, &["get_weather"]),
                    (&tagged, &["get_weather"]),
                    (&both, &["get_weather", "get_time"]),
                ],
                &auto_bad,
            );
            let mut required_bad = vec!["It is sunny.", ""];
            required_bad.extend(bad);
            check(
                Llama3,
                ToolChoice::Required,
                &[(weather, &["get_weather"]), (&tagged, &["get_weather"]), (&both, &["get_weather", "get_time"])],
                &required_bad,
            );
            check(Llama3, ToolChoice::Function("get_time".into()), &[(time, &["get_time"])], &[weather, &both]);
        }

        #[test]
        fn mistral() {
            let array = format!("[TOOL_CALLS][{WEATHER}]");
            let spaced = format!("[TOOL_CALLS] [{WEATHER}, {TIME}]");
            let named = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}";
            let named_two = format!("{named}[TOOL_CALLS]get_time[ARGS]{{\"zone\": \"CET\"}}");
            let bad = [
                "[TOOL_CALLS][{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}]",
                "[TOOL_CALLS]get_wether[ARGS]{\"city\": \"Paris\"}",
                "[TOOL_CALLS]get_weather[ARGS]{\"town\": \"Paris\"}",
                "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": 1}}]",
                "[TOOL_CALLS][]",
            ];
            let mut auto_bad = vec!["Hi [TOOL_CALLS] there"];
            auto_bad.extend(bad);
            check(
                Mistral,
                ToolChoice::Auto,
                &[
                    ("", &[]),
                    ("No [tools] needed.", &[]),
                    (&array, &["get_weather"]),
                    (&spaced, &["get_weather", "get_time"]),
                    (&format!("Checking. {named_two}"), &["get_weather", "get_time"]),
                ],
                &auto_bad,
            );
            let mut required_bad = vec!["No tools.", ""];
            required_bad.extend(bad);
            check(
                Mistral,
                ToolChoice::Required,
                &[(&array, &["get_weather"]), (&named_two, &["get_weather", "get_time"])],
                &required_bad,
            );
            check(
                Mistral,
                ToolChoice::Function("get_weather".into()),
                &[(&array, &["get_weather"]), (named, &["get_weather"])],
                &[&spaced, &named_two, "[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CET\"}"],
            );
        }

        #[test]
        fn generic() {
            let one = format!("{{\"tool_calls\": [{WEATHER}]}}");
            let two = format!("{{\"tool_calls\": [{WEATHER}, {TIME}]}}");
            let response = "{\"response\": \"It is \\\"sunny\\\".\"}";
            let bad = [
                "It is sunny.",
                "{\"tool_calls\": []}",
                "{\"tool_calls\": [{\"name\": \"get_wether\", \"arguments\": {\"city\": \"Paris\"}}]}",
                "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"wind\": 1}}]}",
            ];
            check(
                Generic,
                ToolChoice::Auto,
                &[(&one, &["get_weather"]), (&two, &["get_weather", "get_time"]), (response, &[])],
                &bad,
            );
            let mut required_bad = vec![response];
            required_bad.extend(bad);
            check(
                Generic,
                ToolChoice::Required,
                &[(&one, &["get_weather"]), (&two, &["get_weather", "get_time"])],
                &required_bad,
            );
            check(Generic, ToolChoice::Function("get_weather".into()), &[(&one, &["get_weather"])], &[&two, response]);
        }
    }
}
