//! LoRA adapters at run time (llama.cpp's GGUF adapter format) on the CPU, against the adapters and references that
//! tests/fixtures/make_lora_adapters.py writes into $RUVLLM_FIXTURES beside the tiny models:
//!
//! - logits with adapters (ranks 1 to 16, F32 and F16, several scales, two at once, Phi-3's fused weights) match a
//!   float64 forward over the merged weights `W + scale·alpha/rank·B·A`, within the tolerance the base models have;
//! - an adapter at scale 0 gives the base model's logits bit for bit;
//! - a session that switches adapter sets between requests generates what a fresh session of each set does, and keys
//!   and values computed under one set are never reused under another (the session's own, or the prefix cache's);
//! - bad adapter files are typed errors.
//!
//! `smollm2_adapter_matches_llama_cpp` holds the default model with a rank-8 adapter to llama.cpp's teacher-forced
//! distributions with the same adapter (tests/fixtures/lora_reference.mjs), by the bounds of the base model;
//! `an_exported_microlora_matches_llama_cpp_with_it` does the same for a MicroLoRA we trained and exported.

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;

use ruvllm::training::{MicroLora, MicroLoraOptions};
use ruvllm::{AdapterSet, GenerateOptions, LoraAdapter, Model, SamplerConfig, Session, SessionOptions};
use serde_json::Value;

use support::logits::assert_matches_reference;
use support::test;
use support::tiny::{compare, fixtures_dir, ids, load, tolerance, LLAMA_SPM, PHI3};

/// llama.cpp's distributions with `lora-smollm2-r8.gguf` (tests/fixtures/lora_reference.mjs).
const SMOLLM2_REFERENCE: &str = include_str!("../fixtures/lora-smollm2-reference.json");
/// llama.cpp's distributions with `microlora-smollm2-facts.gguf`, our export (tests/fixtures/lora_reference.mjs).
const MICROLORA_REFERENCE: &str = include_str!("../fixtures/microlora-smollm2-reference.json");
const MICROLORA_FILE: &[u8] = include_bytes!("../fixtures/microlora-smollm2-facts.gguf");

fn adapter(model: &Model, file: &str) -> Arc<LoraAdapter> {
    let bytes = support::read_file(&format!("{}/{file}", fixtures_dir()));
    Arc::new(LoraAdapter::from_bytes(model, bytes).unwrap_or_else(|e| panic!("{file}: {e}")))
}

fn lora_json() -> Value {
    support::read_json(&format!("{}/lora.json", fixtures_dir()))
}

/// Every position's logits of `ids` from an empty cache, under `set`.
fn logits(model: &Arc<Model>, set: &AdapterSet, ids: &[u32]) -> Vec<f32> {
    let mut session = Session::new(model.clone());
    session.set_adapters(set).expect("adapters of this model");
    session.eval(ids, true).expect("eval").to_vec()
}

#[test]
fn adapters_match_the_float64_reference() {
    for case in lora_json()["cases"].as_array().unwrap() {
        let file = case["model"].as_str().unwrap();
        let (model, _) = load(file);
        let set = AdapterSet::new(
            case["adapters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| (adapter(&model, a["file"].as_str().unwrap()), a["scale"].as_f64().unwrap() as f32))
                .collect(),
        );
        let what = format!("{file} with {}", case["adapters"]);
        let tol = tolerance(&case["ggml_like_deviation"], &what);
        for seq in case["forward"].as_array().unwrap() {
            // The adapters move the logits far more than the tolerance: applying them wrong cannot pass.
            assert!(seq["moved_over_std"].as_f64().unwrap() > 5.0 * tol.0, "{what}: the adapters move too little");
            let ids = ids(&seq["ids"]);
            let got = logits(&model, &set, &ids);
            let d = compare(&got, seq["logits"].as_array().unwrap(), model.config.vocab_size, tol.0);
            eprintln!("{what}: {d:?}");
            d.assert_within(tol, &what);
        }
    }
}

/// The same logits fed one token at a time and in prefill batches of 3: the adapters apply to a decode row as
/// to a batch.
#[test]
fn adapters_apply_the_same_to_batches_and_single_tokens() {
    let (model, entry) = load(LLAMA_SPM);
    let set = AdapterSet::new(vec![(adapter(&model, "lora-llama-r4.gguf"), 1.0)]);
    let ids = ids(&entry["forward"][0]["ids"]);
    let whole = logits(&model, &set, &ids);
    let opts = SessionOptions { n_batch: 3, ..SessionOptions::default() };
    let mut session = Session::with_options(model.clone(), &opts).unwrap();
    session.set_adapters(&set).unwrap();
    let mut pieces = Vec::new();
    for chunk in ids.chunks(5) {
        pieces.extend_from_slice(session.eval(chunk, true).unwrap());
    }
    let vocab = model.config.vocab_size;
    for (t, (a, b)) in whole.chunks(vocab).zip(pieces.chunks(vocab)).enumerate() {
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-3, "position {t}: batch and pieces differ by {worst}");
    }
}

