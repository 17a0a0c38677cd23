//! The engine end to end on the tiny models that tests/fixtures/make_tiny_models.py generates into $RUVLLM_FIXTURES:
//! a llama with a SentencePiece tokenizer and every legacy and K-quant weight type, a qwen2 (q/k/v biases, NEOX
//! RoPE, GQA 3, tied head) with a byte-level BPE tokenizer and ChatML control tokens, and a qwen3 (QK-norm, heads
//! wider than d_model / n_head) and a llama with Llama 3.1's RoPE frequency factors, both with the same tokenizer, and
//! a phi3 (fused q/k/v and gate/up, LongRoPE) and a gemma3 (heads of 256, QK-norm, post-norms, GeGLU, a sliding
//! window of 8 positions) with the SentencePiece one, and a smollm3 (no RoPE in its fourth layer), a qwen3moe (4
//! experts, 2 a token) and a granitemoe (Granite's multipliers and 4 experts) with the BPE one, whose greedy ids are
//! also llama.cpp's.
//!
//! Token ids must equal those of the real libraries (sentencepiece, HF tokenizers) exactly, and decode back to the text.
//! Logits at every position must match a float64 NumPy forward over the dequantized weights. The engine, like ggml,
//! rounds matmul inputs to 8 bits, which moves logits by up to ~0.1 std(logits) at some vocabulary entry (~0.03 rms);
//! expected.json records that deviation for a ggml-like simulation (`ggml_like_deviation`, matched by llama.cpp
//! itself, see tests/fixtures/README.md), and the engine may deviate by at most twice as much. A wrong RoPE layout, GQA
//! mapping, bias or quant kernel moves logits by ~1 std.
//! Runs natively and on wasm32 (Node), with the same expectations on both.

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;

use ruvllm::gguf::bytes::{ModelBytes, ModelBytesBuilder};
use ruvllm::kv::PAGE_TOKENS;
use ruvllm::kv::{KvCacheOptions, KvType};
use ruvllm::{FinishReason, GenerateOptions, Model, SamplerConfig, Session, SessionOptions, Step};
use serde_json::Value;

use support::test;
use support::tiny::{
    assert_going_back_gives_whole_logits, check_logits, fixtures_dir, greedy_reference, ids, load, GEMMA3, GEMMA4,
    GRANITEMOE, LLAMA3, LLAMA_SPM, PHI3, QWEN2, QWEN3, QWEN35, QWEN3MOE, SMOLLM3,
};

fn check_tokenizer(file: &str) {
    let (model, entry) = load(file);
    let cases = entry["tokenize"].as_array().expect("tokenize cases");
    assert!(cases.len() >= 15, "{file}: only {} tokenizer cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let parse_special = case["parse_special"].as_bool().unwrap();
        let want = ids(&case["ids"]);
        match model.tokenizer().encode(text, parse_special) {
            Ok(got) if got != want => {
                failures.push(format!("encode({text:?}, {parse_special}) = {got:?}, want {want:?}"))
            }
            Err(e) => failures.push(format!("encode({text:?}, {parse_special}) failed: {e}")),
            Ok(_) => {}
        }
        match model.tokenizer().decode(&want) {
            Ok(back) if back != text => failures.push(format!("decode({want:?}) = {back:?}, want {text:?}")),
            Err(e) => failures.push(format!("decode({want:?}) failed: {e}")),
            Ok(_) => {}
        }
    }
    assert!(failures.is_empty(), "{file}: {} tokenizer failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn llama_spm_tokenizer_matches_sentencepiece() {
    check_tokenizer(LLAMA_SPM);
}

#[test]
fn qwen2_tokenizer_matches_hf_tokenizers() {
    check_tokenizer(QWEN2);
}

#[test]
fn llama_spm_logits_match_reference() {
    check_logits(LLAMA_SPM, &SessionOptions::default(), None);
}

#[test]
fn qwen2_logits_match_reference() {
    check_logits(QWEN2, &SessionOptions::default(), None);
}

/// The same sequences fed in pieces of 1, 2 and 3 tokens with prefill batches of 2: every position reads keys and
/// values that earlier calls wrote to the cache.
#[test]
fn llama_spm_incremental_eval_matches_reference() {
    check_logits(LLAMA_SPM, &SessionOptions { n_batch: 2, ..SessionOptions::default() }, Some(&[1, 2, 3]));
}

#[test]
fn qwen2_incremental_eval_matches_reference() {
    check_logits(QWEN2, &SessionOptions { n_batch: 2, ..SessionOptions::default() }, Some(&[3, 1, 2]));
}

/// Qwen3: each query and key head RMS-normed before RoPE, heads of 32 over d_model 64 (`attention.key_length`),
/// no biases; llama.cpp lands as close to the same reference (tests/fixtures/README.md).
#[test]
fn qwen3_logits_match_reference() {
    check_tokenizer(QWEN3);
    check_logits(QWEN3, &SessionOptions::default(), None);
    check_logits(QWEN3, &SessionOptions { n_batch: 2, ..SessionOptions::default() }, Some(&[2, 3, 1]));
}

/// Llama 3.1+: RoPE with a frequency factor per rotated pair (`rope_freqs.weight`), GQA 4, tied embedding.
#[test]
fn llama3_rope_factors_match_reference() {
    check_tokenizer(LLAMA3);
    check_logits(LLAMA3, &SessionOptions::default(), None);
    check_logits(LLAMA3, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[1, 4]));
}

