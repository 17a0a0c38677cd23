//! Tokenizer tests: hand-built vocabularies (SentencePiece scores and byte fallback, byte-level BPE merges,
//! special tokens, streaming), and llama.cpp's own tokenizations of the real model.

use std::collections::BTreeMap;

use super::*;
use crate::gguf::Value;
use crate::test_support::test;

fn gguf(entries: Vec<(&str, Value)>) -> Gguf {
    let metadata: BTreeMap<String, Value> = entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    Gguf { version: 3, metadata, tensors: Vec::new(), alignment: 32, data_offset: 0, header_bytes: 0 }
}

fn strings<S: AsRef<str>>(items: &[S]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.as_ref().to_owned())).collect())
}

/// A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then scored pieces.
fn spm_vocab(pieces: &[(&str, f32)], extra: Vec<(&str, Value)>) -> Gguf {
    let mut texts: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        texts.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for &(t, s) in pieces {
        texts.push(t.to_owned());
        types.push(1);
        scores.push(s);
    }
    let mut entries = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&texts)),
        ("tokenizer.ggml.scores", Value::Array(scores.into_iter().map(Value::F32).collect())),
        ("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect())),
    ];
    entries.extend(extra);
    gguf(entries)
}

const SPM_PIECES: &[(&str, f32)] = &[
    ("▁", -1.0),
    ("a", -2.0),
    ("b", -2.0),
    ("c", -2.0),
    ("ab", -0.5),
    ("▁a", -1.5),
    ("bc", -0.8),
    ("▁ab", -0.6),
    ("abc", -3.0),
    ("aa", -1.0),
];

fn ids_of(t: &Tokenizer, texts: &[&str]) -> Vec<u32> {
    texts.iter().map(|s| t.token_id(s).unwrap_or_else(|| panic!("no token {s:?}"))).collect()
}

#[test]
fn spm_merges_by_score_not_length() {
    let t = Tokenizer::from_gguf(&spm_vocab(SPM_PIECES, vec![])).unwrap();
    // "▁abc": "ab" (-0.5) merges first, then "▁ab" (-0.6); "abc" (-3.0) never gets a chance, "▁abc" is no token.
    assert_eq!(t.encode("abc", false).unwrap(), ids_of(&t, &["▁ab", "c"]));
    // Equal scores: the leftmost pair first ("▁aaa" -> "▁", "aa", "a", not "▁a", "aa").
    assert_eq!(t.encode("aaa", false).unwrap(), ids_of(&t, &["▁", "aa", "a"]));
    // Spaces become "▁"; the prefix space is added once, at the start.
    assert_eq!(t.encode("ab ab", false).unwrap(), ids_of(&t, &["▁ab", "▁ab"]));
    assert_eq!(t.encode("", false).unwrap(), Vec::<u32>::new());
    assert_eq!(t.decode(&ids_of(&t, &["▁ab", "c", "▁ab"])).unwrap(), "abc ab"); // first space dropped
}

#[test]
fn spm_byte_fallback_and_unknown() {
    let t = Tokenizer::from_gguf(&spm_vocab(SPM_PIECES, vec![])).unwrap();
    let ids = t.encode("é", false).unwrap(); // U+00E9 = C3 A9, no piece for it
    assert_eq!(ids, ids_of(&t, &["▁", "<0xC3>", "<0xA9>"]));
    assert_eq!(t.decode(&ids).unwrap(), "é");
    assert_eq!(t.token_bytes(ids[1]).unwrap(), [0xC3]);

    // Without byte tokens a missing char becomes <unk> (llama.cpp would throw).
    let g = gguf(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&["<unk>", "<s>", "</s>", "▁", "a"])),
        ("tokenizer.ggml.token_type", Value::Array([2, 3, 3, 1, 1].into_iter().map(Value::I32).collect())),
    ]);
    let t = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(t.encode("az", false).unwrap(), [3, 4, 0]);
    assert_eq!(t.decode(&[3, 4, 0]).unwrap(), "a<unk>");
}

