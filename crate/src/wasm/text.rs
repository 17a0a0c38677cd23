//! The text side for JavaScript: `TextEngine`, a model's tokenizer and chat template read from its GGUF header alone
//! (`TextModel`), and the text calls every engine answers (`tokenize`, `tokenizePrompt`, `detokenize`,
//! `applyChatTemplate`, `chatPrompt`, the text facts of `info`): `Engine`, `GpuEngine` and `TextEngine` answer them with
//! the functions here, on their model's text side, so the three agree.
//!
//! A reader fetches a file's first bytes, asks `TextEngine.headerBytes` how many the header takes (or needs at
//! least, when the prefix ends inside it), fetches more until it has them, and makes the `TextEngine` from them: the
//! weights are never read (the npm package's `Tokenizer.load`; a page whose engine runs in a worker).

use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::gguf::{Gguf, Prefix, MAX_HEADER_FILE_BYTES};
use crate::model::text::TextModel;
use crate::wasm::{bytes_from_js, js_error, json, parse, JsChatTemplate};

/// A model's text side without its weights: tokenizing, detokenizing and chat prompts, all synchronous.
#[wasm_bindgen]
pub struct TextEngine {
    text: TextModel,
}

/// `TextEngine`'s options.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct JsTextOptions {
    chat_template: JsChatTemplate,
}

#[wasm_bindgen]
impl TextEngine {
    /// How many bytes of the file the GGUF header in `prefix` (the file's first bytes) takes: at most
    /// `prefix.length` when all of it is there, else at least how many it needs (read that many, or more, and ask
    /// again). A prefix that is not the start of a GGUF header is `E_GGUF`.
    #[wasm_bindgen(js_name = headerBytes)]
    pub fn header_bytes(prefix: &js_sys::Uint8Array) -> Result<f64, JsValue> {
        let bytes = header_prefix(prefix)?;
        Ok(match Gguf::parse_prefix(&bytes, None).map_err(js_error)? {
            Prefix::Complete(g) => g.header_bytes,
            Prefix::Need(n) => n,
        } as f64)
    }

    /// The text side of the model whose GGUF header `header` holds (bytes past the header are not read).
    /// `options_json`: `{chatTemplate?}`, a chat template to use instead of the file's.
    #[wasm_bindgen(constructor)]
    pub fn new(header: &js_sys::Uint8Array, options_json: Option<String>) -> Result<TextEngine, JsValue> {
        let opts: JsTextOptions = options_json.map(|json| parse(&json, "options")).transpose()?.unwrap_or_default();
        let text = TextModel::from_bytes(&header_prefix(header)?).map_err(js_error)?;
        Ok(TextEngine { text: opts.chat_template.apply(text, TextModel::with_chat_template)? })
    }

    /// The text facts as JSON: `{name, architecture, vocab_size, has_chat_template, bos, eos}`.
    pub fn info(&self) -> String {
        json(&info(&self.text))
    }

    pub fn tokenize(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, JsValue> {
        tokenize(&self.text, text, parse_special)
    }

    #[wasm_bindgen(js_name = tokenizePrompt)]
    pub fn tokenize_prompt(&self, text: &str) -> Result<Vec<u32>, JsValue> {
        tokenize_prompt(&self.text, text)
    }

    pub fn detokenize(&self, ids: Vec<u32>) -> Result<String, JsValue> {
        detokenize(&self.text, &ids)
    }

    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(&self, request_json: &str) -> Result<String, JsValue> {
        crate::wasm::chat::apply_chat_template(&self.text, request_json)
    }

    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(&self, request_json: &str, parse_special_in_messages: bool) -> Result<String, JsValue> {
        crate::wasm::chat::chat_prompt(&self.text, request_json, parse_special_in_messages)
    }
}

/// The first bytes of `array`, as many as a header may take, copied into wasm memory.
fn header_prefix(array: &js_sys::Uint8Array) -> Result<Vec<u8>, JsValue> {
    // `subarray` clamps its end to the array's length.
    let head = array.subarray(0, MAX_HEADER_FILE_BYTES as u32);
    bytes_from_js(&head, MAX_HEADER_FILE_BYTES, "a GGUF header").map_err(js_error)
}

/// The text facts of every engine's `info()`: `{name, architecture, vocab_size, has_chat_template, bos, eos,
/// context_length, parameters, quantization}` (`bos`, `eos`: ids, or null where the vocabulary has none;
/// `context_length`, `quantization`: null where the header has none).
pub(crate) fn info(text: &TextModel) -> serde_json::Map<String, serde_json::Value> {
    let t = text.tokenizer();
    let weights = text.weights();
    let serde_json::Value::Object(info) = serde_json::json!({
        "name": text.name(), "architecture": text.architecture(), "vocab_size": t.vocab_size(),
        "has_chat_template": text.chat_template().is_ok(), "bos": t.bos(), "eos": t.eos(),
        "context_length": text.context_length(), "parameters": weights.parameters, "quantization": weights.quantization,
    }) else {
        unreachable!("json! of braces is an object")
    };
    info
}

/// Token ids of `s`; control-token text parsed as those tokens with `parse_special`.
pub(crate) fn tokenize(text: &TextModel, s: &str, parse_special: bool) -> Result<Vec<u32>, JsValue> {
    text.tokenizer().encode(s, parse_special).map_err(js_error)
}

/// A prompt's ids as generation tokenizes one: special tokens parsed, BOS/EOS as the model asks.
pub(crate) fn tokenize_prompt(text: &TextModel, s: &str) -> Result<Vec<u32>, JsValue> {
    text.tokenizer().encode_with_special(s, true).map_err(js_error)
}

pub(crate) fn detokenize(text: &TextModel, ids: &[u32]) -> Result<String, JsValue> {
    text.tokenizer().decode(ids).map_err(js_error)
}