/// Phi-3: q/k/v and gate/up each read from one fused matrix, LongRoPE's long factors and attention factor (the
/// default context, 128, is past the original 64); a session within the original context takes the short factors.
#[test]
fn phi3_fused_matrices_and_long_rope_match_reference() {
    check_tokenizer(PHI3);
    check_logits(PHI3, &SessionOptions::default(), None);
    check_logits(PHI3, &SessionOptions { n_batch: 2, ..SessionOptions::default() }, Some(&[3, 2]));
    let (model, entry) = load(PHI3);
    let seq = ids(&entry["forward"][0]["ids"]);
    let logits = |n_ctx| {
        let mut s =
            Session::with_options(model.clone(), &SessionOptions { n_ctx, ..SessionOptions::default() }).unwrap();
        s.eval(&seq, true).unwrap().to_vec()
    };
    let (long, short) = (logits(128), logits(64));
    let vocab = model.config.vocab_size;
    assert_eq!(long[..vocab], short[..vocab], "position 0 turns by no angle");
    assert_ne!(long, short, "a context within the original one uses the short factors");
}

/// A file held in pieces (as wasm32 holds one above 2 GiB, `ModelBytesBuilder`) gives the same logits as one buffer:
/// every weight lies within one piece.
#[test]
fn a_model_held_in_pieces_equals_one_held_whole() {
    let (whole, entry) = load(LLAMA_SPM);
    let bytes = support::read_file(&format!("{}/{LLAMA_SPM}", fixtures_dir()));
    let mut builder = ModelBytesBuilder::new(Some(bytes.len()), bytes.len() / 3).unwrap();
    for chunk in bytes.chunks(1000) {
        builder.push(chunk).unwrap();
    }
    let pieces = builder.finish();
    assert!(pieces.piece_count() >= 3, "{} pieces", pieces.piece_count());
    let pieced = Arc::new(Model::from_bytes(pieces).unwrap());
    let seq = ids(&entry["forward"][0]["ids"]);
    let logits = |model: &Arc<Model>| Session::new(model.clone()).eval(&seq, true).unwrap().to_vec();
    assert_eq!(logits(&pieced), logits(&whole));
}

/// A split GGUF (gguf-py's, `tiny-llama3-split-0000i-of-00003.gguf`), its shards laid end to end, gives the one file's
/// logits: the first shard's metadata, every shard's tensors.
#[test]
fn a_split_model_equals_the_one_file() {
    let (whole, entry) = load(LLAMA3);
    let shards = (1..=3)
        .map(|i| {
            ModelBytes::from(support::read_file(&format!("{}/tiny-llama3-split-{i:05}-of-00003.gguf", fixtures_dir())))
        })
        .collect();
    let split = Arc::new(Model::from_bytes(ModelBytes::from_shards(shards)).unwrap());
    let seq = ids(&entry["forward"][0]["ids"]);
    let logits = |model: &Arc<Model>| Session::new(model.clone()).eval(&seq, true).unwrap().to_vec();
    assert_eq!(logits(&split), logits(&whole));
}

/// Gemma 3: embeddings times sqrt(d_model), QK-norm on heads of 256, post-attention and post-FFN norms, GeGLU, and a
/// sliding window of 8 positions (the reference sequences are longer) with RoPE base 10000 on layers 0-4, layer 5
/// global; whole, and in batches whose windows start in earlier batches.
#[test]
fn gemma3_sliding_window_and_post_norms_match_reference() {
    check_tokenizer(GEMMA3);
    check_logits(GEMMA3, &SessionOptions::default(), None);
    check_logits(GEMMA3, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[5, 1, 3]));
    let (model, _) = load(GEMMA3);
    let c = &model.config;
    assert_eq!((c.head_dim, c.sliding_window), (256, 8));
    assert_eq!((0..6).map(|l| c.layer_window(l)).collect::<Vec<_>>(), [8, 8, 8, 8, 8, 0]);
}

