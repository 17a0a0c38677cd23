//! Bad input gets a typed error that names the problem: never a panic, never an allocation sized
//! by an unchecked count. Runs natively and on wasm32 (Node).

#[path = "support/mod.rs"]
mod support;

use std::sync::OnceLock;

use ruvllm::gguf::Gguf;
use ruvllm::{ChatTemplate, Error, GenerateOptions, Model, Session, SessionOptions};
use support::default_model as model;
use support::gguf_writer::{GgufWriter, Meta};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| support::read_file(&support::model_path()))
}

fn gguf_error(bytes: &[u8]) -> String {
    match Model::from_bytes(bytes.to_vec()) {
        Err(Error::Gguf(m)) => m,
        Err(e) => panic!("expected a GGUF error, got {e:?}"),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn truncated_files_are_rejected_at_every_cut() {
    let bytes = model_bytes();
    for cut in [0, 3, 7, 23, 100, 4096, 1 << 20, bytes.len() / 2, bytes.len() - 1] {
        let msg = gguf_error(&bytes[..cut]);
        assert!(
            msg.contains("truncated")
                || msg.contains("shorter")
                || msg.contains("past the end")
                || msg.contains("cannot fit"),
            "cut at {cut}: {msg}"
        );
    }
}

#[test]
fn wrong_magic_and_unsupported_versions_are_named() {
    let mut bytes = model_bytes()[..64].to_vec();
    bytes[..4].copy_from_slice(b"GGML");
    assert!(gguf_error(&bytes).contains("bad magic"));
    for v in [1u32, 4, 1000] {
        let mut w = GgufWriter::new();
        w.version = v;
        let msg = gguf_error(&w.bytes());
        assert!(msg.contains(&format!("unsupported GGUF version {v}")), "{msg}");
    }
}

#[test]
fn absurd_counts_and_lengths_do_not_allocate() {
    // Tensor and metadata counts of u64::MAX.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(u64::MAX.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    assert!(gguf_error(&b).contains("cannot fit"));
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((1u64 << 60).to_le_bytes());
    assert!(gguf_error(&b).contains("cannot fit"));
    // A string whose length runs past the end, and an array of 2^62 elements.
    let w = GgufWriter::new().meta("general.name", Meta::Str("x".repeat(8)));
    let mut b = w.bytes();
    let len_at = 4 + 4 + 8 + 8 + 8 + "general.name".len() + 4;
    b[len_at..len_at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    assert!(gguf_error(&b).contains("runs past the end"), "{}", gguf_error(&b));
    let w = GgufWriter::new().meta("a", Meta::I32Array(vec![1, 2, 3]));
    let mut b = w.bytes();
    let count_at = 4 + 4 + 8 + 8 + 8 + 1 + 4 + 4;
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(gguf_error(&b).contains("cannot fit"));
}

#[test]
fn tensor_past_the_end_and_unknown_types_are_named() {
    // 64 F32 values declared, 16 present.
    let w = GgufWriter::new().tensor("t", &[64], 0, vec![0u8; 64]);
    let b = w.bytes();
    let msg = gguf_error(&b);
    assert!(msg.contains("tensor 't'") && msg.contains("past the end"), "{msg}");
    let w = GgufWriter::new().tensor("weird", &[32], 99, vec![0u8; 32]);
    match Model::from_bytes(w.bytes()) {
        Err(Error::UnsupportedTensorType { tensor, type_id }) => {
            assert_eq!((tensor.as_str(), type_id), ("weird", 99))
        }
        other => panic!("{:?}", other.err()),
    }
    // A row length that is not a whole number of blocks (Q4_0 has 32 per block).
    let w = GgufWriter::new().tensor("odd", &[48], 2, vec![0u8; 36]);
    assert!(gguf_error(&w.bytes()).contains("block size"));
}

#[test]
fn unsupported_architecture_is_named() {
    let w = GgufWriter::new().meta("general.architecture", Meta::Str("mamba".into()));
    match Model::from_bytes(w.bytes()) {
        Err(e @ Error::UnsupportedArchitecture(_)) => assert!(e.to_string().contains("mamba")),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn missing_chat_template_is_a_clear_error() {
    let g = Gguf::parse(&GgufWriter::new().meta("general.architecture", Meta::Str("llama".into())).bytes()).unwrap();
    match ChatTemplate::from_gguf(&g) {
        Err(e @ Error::ChatTemplate(_)) => {
            assert!(e.to_string().contains("no chat template"), "{e}")
        }
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn token_ids_out_of_range_are_refused() {
    let model = model();
    let mut s = Session::new(model.clone());
    assert_eq!(s.eval(&[1, 49152], false).unwrap_err(), Error::TokenOutOfRange { id: 49152, vocab_size: 49152 });
    assert!(s.tokens().is_empty(), "nothing was evaluated");
    assert!(matches!(model.tokenizer().decode(&[5, 100_000]), Err(Error::TokenOutOfRange { id: 100_000, .. })));
    // The session is still usable.
    assert_eq!(s.eval(&[1, 2, 3], false).unwrap().len(), 49152);
}

#[test]
fn prompts_longer_than_the_context_are_refused() {
    let model = model();
    let mut s = Session::with_options(model, &SessionOptions { n_ctx: 16, n_batch: 8 }).unwrap();
    let ids: Vec<u32> = (100..117).collect();
    assert_eq!(s.eval(&ids, false).unwrap_err(), Error::ContextOverflow { needed: 17, context: 16 });
    assert!(matches!(s.start(&ids[..16], GenerateOptions::default()), Err(Error::ContextOverflow { .. })));
    // A prompt that fits leaves room to generate until the window is full, then stops with "length".
    let out = s
        .generate(&ids[..12], GenerateOptions { max_tokens: 100, ignore_eog: true, ..Default::default() }, None, |_| {})
        .unwrap();
    assert_eq!(out.finish, ruvllm::FinishReason::Length);
    assert!(s.tokens().len() <= 16);
}
