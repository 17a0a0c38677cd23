//! llama.cpp's own GBNF grammars (its grammars/*.gbnf, from the llama-cpp-python release that
//! `scripts/fetch-llama-cpp.sh grammars` extracts into the directory $RUVLLM_LLAMA_GRAMMARS): each translates to
//! Lark, compiles in llguidance, takes a sample text and refuses a near miss. Skipped, with a notice, when
//! the variable is unset.

#[path = "support/mod.rs"]
mod support;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::ApproximateTokEnv;
use llguidance::{Matcher, ParserFactory};
use ruvllm::constraint::gbnf::gbnf_to_lark;
use support::test;

/// Every grammar of the pinned release: a text it takes and one it refuses.
const SAMPLES: &[(&str, &str, &str)] = &[
    // A line ends in ")" here: after a name or a number, the greedy terminal of it and its trailing
    // `ws` would take the newline as well (see constraint::gbnf on greedy terminals).
    ("arithmetic.gbnf", "(a +12) *b1 = (x)\ny=(2)\n", "x = (a +12) *b1\n"),
    ("c.gbnf", "int main(int argc){x = 1;while(x<10){x = x+1;}return x;}", "int main(){return x}"),
    ("chess.gbnf", "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n", "1. e4 e5\n"),
    ("english.gbnf", "Hello, world! (It's 42.)", "Hello,  world"),
    ("japanese.gbnf", "こんにちは 世界、カタカナ", "こんにちは world"),
    ("json.gbnf", r#"{"a": [1, -2.5, 3e5, true, null], "b": {"c": "d\n\u00e9"}}"#, r#"{"a": [1,]}"#),
    ("json_arr.gbnf", "[\n{\"a\": 1},\n\"x\",\n[false, 2]]", "[{\"a\": 1}]"),
    ("list.gbnf", "- one\n- two items\n", "- one\n-two\n"),
];

fn matcher(lark: &str) -> Matcher {
    let mut factory = ParserFactory::new_simple(&ApproximateTokEnv::single_byte_env()).unwrap();
    factory.quiet();
    let parser = factory.create_parser(TopLevelGrammar::from_lark(lark.to_string()));
    Matcher::new(Ok(parser.unwrap_or_else(|e| panic!("llguidance refused it: {e}\n{lark}"))))
}

/// Whether the grammar takes `text` whole, one byte (= one token of the test tokenizer) at a time.
fn accepts(lark: &str, text: &str) -> bool {
    let mut matcher = matcher(lark);
    for token in text.bytes().map(u32::from) {
        let Ok(mask) = matcher.compute_mask_or_eos() else { return false };
        if !mask.is_allowed(token) || matcher.consume_token(token).is_err() {
            return false;
        }
    }
    matcher.is_accepting().unwrap_or(false)
}

#[test]
fn llama_cpp_grammars_translate_compile_and_accept() {
    let Some(dir) = support::env("RUVLLM_LLAMA_GRAMMARS") else {
        eprintln!(
            "skipped: RUVLLM_LLAMA_GRAMMARS is unset (set it to the directory that `scripts/fetch-llama-cpp.sh \
             grammars` prints)"
        );
        return;
    };
    // Natively, also check that no grammar there goes untested.
    #[cfg(not(target_arch = "wasm32"))]
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".gbnf") {
            assert!(SAMPLES.iter().any(|&(file, ..)| file == name), "{dir}/{name} has no sample here");
        }
    }
    for &(file, good, bad) in SAMPLES {
        let path = format!("{dir}/{file}");
        let gbnf = String::from_utf8(support::read_file(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let lark = gbnf_to_lark(&gbnf).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(accepts(&lark, good), "{file} refused {good:?}\n{lark}");
        assert!(!accepts(&lark, bad), "{file} accepted {bad:?}\n{lark}");
    }
}
