//! The text side alone (`TextModel`), read from a GGUF's header without the weights: the tiny models and the default
//! model give, from a prefix of the file grown as each `Prefix::Need` asks, the text side the loaded model has (the
//! same ids as the reference tokenizers', the same chat prompts, with tools too); a vocabulary-only file, which a
//! `Model` refuses (it has no weights), loads; a prefix that ends inside the header, or a damaged header, is a typed
//! error or a request for more bytes, never a panic.
//! Runs natively and on wasm32, with the same expectations on both.

#[path = "support/mod.rs"]
mod support;

use ruvllm::gguf::{Gguf, Prefix, MAX_HEADER_FILE_BYTES};
use ruvllm::{ChatMessage, Error, Model, RenderOptions, TextModel, ToolChoice, ToolSpec, ToolUse, WeightsSummary};
use serde_json::json;

use support::gguf_writer::{GgufWriter, Meta};
use support::test;
use support::test_support::Rng;
use support::tiny::{fixtures_dir, ids, load, GEMMA3, LLAMA3, LLAMA_SPM, PHI3, QWEN2, QWEN3};

const QWEN3_TEMPLATE: &str = include_str!("../fixtures/templates/Qwen-Qwen3-0.6B.jinja");

/// Texts every vocabulary tokenizes: plain, control-token markup, code, scripts beyond Latin, emoji.
const TEXTS: [&str; 6] = [
    "Hello, world! The quick brown fox.",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}",
    "東京は日本の首都です。 Ελληνικά, русский, العربية",
    "emoji 🦀🎉 and   spaces\t\ttabs",
    "",
];

/// The text side of `bytes` as a header reader gets it: from a prefix of 1 KiB, grown to at least what each
/// `Prefix::Need` asks (and at least doubled, as the package's reader does). Each need is more than the prefix
/// and no more than the header. Returns the text side and the prefix it was read from.
fn read_as_prefixes(bytes: &[u8]) -> (TextModel, usize) {
    let header = Gguf::parse(bytes).expect("a whole file parses").header_bytes;
    let mut len = bytes.len().min(1024);
    loop {
        match TextModel::from_header(&bytes[..len]).unwrap() {
            Prefix::Complete(text) => {
                assert!(len >= header, "complete from {len} bytes of a {header}-byte header");
                return (text, len);
            }
            Prefix::Need(n) => {
                assert!(len < n && n <= header, "a prefix of {len} bytes needs {n} of a {header}-byte header");
                len = n.max(2 * len).min(bytes.len());
            }
        }
    }
}

/// `text` tokenizes, detokenizes and renders chats as `model` does.
fn same_text_side(model: &Model, text: &TextModel, what: &str) {
    let (m, t) = (model.tokenizer(), text.tokenizer());
    assert_eq!((text.name(), text.architecture()), (model.name(), model.config.arch.name()), "{what}");
    assert_eq!(
        (t.vocab_size(), t.bos(), t.eos(), t.eog_ids()),
        (m.vocab_size(), m.bos(), m.eos(), m.eog_ids()),
        "{what}"
    );
    for s in TEXTS {
        for special in [false, true] {
            let ids = m.encode(s, special).unwrap();
            assert_eq!(t.encode(s, special).unwrap(), ids, "{what}: {s:?}");
            assert_eq!(t.encode_with_special(s, special).unwrap(), m.encode_with_special(s, special).unwrap());
            assert_eq!(t.decode(&ids).unwrap(), m.decode(&ids).unwrap(), "{what}: {s:?}");
        }
    }
    assert_eq!(text.chat_template().is_ok(), model.chat_template().is_ok(), "{what}");
    if model.chat_template().is_err() {
        return;
    }
    let chat = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi <|im_end|> there")];
    for trusted in [false, true] {
        let ids = model.text().chat_prompt_ids(&chat, &RenderOptions::default(), trusted).unwrap();
        assert_eq!(text.chat_prompt_ids(&chat, &RenderOptions::default(), trusted).unwrap(), ids, "{what}");
    }
    let tools = RenderOptions { tools: tools(), ..RenderOptions::default() };
    let ask = [ChatMessage::new("user", "What is the weather in Paris?")];
    for choice in [ToolChoice::Auto, ToolChoice::Required, ToolChoice::None] {
        let tool_use = ToolUse { choice, parallel: false };
        let prompt = model.text().chat_prompt(&ask, &tools, &tool_use, false).unwrap();
        assert_eq!(text.chat_prompt(&ask, &tools, &tool_use, false).unwrap(), prompt, "{what}: {tool_use:?}");
        let rendered = model.text().chat_prompt_text(&ask, &tools, &tool_use).unwrap();
        assert_eq!(text.chat_prompt_text(&ask, &tools, &tool_use).unwrap(), rendered, "{what}");
    }
}

