//! The tiny models that tests/fixtures/make_tiny_models.py generates into $RUVLLM_FIXTURES, and their checks against
//! the float64 reference in expected.json (tests/rust/tiny_models.rs on the CPU, tests/rust/gpu.rs on the GPU).

use std::sync::Arc;

use ruvllm::{Model, Session, SessionOptions};

use crate::support::gguf_writer::{GgufWriter, Meta, Part};
use serde_json::Value;

pub const LLAMA_SPM: &str = "tiny-llama-spm.gguf";
pub const QWEN2: &str = "tiny-qwen2.gguf";
pub const QWEN3: &str = "tiny-qwen3.gguf";
pub const LLAMA3: &str = "tiny-llama3.gguf";
pub const PHI3: &str = "tiny-phi3.gguf";
pub const GEMMA3: &str = "tiny-gemma3.gguf";
pub const SMOLLM3: &str = "tiny-smollm3.gguf";
pub const QWEN3MOE: &str = "tiny-qwen3moe.gguf";
pub const GRANITEMOE: &str = "tiny-granitemoe.gguf";
pub const GEMMA4: &str = "tiny-gemma4.gguf";
pub const QWEN35: &str = "tiny-qwen35.gguf";

/// llama.cpp's greedy continuations of the tiny models of new architectures (tests/fixtures/greedy_reference.mjs).
const GREEDY_REFERENCE: &str = include_str!("../../fixtures/tiny-greedy-reference.json");

/// Allowed deviation from the float64 reference, as a multiple of the ggml-like simulation's.
pub const TOLERANCE_FACTOR: f64 = 2.0;

pub fn fixtures_dir() -> String {
    super::env("RUVLLM_FIXTURES").unwrap_or_else(|| {
        panic!(
            "RUVLLM_FIXTURES is not set: generate the tiny test models with \
             `.venv/bin/python tests/fixtures/make_tiny_models.py target/fixtures` and set \
             RUVLLM_FIXTURES=$PWD/target/fixtures (scripts/test.sh does both)"
        )
    })
}

/// The model `file` and its entry in expected.json.
pub fn load(file: &str) -> (Arc<Model>, Value) {
    let dir = fixtures_dir();
    let mut expected = super::read_json(&format!("{dir}/expected.json"));
    let entry = expected["models"][file].take();
    assert!(entry.is_object(), "{dir}/expected.json has no entry for {file}: regenerate the fixtures");
    let model = Model::from_bytes(super::read_file(&format!("{dir}/{file}")))
        .unwrap_or_else(|e| panic!("{file} does not load: {e}"));
    assert_eq!(model.config.vocab_size as u64, entry["vocab_size"].as_u64().unwrap(), "{file}: vocabulary size");
    (Arc::new(model), entry)
}

/// llama.cpp's greedy continuation of `file`'s reference sequences: (prompt, the 32 ids after it) for each whose
/// two best logits were never closer than 0.1 along the way: random weights make near ties (0.02 apart), where two
/// engines within the logits' bounds may part. The fixture must be the bytes llama.cpp ran (the generator is seeded;
/// other library versions may write others).
pub fn greedy_reference(file: &str) -> Vec<(Vec<u32>, Vec<u32>)> {
    let reference: Value = serde_json::from_str(GREEDY_REFERENCE).expect("tiny-greedy-reference.json");
    let entry = &reference["models"][file];
    read_fixture_made_for(file, &entry["sha256"], "greedy_reference.mjs");
    let runs = entry["runs"].as_array().expect("runs");
    let clear: Vec<_> = runs
        .iter()
        .filter(|r| r["min_top2_gap"].as_f64().unwrap() >= 0.1)
        .map(|r| (ids(&r["prompt"]), ids(&r["greedy"])))
        .collect();
    assert!(clear.len() >= 2, "{file}: only {} of the greedy runs are clear of near ties", clear.len());
    clear
}

/// The fixture `file`'s bytes, which must be those whose SHA-256 (`sha256`) a committed llama.cpp reference was made
/// from by tests/fixtures/`script` (the generator is seeded; other library versions may write other bytes).
pub fn read_fixture_made_for(file: &str, sha256: &Value, script: &str) -> Vec<u8> {
    super::read_file_made_for(&format!("{}/{file}", fixtures_dir()), sha256, script)
}