/// SmolLM3: a llama whose fourth layer has no RoPE (NoPE), GQA 4, tied embedding; whole and in batches, and llama.cpp's
/// 32 greedy tokens after each reference sequence (tests/fixtures/tiny-greedy-reference.json).
#[test]
fn smollm3_nope_layers_match_reference_and_llama_cpp_greedy() {
    check_tokenizer(SMOLLM3);
    check_logits(SMOLLM3, &SessionOptions::default(), None);
    check_logits(SMOLLM3, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[2, 5, 1]));
    let (model, _) = load(SMOLLM3);
    assert_eq!(
        (0..8).map(|l| model.config.layer_uses_rope(l)).collect::<Vec<_>>(),
        [true, true, true, false].repeat(2)
    );
    for (prompt, want) in greedy_reference(SMOLLM3) {
        let got = session(&model, 64).generate(&prompt, greedy(want.len()), None, |_| {}).unwrap();
        assert_eq!(got.ids, want, "greedy ids after {prompt:?}");
    }
}

/// Qwen3-MoE: Qwen3's attention and, in each layer, 4 experts of which each token takes the 2 its router scores
/// highest, weighted by their renormalized softmax; whole and in batches (an expert's tokens gathered from a batch),
/// and llama.cpp's 32 greedy tokens. One token taking another expert at one position moves the logits by 0.65 of
/// their std, weights left unnormalized by 0.33 (tests/fixtures/README.md); the bound is 0.094.
#[test]
fn qwen3moe_experts_match_reference_and_llama_cpp_greedy() {
    check_tokenizer(QWEN3MOE);
    check_logits(QWEN3MOE, &SessionOptions::default(), None);
    check_logits(QWEN3MOE, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[3, 1, 2]));
    let (model, entry) = load(QWEN3MOE);
    let c = &model.config;
    // Each expert's width is its own key (expert_feed_forward_length), not feed_forward_length (512 in the file).
    assert_eq!((c.experts.map(|e| (e.count, e.used)), c.ffn_dim), (Some((4, 2)), 256));
    for seq in entry["forward"].as_array().unwrap() {
        assert!(seq["min_router_gap"].as_f64().unwrap() >= 0.05, "a near tie between experts in the fixture");
    }
    for (prompt, want) in greedy_reference(QWEN3MOE) {
        let got = session(&model, 64).generate(&prompt, greedy(want.len()), None, |_| {}).unwrap();
        assert_eq!(got.ids, want, "greedy ids after {prompt:?}");
    }
}

/// Granite-MoE: a llama whose embeddings, residual branches, attention scores and logits are scaled by the file's four
/// multipliers (3, 0.5, 0.09, 1/2.5 here), with qwen3moe's mixture of experts (the width is `feed_forward_length`);
/// whole and in batches, and llama.cpp's 32 greedy tokens. Leaving any multiplier out moves the logits by 0.56-12.8 of
/// their std (tests/fixtures/README.md); the bound is 0.056.
#[test]
fn granitemoe_multipliers_and_experts_match_reference_and_llama_cpp_greedy() {
    check_tokenizer(GRANITEMOE);
    check_logits(GRANITEMOE, &SessionOptions::default(), None);
    check_logits(GRANITEMOE, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[3, 1, 2]));
    let (model, entry) = load(GRANITEMOE);
    let c = &model.config;
    assert_eq!((c.experts.map(|e| (e.count, e.used)), c.ffn_dim), (Some((4, 2)), 256));
    let s = c.scales;
    assert_eq!((s.embedding, s.residual, s.attention, s.logit_divisor), (3.0, 0.5, 0.09, 2.5));
    for seq in entry["forward"].as_array().unwrap() {
        assert!(seq["min_router_gap"].as_f64().unwrap() >= 0.05, "a near tie between experts in the fixture");
    }
    for (prompt, want) in greedy_reference(GRANITEMOE) {
        let got = session(&model, 64).generate(&prompt, greedy(want.len()), None, |_| {}).unwrap();
        assert_eq!(got.ids, want, "greedy ids after {prompt:?}");
    }
}

