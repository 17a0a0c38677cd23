//! The text side of a model: its tokenizer, its chat template, and what is made of them alone (chat prompts with
//! tools offered, the grammar that holds an answer to the tool-call format and that format, the grammar compiler of
//! constrained requests), read from a GGUF's header, without the weights.
//!
//! # Design
//!
//! `TextModel` is all of a `Model` that text needs: a `Model` holds one (`Model::text`) and the engine asks it for
//! prompts; alone it is built from the file's first bytes, so that a page can tokenize and render chats while the
//! weights live in a worker (or nowhere: counting a prompt's tokens), and a vocabulary-only GGUF (llama.cpp's
//! tokenizer test files, which have no tensors) loads. `from_header` takes any prefix of a file and answers the
//! text model or how many bytes the header needs at least (`gguf::Prefix`), so a reader of a file, a `Blob` or an
//! HTTP server fetches the header and no more; `from_bytes` takes a prefix holding the whole header (a vocabulary-only
//! file, whole), `from_file` reads that much of a file. Nothing here looks at a tensor: a header whose tensor table
//! does not fit the file still gives its text side (the weights' checks are `Model::from_bytes`'s).
//!
//! `chat_prompt` is a chat request before it runs: the conversation and its tools rendered through the template,
//! the grammar that holds the answer to the model's tool-call format, and that format, to read the answer's calls
//! back out (`ToolFormat::parse_with_tools`, or a `ToolCallStream::with_tools` as it streams: `QwenXml` types its
//! values by the tools' schemas). The template lists every tool whatever the choice (but `none`: then none is offered,
//! and the answer is free text); the grammar holds the answer to the calls the choice allows, from the first token
//! under `required` or a named function, from a call's marker on under `auto` (`ToolFormat::grammar`).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use crate::chat_template::tool_calls::{ToolChoice, ToolFormat};
use crate::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
use crate::constraint::{GrammarCompiler, GrammarSource};
use crate::error::{Error, Result};
use crate::gguf::{Gguf, Prefix};
use crate::tokenizer::Tokenizer;

/// The weights a header lists, in two figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightsSummary {
    /// Elements of all tensors (a model's "135M").
    pub parameters: u64,
    /// The type holding most of the matrices' bytes (`Q4_K` for a Q4_K_M file, whose rest is Q6_K); None without
    /// matrices (a vocabulary-only file).
    pub quantization: Option<&'static str>,
}

impl WeightsSummary {
    /// Sums saturate: a header read from a prefix (its file's length unknown) may claim tensors of any size.
    fn of(g: &Gguf) -> WeightsSummary {
        let mut bytes_by_type: Vec<(&'static str, usize)> = Vec::new();
        for t in g.tensors.iter().filter(|t| t.dims.len() >= 2) {
            match bytes_by_type.iter_mut().find(|(name, _)| *name == t.ty.name()) {
                Some((_, bytes)) => *bytes = bytes.saturating_add(t.size),
                None => bytes_by_type.push((t.ty.name(), t.size)),
            }
        }
        WeightsSummary {
            parameters: g.tensors.iter().fold(0u64, |n, t| n.saturating_add(t.n_elements() as u64)),
            quantization: bytes_by_type.iter().max_by_key(|(_, bytes)| *bytes).map(|(name, _)| *name),
        }
    }
}

/// A model's tokenizer and chat template, with its name and architecture: all that text needs of it.
pub struct TextModel {
    tokenizer: Tokenizer,
    /// The GGUF's `tokenizer.chat_template`, compiled; or why there is none (missing, or refused when compiled):
    /// an error at chat time, while the model still loads and tokenizes plain text.
    chat_template: Result<ChatTemplate>,
    name: Option<String>,
    /// `general.architecture` as the file writes it (a vocabulary-only file may name one this crate does not run).
    architecture: String,
    /// `{architecture}.context_length`: the context the model was trained at, when the file says.
    context_length: Option<u64>,
    /// The weights as the header's tensor table lists them: what a model catalogue shows before a download.
    weights: WeightsSummary,
    /// The grammar compiler of this vocabulary, made by the first constrained request.
    grammar: OnceLock<Arc<GrammarCompiler>>,
}

impl std::fmt::Debug for TextModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextModel")
            .field("name", &self.name)
            .field("architecture", &self.architecture)
            .field("tokenizer", &self.tokenizer)
            .field("has_chat_template", &self.chat_template.is_ok())
            .finish_non_exhaustive()
    }
}