#[test]
fn scale_zero_is_the_base_model_exactly() {
    for (file, lora) in [(LLAMA_SPM, "lora-llama-r4.gguf"), (PHI3, "lora-phi3-r8.gguf")] {
        let (model, entry) = load(file);
        let ids = ids(&entry["forward"][0]["ids"]);
        let base = logits(&model, &AdapterSet::default(), &ids);
        let zero = logits(&model, &AdapterSet::new(vec![(adapter(&model, lora), 0.0)]), &ids);
        assert!(base == zero, "{file}: an adapter at scale 0 changed the logits");
        let one = logits(&model, &AdapterSet::new(vec![(adapter(&model, lora), 1.0)]), &ids);
        assert!(base != one, "{file}: the adapter changes nothing");
    }
}

/// Greedy generation of `prompt` under `set`: its ids and how many prompt tokens came from a cache.
fn generate(session: &mut Session, prompt: &[u32], set: &AdapterSet) -> (Vec<u32>, usize) {
    let opts = GenerateOptions {
        max_tokens: 8,
        sampler: SamplerConfig::greedy(),
        ignore_eog: true,
        adapters: set.clone(),
        ..GenerateOptions::default()
    };
    let out = session.generate(prompt, opts, None, |_| {}).expect("generate");
    (out.ids, out.stats.cached_tokens)
}

/// The adapter set of `spec` (fixture files with scales) for `model`.
fn set_of(model: &Model, spec: &[(&str, f32)]) -> AdapterSet {
    AdapterSet::new(spec.iter().map(|&(file, scale)| (adapter(model, file), scale)).collect())
}

#[test]
fn switching_adapters_per_request_matches_fresh_sessions() {
    let (x, y) = ("lora-llama-r4.gguf", "lora-llama-r16-ffn.gguf");
    let specs: [&[(&str, f32)]; 5] = [&[], &[(x, 1.0)], &[(x, 0.5)], &[(y, 1.0)], &[(y, 1.0), (x, 1.0)]];
    // 40 tokens: two whole pages of the prefix cache and some.
    let prompt: Vec<u32> = (0..40).map(|i| 3 + (i * 37 % 700) as u32).collect();
    // Each set's tokens from a session of a model of its own (no prefix cache shared with anything).
    let fresh: Vec<Vec<u32>> = specs
        .iter()
        .map(|spec| {
            let (model, _) = load(LLAMA_SPM);
            let set = set_of(&model, spec);
            generate(&mut Session::new(model), &prompt, &set).0
        })
        .collect();
    assert!(fresh[1..].iter().all(|ids| *ids != fresh[0]), "every adapter set changes the greedy tokens");

    // One session through the sets in turn, and back: each request's tokens are its set's.
    let (model, _) = load(LLAMA_SPM);
    let sets: Vec<AdapterSet> = specs.iter().map(|spec| set_of(&model, spec)).collect();
    let mut session = Session::new(model.clone());
    let mut last = None;
    for i in [0, 1, 1, 2, 3, 0, 4, 1, 0] {
        let (ids, cached) = generate(&mut session, &prompt, &sets[i]);
        assert_eq!(ids, fresh[i], "request under set {i} after set {last:?}");
        match (last, i) {
            // The same set again: the session's own cache is reused.
            (Some(j), i) if j == i => assert_eq!(cached, prompt.len() - 1, "set {i} twice"),
            // The base model again: the prefix cache holds its pages (what was computed under it).
            (Some(_), 0) => assert_eq!(cached, 32, "the base model's pages"),
            // Another set: nothing is reused (the model keeps one set's prefix cache, the latest, and set 1 came
            // back only after others).
            _ => assert_eq!(cached, 0, "set {i} after {last:?}"),
        }
        last = Some(i);
    }
    // Another session of the model under set 1, the last set used, starts from that set's pages and decodes the
    // same; under set 2, whose cache the model no longer keeps, it finds no pages (none of the base model's either).
    let mut other = Session::new(model.clone());
    assert_eq!(generate(&mut other, &prompt, &sets[1]), (fresh[1].clone(), 32));
    let mut third = Session::new(model.clone());
    assert_eq!(generate(&mut third, &prompt, &sets[2]), (fresh[2].clone(), 0));
    // The base model's pages are still the base model's.
    assert_eq!(generate(&mut Session::new(model.clone()), &prompt, &sets[0]), (fresh[0].clone(), 32));
}