/// Gemma 4: windowed layers with heads of 64 and their own RoPE (base 10000, every pair), global ones with heads of
/// 128, two KV heads and "proportional" RoPE (16 of 64 pairs rotate, the others' factors 1e30), scores unscaled,
/// value heads RMS-normed (layer 3's values its keys' projection), layers 4 and 5 attending to layers 2's and 3's
/// keys and values, per-layer inputs of 16, each layer's output scaled, the logits soft-capped at 10; whole, in
/// batches, and llama.cpp's greedy tokens. Leaving out any of these moves the logits by 0.3-4.4 of their std
/// (tests/fixtures/README.md); the bound is 0.32.
#[test]
fn gemma4_layer_shapes_shared_kv_and_per_layer_inputs_match_reference_and_llama_cpp_greedy() {
    check_tokenizer(GEMMA4);
    check_logits(GEMMA4, &SessionOptions::default(), None);
    check_logits(GEMMA4, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[5, 1, 3]));
    let (model, _) = load(GEMMA4);
    let c = &model.config;
    let per_layer = |f: &dyn Fn(usize) -> usize| (0..6).map(f).collect::<Vec<_>>();
    assert_eq!(per_layer(&|l| c.layer_window(l)), [8, 8, 8, 0, 8, 0]);
    assert_eq!(per_layer(&|l| c.layer_kv_dim(l)), [64, 64, 64, 256, 64, 256]);
    assert_eq!(per_layer(&|l| c.layer_ffn_dim(l)), [256, 256, 256, 256, 512, 512]);
    assert_eq!(per_layer(&|l| c.kv_layer(l)), [0, 1, 2, 3, 2, 3]);
    assert_eq!((c.kv_layers(), c.kv_dim(), c.logit_softcap), (4, 256, Some(10.0)));
    for (prompt, want) in greedy_reference(GEMMA4) {
        let got = session(&model, 64).generate(&prompt, greedy(want.len()), None, |_| {}).unwrap();
        assert_eq!(got.ids, want, "greedy ids after {prompt:?}");
    }
}

/// A Gemma 4 header whose layer keys disagree with one another, or that asks for what the forward pass does not
/// have, is refused with a typed error that names the key, before any weight is read.
#[test]
fn gemma4_headers_that_do_not_hold_together_are_refused() {
    use ruvllm::gguf::Value;
    let cases = [
        ("attention.sliding_window_pattern", Some(flags(&[true, true, false])), "sliding_window_pattern"),
        ("attention.head_count_kv", Some(numbers(&[1, 1, 1, 2, 1])), "head_count_kv"),
        ("attention.head_count_kv", Some(numbers(&[1, 1, 1, 3, 1, 2])), "head_count_kv"),
        ("feed_forward_length", Some(Value::String("wide".into())), "feed_forward_length"),
        // Layers 3 and 4 would have to be a windowed and a global layer for layers 4 and 5 to share theirs.
        ("attention.shared_kv_layers", Some(Value::U32(3)), "shared_kv_layers"),
        ("attention.value_length_swa", Some(Value::U32(32)), "value_length_swa"),
        ("attention.key_length_swa", Some(Value::U32(1024)), "key_length_swa"),
        ("expert_count", Some(Value::U32(128)), "mixture of experts"),
        ("final_logit_softcapping", Some(Value::F32(-1.0)), "final_logit_softcapping"),
    ];
    assert_headers_refused(GEMMA4, "gemma4", cases);
}

/// `file`'s header with each of `cases` applied (a key of `arch` set to a value, or removed) is refused as a bad model
/// with a message that holds the case's words; the header as it is is not.
fn assert_headers_refused<const N: usize>(
    file: &str,
    arch: &str,
    cases: [(&str, Option<ruvllm::gguf::Value>, &str); N],
) {
    use ruvllm::gguf::Gguf;
    use ruvllm::model::config::Config;
    let bytes = support::read_file(&format!("{}/{file}", fixtures_dir()));
    let header = Gguf::parse(&bytes).expect("the fixture parses");
    assert!(Config::from_gguf(&header).is_ok());
    for (key, value, wanted) in cases {
        let mut g = header.clone();
        match &value {
            Some(v) => g.metadata.insert(format!("{arch}.{key}"), v.clone()),
            None => g.metadata.remove(&format!("{arch}.{key}")),
        };
        match Config::from_gguf(&g) {
            Err(ruvllm::Error::Model(message)) => assert!(message.contains(wanted), "{key} = {value:?}: {message}"),
            other => panic!("{key} = {value:?}: not refused as a bad model: {:?}", other.map(|c| c.arch)),
        }
    }
}

fn numbers(v: &[u32]) -> ruvllm::gguf::Value {
    ruvllm::gguf::Value::Array(v.iter().map(|&n| ruvllm::gguf::Value::U32(n)).collect())
}

fn flags(v: &[bool]) -> ruvllm::gguf::Value {
    ruvllm::gguf::Value::Array(v.iter().map(|&b| ruvllm::gguf::Value::Bool(b)).collect())
}