/// How much of a file [`TextModel::from_file`] reads first: a small vocabulary's header whole, a large one's in a
/// few reads (each at least doubles what was read).
#[cfg(not(target_arch = "wasm32"))]
const FIRST_READ: usize = 256 << 10;

impl TextModel {
    /// The text side of the model whose header `g` is.
    pub fn from_gguf(g: &Gguf) -> Result<TextModel> {
        Ok(TextModel {
            tokenizer: Tokenizer::from_gguf(g)?,
            chat_template: ChatTemplate::from_gguf(g),
            name: g.get_str("general.name").map(str::to_string),
            architecture: g.architecture()?.to_string(),
            context_length: g.get_u64(&format!("{}.context_length", g.architecture()?)),
            weights: WeightsSummary::of(g),
            grammar: OnceLock::new(),
        })
    }

    /// The text side from `prefix`, the first bytes of a GGUF file (its length need not be known): the text model
    /// once the prefix holds the whole header, else how many bytes of the file the header needs at least
    /// (`Prefix::Need`: ask again with at least that many). A malformed header is `Error::Gguf` as soon as the
    /// prefix shows it; a header never asks for more than `gguf::MAX_HEADER_FILE_BYTES`.
    pub fn from_header(prefix: &[u8]) -> Result<Prefix<TextModel>> {
        Ok(match Gguf::parse_prefix(prefix, None)? {
            Prefix::Complete(g) => Prefix::Complete(TextModel::from_gguf(&g)?),
            Prefix::Need(n) => Prefix::Need(n),
        })
    }

    /// The text side from `bytes`: a whole GGUF file (a vocabulary-only one, say), or any prefix of one that holds
    /// its header. Bytes that end inside the header are `Error::Gguf`.
    pub fn from_bytes(bytes: &[u8]) -> Result<TextModel> {
        match TextModel::from_header(bytes)? {
            Prefix::Complete(text) => Ok(text),
            Prefix::Need(n) => Err(truncated(bytes.len(), n)),
        }
    }