#[test]
fn spm_specials_bos_and_space_prefix() {
    let t = Tokenizer::from_gguf(&spm_vocab(SPM_PIECES, vec![])).unwrap();
    assert_eq!((t.bos(), t.eos(), t.adds_bos()), (Some(1), Some(2), true));
    assert_eq!(t.eog_ids(), [2]);
    let ab = t.token_id("▁ab").unwrap();
    // Text after a special token gets the space prefix again (llama.cpp's is_prev_special).
    assert_eq!(t.encode("ab</s>ab", true).unwrap(), [ab, 2, ab]);
    assert_eq!(t.encode_with_special("ab", false).unwrap(), [1, ab]);
    // Without parse_special, "</s>" is text: '<', '/', 's', '>' as bytes.
    let plain = t.encode("</s>", false).unwrap();
    assert_eq!(plain[0], t.token_id("▁").unwrap());
    assert_eq!(plain[1..], ids_of(&t, &["<0x3C>", "<0x2F>", "<0x73>", "<0x3E>"]));
    // Decoding renders specials; only the very first token loses a leading space.
    assert_eq!(t.decode(&[1, ab]).unwrap(), "<s> ab");

    let g = spm_vocab(
        SPM_PIECES,
        vec![
            ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
            ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
        ],
    );
    let t = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(t.encode_with_special("ab c", false).unwrap(), ids_of(&t, &["ab", "▁", "c", "</s>"]));
    assert_eq!(t.decode(&ids_of(&t, &["▁ab"])).unwrap(), " ab");
}

/// A byte-level BPE vocabulary: the 256 byte chars, then `words` (merged tokens) and `specials` (text, type).
fn bpe_vocab(pre: &str, words: &[&str], merges: &[&str], specials: &[(&str, i32)]) -> Gguf {
    let mut texts: Vec<String> = (0..=255u8).map(|b| bpe::byte_to_char(b).to_string()).collect();
    let mut types = vec![1; 256];
    texts.extend(words.iter().map(|w| w.to_string()));
    types.extend(words.iter().map(|_| 1));
    texts.extend(specials.iter().map(|s| s.0.to_string()));
    types.extend(specials.iter().map(|s| s.1));
    gguf(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(pre.into())),
        ("tokenizer.ggml.tokens", strings(&texts)),
        ("tokenizer.ggml.merges", strings(merges)),
        ("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.eos_token_id", Value::U32(256 + words.len() as u32)),
    ])
}

fn byte_ids(s: &str) -> Vec<u32> {
    // In bpe_vocab, token b (< 256) is byte b.
    s.bytes().map(u32::from).collect()
}

#[test]
fn bpe_merges_by_rank() {
    let words = ["he", "ll", "hell", "hello", "Ġhello", "lo", "xyz", "qr"];
    let merges = ["l o", "h e", "l l", "he ll", "hell o", "Ġ hello", "q r", "x y"];
    let g = bpe_vocab("gpt-2", &words, &merges, &[("<|end|>", 3), ("<tool>", 4)]);
    let t = Tokenizer::from_gguf(&g).unwrap();
    let id = |s: &str| t.token_id(s).unwrap();
    // "l o" has the best rank, so "lo" forms first and "hello" (reached through "he ll" + "o") never does.
    assert_eq!(t.encode("hello", false).unwrap(), [id("he"), 108, id("lo")]);
    // Ranks, not lengths: "he" before "ll" before "hell" (no "lo" here).
    assert_eq!(t.encode("hell", false).unwrap(), [id("hell")]);
    // "x y" makes "xy", which is no token: llama.cpp falls back to the one-byte tokens of the piece.
    assert_eq!(t.encode("xyz", false).unwrap(), byte_ids("xyz"));
    assert_eq!(t.encode("qr", false).unwrap(), [id("qr")]);
    assert_eq!(t.decode(&t.encode("hello xyz!", false).unwrap()).unwrap(), "hello xyz!");
}