/// Qwen3.5: delta-net layers (0, 2, 4: a causal convolution of 4 taps, then per value head a 16×16 state that each
/// token decays, corrects towards its value and reads with its query; 4 value heads over 2 key heads) between gated
/// attention layers (1, 3: QK-norm, NeoX RoPE on 16 of 64 dimensions with Qwen's interleaved sections, each head's
/// output times the sigmoid of its gate); whole, in batches that carry the recurrent state from call to call, and
/// llama.cpp's greedy tokens.
#[test]
fn qwen35_delta_nets_and_gated_attention_match_reference_and_llama_cpp_greedy() {
    check_tokenizer(QWEN35);
    check_logits(QWEN35, &SessionOptions::default(), None);
    check_logits(QWEN35, &SessionOptions { n_batch: 3, ..SessionOptions::default() }, Some(&[5, 1, 3]));
    let (model, _) = load(QWEN35);
    let c = &model.config;
    assert_eq!((0..5).map(|l| c.layer_is_recurrent(l)).collect::<Vec<_>>(), [true, false, true, false, true]);
    assert_eq!((c.kv_layers(), c.kv_layer(1), c.kv_layer(3)), (2, 0, 1));
    // Sections [3, 2, 2, 1] over 8 pairs: pair 7 is the fourth section's, whose position is 0 for text.
    let turning: Vec<bool> = c.rope_section_factors().unwrap().iter().map(|f| f.is_finite()).collect();
    assert_eq!(turning, [true, true, true, true, true, true, true, false]);
    for (prompt, want) in greedy_reference(QWEN35) {
        let got = session(&model, 64).generate(&prompt, greedy(want.len()), None, |_| {}).unwrap();
        assert_eq!(got.ids, want, "greedy ids after {prompt:?}");
    }
}

/// A recurrent state cannot drop positions as a KV cache does: a request that shares only part of what a Qwen3.5
/// session evaluated goes back to the session's checkpoint (the last prompt's end) or to the start, and evaluates
/// the cached tokens between again. Each way answers as a fresh session does, and keeps the shared positions.
#[test]
fn a_recurrent_state_goes_back_to_an_earlier_position() {
    let (model, entry) = load(QWEN35);
    let prompt = long_prompt(&entry);
    let fresh = |p: &[u32]| session(&model, 8).generate(p, greedy(6), None, |_| {}).unwrap().ids;
    let mut s = session(&model, 8);
    let first = s.generate(&prompt, greedy(6), None, |_| {}).unwrap();
    let into_answer: Vec<u32> = prompt.iter().chain(&first.ids[..3]).chain(&prompt[..2]).copied().collect();
    let into_prompt: Vec<u32> = prompt[..prompt.len() - 5].iter().chain(&prompt[..4]).copied().collect();
    let longer: Vec<u32> = into_prompt.iter().chain(&prompt[4..9]).copied().collect();
    for (what, p, at_least, below) in [
        ("after the checkpoint", &into_answer, prompt.len() + 3, prompt.len() + 5),
        ("before the checkpoint", &into_prompt, prompt.len() - 5, prompt.len()),
        ("on from there", &longer, into_prompt.len(), longer.len()),
    ] {
        let shared = s.tokens().iter().zip(&p[..p.len() - 1]).take_while(|(a, b)| a == b).count();
        assert!((at_least..below).contains(&shared), "{what}: {shared} shared positions");
        let got = s.generate(p, greedy(6), None, |_| {}).unwrap();
        assert_eq!(got.ids, fresh(p), "{what}");
        assert_eq!(got.stats.cached_tokens, shared, "{what}: the positions it shares are kept");
    }

    // The logits too, bit for bit.
    let whole = session(&model, 64).eval(&prompt, true).unwrap().to_vec();
    assert_going_back_gives_whole_logits(&mut session(&model, 8), &prompt, &whole, model.config.vocab_size);
}

/// A Qwen3.5 header whose delta-net or RoPE keys do not hold together is refused with a typed error that names
/// the key, before any weight is read.
#[test]
fn qwen35_headers_that_do_not_hold_together_are_refused() {
    use ruvllm::gguf::Value;
    let cases = [
        ("ssm.inner_size", Some(Value::U32(48)), "inner_size"),
        ("ssm.time_step_rank", Some(Value::U32(3)), "time_step_rank"),
        ("ssm.conv_kernel", Some(Value::U32(1)), "conv_kernel"),
        ("ssm.state_size", Some(Value::U32(0)), "state_size"),
        ("ssm.group_count", None, "group_count"),
        ("attention.recurrent_layers", Some(flags(&[true, false])), "recurrent_layers"),
        ("rope.dimension_sections", Some(numbers(&[3, 2, 2])), "dimension_sections"),
        ("rope.dimension_sections", Some(numbers(&[8, 8, 8, 8])), "dimension_sections"),
        ("rope.dimension_sections", None, "dimension_sections"),
    ];
    assert_headers_refused(QWEN35, "qwen35", cases);
}

