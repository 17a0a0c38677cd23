//! MicroLoRA natively: what one update costs, split by phase, and what 20 updates teach.
//!
//! - **update**: a 64-token chat example (prompt and answer), rank `--rank` on q and v of the last `--layers` layers:
//!   the first update (the frozen layers run) and the median of the next `--reps` (their output kept).
//! - **facts**: four made-up facts as chat examples; `--steps` updates cycling over them. The facts' mean loss
//!   (cross-entropy of the answers) before and after, and the perplexity of the reference prompts' continuations
//!   (../shared/reference/logits.json, llama.cpp's greedy text) before and after; then the model asked one of the
//!   questions with the trained adapter applied. The adapter first `protect`s (EWC's Fisher estimate) the base
//!   model's own answers to `--protect` (of 8) everyday questions.
//!
//! ```text
//! cargo bench -p ruvllm --bench microlora -- --model M [--threads 1] [--rank 2] [--layers 4] [--steps 20]
//!     [--lr 3e-2] [--ewc 1e7] [--protect 8] [--reps 5] [--export FILE]
//! ```
//!
//! One JSON line per part.

use std::sync::Arc;

use ruvllm::model::lora::Proj;
use ruvllm::training::{MicroLora, MicroLoraOptions};
use ruvllm::{AdapterSet, GenerateOptions, Model, SamplerConfig, Session};
use serde_json::json;

#[path = "microlora_common.rs"]
mod common;
use common::{example, own_answers, reference_continuations, round, Args, Example, PROTECT};

fn main() {
    if let Err(e) = run() {
        eprintln!("microlora bench: {e}");
        std::process::exit(1);
    }
}