#[test]
fn bpe_llama3_ignores_merges_for_whole_word_tokens() {
    let words = ["xyz"];
    let t = Tokenizer::from_gguf(&bpe_vocab("llama-bpe", &words, &[], &[("<|eot_id|>", 3)])).unwrap();
    assert_eq!(t.encode("xyz", false).unwrap(), [256]);
    assert_eq!(t.encode("xyzw", false).unwrap(), byte_ids("xyzw"));
    // llama-bpe adds BOS by default, but this vocabulary names no bos (the gpt2 default id 11 is used).
    assert!(t.adds_bos());
    assert_eq!(t.encode_with_special("xyz", false).unwrap(), [11, 256]);
    // bpe_vocab makes the first special token (<|eot_id|>) eos; it is EOG as eos and by its text.
    assert_eq!(t.eog_ids(), [257]);
    let t = Tokenizer::from_gguf(&bpe_vocab("gpt-2", &words, &[], &[])).unwrap();
    assert_eq!(t.encode("xyz", false).unwrap(), byte_ids("xyz"));
}

#[test]
fn special_tokens_split_longest_first() {
    let specials = [("<|end|>", 3), ("<tool>", 4), ("<tool>x", 4), ("<unk>", 2)];
    let t = Tokenizer::from_gguf(&bpe_vocab("gpt-2", &[], &[], &specials)).unwrap();
    let (end, tool, toolx, unk) = (256, 257, 258, 259);
    // User-defined tokens are matched even without parse_special; control and unknown ones only with it.
    assert_eq!(t.encode("a<tool>b", false).unwrap(), [97, tool, 98]);
    assert_eq!(t.encode("a<|end|>", false).unwrap(), byte_ids("a<|end|>"));
    assert_eq!(t.encode("a<|end|>", true).unwrap(), [97, end]);
    assert_eq!(t.encode("<unk><unk>", true).unwrap(), [unk, unk]);
    assert_eq!(t.encode("<unk>", false).unwrap(), byte_ids("<unk>"));
    // The longer token wins where both match.
    assert_eq!(t.encode("<tool>x<tool>", false).unwrap(), [toolx, tool]);
    // Specials render as their text; an incomplete marker is text.
    assert_eq!(t.decode(&[97, end, tool]).unwrap(), "a<|end|><tool>");
    assert_eq!(t.encode("<|end|", true).unwrap(), byte_ids("<|end|"));
    assert!(t.is_control(end) && t.is_control(unk) && !t.is_control(tool) && !t.is_control(97));
    assert!(t.is_eog(end)); // "<|end|>" is an end-of-generation text
}

#[test]
fn eog_set_from_ids_and_texts() {
    let specials =
        [("<|im_end|>", 3), ("<|endoftext|>", 3), ("<|fim_pad|>", 3), ("<|file_sep|>", 3), ("<|im_start|>", 3)];
    let mut g = bpe_vocab("qwen2", &[], &[], &specials);
    g.metadata.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(65)); // "A", only to see eos included
    let t = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(t.eog_ids(), [65, 256, 257, 258, 259]);
    assert!(!t.is_eog(260));
    // A text-detected EOG token that was not CONTROL becomes one (llama.cpp's override).
    let t = Tokenizer::from_gguf(&bpe_vocab("qwen2", &[], &[], &[("<|im_end|>", 1)])).unwrap();
    assert!(t.is_control(256) && t.is_eog(256));
}

#[test]
fn bad_metadata_is_a_typed_error() {
    let e = Tokenizer::from_gguf(&bpe_vocab("no-such-pre", &[], &[], &[])).unwrap_err();
    assert!(matches!(e, Error::Tokenizer(ref m) if m.contains("no-such-pre")), "{e}");
    let mut g = bpe_vocab("gpt-2", &[], &[], &[]);
    g.metadata.remove("tokenizer.ggml.merges");
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(_))));
    let mut g = bpe_vocab("gpt-2", &[], &[], &[]);
    g.metadata.insert("tokenizer.ggml.model".into(), Value::String("rwkv".into()));
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(ref m)) if m.contains("rwkv")));
    let g = gguf(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&["a", "a"])),
    ]);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(ref m)) if m.contains("duplicate")));
    let g =
        gguf(vec![("tokenizer.ggml.model", Value::String("llama".into())), ("tokenizer.ggml.tokens", Value::U32(3))]);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(_))));
}

