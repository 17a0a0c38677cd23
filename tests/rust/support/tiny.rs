//! The tiny models that tests/fixtures/make_tiny_models.py generates into $RUVLLM_FIXTURES, and their checks against
//! the float64 reference in expected.json (tests/rust/tiny_models.rs on the CPU, tests/rust/gpu.rs on the GPU).

use std::sync::Arc;

use ruvllm::{Model, Session, SessionOptions};
use serde_json::Value;

pub const LLAMA_SPM: &str = "tiny-llama-spm.gguf";
pub const QWEN2: &str = "tiny-qwen2.gguf";
pub const QWEN3: &str = "tiny-qwen3.gguf";
pub const LLAMA3: &str = "tiny-llama3.gguf";
pub const PHI3: &str = "tiny-phi3.gguf";

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