pub fn ids(v: &Value) -> Vec<u32> {
    serde_json::from_value(v.clone()).expect("a list of token ids")
}

/// How one sequence's logits compare with the reference.
#[derive(Default, Debug)]
pub struct Deviation {
    /// Worst over positions of max |engine - reference| / std(reference logits at that position).
    max_over_std: f64,
    /// Worst over positions of rms(engine - reference) / std(reference).
    rms_over_std: f64,
    /// Positions where the reference's top token leads by more than the allowed error, and of those, how many the
    /// engine ranks first too.
    clear_top1: usize,
    clear_top1_agree: usize,
}

impl Deviation {
    /// Assert that the logits are within `tol` (max and rms, over the reference's std) and that the top token is the
    /// reference's wherever it is clear; `what` names the sequence in a failure.
    pub fn assert_within(&self, (tol_max, tol_rms): (f64, f64), what: &str) {
        assert!(
            self.max_over_std <= tol_max && self.rms_over_std <= tol_rms,
            "{what}: logits deviate from the reference by max {:.4} / rms {:.4} of their std; \
             allowed {tol_max:.4} / {tol_rms:.4} ({TOLERANCE_FACTOR} x ggml's own 8-bit activation rounding)",
            self.max_over_std,
            self.rms_over_std
        );
        assert_eq!(self.clear_top1_agree, self.clear_top1, "{what}: top token differs where the reference is clear");
    }
}

/// The allowed deviation (max, rms) for a reference whose ggml-like simulation deviates by `sim`
/// (`ggml_like_deviation`).
pub fn tolerance(sim: &Value, what: &str) -> (f64, f64) {
    let (sim_max, sim_rms) = (sim["max_over_std"].as_f64().unwrap(), sim["rms_over_std"].as_f64().unwrap());
    // A regenerated fixture must not quietly widen the tolerance.
    assert!(sim_max < 0.15 && sim_rms < 0.05, "{what}: implausible ggml-like deviation {sim}");
    (TOLERANCE_FACTOR * sim_max, TOLERANCE_FACTOR * sim_rms)
}

pub fn argmax<T: PartialOrd + Copy>(v: &[T]) -> usize {
    (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best })
}

pub fn compare(got: &[f32], reference: &[Value], vocab: usize, tol_max: f64) -> Deviation {
    assert_eq!(got.len(), reference.len() * vocab, "one row of logits per position");
    let mut d = Deviation::default();
    for (row, want) in got.chunks(vocab).zip(reference) {
        let want: Vec<f64> = serde_json::from_value(want.clone()).expect("a row of logits");
        assert_eq!(want.len(), vocab);
        assert!(row.iter().all(|v| v.is_finite()), "non-finite logits");
        let mean = want.iter().sum::<f64>() / vocab as f64;
        let std = (want.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / vocab as f64).sqrt();
        let diffs = row.iter().zip(&want).map(|(&g, w)| g as f64 - w);
        let (max, sq) = diffs.fold((0f64, 0f64), |(m, s), x| (m.max(x.abs()), s + x * x));
        d.max_over_std = d.max_over_std.max(max / std);
        d.rms_over_std = d.rms_over_std.max((sq / vocab as f64).sqrt() / std);
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        if sorted[0] - sorted[1] > 2.0 * tol_max * std {
            d.clear_top1 += 1;
            d.clear_top1_agree += (argmax(row) == argmax(&want)) as usize;
        }
    }
    d
}