/// A session that keeps the residual stream below a MicroLoRA's layers gives it for the answer it generated, the
/// same as the MicroLoRA's own run of those layers; where the stream is not the base model's it gives none.
#[test]
fn a_session_keeps_the_frozen_layers_output_for_a_microlora() {
    let (model, _) = load(LLAMA_SPM);
    let lora = MicroLora::new(&model, MicroLoraOptions { layers: 2, ..MicroLoraOptions::default() }).unwrap();
    let first = lora.first_layer();
    let prompt: Vec<u32> = (0..20).map(|i| 3 + (i * 37 % 700) as u32).collect();
    let mut session = Session::new(model.clone());
    session.keep_residuals(Some(first));
    let (answer, _) = generate(&mut session, &prompt, &AdapterSet::default());
    // The example: the prompt, the answer, and one token more (the template's end of turn), which was not evaluated.
    let tokens = [prompt.clone(), answer, vec![2]].concat();
    let rows = session.frozen_residuals(&tokens, first).unwrap().expect("kept");
    assert_eq!(session.tokens(), &tokens[..]);
    // The same loss as from the MicroLoRA's own run of the frozen layers, up to the batches' rounding.
    let mut own = MicroLora::new(&model, MicroLoraOptions { layers: 2, ..MicroLoraOptions::default() }).unwrap();
    let mut given = MicroLora::new(&model, MicroLoraOptions { layers: 2, ..MicroLoraOptions::default() }).unwrap();
    given.use_frozen(&model, &tokens, rows).unwrap();
    let (a, b) = (own.loss(&model, &tokens, prompt.len()).unwrap(), given.loss(&model, &tokens, prompt.len()).unwrap());
    assert!((a - b).abs() <= 1e-3 * a.abs(), "loss {a} from its own run, {b} from the session's");
    let step = given.train_step(&model, &tokens, prompt.len(), 1.0).unwrap();
    assert_eq!(step.frozen_ms, 0.0, "the step ran no frozen layer");

    // Another layer's stream, or adapters below the MicroLoRA's layers: none.
    assert!(session.frozen_residuals(&tokens, first - 1).unwrap().is_none());
    session.set_adapters(&set_of(&model, &[("lora-llama-r4.gguf", 1.0)])).unwrap();
    assert!(session.frozen_residuals(&tokens, first).unwrap().is_none());
    // Back on the base model, the cache was forgotten with the set: the session evaluates the example again.
    session.set_adapters(&AdapterSet::default()).unwrap();
    let again = session.frozen_residuals(&tokens, first).unwrap().expect("kept");
    assert_eq!(again.len(), tokens.len() * model.config.d_model);
}

#[test]
fn bad_adapters_are_typed_errors() {
    let (model, _) = load(LLAMA_SPM);
    let dir = fixtures_dir();
    for (file, says) in [
        ("lora-bad-arch.gguf", "for a 'qwen2' model"),
        ("lora-bad-rank.gguf", "lora_a [64, 3] and lora_b [4, 64]"),
        ("lora-bad-shape.gguf", "needs [64, rank]"),
        ("lora-bad-missing-b.gguf", "only one of lora_a and lora_b"),
        ("lora-bad-layer.gguf", "'blk.9.attn_q.weight' is not a weight of this model"),
        ("lora-bad-type.gguf", "general.type is 'model'"),
        ("lora-bad-nan.gguf", "'blk.0.attn_q.weight' has a factor that is NaN or infinite"),
        ("lora-bad-wide.gguf", "has rank 65, more than its 64 x 64 weight's larger side"),
        ("lora-phi3-r8.gguf", "for a 'phi3' model"),
        // A model file is not an adapter.
        (LLAMA_SPM, "general.type is ''"),
    ] {
        let e = LoraAdapter::from_bytes(&model, support::read_file(&format!("{dir}/{file}"))).unwrap_err();
        assert_eq!(e.code(), "E_ADAPTER", "{file}: {e}");
        assert!(e.to_string().contains(says), "{file}: {e}");
    }
    // Cut anywhere, an adapter is refused as a GGUF that is not whole (or, cut in its metadata, as no adapter).
    let whole = support::read_file(&format!("{dir}/lora-llama-r1-qv.gguf"));
    for len in (0..whole.len()).step_by(61) {
        let e = LoraAdapter::from_bytes(&model, whole[..len].to_vec()).unwrap_err();
        assert!(["E_GGUF", "E_ADAPTER"].contains(&e.code()), "cut at {len}: {e}");
    }
    // An adapter of one model in a session of another.
    let (phi3, _) = load(PHI3);
    let set = AdapterSet::new(vec![(adapter(&model, "lora-llama-r4.gguf"), 1.0)]);
    let e = Session::new(phi3).set_adapters(&set).unwrap_err();
    assert_eq!(e.code(), "E_ADAPTER", "{e}");
    // Saved states carry no adapters: a session under adapters neither saves nor restores one.
    let mut session = Session::new(model.clone());
    let state = session.save_state().unwrap();
    session.set_adapters(&set).unwrap();
    assert_eq!(session.save_state().unwrap_err().code(), "E_ADAPTER");
    assert_eq!(session.restore_state(&state).unwrap_err().code(), "E_ADAPTER");
}