#[test]
fn out_of_range_ids_are_errors() {
    let t = Tokenizer::from_gguf(&bpe_vocab("gpt-2", &[], &[], &[])).unwrap();
    let n = t.vocab_size() as u32;
    assert_eq!(n, 256);
    let oor = Error::TokenOutOfRange { id: n, vocab_size: 256 };
    assert_eq!(t.decode(&[97, n]).unwrap_err(), oor);
    assert_eq!(t.token_bytes(n).unwrap_err(), oor);
    assert_eq!(t.decoder().push(u32::MAX).unwrap_err(), Error::TokenOutOfRange { id: u32::MAX, vocab_size: 256 });
    assert_eq!(t.token_text(n), None);
    assert!(!t.is_eog(u32::MAX) && !t.is_control(u32::MAX));
}

#[test]
fn stream_decoder_holds_incomplete_characters() {
    let t = Tokenizer::from_gguf(&bpe_vocab("gpt-2", &[], &[], &[])).unwrap();
    let text = "ok 👍🏽 é!";
    let ids = t.encode(text, false).unwrap();
    assert_eq!(ids, byte_ids(text)); // one token per byte: every multi-byte char is split
    let mut d = t.decoder();
    let mut pieces = Vec::new();
    for &id in &ids {
        pieces.push(d.push(id).unwrap());
    }
    assert_eq!(pieces.concat(), text);
    // 👍 (F0 9F 91 8D) comes out whole, at its fourth byte.
    let thumb = text.find('👍').unwrap();
    assert_eq!(pieces[thumb..thumb + 4], ["", "", "", "👍"]);
    assert_eq!(d.finish(), "");

    // An unfinished character is held, then flushed as U+FFFD; impossible bytes come out as U+FFFD at once.
    let mut d = t.decoder();
    assert_eq!(d.push(0xF0).unwrap(), "");
    assert_eq!(d.push(0x9F).unwrap(), "");
    assert_eq!(d.pending_bytes(), [0xF0, 0x9F]);
    assert_eq!(d.push(u32::from(b'a')).unwrap(), "\u{FFFD}a");
    assert_eq!(d.push(0xFF).unwrap(), "\u{FFFD}");
    assert_eq!(d.push(0xE2).unwrap(), "");
    assert_eq!(d.finish(), "\u{FFFD}");
    assert_eq!(d.push(u32::from(b'b')).unwrap(), "b");
}

#[test]
fn decode_cleans_spaces_where_the_vocabulary_asks() {
    // gpt-2 has clean_spaces; qwen2 does not.
    let text = "a , b . c ' d 's 't 're";
    let t = Tokenizer::from_gguf(&bpe_vocab("gpt-2", &[], &[], &[])).unwrap();
    assert_eq!(t.decode(&byte_ids(text)).unwrap(), "a, b. c'd's 't're");
    let t = Tokenizer::from_gguf(&bpe_vocab("qwen2", &[], &[], &[])).unwrap();
    assert_eq!(t.decode(&byte_ids(text)).unwrap(), text);
}

// Tests on the real default model (llama.cpp reference ids, its specials, streaming real emoji tokens)
// live in tests/rust/reference.rs, which runs natively and on wasm32.

/// A unigram (t5) vocabulary: <pad> </s> <unk> (llama.cpp's default ids 0, 1, 2), then scored pieces; with a
/// precompiled character map of `xcda` entries and `replacements` when given.
fn ugm_vocab(pieces: &[(&str, f32)], charsmap: Option<(&[u32], &[u8])>, extra: Vec<(&str, Value)>) -> Gguf {
    let mut texts = vec!["<pad>", "</s>", "<unk>"];
    let (mut types, mut scores) = (vec![3, 3, 2], vec![0.0f32; 3]);
    for &(t, s) in pieces {
        texts.push(t);
        types.push(1);
        scores.push(s);
    }
    let mut entries = vec![
        ("tokenizer.ggml.model", Value::String("t5".into())),
        ("tokenizer.ggml.tokens", strings(&texts)),
        ("tokenizer.ggml.scores", Value::Array(scores.into_iter().map(Value::F32).collect())),
        ("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.add_space_prefix", Value::Bool(true)),
    ];
    if let Some((xcda, replacements)) = charsmap {
        let mut map = ((xcda.len() * 4) as u32).to_le_bytes().to_vec();
        xcda.iter().for_each(|e| map.extend_from_slice(&e.to_le_bytes()));
        map.extend_from_slice(replacements);
        entries.push(("tokenizer.ggml.precompiled_charsmap", Value::Array(map.into_iter().map(Value::U8).collect())));
    }
    entries.extend(extra);
    gguf(entries)
}