/// Evaluate every reference sequence in a fresh session of `opts` (`session` makes it: the CPU's, or another
/// backend's), feeding it in pieces of `chunks` (cycled; `None`: all at once), and compare the logits at every
/// position with the reference.
pub fn check_logits_with(
    file: &str,
    opts: &SessionOptions,
    chunks: Option<&[usize]>,
    session: impl Fn(&Arc<Model>, &SessionOptions) -> Session,
) {
    let (model, entry) = load(file);
    let vocab = model.config.vocab_size;
    let tol = tolerance(&entry["ggml_like_deviation"], file);

    let sequences = entry["forward"].as_array().expect("forward cases");
    assert!(!sequences.is_empty());
    for seq in sequences {
        let ids = ids(&seq["ids"]);
        let mut session = session(&model, opts);
        let mut logits = Vec::with_capacity(ids.len() * vocab);
        let sizes = chunks.map_or_else(|| vec![ids.len()], |c| c.iter().copied().cycle().take(ids.len()).collect());
        let mut start = 0;
        for n in sizes {
            let end = (start + n).min(ids.len());
            if start == end {
                break;
            }
            logits.extend_from_slice(session.eval(&ids[start..end], true).expect("eval"));
            start = end;
        }
        let d = compare(&logits, seq["logits"].as_array().unwrap(), vocab, tol.0);
        eprintln!("{file} {} tokens, chunks {chunks:?}, n_batch {}: {d:?}", ids.len(), opts.n_batch);
        d.assert_within(tol, &format!("{file}, sequence {ids:?}"));
    }
}

/// [`check_logits_with`] on the CPU.
pub fn check_logits(file: &str, opts: &SessionOptions, chunks: Option<&[usize]>) {
    check_logits_with(file, opts, chunks, |model, opts| {
        Session::with_options(model.clone(), opts).expect("session options")
    });
}

/// The byte offset of tensor `name`'s type id in a GGUF header (its offset follows).
fn tensor_type_field(bytes: &[u8], name: &str, n_dims: usize) -> usize {
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap_or_else(|| panic!("no tensor {name}"));
    at + key.len() + 4 + 8 * n_dims
}

/// The tiny model `file` with its layer matrices requantized (from their values) as IQ4_XS where rows are whole
/// super-blocks, else IQ4_NL, each in place where its IQ4 bytes fit; and the same model with those matrices in F32
/// holding the IQ4 values exactly (at the end of the file). The fixtures' Python writer cannot quantize these types.
pub fn iq4_models(file: &str) -> (Arc<Model>, Arc<Model>) {
    use ruvllm::gguf::Gguf;
    use ruvllm::quant::{dequantize_row, quantize_row, GgmlType};

    let bytes = super::read_file(&format!("{}/{file}", fixtures_dir()));
    let g = Gguf::parse(&bytes).unwrap();
    let (mut iq4, mut f32s) = (bytes.clone(), bytes.clone());
    let mut retyped = [0usize; 2];
    for t in g.tensors.iter().filter(|t| t.name.starts_with("blk.") && t.dims.len() == 2) {
        let ty = if t.dims[0] % 256 == 0 { GgmlType::IQ4_XS } else { GgmlType::IQ4_NL };
        let size = ty.row_bytes(t.n_elements());
        if size > t.size {
            continue;
        }
        retyped[(ty == GgmlType::IQ4_XS) as usize] += 1;
        let mut x = vec![0f32; t.n_elements()];
        dequantize_row(t.ty, t.data(&bytes), &mut x);
        let mut q = vec![0u8; size];
        quantize_row(ty, &x, &mut q);
        dequantize_row(ty, &q, &mut x);
        let field = tensor_type_field(&bytes, &t.name, t.dims.len());
        iq4[field..field + 4].copy_from_slice(&(ty as u32).to_le_bytes());
        iq4[t.offset as usize..][..size].copy_from_slice(&q);
        let rel = (f32s.len() - g.data_offset).next_multiple_of(g.alignment);
        f32s.resize(g.data_offset + rel, 0);
        f32s.extend(x.iter().flat_map(|v| v.to_le_bytes()));
        f32s[field..field + 4].copy_from_slice(&(GgmlType::F32 as u32).to_le_bytes());
        f32s[field + 4..field + 12].copy_from_slice(&(rel as u64).to_le_bytes());
    }
    assert!(retyped[0] > 0 && retyped[1] > 0, "{file}: IQ4_NL and IQ4_XS matrices: {retyped:?}");
    let iq4 = Model::from_bytes(iq4).unwrap_or_else(|e| panic!("{file} in IQ4 does not load: {e}"));
    let f32s = Model::from_bytes(f32s).unwrap_or_else(|e| panic!("{file} in F32 does not load: {e}"));
    (Arc::new(iq4), Arc::new(f32s))
}