/// The default model with a rank-8 adapter on every attention and feed-forward weight, teacher-forced over the
/// llama.cpp reference's sequences, against llama.cpp's distributions with the same adapter: held to the bounds of the
/// base model (`LlamaCppAgreement`).
#[test]
fn smollm2_adapter_matches_llama_cpp() {
    let model = support::default_model();
    let lora = adapter(&model, "lora-smollm2-r8.gguf");
    matches_llama_cpp(&model, lora, SMOLLM2_REFERENCE, "rerun make_lora_adapters.py --model and lora_reference.mjs");
}

/// A MicroLoRA trained here and exported as GGUF (`benches/microlora.rs --lr 3e-2 --ewc 3e6 --export`: rank 2 on q and
/// v of the last 4 layers, 20 steps on four made-up facts), which llama.cpp loads: the same distributions as llama.cpp's
/// with it (tests/fixtures/lora_reference.mjs on that file), within the base model's bounds.
#[test]
fn an_exported_microlora_matches_llama_cpp_with_it() {
    let model = support::default_model();
    let lora = Arc::new(LoraAdapter::from_bytes(&model, MICROLORA_FILE.to_vec()).expect("our export reads back"));
    assert_eq!(lora.name(), Some("ruvllm microlora facts"));
    matches_llama_cpp(&model, lora, MICROLORA_REFERENCE, "rerun lora_reference.mjs on the committed file");
}

/// Our logits under `lora` against llama.cpp's with the same file (`reference`, lora_reference.mjs's output), and
/// far enough from the base model's that the comparison means something.
fn matches_llama_cpp(model: &Arc<Model>, lora: Arc<LoraAdapter>, reference: &str, remedy: &str) {
    let reference: Value = serde_json::from_str(reference).expect("the reference is JSON");
    let digest: String = lora.digest().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, reference["adapter_sha256"], "the adapter is not the reference's: {remedy}");
    let vocab = model.config.vocab_size;
    let mut session =
        Session::with_options(model.clone(), &SessionOptions { n_ctx: 1024, ..SessionOptions::default() }).unwrap();
    session.set_adapters(&AdapterSet::new(vec![(lora, 1.0)])).unwrap();
    let mut rows = Vec::new();
    assert_matches_reference(&reference, vocab, |ids| {
        session.reset();
        let logits = session.eval(ids, true).expect("eval").to_vec();
        rows.extend(logits.chunks(vocab).map(<[f32]>::to_vec));
        logits
    });
    // The adapter moves the model beyond those bounds: against llama.cpp without it, our probability of its top token
    // is off by a median over the 0.015 allowed (an engine that ignored the adapter would fail), and clearly more than
    // from llama.cpp with it.
    let base = support::read_json(&format!("{}/logits.json", support::reference_dir()));
    let (with, without) = (median_dp1(&reference, &rows), median_dp1(&base, &rows));
    println!("|dp1| median against llama.cpp with the adapter {with:.4}, without it {without:.4}");
    assert!(without > 0.015 && without > 1.5 * with, "the adapter moves the model too little to test it");
}

/// The median over positions of |our probability of the reference's top token - the reference's|, for `rows` of
/// logits of the reference's sequences in order.
fn median_dp1(reference: &Value, rows: &[Vec<f32>]) -> f64 {
    let positions = reference["prompts"].as_array().unwrap().iter().flat_map(|p| p["positions"].as_array().unwrap());
    let mut dp: Vec<f64> = positions
        .zip(rows)
        .map(|(pos, row)| {
            let (id, p1) = (pos["top"][0]["id"].as_u64().unwrap() as u32, pos["top"][0]["prob"].as_f64().unwrap());
            (support::logits::prob(row, id) - p1).abs()
        })
        .collect();
    assert_eq!(dp.len(), rows.len(), "one row of logits per position");
    dp.sort_by(f64::total_cmp);
    dp[dp.len() / 2]
}