/// A character map with one rule, "x" -> "y": the root's BASE 0 leads to entry 'x' (LCHECK 'x', LEAF, BASE 1), whose
/// BASE leads to entry 'x' ^ 1, holding the replacement's offset (0).
fn x_to_y() -> Vec<u32> {
    let x = b'x' as u32;
    let mut xcda = vec![0u32; x as usize + 2];
    xcda[x as usize] = (1 << 10) | (1 << 8) | x;
    xcda
}

#[test]
fn unigram_takes_the_best_scoring_path_and_one_unknown_for_a_run() {
    let t = Tokenizer::from_gguf(&ugm_vocab(&[("▁a", -1.0), ("▁ab", -5.0), ("b", -1.0), ("▁", -2.0)], None, vec![]))
        .unwrap();
    // "▁a" + "b" (-2) beats "▁ab" (-5); the space prefix is added, and EOS (</s>) with add_special.
    assert_eq!(t.encode("ab", false).unwrap(), [3, 5]);
    assert_eq!(t.encode_with_special("ab", false).unwrap(), [3, 5, 1]);
    // Chars no piece covers: one <unk> for the run, scored 10 below the lowest piece.
    assert_eq!(t.encode("a zzz b", false).unwrap(), [3, 6, 2, 6, 5]);
    assert_eq!(t.decode(&[3, 5]).unwrap(), "ab");
}

#[test]
fn unigram_applies_the_precompiled_character_map_and_refuses_a_damaged_one() {
    let pieces = [("▁y", -1.0), ("▁x", -1.0), ("▁", -5.0), ("y", -3.0), ("x", -3.0)];
    let t = Tokenizer::from_gguf(&ugm_vocab(&pieces, Some((&x_to_y(), b"y\0")), vec![])).unwrap();
    assert_eq!(t.encode("x", false).unwrap(), [3], "x is written y before the search");
    // Damage the map: a size past its end, a table pointing past its end, a replacement past the map's end or
    // without its NUL: typed errors, when loaded or when a text reaches the damage, never a panic.
    let mut g = ugm_vocab(&pieces, Some((&x_to_y(), b"y\0")), vec![]);
    if let Some(Value::Array(map)) = g.metadata.get_mut("tokenizer.ggml.precompiled_charsmap") {
        map[0] = Value::U8(0xff);
        map[1] = Value::U8(0xff);
    }
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(ref m)) if m.contains("charsmap")));
    let mut far = x_to_y();
    far[0] = 1000 << 10;
    let t = Tokenizer::from_gguf(&ugm_vocab(&pieces, Some((&far, b"y\0")), vec![])).unwrap();
    assert!(matches!(t.encode("x", false), Err(Error::Tokenizer(ref m)) if m.contains("charsmap")));
    let t = Tokenizer::from_gguf(&ugm_vocab(&pieces, Some((&x_to_y(), b"y")), vec![])).unwrap();
    assert!(matches!(t.encode("x", false), Err(Error::Tokenizer(ref m)) if m.contains("not terminated")));
    let mut past = x_to_y();
    past[b'x' as usize ^ 1] = 7; // the replacement's offset, past the replacements
    let t = Tokenizer::from_gguf(&ugm_vocab(&pieces, Some((&past, b"y\0")), vec![])).unwrap();
    assert!(matches!(t.encode("x", false), Err(Error::Tokenizer(ref m)) if m.contains("past the map's end")));
    // No unknown token (the default id 2 is out of range): refused when loaded.
    let g = gguf(vec![
        ("tokenizer.ggml.model", Value::String("t5".into())),
        ("tokenizer.ggml.tokens", strings(&["<pad>", "</s>"])),
    ]);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(ref m)) if m.contains("unknown_token_id")));
    let mut g = ugm_vocab(&pieces, None, vec![]);
    g.metadata.insert("tokenizer.ggml.precompiled_charsmap".into(), strings(&["not", "bytes"]));
    assert!(matches!(Tokenizer::from_gguf(&g), Err(Error::Tokenizer(ref m)) if m.contains("array of bytes")));
}
