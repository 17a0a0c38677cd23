//! Embeddings of all-MiniLM-L6-v2 (llama.cpp's `bert` GGUF, written by scripts/convert_bert_gguf.py and cached by
//! scripts/fetch-embed-model.sh) against llama.cpp's own: token ids and mean-pooled, normalized vectors of every
//! sentence of tests/fixtures/embed_sentences.txt, as benches/embed_reference.mjs recorded them with
//! node-llama-cpp on the F16 file. Runs natively and on wasm32 (Node, Chromium), with the same bounds.

#[path = "support/mod.rs"]
mod support;

use std::sync::{Arc, OnceLock};

use ruvllm::{EmbedOptions, Error, Model, Pooling};
use support::test;

const SENTENCES: &str = include_str!("../fixtures/embed_sentences.txt");
const REFERENCE_JSON: &str = include_str!("../fixtures/embed_reference.json");
const REFERENCE_VECTORS: &[u8] = include_bytes!("../fixtures/embed_reference.f32");

/// The F16 GGUF: $RUVLLM_EMBED_MODEL, else the cache path scripts/fetch-embed-model.sh uses. The Q8_0 one lies beside it.
fn f16_path() -> String {
    support::env("RUVLLM_EMBED_MODEL").unwrap_or_else(|| {
        let cache = support::env("RUVLLM_CACHE")
            .unwrap_or_else(|| format!("{}/.cache/ruvllm", support::env("HOME").expect("HOME is set")));
        format!("{cache}/all-MiniLM-L6-v2.F16.gguf")
    })
}

fn load(path: &str) -> Arc<Model> {
    Arc::new(Model::from_bytes(support::read_file(path)).unwrap_or_else(|e| panic!("{path}: {e}")))
}

fn f16_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| load(&f16_path())).clone()
}

fn q8_0_model() -> Arc<Model> {
    static MODEL: OnceLock<Arc<Model>> = OnceLock::new();
    MODEL.get_or_init(|| load(&f16_path().replace(".F16.gguf", ".Q8_0.gguf"))).clone()
}

fn sentences() -> Vec<&'static str> {
    SENTENCES.lines().filter(|l| !l.is_empty()).collect()
}

struct Reference {
    ids: Vec<Vec<u32>>,
    vectors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let json: serde_json::Value = serde_json::from_str(REFERENCE_JSON).unwrap();
    let n_embd = json["n_embd"].as_u64().unwrap() as usize;
    let ids: Vec<Vec<u32>> = serde_json::from_value(json["ids"].clone()).unwrap();
    let floats: Vec<f32> =
        REFERENCE_VECTORS.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let vectors: Vec<Vec<f32>> = floats.chunks_exact(n_embd).map(<[f32]>::to_vec).collect();
    assert_eq!(ids.len(), vectors.len());
    assert_eq!(ids.len(), sentences().len(), "embed_reference.* are not of this embed_sentences.txt");
    Reference { ids, vectors }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// Every sentence's cosine with llama.cpp's vector; returns (min, mean) after checking `min >= bound`.
fn check_against_reference(model: &Model, bound: f64, name: &str) -> (f64, f64) {
    let reference = reference();
    let texts = sentences();
    let got = model.embed(&texts, &EmbedOptions::default()).unwrap();
    assert_eq!(got.len(), texts.len());
    let cosines: Vec<f64> = got.iter().zip(&reference.vectors).map(|(a, b)| cosine(a, b)).collect();
    let (worst, min) =
        cosines.iter().enumerate().fold((0, f64::INFINITY), |m, (i, &c)| if c < m.1 { (i, c) } else { m });
    let mean = cosines.iter().sum::<f64>() / cosines.len() as f64;
    println!(
        "{name}: cosine with llama.cpp over {} sentences: min {min:.7} (1 - min = {:.1e}, sentence {worst}), mean {mean:.7}",
        texts.len(),
        1.0 - min
    );
    assert!(min >= bound, "{name}: sentence {worst} {:?} has cosine {min} < {bound}", texts[worst]);
    for v in &got {
        let norm = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "normalized: {norm}");
    }
    (min, mean)
}

#[test]
fn tokenizer_matches_llama_cpp_on_every_sentence() {
    let model = f16_model();
    let t = model.tokenizer();
    assert_eq!((t.vocab_size(), t.bos(), t.adds_bos()), (30522, Some(101), true));
    let reference = reference();
    for (text, want) in sentences().iter().zip(&reference.ids) {
        assert_eq!(&t.encode_with_special(text, false).unwrap(), want, "{text:?}");
    }
    assert!(
        reference.ids.iter().filter(|ids| ids.len() > 128).count() >= 3,
        "some sentences are longer than 128 tokens"
    );
}

#[test]
fn f16_embeddings_match_llama_cpp() {
    check_against_reference(&f16_model(), 0.999, "F16");
}

#[test]
fn q8_0_embeddings_match_llama_cpp() {
    // The reference is llama.cpp on the F16 file, so this bound covers Q8_0's own rounding too (measured: min 0.99918,
    // mean 0.99961).
    check_against_reference(&q8_0_model(), 0.998, "Q8_0");
}

