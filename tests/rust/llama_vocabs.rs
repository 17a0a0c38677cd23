//! llama.cpp's own tokenizer tests (test-tokenizer-0): the vocab-only GGUFs of its models/ folder, from the
//! llama-cpp-python release that `scripts/fetch-llama-cpp.sh vocabs` extracts into the directory
//! $RUVLLM_LLAMA_VOCABS. Each `ggml-vocab-NAME.gguf` loads through the public API; its `.inp` cases (joined by
//! `\n__ggml_vocab_test__\n`) tokenize, without BOS and with special tokens left as text, to the ids of the
//! same line of its `.out`, every one. The vocabularies this crate does not implement are listed in REFUSED and
//! must be refused with a typed error. Natively, every vocabulary of the folder must be listed here.

#[path = "support/mod.rs"]
mod support;

use ruvllm::gguf::Gguf;
use ruvllm::tokenizer::Tokenizer;
use ruvllm::Error;
use support::test;

/// Every vocabulary of the pinned release that this crate tokenizes as llama.cpp does, with its number of
/// test cases (0: a vocabulary without a .inp, which only has to load).
const EXACT: &[(&str, usize)] = &[
    ("aquila", 0),
    ("baichuan", 0),
    ("bert-bge", 46),
    ("command-r", 46),
    ("deepseek-coder", 46),
    ("deepseek-llm", 46),
    ("falcon", 46),
    ("gemma-4", 46),
    ("gpt-2", 46),
    ("gpt-neox", 0),
    ("llama-bpe", 46),
    ("llama-spm", 46),
    ("mpt", 46),
    ("nomic-bert-moe", 0), // the unigram (t5) one: its cases are llama.cpp's own, in ugm-reference.json (below)
    ("phi-3", 46),
    ("qwen2", 46),
    ("qwen35", 50),
    ("refact", 46),
    ("starcoder", 46),
];

/// The vocabularies refused, each with a text its error must contain and why it is not implemented.
const REFUSED: &[(&str, &str)] = &[];

/// How many mismatching cases of one vocabulary a failure shows.
const SHOWN_MISMATCHES: usize = 5;

fn vocab_dir() -> String {
    support::env("RUVLLM_LLAMA_VOCABS").unwrap_or_else(|| {
        panic!(
            "RUVLLM_LLAMA_VOCABS is unset: set it to the directory that `scripts/fetch-llama-cpp.sh vocabs` prints \
             (scripts/test.sh does)"
        )
    })
}

fn load(dir: &str, name: &str) -> ruvllm::Result<Tokenizer> {
    let path = format!("{dir}/ggml-vocab-{name}.gguf");
    Tokenizer::from_gguf(&Gguf::parse(&support::read_file(&path)).unwrap_or_else(|e| panic!("{path}: {e}")))
}