fn tools() -> Vec<ToolSpec> {
    let weather = json!([{ "type": "function", "function": { "name": "get_weather",
        "parameters": { "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] } } }]);
    ToolSpec::parse_list(&weather).unwrap()
}

#[test]
fn the_tiny_models_text_sides_read_from_their_headers_are_the_loaded_models() {
    for file in [LLAMA_SPM, QWEN2, QWEN3, LLAMA3, PHI3, GEMMA3] {
        let (model, entry) = load(file);
        let bytes = support::read_file(&format!("{}/{file}", fixtures_dir()));
        let (text, read) = read_as_prefixes(&bytes);
        assert!(read < bytes.len(), "{file}: read {read} of {} bytes", bytes.len());
        same_text_side(&model, &text, file);
        // The reference tokenizers' ids (sentencepiece, HF tokenizers), as tests/rust/tiny_models.rs checks the model's.
        for case in entry["tokenize"].as_array().unwrap() {
            let s = case["text"].as_str().unwrap();
            let special = case["parse_special"].as_bool().unwrap();
            assert_eq!(text.tokenizer().encode(s, special).unwrap(), ids(&case["ids"]), "{file}: {s:?}");
        }
        // A template given instead of the file's applies to the text side alone as to the model.
        let qwen = Model::from_bytes(bytes.clone()).unwrap().with_chat_template(QWEN3_TEMPLATE).unwrap();
        same_text_side(
            &qwen,
            &text.with_chat_template(QWEN3_TEMPLATE).unwrap(),
            &format!("{file} with Qwen 3's template"),
        );
    }
}

#[test]
fn the_default_models_text_side_reads_its_header_only_and_matches_llama_cpp() {
    let model = support::default_model();
    let bytes = support::read_file(&support::model_path());
    let (text, read) = read_as_prefixes(&bytes);
    // The header (vocabulary and merges) is under 2% of the file; the reader doubles at most past it.
    let header = Gguf::parse(&bytes).unwrap().header_bytes;
    assert!(read <= 2 * header && header < bytes.len() / 50, "read {read}, header {header}, file {}", bytes.len());
    same_text_side(&model, &text, "the default model");
    // What a catalogue shows before a download: SmolLM2-135M, trained at 8,192 positions, its matrices in Q4_1.
    assert_eq!(text.context_length(), Some(8192));
    let weights = text.weights();
    assert_eq!(weights.quantization, Some("Q4_1"));
    assert!((134_000_000..136_000_000).contains(&weights.parameters), "{weights:?}");
    let reference = support::reference_dir();
    for case in support::read_json(&format!("{reference}/tokenizer.json")).as_array().unwrap() {
        let s = case["text"].as_str().unwrap();
        let special = case["parse_special"].as_bool().unwrap();
        assert_eq!(text.tokenizer().encode(s, special).unwrap(), ids(&case["ids"]), "{s:?}");
    }
    for prompt in support::read_json(&format!("{reference}/logits.json"))["prompts"].as_array().unwrap() {
        let s = prompt["prompt"].as_str().unwrap();
        assert_eq!(text.tokenizer().encode(s, true).unwrap(), ids(&prompt["prompt_ids"]), "{s:?}");
    }
}

/// A vocabulary-only GGUF of the model in `bytes`, as llama.cpp's tokenizer tests ship them (`ggml-vocab-*.gguf`):
/// its metadata, no tensor.
fn vocab_only(bytes: &[u8]) -> Vec<u8> {
    let g = Gguf::parse(bytes).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in &g.metadata {
        w = w.meta(key, Meta::of(value).unwrap());
    }
    w.bytes()
}

#[test]
fn a_vocabulary_only_file_is_no_model_but_has_the_models_text_side() {
    for (file, model) in [(QWEN2, load(QWEN2).0), ("the default model", support::default_model())] {
        let path = if file == QWEN2 { format!("{}/{QWEN2}", fixtures_dir()) } else { support::model_path() };
        let vocab = vocab_only(&support::read_file(&path));
        assert!(Gguf::parse(&vocab).unwrap().tensors.is_empty());
        let refused = Model::from_bytes(vocab.clone()).err().expect("a file without weights is no model");
        assert!(refused.to_string().contains("token_embd.weight"), "{file}: {refused}");
        let text = TextModel::from_bytes(&vocab).unwrap();
        same_text_side(&model, &text, file);
        assert_eq!(text.weights(), WeightsSummary { parameters: 0, quantization: None }, "{file}");
        assert_eq!(text.context_length(), Some(model.config.context_length as u64), "{file}");
        same_text_side(&model, &read_as_prefixes(&vocab).0, file);
    }
}

#[test]
fn a_prefix_ending_inside_the_header_asks_for_more_and_a_short_file_is_a_gguf_error() {
    let vocab = vocab_only(&support::read_file(&format!("{}/{LLAMA_SPM}", fixtures_dir())));
    let header = Gguf::parse(&vocab).unwrap().header_bytes;
    let mut rng = Rng::new(7);
    let cuts = (0..24).chain((0..200).map(|_| (rng.next_u64() % header as u64) as usize)).chain([header - 1]);
    for cut in cuts {
        let Prefix::Need(n) = TextModel::from_header(&vocab[..cut]).unwrap() else { panic!("cut {cut}: complete") };
        assert!(cut < n && n <= header, "cut {cut}: need {n} of {header}");
        let e = TextModel::from_bytes(&vocab[..cut]).unwrap_err();
        assert!(matches!(e, Error::Gguf(ref m) if m.contains("truncated")), "cut {cut}: {e}");
    }
    assert!(matches!(TextModel::from_bytes(b"PK\x03\x04 not a gguf"), Err(Error::Gguf(m)) if m.contains("magic")));
    // A header without a vocabulary is the tokenizer's error.
    let bare = GgufWriter::new().meta("general.architecture", Meta::Str("llama".into())).bytes();
    assert!(matches!(TextModel::from_bytes(&bare), Err(Error::Tokenizer(_))));
}

#[test]
fn a_damaged_header_is_an_error_or_a_request_for_a_bounded_prefix_never_a_panic() {
    let vocab = vocab_only(&support::read_file(&format!("{}/{QWEN2}", fixtures_dir())));
    let mut rng = Rng::new(11);
    let (mut refused, mut asked, mut read) = (0, 0, 0);
    for _ in 0..300 {
        let mut damaged = vocab.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            // Most of a header's counts and lengths are in its first bytes and around each key; damage anywhere.
            let at = (rng.next_u64() % damaged.len() as u64) as usize;
            damaged[at] = rng.next_u64() as u8;
        }
        match TextModel::from_header(&damaged) {
            Err(_) => refused += 1,
            Ok(Prefix::Need(n)) => {
                assert!(n > damaged.len() && n <= MAX_HEADER_FILE_BYTES, "{n}");
                asked += 1;
            }
            Ok(Prefix::Complete(text)) => {
                let ids = text.tokenizer().encode(TEXTS[1], true).unwrap();
                text.tokenizer().decode(&ids).unwrap();
                let _ = text.chat_prompt_ids(&[ChatMessage::new("user", "hi")], &RenderOptions::default(), false);
                read += 1;
            }
        }
    }
    assert!(refused > 0 && read > 0, "refused {refused}, asked for more {asked}, read {read}");
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn from_file_reads_a_header_alone_and_refuses_a_file_that_ends_inside_it() {
    let bytes = support::read_file(&support::model_path());
    let header = Gguf::parse(&bytes).unwrap().header_bytes;
    let dir = std::env::temp_dir().join(format!("ruvllm-text-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (head, short) = (dir.join("head.gguf"), dir.join("short.gguf"));
    // The file's header and none of its tensor data: enough for the text side, not for the model.
    std::fs::write(&head, &bytes[..header]).unwrap();
    std::fs::write(&short, &bytes[..header - 1]).unwrap();
    let text = TextModel::from_file(&head).unwrap();
    assert!(Model::from_file(&head).is_err());
    same_text_side(&support::default_model(), &text, "the header file");
    assert!(matches!(TextModel::from_file(&short), Err(Error::Gguf(m)) if m.contains("truncated")));
    assert!(matches!(TextModel::from_file(dir.join("absent.gguf")), Err(Error::Io(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}