/// Qwen3.5's files count their multi-token-prediction blocks (llama.cpp's drafts) in `block_count`, and flag them in
/// `attention.recurrent_layers`: the forward pass runs the layers before them; a header with no layer left is refused.
#[test]
fn qwen35_next_token_prediction_blocks_are_not_layers() {
    use ruvllm::gguf::{Gguf, Value};
    use ruvllm::model::config::Config;
    let bytes = support::read_file(&format!("{}/{QWEN35}", fixtures_dir()));
    let mut g = Gguf::parse(&bytes).expect("the fixture parses");
    g.metadata.insert("qwen35.block_count".into(), Value::U32(6));
    g.metadata.insert("qwen35.nextn_predict_layers".into(), Value::U32(1));
    g.metadata.insert("qwen35.attention.recurrent_layers".into(), flags(&[true, false, true, false, true, false]));
    let c = Config::from_gguf(&g).unwrap();
    let recurrent: Vec<bool> = (0..c.n_layers).map(|l| c.layer_is_recurrent(l)).collect();
    assert_eq!(recurrent, [true, false, true, false, true]);
    g.metadata.insert("qwen35.nextn_predict_layers".into(), Value::U32(6));
    match Config::from_gguf(&g) {
        Err(ruvllm::Error::Model(message)) => assert!(message.contains("no layer left"), "{message}"),
        other => panic!("not refused: {:?}", other.map(|c| c.n_layers)),
    }
}

/// The reference sequences of `file` end to end: a prompt of a few prefill batches.
fn long_prompt(entry: &Value) -> Vec<u32> {
    entry["forward"].as_array().expect("forward cases").iter().flat_map(|seq| ids(&seq["ids"])).collect()
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    let sampler = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    GenerateOptions { max_tokens, sampler, ignore_eog: true, ..GenerateOptions::default() }
}

fn session(model: &Arc<Model>, n_batch: usize) -> Session {
    Session::with_options(model.clone(), &SessionOptions { n_batch, ..SessionOptions::default() }).expect("options")
}

/// `next_step` evaluates the prompt one `n_batch` batch per step before the first token. The batches are those one
/// `eval` of the whole prompt would run, and rows do not depend on their batch, so the logits and greedy ids equal
/// those of a prefill in a single forward call exactly.
#[test]
fn stepwise_prefill_equals_a_single_forward_call() {
    for file in [LLAMA_SPM, QWEN2] {
        let (model, entry) = load(file);
        let prompt = long_prompt(&entry);
        assert!(prompt.len() > 40, "{file}: {} prompt tokens", prompt.len());

        let mut one_call = session(&model, 64);
        let want_logits = one_call.eval(&prompt, false).unwrap().to_vec();
        one_call.reset();
        let want = one_call.generate(&prompt, greedy(12), None, |_| {}).unwrap();

        let mut stepwise = session(&model, 8);
        stepwise.set_prefix_cache(false); // every batch evaluated, none restored from the first session's
        stepwise.start(&prompt, greedy(12)).unwrap();
        let (mut prefilled, mut ids) = (Vec::new(), Vec::new());
        while let Some(step) = stepwise.next_step().unwrap() {
            match step {
                Step::Prefill { done, total } => {
                    assert_eq!((total, ids.len()), (prompt.len(), 0), "{file}: the prefill comes first");
                    assert_eq!(stepwise.tokens(), &prompt[..done], "{file}: {done} prompt tokens in the cache");
                    prefilled.push(done);
                    if done == total {
                        assert!(stepwise.logits() == want_logits, "{file}: logits after the prefill differ");
                    }
                }
                Step::Token(token) => ids.push(token.id),
            }
        }
        let batches: Vec<usize> = (1..=prompt.len().div_ceil(8)).map(|i| (i * 8).min(prompt.len())).collect();
        assert_eq!(prefilled, batches, "{file}: one prefill step per batch of 8");
        assert_eq!(ids, want.ids, "{file}: greedy ids");
        let out = stepwise.finish().unwrap();
        let stats = (out.stats.prompt_tokens, out.stats.cached_tokens, out.stats.prefilled_tokens);
        assert_eq!((out.ids, stats), (ids, (prompt.len(), 0, prompt.len())));
        assert_eq!(out.finish, FinishReason::Length);
    }
}

