//! Bad input gets a typed error that names the problem: never a panic, never an allocation sized
//! by an unchecked count. Runs natively and on wasm32 (Node).

#[path = "support/mod.rs"]
mod support;

use std::sync::OnceLock;

use ruvllm::gguf::Gguf;
use ruvllm::{ChatTemplate, Error, GenerateOptions, Model, Session, SessionOptions};
use support::default_model as model;
use support::gguf_writer::{GgufWriter, Meta};
use support::test;

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

/// The error of loading `bytes` as a model, which must fail.
fn load_error(bytes: Vec<u8>) -> Error {
    match Model::from_bytes(bytes) {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

/// A llama header with a token embedding of 32 tokens × 64 (no layers, no tokenizer): enough to reach
/// the checks of the config and of the weights.
fn llama(d_model: u32, n_heads: u32, block_count: u32) -> GgufWriter {
    decoder("llama", d_model, n_heads, block_count)
}

/// [`llama`]'s header for architecture `arch`.
fn decoder(arch: &str, d_model: u32, n_heads: u32, block_count: u32) -> GgufWriter {
    GgufWriter::new()
        .meta("general.architecture", Meta::Str(arch.into()))
        .meta(&format!("{arch}.block_count"), Meta::U32(block_count))
        .meta(&format!("{arch}.embedding_length"), Meta::U32(d_model))
        .meta(&format!("{arch}.attention.head_count"), Meta::U32(n_heads))
        .meta(&format!("{arch}.feed_forward_length"), Meta::U32(64))
        .meta(&format!("{arch}.context_length"), Meta::U32(128))
        .tensor("token_embd.weight", &[64, 32], 0, vec![0u8; 64 * 32 * 4])
}

#[test]
fn expert_counts_that_cannot_work_are_model_errors() {
    let moe = |count: u32, used: u32| {
        decoder("qwen3moe", 64, 4, 1)
            .meta("qwen3moe.expert_count", Meta::U32(count))
            .meta("qwen3moe.expert_used_count", Meta::U32(used))
            .meta("qwen3moe.expert_feed_forward_length", Meta::U32(32))
    };
    for (count, used) in [(4, 5), (100_000, 2), (4, 0), (0, 0)] {
        let e = load_error(moe(count, used).bytes());
        assert_eq!(e.code(), "E_MODEL", "{count} experts, {used} used: {e}");
    }
    // Without its expert keys: named. With sound ones the config is read, and the missing layers are the error.
    let e = load_error(decoder("qwen3moe", 64, 4, 1).bytes());
    assert!(e.to_string().contains("qwen3moe.expert_count is missing"), "{e}");
    let e = load_error(moe(4, 2).bytes());
    assert!(e.to_string().contains("block_count 1 needs at least"), "{e}");
}

#[test]
fn granite_multipliers_that_are_not_positive_numbers_and_a_shared_expert_are_model_errors() {
    let granite = || {
        decoder("granitemoe", 64, 4, 1)
            .meta("granitemoe.expert_count", Meta::U32(4))
            .meta("granitemoe.expert_used_count", Meta::U32(2))
    };
    for key in ["embedding_scale", "residual_scale", "attention.scale", "logit_scale"] {
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = load_error(granite().meta(&format!("granitemoe.{key}"), Meta::F32(bad)).bytes());
            assert_eq!(e.code(), "E_MODEL", "{key} = {bad}: {e}");
            assert!(e.to_string().contains(&format!("granitemoe.{key} is {bad}")), "{e}");
        }
    }
    // Granite 4's shared expert is a block this engine does not run: refused, not left out.
    let e = load_error(granite().meta("granitemoe.expert_shared_feed_forward_length", Meta::U32(64)).bytes());
    assert!(e.to_string().contains("shared expert is not supported"), "{e}");
    // Sound multipliers: the config is read, and the missing layers are the error.
    let e = load_error(granite().meta("granitemoe.logit_scale", Meta::F32(6.0)).bytes());
    assert!(e.to_string().contains("block_count 1 needs at least"), "{e}");
}

#[test]
fn block_counts_beyond_the_tensors_present_reserve_nothing() {
    // 2^31 - 1 layers once reserved ~738 GB up front; a layer needs 9 tensors, so the count is checked first.
    for block_count in [i32::MAX as u32, 100_000_000, 1] {
        let e = load_error(llama(64, 4, block_count).bytes());
        assert_eq!(e.code(), "E_MODEL", "{e}");
        assert!(e.to_string().contains(&format!("block_count {block_count} needs")), "{e}");
    }
}

#[test]
fn attention_shapes_that_cannot_work_are_model_errors() {
    // More heads than embedding dimensions: a head dim of 0.
    let e = load_error(llama(64, 128, 1).bytes());
    assert!(matches!(e, Error::Model(ref m) if m.contains("dim 0")), "{e}");
    // n_heads × key_length overflows 32-bit usize (and on 64-bit does not match the weights' shapes).
    let w = llama(64, i32::MAX as u32, 1).meta("llama.attention.key_length", Meta::U32(512));
    assert_eq!(load_error(w.bytes()).code(), "E_MODEL");
    // Zero heads, and an embedding length of 2^31 - 1 over a 64-wide token embedding.
    assert_eq!(load_error(llama(64, 0, 1).bytes()).code(), "E_MODEL");
    let w = llama(i32::MAX as u32, 4, 1).meta("llama.attention.key_length", Meta::U32(16));
    let e = load_error(w.bytes());
    assert!(matches!(e, Error::Model(ref m) if m.contains("token_embd.weight has shape")), "{e}");
}

#[test]
fn tensor_sizes_that_overflow_usize_are_refused() {
    // [2^40, 2^23] F32: 2^63 elements, 2^65 bytes (96 bytes of file). On wasm32 2^40 does not fit in usize;
    // [2^30, 4] F32 is 2^34 bytes, and [2^32 + 32] used to be cut to 32 elements there.
    let w = GgufWriter::new().tensor("big", &[1 << 40, 1 << 23], 0, vec![0u8; 32]);
    let msg = gguf_error(&w.bytes());
    assert!(msg.contains("tensor 'big' of shape [1099511627776, 8388608] has more bytes than memory"), "{msg}");
    for dims in [[1u64 << 30, 4].as_slice(), &[(1 << 32) + 32], &[u64::MAX, u64::MAX], &[1 << 32, 1 << 32]] {
        let w = GgufWriter::new().tensor("big", dims, 0, vec![0u8; 32]);
        let msg = gguf_error(&w.bytes());
        assert!(msg.contains("tensor 'big'"), "{dims:?}: {msg}");
    }
    // Dimension counts of 0, 5 and u32::MAX.
    for n_dims in [0u32, 5, u32::MAX] {
        let mut b = GgufWriter::new().tensor("t", &[32], 0, vec![0u8; 128]).bytes();
        let at = 4 + 4 + 8 + 8 + 8 + 1;
        b[at..at + 4].copy_from_slice(&n_dims.to_le_bytes());
        let msg = gguf_error(&b);
        assert!(msg.contains(&format!("{n_dims} dimensions (1..=4 allowed)")), "{msg}");
    }
}

#[test]
fn tensor_offsets_that_overflow_are_refused() {
    let mut b = GgufWriter::new().tensor("t", &[32], 0, vec![0u8; 128]).bytes();
    let at = 4 + 4 + 8 + 8 + 8 + 1 + 4 + 8 + 4;
    for offset in [!31u64, 1 << 63, (1 << 32) + 32] {
        b[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        let msg = gguf_error(&b);
        assert!(msg.contains("tensor 't'") && msg.contains("past the end"), "{offset}: {msg}");
    }
}

#[test]
fn headers_that_would_take_too_much_memory_are_refused() {
    // 5M one-byte array elements fit in the file but would be 5M parsed values (160 MB on 64-bit).
    let w = GgufWriter::new().meta("a", Meta::U8Array(vec![0; 5 << 20]));
    let msg = gguf_error(&w.bytes());
    assert!(msg.contains("metadata 'a': array elements") && msg.contains("past 256 MiB"), "{msg}");
    // A vocabulary of 2^40 tokens, and a string of length u64::MAX.
    let w = GgufWriter::new().meta("tokenizer.ggml.tokens", Meta::StrArray(vec!["a".into()]));
    let mut b = w.bytes();
    let count_at = 4 + 4 + 8 + 8 + 8 + "tokenizer.ggml.tokens".len() + 4 + 4;
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(gguf_error(&b).contains("cannot fit"));
    b[count_at..count_at + 8].copy_from_slice(&1u64.to_le_bytes());
    b[count_at + 8..count_at + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(gguf_error(&b).contains("runs past the end"));
}

// Inputs found by the fuzz targets (fuzz/, scripts/fuzz.sh).

#[test]
fn bytes_the_vocabulary_cannot_spell_are_dropped() {
    // SmolLM2's byte-level vocabulary has no token for most ASCII control characters: their bytes are dropped
    // (as llama.cpp drops a piece's bytes that are no token), the rest of the text round-trips. The tokenizer
    // target had asserted a round trip for every text.
    let t = model().tokenizer().clone();
    let text = "  tabs\tand\n\nnewsi\u{14}\u{14}\u{14}neend|";
    let ids = t.encode(text, false).unwrap();
    assert_eq!(t.decode(&ids).unwrap(), text.replace('\u{14}', ""));
    assert_eq!(t.encode("\u{14}", false).unwrap(), Vec::<u32>::new());
}

#[test]
fn templates_whose_values_could_hold_themselves_are_refused() {
    // Reference cycles and values nested a level per step: printing or freeing them recursed until the stack
    // overflowed (wasm32: a trap), and minijinja never freed a cycle. The chat_template target found the first
    // (LeakSanitizer) and the printed cycle and nested list (stack overflow); they are refused when compiled.
    for src in [
        "{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}",
        "{% for i in [1] %}{% set ns = namespace(l=loop) %}{{ loop.changed(ns) }}{% endfor %}",
        "{% set ns = namespace() %}{% set ns.n = ns %}{{ ns }}",
        "{% set ns = namespace(l=[]) %}{% for i in range(90000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
    ] {
        let e = ChatTemplate::new(src, "", "").unwrap_err();
        assert_eq!(e.code(), "E_CHAT_TEMPLATE", "{src}");
    }
}

#[test]
fn byte_level_tokens_that_render_to_gigabytes_are_refused() {
    // The gguf_structured target's merges built tokens of tens of thousands of chars outside GPT-2's byte
    // alphabet; llama.cpp writes each such char out with the whole text again (`[UNK_BYTE_0x..text]`), so a
    // 434 KB vocabulary rendered to gigabytes and the load aborted. A ~120 KB token of 40,000 such chars
    // (4.8 GB rendered) is now an E_TOKENIZER error, and a short one still renders as llama.cpp does.
    let vocab = |long: usize| {
        let tokens = vec!["a".to_string(), "b".to_string(), "中".repeat(long)];
        GgufWriter::new()
            .meta("general.architecture", Meta::Str("llama".into()))
            .meta("tokenizer.ggml.model", Meta::Str("gpt2".into()))
            .meta("tokenizer.ggml.tokens", Meta::StrArray(tokens))
            .meta("tokenizer.ggml.merges", Meta::StrArray(vec!["a b".into()]))
            .bytes()
    };
    let load = |bytes: &[u8]| ruvllm::tokenizer::Tokenizer::from_gguf(&Gguf::parse(bytes).expect("a GGUF"));
    let e = load(&vocab(40_000)).unwrap_err();
    assert_eq!(e.code(), "E_TOKENIZER", "{e}");
    assert!(e.to_string().contains("token 2's text renders past"), "{e}");
    let short = load(&vocab(2)).expect("a short token");
    assert_eq!(short.decode(&[2]).unwrap(), "[UNK_BYTE_0xe4b8ad中中][UNK_BYTE_0xe4b8ad中中]");
}