    /// The text side of the GGUF file at `path`, of which only the header is read.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<TextModel> {
        use std::io::Read;
        let path = path.as_ref();
        let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut head = Vec::new();
        let mut want = FIRST_READ;
        loop {
            let more = (want - head.len()) as u64;
            (&mut file).take(more).read_to_end(&mut head).map_err(io)?;
            match TextModel::from_header(&head)? {
                Prefix::Complete(text) => return Ok(text),
                Prefix::Need(n) if head.len() < want => return Err(truncated(head.len(), n)),
                Prefix::Need(n) => want = n.max(want.saturating_mul(2)),
            }
        }
    }

    /// This text side with `source` as its chat template instead of the file's (as llama.cpp's
    /// `--chat-template-file`). A template that does not compile is `Error::ChatTemplate`.
    pub fn with_chat_template(mut self, source: &str) -> Result<TextModel> {
        let text = |id: Option<u32>| id.and_then(|id| self.tokenizer.token_text(id)).unwrap_or("");
        self.chat_template = Ok(ChatTemplate::new(source, text(self.tokenizer.bos()), text(self.tokenizer.eos()))?);
        Ok(self)
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template, or an error naming the problem when the model has none or it did not compile.
    pub fn chat_template(&self) -> Result<&ChatTemplate> {
        self.chat_template.as_ref().map_err(Clone::clone)
    }

    /// `general.name`.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// `general.architecture`, as the file names it.
    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    /// `{architecture}.context_length`, when the file gives it.
    pub fn context_length(&self) -> Option<u64> {
        self.context_length
    }

    /// The weights' parameter count and main type, from the header's tensor table.
    pub fn weights(&self) -> WeightsSummary {
        self.weights
    }

    /// The compiler of constrained requests' grammars for this vocabulary (built on first use: it holds the
    /// vocabulary's token trie).
    pub fn grammar_compiler(&self) -> Result<Arc<GrammarCompiler>> {
        if let Some(c) = self.grammar.get() {
            return Ok(c.clone());
        }
        let compiler = Arc::new(GrammarCompiler::new(&self.tokenizer)?);
        Ok(self.grammar.get_or_init(|| compiler).clone())
    }

    /// The prompt ids of a conversation in the chat template, BOS included where the model asks. The template's
    /// markup is parsed for special tokens; the messages' roles and contents are not, unless
    /// `parse_special_in_messages` (input the caller trusts): their `<|im_end|>` is text, so a message cannot end
    /// its turn or open another.
    pub fn chat_prompt_ids(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
        parse_special_in_messages: bool,
    ) -> Result<Vec<u32>> {
        let template = self.chat_template()?;
        if parse_special_in_messages {
            return self.tokenizer.encode_with_special(&template.render_with(messages, options)?, true);
        }
        let prompt = template.render_guarded(messages, options, &self.tokenizer.control_texts())?;
        self.tokenizer.encode_guarded(&prompt.text, &prompt.guarded)
    }

    /// The prompt of `messages` with `options.tools` offered as `tool_use` says, and how to hold and read the
    /// answer. `parse_special_in_messages` as in [`TextModel::chat_prompt_ids`].
    pub fn chat_prompt(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
        tool_use: &ToolUse,
        parse_special_in_messages: bool,
    ) -> Result<ChatPrompt> {
        let choice = &tool_use.choice;
        let format = self.chat_template()?.tool_format();
        let options = offered(options, choice);
        let ids = self.chat_prompt_ids(messages, &options, parse_special_in_messages)?;
        if options.tools.is_empty() {
            return Ok(ChatPrompt { ids, grammar: None, tool_format: None });
        }
        let tokenizer = &self.tokenizer;
        let special = |text: &str| tokenizer.token_id(text).filter(|&id| tokenizer.is_control(id));
        Ok(ChatPrompt {
            ids,
            grammar: format.grammar(&options.tools, choice, tool_use.parallel, &special).map(GrammarSource::Lark),
            tool_format: Some(format),
        })
    }

    /// The prompt text [`TextModel::chat_prompt`] tokenizes: `messages` with the tools offered as `tool_use` says.
    pub fn chat_prompt_text(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
        tool_use: &ToolUse,
    ) -> Result<String> {
        self.chat_template()?.render_with(messages, &offered(options, &tool_use.choice))
    }
}

/// A prefix of `have` bytes that ends inside a header needing at least `need`.
fn truncated(have: usize, need: usize) -> Error {
    Error::Gguf(format!("truncated: the file ends at byte {have}, inside its header (which needs at least {need})"))
}

/// How an answer may use the tools offered: OpenAI's `tool_choice` and `parallel_tool_calls` (false: at most
/// one call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolUse {
    pub choice: ToolChoice,
    pub parallel: bool,
}

impl Default for ToolUse {
    fn default() -> ToolUse {
        ToolUse { choice: ToolChoice::Auto, parallel: true }
    }
}

/// What [`TextModel::chat_prompt`] makes of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatPrompt {
    /// The prompt's token ids.
    pub ids: Vec<u32>,
    /// The grammar of the answer under the tool choice; `None` when no tool is offered.
    pub grammar: Option<GrammarSource>,
    /// How the answer writes calls; `None` when no tool is offered (the answer is all content).
    pub tool_format: Option<ToolFormat>,
}

/// `options` as a request under `choice` renders them: `none` offers no tool, so the template lists none.
fn offered<'a>(options: &'a RenderOptions, choice: &ToolChoice) -> Cow<'a, RenderOptions> {
    match choice {
        ToolChoice::None if !options.tools.is_empty() => {
            Cow::Owned(RenderOptions { tools: Vec::new(), ..options.clone() })
        }
        _ => Cow::Borrowed(options),
    }
}