/// Cancelling between prefill batches ends the generation with no tokens; the batches evaluated so far stay cached
/// and the next generation of the same prompt resumes from them, with the same ids as an uninterrupted one.
#[test]
fn cancel_during_prefill_leaves_a_usable_session() {
    let (model, entry) = load(QWEN2);
    let prompt = long_prompt(&entry);
    let want = session(&model, 8).generate(&prompt, greedy(6), None, |_| {}).unwrap();

    let mut s = session(&model, 8);
    s.set_prefix_cache(false); // the session's own cache only
    s.start(&prompt, greedy(6)).unwrap();
    assert_eq!(s.next_step().unwrap(), Some(Step::Prefill { done: 8, total: prompt.len() }));
    assert_eq!(s.next_step().unwrap(), Some(Step::Prefill { done: 16, total: prompt.len() }));
    let cancelled = s.cancel().expect("a generation was in progress");
    assert_eq!(cancelled.finish, FinishReason::Cancelled);
    assert!(cancelled.ids.is_empty() && cancelled.text.is_empty());
    assert_eq!(s.tokens(), &prompt[..16]);
    // The prefill rate counts the two batches that ran, not the whole prompt.
    let stats = &cancelled.stats;
    assert_eq!((stats.prompt_tokens, stats.cached_tokens, stats.prefilled_tokens), (prompt.len(), 0, 16));
    let rate = if stats.prefill_ms > 0.0 { 16.0 * 1e3 / stats.prefill_ms } else { 0.0 };
    assert_eq!(stats.prefill_tok_s(), rate, "prefill of 16 tokens in {} ms", stats.prefill_ms);

    let again = s.generate(&prompt, greedy(6), None, |_| {}).unwrap();
    assert_eq!((again.stats.cached_tokens, again.stats.prefilled_tokens), (16, prompt.len() - 16));
    assert_eq!(again.ids, want.ids);
}

/// A new session starts from the model's prefix cache: the whole pages of its prompt that an earlier session
/// evaluated (its prompt and its answer, as the next turn of a chat) are restored, not prefilled, and the greedy ids
/// equal those of a session that prefills everything.
#[test]
fn sessions_start_from_the_prefix_cache_with_the_same_ids() {
    for file in [LLAMA_SPM, QWEN2] {
        let (model, entry) = load(file);
        let prompt = long_prompt(&entry);
        let first = session(&model, 8).generate(&prompt, greedy(6), None, |_| {}).unwrap();
        let turn2: Vec<u32> = prompt.iter().chain(&first.ids).chain(&prompt[..5]).copied().collect();

        let mut plain = session(&model, 8);
        plain.set_prefix_cache(false);
        let want = plain.generate(&turn2, greedy(6), None, |_| {}).unwrap();
        assert_eq!(want.stats.cached_tokens, 0, "{file}");

        let again = session(&model, 8).generate(&turn2, greedy(6), None, |_| {}).unwrap();
        // The first session's cache held its prompt and answer but the last token (never evaluated).
        let held = prompt.len() + first.ids.len() - 1;
        assert_eq!(again.stats.cached_tokens, held / PAGE_TOKENS * PAGE_TOKENS, "{file}");
        assert_eq!(again.stats.prefilled_tokens, turn2.len() - again.stats.cached_tokens, "{file}");
        assert_eq!(again.ids, want.ids, "{file}: greedy ids with the prefix cache");
        let stats = model.prefix_cache().stats();
        assert_eq!(stats.restored_tokens, again.stats.cached_tokens as u64, "{file}");
        assert!(stats.bytes <= stats.budget_bytes, "{file}: {stats:?}");

        // Cleared, it gives nothing.
        model.prefix_cache().clear();
        let cold = session(&model, 8).generate(&turn2, greedy(6), None, |_| {}).unwrap();
        assert_eq!((cold.stats.cached_tokens, cold.ids), (0, want.ids), "{file}");
    }
}

/// `max_tokens: 0` evaluates a prompt into the session and returns no token: a reopened conversation made ready
/// (from the prefix cache, then its uncached tail) before its next turn, which then prefills only its own tokens and
/// gives the ids of a session that prefills everything.
#[test]
fn max_tokens_0_makes_a_conversation_ready_without_a_token() {
    for file in [LLAMA_SPM, QWEN2] {
        let (model, entry) = load(file);
        let prompt = long_prompt(&entry);
        let turn2: Vec<u32> = prompt.iter().chain(&prompt[..5]).copied().collect();
        let mut plain = session(&model, 8);
        plain.set_prefix_cache(false);
        let want = plain.generate(&turn2, greedy(6), None, |_| {}).unwrap();

        session(&model, 8).generate(&prompt, greedy(2), None, |_| {}).unwrap(); // pages of `prompt` in the cache
        let mut s = session(&model, 8);
        let mut steps = 0;
        let ready = s.generate(&prompt, greedy(0), None, |_| steps += 1).unwrap();
        assert_eq!((steps, ready.ids.len(), ready.text.as_str()), (0, 0, ""), "{file}: no token");
        assert_eq!(ready.finish, FinishReason::Length, "{file}");
        let cached = (prompt.len() - 1) / PAGE_TOKENS * PAGE_TOKENS;
        assert_eq!((ready.stats.cached_tokens, ready.stats.prefilled_tokens), (cached, prompt.len() - cached));
        assert_eq!(s.tokens(), &prompt[..], "{file}: the whole prompt is in the cache");

        let next = s.generate(&turn2, greedy(6), None, |_| {}).unwrap();
        assert_eq!((next.stats.cached_tokens, next.stats.prefilled_tokens), (prompt.len(), 5), "{file}");
        assert_eq!(next.ids, want.ids, "{file}: greedy ids after the prompt was made ready");
    }
}