#[test]
fn batching_does_not_change_an_embedding() {
    let model = f16_model();
    let texts = sentences();
    let opts = EmbedOptions::default();
    let together = model.embed(&texts[..8], &opts).unwrap();
    for (text, want) in texts[..8].iter().zip(&together) {
        let alone = &model.embed(&[text], &opts).unwrap()[0];
        assert!(cosine(alone, want) > 0.999_999, "{text:?}");
    }
}

#[test]
fn pooling_options() {
    let model = f16_model();
    assert_eq!(model.config.pooling, Some(Pooling::Mean));
    let raw = EmbedOptions { pooling: Some(Pooling::Cls), normalize: false };
    let cls = &model.embed(&["hello world"], &raw).unwrap()[0];
    assert_eq!(cls.len(), 384);
    assert!((cls.iter().map(|x| x * x).sum::<f32>().sqrt() - 1.0).abs() > 1e-3, "not normalized");
    let mean = &model.embed(&["hello world"], &EmbedOptions::default()).unwrap()[0];
    assert!(cosine(cls, mean) < 0.999, "CLS pooling is not the mean");
    assert!(model.embed(&[], &EmbedOptions::default()).unwrap().is_empty());
}

#[test]
fn refusals_are_typed() {
    let model = f16_model();
    let too_long = "word ".repeat(600);
    assert!(matches!(
        model.embed(&[&too_long], &EmbedOptions::default()),
        Err(Error::ContextOverflow { context: 512, .. })
    ));
    assert!(matches!(
        model.embed_tokens(&[vec![101, 30522, 102]], &EmbedOptions::default()),
        Err(Error::TokenOutOfRange { id: 30522, .. })
    ));
    // An encoder does not generate.
    assert!(matches!(ruvllm::Session::with_options(model.clone(), &Default::default()), Err(Error::Model(_))));
}

/// Decoder embeddings (llama.cpp's pooling over the final norm's outputs), on the default model (SmolLM2, llama):
/// the last token's state is what the output head turns into the session's logits, and because attention is
/// causal, the mean over a text is the mean of the last states of its prefixes.
#[test]
fn decoder_pooling_agrees_with_the_forward_pass() {
    let model = support::default_model();
    let ids = model.tokenizer().encode("The capital of France is", false).unwrap();
    let raw = |pooling| EmbedOptions { pooling: Some(pooling), normalize: false };
    let last = &model.embed_tokens(std::slice::from_ref(&ids), &raw(Pooling::Last)).unwrap()[0];
    assert_eq!(last.len(), model.config.d_model);

    let mut session = ruvllm::Session::new(model.clone());
    let logits = session.eval(&ids, false).unwrap().to_vec();
    let mut top: Vec<usize> = (0..logits.len()).collect();
    top.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let output = &model.weights.output;
    let mut row = vec![0f32; output.cols];
    for &id in &top[..5] {
        let bytes = &output.bytes(model.file())[id * output.row_bytes()..][..output.row_bytes()];
        ruvllm::quant::dequantize_row(output.ty, bytes, &mut row);
        let dot: f32 = row.iter().zip(last).map(|(w, h)| w * h).sum();
        // The session's matmul quantizes its input to Q8: a small difference, not a different state.
        assert!((dot - logits[id]).abs() < 0.05 * logits[id].abs().max(1.0), "token {id}: {dot} vs {}", logits[id]);
    }

    let mean = &model.embed_tokens(std::slice::from_ref(&ids), &raw(Pooling::Mean)).unwrap()[0];
    let prefixes: Vec<Vec<u32>> = (1..=ids.len()).map(|n| ids[..n].to_vec()).collect();
    let lasts = model.embed_tokens(&prefixes, &raw(Pooling::Last)).unwrap();
    for (j, &m) in mean.iter().enumerate() {
        let want = lasts.iter().map(|v| v[j]).sum::<f32>() / lasts.len() as f32;
        assert!((m - want).abs() <= 1e-4 * want.abs().max(1.0), "dim {j}: {m} vs {want}");
    }
    let normalized = &model.embed(&["The capital of France is"], &EmbedOptions::default()).unwrap()[0];
    assert!(cosine(normalized, mean) > 0.999_999, "the default pooling of a decoder is the mean");
}