/// The cases of `ggml-vocab-NAME.gguf.inp` with the ids of `.out`, split as test-tokenizer-0 does.
fn cases(dir: &str, name: &str) -> Vec<(String, Vec<u32>)> {
    let path = format!("{dir}/ggml-vocab-{name}.gguf");
    let text = |ext: &str| {
        let file = format!("{path}.{ext}");
        String::from_utf8(support::read_file(&file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    };
    let (inp, out) = (text("inp"), text("out"));
    // The input ends with the separator, so it leaves no empty last case (test-tokenizer-0's split).
    let sep = "\n__ggml_vocab_test__\n";
    let mut texts: Vec<&str> = inp.split(sep).collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|line| {
            line.split_whitespace().map(|id| id.parse().unwrap_or_else(|e| panic!("{path}.out: {e}"))).collect()
        })
        .collect();
    assert_eq!(texts.len(), ids.len(), "{path}: .inp and .out differ in their number of cases");
    texts.into_iter().map(String::from).zip(ids).collect()
}

#[test]
fn llama_cpp_vocabs_tokenize_as_llama_cpp_or_are_refused() {
    let dir = vocab_dir();
    // Natively, also check that no vocabulary there goes untested.
    #[cfg(not(target_arch = "wasm32"))]
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(name) = file.strip_prefix("ggml-vocab-").and_then(|f| f.strip_suffix(".gguf")) {
            let listed = EXACT.iter().any(|&(n, _)| n == name) || REFUSED.iter().any(|&(n, _)| n == name);
            assert!(listed, "{dir}/{file} is neither in EXACT nor in REFUSED");
        }
    }
    let mut failures = Vec::new();
    for &(name, n_cases) in EXACT {
        let tokenizer = match load(&dir, name) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: refused: {e}"));
                continue;
            }
        };
        if n_cases == 0 {
            continue;
        }
        let cases = cases(&dir, name);
        let mut mismatches = Vec::new();
        for (text, want) in &cases {
            let got = tokenizer.encode(text, false).unwrap_or_else(|e| panic!("{name}: {text:?}: {e}"));
            if &got != want {
                mismatches.push(format!("  {text:?}\n    got  {got:?}\n    want {want:?}"));
            }
        }
        if cases.len() != n_cases || !mismatches.is_empty() {
            let shown = mismatches.iter().take(SHOWN_MISMATCHES).cloned().collect::<Vec<_>>().join("\n");
            failures.push(format!(
                "{name}: {} of {} cases equal ({n_cases} expected){}{shown}",
                cases.len() - mismatches.len(),
                cases.len(),
                if shown.is_empty() { "" } else { ":\n" }
            ));
        }
    }
    for &(name, why) in REFUSED {
        match load(&dir, name) {
            Err(Error::Tokenizer(e)) if e.contains(why) => {}
            Err(e) => failures.push(format!("{name}: refused, but not by a tokenizer error naming {why:?}: {e}")),
            Ok(_) => failures.push(format!("{name}: loads: move it from REFUSED to EXACT")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// llama.cpp's tokenizations with its suite's unigram (`t5`) vocabulary, nomic-bert-moe's (XLM-RoBERTa's pieces and
/// SentencePiece's precompiled character map), which the suite ships without cases (tests/fixtures/ugm-reference.json,
/// written by ugm_reference.mjs): the llama-bpe inputs and texts the map rewrites, tokenized with and without special
/// tokens parsed, and decoded; and the BOS and EOS the file asks for.
#[test]
fn the_unigram_vocabulary_tokenizes_and_decodes_as_llama_cpp() {
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/ugm-reference.json")).expect("ugm-reference.json");
    let dir = vocab_dir();
    let path = format!("{dir}/{}", reference["file"].as_str().unwrap());
    let bytes = support::read_file_made_for(&path, &reference["sha256"], "ugm_reference.mjs");
    let tokenizer = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).expect("the unigram vocabulary loads");
    let cases = reference["cases"].as_array().expect("cases");
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, special) in [("ids", false), ("special", true)] {
            let want: Vec<u32> = serde_json::from_value(case[key].clone()).unwrap();
            let got = tokenizer.encode(text, special).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            if got != want {
                failures.push(format!("{text:?} ({key})\n    got  {got:?}\n    want {want:?}"));
            }
        }
        let ids: Vec<u32> = serde_json::from_value(case["special"].clone()).unwrap();
        let decoded = tokenizer.decode(&ids).unwrap();
        if decoded != case["decoded"].as_str().unwrap() {
            failures.push(format!("{text:?} decoded\n    got  {decoded:?}\n    want {:?}", case["decoded"]));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // The file asks for BOS (<s>, 0) and EOS (</s>, 2); unknown is <unk> (3).
    assert_eq!(tokenizer.encode_with_special("x", false).unwrap(), [0, 1022, 2]);
    assert_eq!(tokenizer.encode("\u{1F9FF}\u{1F9FF}", false).unwrap(), [6, 3], "one unknown for a run of them");
}

/// llama.cpp's tokenizations through the pre-tokenizers its suite has no vocabulary for, Tekken's and GPT-4o's
/// (tests/fixtures/tiny-pre-reference.json, written by pre_tokenizer_reference.mjs): this suite's llama-bpe inputs and
/// cases of letter case, contractions, digits and slashes, on make_tiny_models.py's vocabulary-only GGUFs, whose
/// merges cross the places where these split and others do not.
#[test]
fn tekken_and_gpt_4o_pre_tokenizers_equal_llama_cpp() {
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/tiny-pre-reference.json")).expect("tiny-pre-reference.json");
    let mut failures = Vec::new();
    for (file, entry) in reference["vocabs"].as_object().expect("vocabs") {
        let bytes = support::tiny::read_fixture_made_for(file, &entry["sha256"], "pre_tokenizer_reference.mjs");
        let tokenizer = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap_or_else(|e| panic!("{file}: {e}"));
        let cases = entry["cases"].as_array().expect("cases");
        assert!(cases.len() >= 50, "{file}: {} cases", cases.len());
        for case in cases {
            let text = case["text"].as_str().unwrap();
            let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
            let got = tokenizer.encode(text, false).unwrap_or_else(|e| panic!("{file}: {text:?}: {e}"));
            if got != want {
                failures.push(format!("{file}: {text:?}\n    got  {got:?}\n    want {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
