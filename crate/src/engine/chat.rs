//! A chat request, before it runs: the conversation and its tools rendered through the model's template,
//! the grammar that holds the answer to the model's tool-call format, and that format, to read the answer's
//! calls back out (`ToolFormat::parse`, or a `ToolCallStream` as it streams).
//!
//! The template lists every tool whatever the choice (but `none`: then none is offered, and the answer is
//! free text); the grammar holds the answer to the calls the choice allows, from the first token under
//! `required` or a named function, from a call's marker on under `auto` (`ToolFormat::grammar`).

use std::borrow::Cow;

use crate::chat_template::tool_calls::{ToolChoice, ToolFormat};
use crate::chat_template::{ChatMessage, RenderOptions};
use crate::constraint::GrammarSource;
use crate::error::Result;
use crate::model::Model;

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

/// What [`Model::chat_prompt`] makes of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatPrompt {
    /// The prompt's token ids.
    pub ids: Vec<u32>,
    /// The grammar of the answer under the tool choice; `None` when no tool is offered.
    pub grammar: Option<GrammarSource>,
    /// How the answer writes calls; `None` when no tool is offered (the answer is all content).
    pub tool_format: Option<ToolFormat>,
}

impl Model {
    /// The prompt of `messages` with `options.tools` offered as `tool_use` says, and how to hold and read
    /// the answer. `parse_special_in_messages` as in [`Model::chat_prompt_ids`].
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
        if options.tools.is_empty() {
            return Ok(ChatPrompt {
                ids: self.chat_prompt_ids(messages, &options, parse_special_in_messages)?,
                grammar: None,
                tool_format: None,
            });
        }
        let tokenizer = self.tokenizer();
        let special = |text: &str| tokenizer.token_id(text).filter(|&id| tokenizer.is_control(id));
        Ok(ChatPrompt {
            ids: self.chat_prompt_ids(messages, &options, parse_special_in_messages)?,
            grammar: format.grammar(&options.tools, choice, tool_use.parallel, &special).map(GrammarSource::Lark),
            tool_format: Some(format),
        })
    }

    /// The prompt text [`Model::chat_prompt`] tokenizes: `messages` with the tools offered as `tool_use` says.
    pub fn chat_prompt_text(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
        tool_use: &ToolUse,
    ) -> Result<String> {
        self.chat_template()?.render_with(messages, &offered(options, &tool_use.choice))
    }
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