/// A conversation saved from one session and restored into another (as llama.cpp's slot save/restore) continues
/// exactly as it would have in the first: the same greedy ids, its positions reused. Bad or cut bytes are refused
/// and change nothing.
#[test]
fn a_saved_conversation_continues_in_another_session() {
    // Qwen3.5's state holds its recurrent state too.
    for file in [LLAMA_SPM, QWEN2, QWEN35] {
        let (model, entry) = load(file);
        let prompt = long_prompt(&entry);
        let mut a = session(&model, 8);
        a.set_prefix_cache(false);
        let first = a.generate(&prompt, greedy(4), None, |_| {}).unwrap();
        let state = a.save_state().unwrap();
        let turn2: Vec<u32> = prompt.iter().chain(&first.ids).chain(&prompt[..3]).copied().collect();
        let want = a.generate(&turn2, greedy(4), None, |_| {}).unwrap();

        let mut b = session(&model, 8);
        b.set_prefix_cache(false);
        for bad in [&state[..state.len() - 1], &state[1..], b"not a state".as_slice()] {
            let e = b.restore_state(bad).unwrap_err();
            assert_eq!(e.code(), "E_INVALID_ARGUMENT", "{file}: {e}");
            assert!(b.tokens().is_empty(), "{file}: a refused state changed nothing");
        }
        b.restore_state(&state).unwrap();
        assert_eq!(b.tokens().len(), prompt.len() + first.ids.len() - 1, "{file}");
        let got = b.generate(&turn2, greedy(4), None, |_| {}).unwrap();
        assert_eq!((got.ids, got.stats.cached_tokens), (want.ids, want.stats.cached_tokens), "{file}");
    }
}

/// The tiny models' heads are 16 wide: a quantized cold tier, whose blocks of 32 values must not straddle heads, is
/// refused with `E_KV_CACHE` where the model takes the option; the f16 cache (the default) is taken.
#[test]
fn a_cold_tier_needs_heads_of_whole_blocks() {
    for file in [LLAMA_SPM, QWEN2] {
        let bytes = support::read_file(&format!("{}/{file}", fixtures_dir()));
        for cold in [KvType::Q8_0, KvType::Q4_0] {
            let e = Model::from_bytes(bytes.clone()).unwrap().with_kv_cache(KvCacheOptions::tiered(cold)).err();
            let e = e.expect("refused");
            assert_eq!(e.code(), "E_KV_CACHE", "{file}: {e}");
            assert!(e.to_string().contains("head size"), "{file}: {e}");
        }
        let model = Model::from_bytes(bytes).unwrap().with_kv_cache(KvCacheOptions::default()).unwrap();
        assert_eq!(model.kv_cache().cold, KvType::F16);
    }
}

/// The micro models (the fuzz targets' seeds: the tiny models' vocabularies over one or two small layers) load,
/// tokenize their own text and generate: a seed that a loader check refused would leave the fuzzers at the header.
#[test]
fn micro_fuzz_seeds_load_and_generate() {
    for file in ["micro-llama-spm.gguf", "micro-qwen2.gguf"] {
        let path = format!("{}/{file}", fixtures_dir());
        let model = Arc::new(Model::from_bytes(support::read_file(&path)).unwrap_or_else(|e| panic!("{file}: {e}")));
        let prompt = model.tokenizer().encode_with_special("The old fisherman rowed out.", true).expect("tokenize");
        assert!(prompt.len() > 3, "{file}: {prompt:?}");
        let out = session(&model, 8).generate(&prompt, greedy(4), None, |_| {}).expect("generate");
        assert_eq!(out.ids.len(), 4, "{file}");
    }
}

/// The tiny llama with its layer matrices requantized as IQ4_XS or IQ4_NL ([`support::tiny::iq4_models`]) loads and
/// runs like the same model with those matrices in F32 holding the IQ4 values exactly: the two differ only by the
/// 8-bit activations the IQ4 dots take (under 0.09 std of the logits here; a wrong IQ4 dot moves them by about one
/// std).
#[test]
fn iq4_weights_load_and_run_like_their_values_in_f32() {
    let (iq4, f32s) = support::tiny::iq4_models(LLAMA_SPM);
    support::tiny::check_iq4_logits(
        LLAMA_SPM,
        0.15,
        |ids| Session::new(iq4.clone()).eval(ids, true).unwrap().to_vec(),
        |ids| Session::new(f32s.clone()).eval(ids, true).unwrap().to_vec(),
    );
}