/// On every reference sequence of `file`, the logits `got(ids)` within `tol` std of the logits `want(ids)` at
/// every position.
pub fn check_iq4_logits(file: &str, tol: f32, got: impl Fn(&[u32]) -> Vec<f32>, want: impl Fn(&[u32]) -> Vec<f32>) {
    let (model, entry) = load(file);
    let vocab = model.config.vocab_size;
    for seq in entry["forward"].as_array().unwrap() {
        let ids = ids(&seq["ids"]);
        let (got, want) = (got(&ids), want(&ids));
        assert_eq!(got.len(), want.len());
        for (p, (got, want)) in got.chunks_exact(vocab).zip(want.chunks_exact(vocab)).enumerate() {
            let mean = want.iter().sum::<f32>() / vocab as f32;
            let std = (want.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / vocab as f32).sqrt();
            let max = got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(max <= tol * std, "{file}, position {p} of {ids:?}: logits {max} apart (std {std})");
        }
    }
}

/// A recurrent model's state going back, checked on its logits bit for bit (the tiny models' top token is mostly
/// their input, so ids alone say little): `s` (a fresh session) takes `prompt`'s first 10 tokens in one call (its
/// checkpoint) and the others one at a time, then goes back to 14 (from the checkpoint) and to 5 (from the start);
/// the logits of the rest must be `whole`'s rows (the whole prompt's, evaluated at once).
pub fn assert_going_back_gives_whole_logits(s: &mut Session, prompt: &[u32], whole: &[f32], vocab: usize) {
    s.eval(&prompt[..10], false).unwrap();
    for t in 10..prompt.len() {
        s.eval(&prompt[t..t + 1], false).unwrap();
    }
    for back in [14, 5] {
        s.truncate(back);
        let got = s.eval(&prompt[back..], true).unwrap();
        assert!(got == &whole[back * vocab..], "logits after going back to {back}");
    }
}

/// The tiny model `file` after 5 GiB of zeros (`padding.N`, F32 tensors of 1 GiB that no model reads), so that its own
/// tensors lie past 4 GiB: a stand-in for a model file larger than wasm32's memory, never held whole ([`Part::Zeros`]
/// are lengths). Its bytes as parts, and its length.
pub fn past_4_gib(file: &str) -> (Vec<Part>, u64) {
    use ruvllm::gguf::Gguf;
    let bytes = crate::support::read_file(&format!("{}/{file}", fixtures_dir()));
    let gguf = Gguf::parse(&bytes).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in &gguf.metadata {
        w = w.meta(key, Meta::of(value).unwrap());
    }
    for i in 0..5 {
        w = w.zeros(&format!("padding.{i}"), &[1 << 20, 256], 0, 1 << 30);
    }
    for t in &gguf.tensors {
        let dims: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
        w = w.tensor(&t.name, &dims, t.ty as u32, t.data(&bytes).to_vec());
    }
    let parts = w.parts();
    let len = parts.iter().map(|p| match p {
        Part::Bytes(b) => b.len() as u64,
        Part::Zeros(n) => *n,
    });
    let len = len.sum();
    (parts, len)
}

/// `parts` as chunks of at most 1 MiB, in order (the zeros from one buffer).
pub fn chunks(parts: &[Part]) -> impl Iterator<Item = &[u8]> {
    const CHUNK: u64 = 1 << 20;
    static ZEROS: [u8; CHUNK as usize] = [0; CHUNK as usize];
    parts.iter().flat_map(|p| -> Box<dyn Iterator<Item = &[u8]> + '_> {
        match p {
            Part::Bytes(b) => Box::new(b.chunks(CHUNK as usize)),
            &Part::Zeros(n) => {
                Box::new((0..n.div_ceil(CHUNK)).map(move |i| &ZEROS[..(n - i * CHUNK).min(CHUNK) as usize]))
            }
        }
    })
}