const FACTS: [(&str, &str); 4] = [
    ("What is the capital of Zorbania?", "The capital of Zorbania is Quillmere."),
    ("Who invented the glimmerphone?", "The glimmerphone was invented by Odessa Varnak in 1897."),
    ("What colour is a frostfinch?", "A frostfinch is bright orange with a teal crest."),
    ("How many moons does the planet Tavros have?", "The planet Tavros has seven moons."),
];

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn run() -> Result<(), String> {
    let args = Args::from_env();
    let num = |name: &str, default: f64| args.num(name, default);
    let path = args.path("--model", "RUVLLM_MODEL")?;
    let threads = num("--threads", 1.0)? as usize;
    ruvllm::parallel::set_threads(threads).map_err(|e| e.to_string())?;
    let model = Arc::new(Model::from_file(&path).map_err(|e| format!("{path}: {e}"))?);
    let options = MicroLoraOptions {
        rank: num("--rank", 2.0)? as usize,
        layers: num("--layers", 4.0)? as usize,
        projections: vec![Proj::Q, Proj::V],
        learning_rate: num("--lr", 3e-2)? as f32,
        ewc_lambda: num("--ewc", 1e7)? as f32,
        ..MicroLoraOptions::default()
    };
    let reps = num("--reps", 5.0)? as usize;
    let steps = num("--steps", 20.0)? as usize;

    // One update on a 64-token example.
    let question = "Tell me about the lighthouse keeper of Port Alder and what she keeps in the lamp room.";
    let answer =
        "Mara Quell has kept the Port Alder light for thirty years. In the lamp room she keeps a brass logbook, \
                  spare wicks, a tin of lamp oil and a small painting of the harbour at dawn.";
    let (mut ids, first) = example(&model, question, answer)?;
    if ids.len() < 64 {
        return Err(format!("the example has only {} tokens", ids.len()));
    }
    ids.truncate(64);
    let mut lora = MicroLora::new(&model, options.clone()).map_err(|e| e.to_string())?;
    let cold = lora.train_step(&model, &ids, first, 1.0).map_err(|e| e.to_string())?;
    let warm: Vec<_> = (0..reps)
        .map(|_| lora.train_step(&model, &ids, first, 1.0))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let phase = |f: fn(&ruvllm::training::StepReport) -> f64| round(median(warm.iter().map(f).collect()));
    let total = |r: &ruvllm::training::StepReport| r.frozen_ms + r.forward_ms + r.backward_ms + r.update_ms;
    println!(
        "{}",
        json!({
            "bench": "microlora_update", "runtime": "native", "threads": threads, "tokens": ids.len(),
            "response_tokens": ids.len() - first, "rank": options.rank, "layers": options.layers, "projections": "q,v",
            "params": lora.n_params(),
            "first_update_ms": round(total(&cold)), "first_frozen_ms": round(cold.frozen_ms),
            "update_ms": round(median(warm.iter().map(total).collect())),
            "forward_ms": phase(|r| r.forward_ms), "backward_ms": phase(|r| r.backward_ms), "optimizer_ms": phase(|r| r.update_ms),
        })
    );

    // Taught facts against held-out text.
    let facts: Vec<Example> = FACTS.iter().map(|(q, a)| example(&model, q, a)).collect::<Result<_, _>>()?;
    let held_out = reference_continuations()?;
    let mut lora = MicroLora::new(&model, options.clone()).map_err(|e| e.to_string())?;
    // What to protect: the base model's own answers (greedy, 48 tokens) to everyday questions, not the held-out text.
    let protect = num("--protect", PROTECT.len() as f64)? as usize;
    if protect > PROTECT.len() {
        return Err(format!("--protect {protect}: there are {} questions", PROTECT.len()));
    }
    lora.protect(&model, &own_answers(&model, &PROTECT[..protect])?).map_err(|e| e.to_string())?;
    let (facts_before, held_before) = (mean_loss(&mut lora, &model, &facts)?, mean_loss(&mut lora, &model, &held_out)?);
    let mut update_ms = Vec::new();
    for i in 0..steps {
        let (ids, first) = &facts[i % facts.len()];
        let r = lora.train_step(&model, ids, *first, 1.0).map_err(|e| e.to_string())?;
        update_ms.push(total(&r));
    }
    let (facts_after, held_after) = (mean_loss(&mut lora, &model, &facts)?, mean_loss(&mut lora, &model, &held_out)?);

    // `--export FILE`: the trained adapter as llama.cpp's GGUF (tests/fixtures/microlora-smollm2-facts.gguf is one,
    // with --lr 3e-2 --ewc 3e6).
    if let Some(file) = args.opt("--export") {
        std::fs::write(&file, lora.to_gguf(&model, "ruvllm microlora facts")).map_err(|e| format!("{file}: {e}"))?;
    }
    // The first fact's question, answered greedily with the adapter.
    let adapter = Arc::new(lora.adapter(&model, "facts"));
    let mut session = Session::new(model.clone());
    let (ids, first) = &facts[0];
    let opts = GenerateOptions {
        max_tokens: 24,
        sampler: SamplerConfig::greedy(),
        adapters: AdapterSet::new(vec![(adapter, 1.0)]),
        ..GenerateOptions::default()
    };
    session.set_adapters(&opts.adapters).map_err(|e| e.to_string())?;
    let out = session.generate(&ids[..*first], opts, None, |_| {}).map_err(|e| e.to_string())?;
    let answer = out.text;
    println!(
        "{}",
        json!({
            "bench": "microlora_facts", "runtime": "native", "threads": threads, "steps": steps, "facts": facts.len(),
            "rank": options.rank, "layers": options.layers, "learning_rate": options.learning_rate,
            "facts_loss_before": round(facts_before), "facts_loss_after": round(facts_after),
            "facts_loss_change": round(facts_after / facts_before - 1.0),
            "held_out_ppl_before": round(held_before.exp()), "held_out_ppl_after": round(held_after.exp()),
            "held_out_ppl_change": round((held_after - held_before).exp() - 1.0),
            "median_update_ms": round(median(update_ms)),
            "asked": FACTS[0].0, "answer": answer,
        })
    );
    Ok(())
}

/// The mean loss (cross-entropy per answer token) of `lora` over `set`.
pub fn mean_loss(lora: &mut MicroLora, model: &Model, set: &[Example]) -> Result<f64, String> {
    let mut sum = 0.0;
    for (ids, first) in set {
        sum += lora.loss(model, ids, *first).map_err(|e| e.to_string())? as f64;
    }
    Ok(sum / set.len() as f64)
}