/// A small bert GGUF in F32 (`d` wide, 4 heads, one layer, 112 tokens), with `change` applied to the tensor list
/// before it is written: a way to break one thing at a time.
fn micro_bert(d: usize, change: impl FnOnce(&mut Vec<(String, Vec<usize>)>)) -> Vec<u8> {
    use support::gguf_writer::{GgufWriter, Meta};
    let (ff, ctx, vocab) = (2 * d, 16, 112);
    let mut tensors: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![d, vocab]),
        ("position_embd.weight".into(), vec![d, ctx]),
        ("token_types.weight".into(), vec![d, 2]),
        ("token_embd_norm.weight".into(), vec![d]),
        ("token_embd_norm.bias".into(), vec![d]),
    ];
    for (name, dims) in [
        ("attn_q", vec![d, d]),
        ("attn_k", vec![d, d]),
        ("attn_v", vec![d, d]),
        ("attn_output", vec![d, d]),
        ("ffn_up", vec![d, ff]),
        ("ffn_down", vec![ff, d]),
    ] {
        let rows = dims[1];
        tensors.push((format!("blk.0.{name}.weight"), dims));
        tensors.push((format!("blk.0.{name}.bias"), vec![rows]));
    }
    for norm in ["attn_output_norm", "layer_output_norm"] {
        tensors.push((format!("blk.0.{norm}.weight"), vec![d]));
        tensors.push((format!("blk.0.{norm}.bias"), vec![d]));
    }
    change(&mut tensors);
    let mut tokens: Vec<String> = (0..vocab).map(|i| format!("\u{2581}t{i}")).collect();
    for (id, special) in [(0, "[PAD]"), (100, "[UNK]"), (101, "[CLS]"), (102, "[SEP]"), (103, "[MASK]")] {
        tokens[id] = special.into();
    }
    tokens[1] = "\u{2581}a".into();
    tokens[2] = "\u{2581}b".into();
    let types = (0..vocab).map(|i| if [0, 100, 101, 102, 103].contains(&i) { 3 } else { 1 }).collect();
    let mut w = GgufWriter::new()
        .meta("general.architecture", Meta::Str("bert".into()))
        .meta("bert.block_count", Meta::U32(1))
        .meta("bert.context_length", Meta::U32(ctx as u32))
        .meta("bert.embedding_length", Meta::U32(d as u32))
        .meta("bert.feed_forward_length", Meta::U32(ff as u32))
        .meta("bert.attention.head_count", Meta::U32(4))
        .meta("bert.attention.layer_norm_epsilon", Meta::F32(1e-12))
        .meta("bert.pooling_type", Meta::U32(1))
        .meta("tokenizer.ggml.model", Meta::Str("bert".into()))
        .meta("tokenizer.ggml.tokens", Meta::StrArray(tokens))
        .meta("tokenizer.ggml.token_type", Meta::I32Array(types));
    for (i, (name, dims)) in tensors.iter().enumerate() {
        let n: usize = dims.iter().product();
        // Small values that differ between tensors and elements; norms' weights near 1.
        let base = if name.ends_with("norm.weight") { 1.0 } else { 0.0 };
        let data: Vec<u8> = (0..n)
            .flat_map(|j| (base + (((i * 7919 + j * 104_729) % 2001) as f32 - 1000.0) * 1e-4).to_le_bytes())
            .collect();
        let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
        w = w.tensor(name, &dims, 0, data);
    }
    w.bytes()
}

fn load_error(bytes: Vec<u8>) -> Error {
    match Model::from_bytes(bytes) {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn a_micro_bert_loads_and_embeds() {
    let model = Model::from_bytes(micro_bert(32, |_| {})).unwrap();
    assert_eq!(model.tokenizer().encode_with_special("A b", false).unwrap(), [101, 1, 2, 102]);
    let e = model.embed(&["a b", "b", ""], &EmbedOptions::default()).unwrap();
    for v in &e {
        assert_eq!(v.len(), 32);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(v.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-5, "{v:?}");
    }
    assert!(cosine(&e[0], &e[1]) < 0.999_999, "different texts, different vectors");
    // 17 tokens do not fit a context of 16.
    let long = "a ".repeat(15);
    assert!(matches!(model.embed(&[&long], &EmbedOptions::default()), Err(Error::ContextOverflow { needed: 17, .. })));
}

#[test]
fn bert_files_with_bad_shapes_are_model_errors() {
    let set = |name: &'static str, dims: Vec<usize>| {
        move |t: &mut Vec<(String, Vec<usize>)>| {
            t.iter_mut().filter(|(n, _)| n == name).for_each(|(_, d)| *d = dims.clone())
        }
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("blk.0.attn_q.weight has shape", micro_bert(32, set("blk.0.attn_q.weight", vec![32, 31]))),
        ("blk.0.ffn_up.bias has shape", micro_bert(32, set("blk.0.ffn_up.bias", vec![63]))),
        ("position_embd.weight has shape", micro_bert(32, set("position_embd.weight", vec![32, 8]))),
        ("token_types.weight has shape", micro_bert(32, set("token_types.weight", vec![31, 2]))),
        (
            "blk.0.layer_output_norm.bias is missing",
            micro_bert(32, |t| t.retain(|(n, _)| n != "blk.0.layer_output_norm.bias")),
        ),
        // 4 heads of 34 / 4 (= 8) do not make 34.
        ("do not make embedding_length 34", micro_bert(34, |_| {})),
    ];
    for (want, bytes) in cases {
        let e = load_error(bytes);
        assert!(matches!(e, Error::Model(ref m) if m.contains(want)), "{want}: {e}");
    }
}
