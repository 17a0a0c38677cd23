#![no_main]
//! The tokenizers of real vocabularies: the default model's (byte-level BPE, SmolLM2), the two tiny test
//! models' (SentencePiece llama, byte-level BPE qwen2), tiny-qwen2's under the tekken and gpt-4o pre-tokenizers
//! (vocab-*.gguf) and the unigram one of llama.cpp's suite (nomic-bert-moe's: XLM-RoBERTa's pieces and precompiled
//! character map), loaded once. The input picks a vocabulary, encodes a
//! text with and without special-token parsing, and decodes arbitrary ids, whole and streamed.
//!
//! Files: $RUVLLM_MODEL (default ~/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf), $RUVLLM_FIXTURES (default
//! target/fixtures, where scripts/test.sh writes the tiny models) and $RUVLLM_LLAMA_VOCABS (what
//! `scripts/fetch-llama-cpp.sh vocabs` prints). Missing files are skipped; none at all panics.

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ruvllm::gguf::Gguf;
use ruvllm::tokenizer::Tokenizer;

struct Vocab {
    tokenizer: Tokenizer,
    /// decode(encode(text)) == text, and streaming decodes to what decode does: byte-level BPE without
    /// llama.cpp's space clean-up (SmolLM2's `smollm` and qwen2's pre-tokenizers) loses nothing, for texts
    /// whose every byte has a token (SmolLM2 has none for most ASCII control characters: llama.cpp drops them).
    /// SentencePiece does not promise it: it adds a space after user-defined tokens, decodes a literal "▁" as a
    /// space and drops the first space on decode.
    round_trip: bool,
    /// The bytes some token renders to alone.
    has_byte: [bool; 256],
}

fn vocabs() -> &'static [Vocab] {
    static VOCABS: OnceLock<Vec<Vocab>> = OnceLock::new();
    VOCABS.get_or_init(|| {
        let model = std::env::var("RUVLLM_MODEL").unwrap_or_else(|_| {
            format!("{}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf", std::env::var("HOME").unwrap_or_default())
        });
        let fixtures = std::env::var("RUVLLM_FIXTURES")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/fixtures").into());
        let files = [
            (model, true),
            (format!("{fixtures}/tiny-llama-spm.gguf"), false),
            (format!("{fixtures}/tiny-qwen2.gguf"), true),
            (format!("{fixtures}/vocab-tekken.gguf"), true),
            (format!("{fixtures}/vocab-gpt-4o.gguf"), true),
            (
                format!("{}/ggml-vocab-nomic-bert-moe.gguf", std::env::var("RUVLLM_LLAMA_VOCABS").unwrap_or_default()),
                false,
            ),
        ];
        let mut vocabs = Vec::new();
        for (path, round_trip) in files {
            let Ok(bytes) = std::fs::read(&path) else {
                eprintln!("tokenizer target: {path} is absent, skipping its vocabulary");
                continue;
            };
            let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
            let tokenizer = Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{path}: {e}"));
            let mut has_byte = [false; 256];
            for id in 0..tokenizer.vocab_size() as u32 {
                if let [b] = tokenizer.token_bytes(id).unwrap() {
                    has_byte[*b as usize] = true;
                }
            }
            vocabs.push(Vocab { tokenizer, round_trip, has_byte });
        }
        assert!(
            !vocabs.is_empty(),
            "no vocabulary to fuzz: set RUVLLM_MODEL to a GGUF model or RUVLLM_FIXTURES to the tiny models' folder \
             (scripts/test.sh writes them)"
        );
        vocabs
    })
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    vocab: u8,
    ids: Vec<u32>,
    text: &'a str,
}

fuzz_target!(|input: Input| {
    let vocabs = vocabs();
    let Vocab { tokenizer: t, round_trip, has_byte } = &vocabs[input.vocab as usize % vocabs.len()];
    let n = t.vocab_size() as u32;
    for parse_special in [false, true] {
        let ids = t.encode(input.text, parse_special).unwrap();
        assert!(ids.iter().all(|&id| id < n), "{ids:?}");
        let with_special = t.encode_with_special(input.text, parse_special).unwrap();
        assert!(with_special.len() >= ids.len());
        let text = t.decode(&ids).unwrap();
        if *round_trip && !parse_special && input.text.bytes().all(|b| has_byte[b as usize]) {
            assert_eq!(text, input.text, "{ids:?}");
        }
    }
    let ids: Vec<u32> = input.ids.iter().map(|id| id % n).collect();
    let text = t.decode(&ids).unwrap();
    let mut stream = t.decoder();
    let mut streamed = String::new();
    for &id in &ids {
        streamed += &stream.push(id).unwrap();
    }
    streamed += &stream.finish();
    // The stream renders each token's raw piece; decode also drops a SentencePiece text's first space.
    if *round_trip {
        assert_eq!(streamed, text, "{ids:?}");
    } else {
        assert!(streamed == text || streamed.strip_prefix(' ') == Some(&text), "{streamed:?} vs {text:?}");
    }
    assert_eq!(t.decode(&[n]).unwrap_err(), ruvllm::Error::TokenOutOfRange { id: n, vocab_size: n as usize });
});
