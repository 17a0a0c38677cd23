//! The learning loops on a stream of requests (issue 43's goals), natively: the training calls the package's
//! `LearningLoop` makes (npm/src/vectors/learning.ts), in its order, on a replayed stream of chat requests with a
//! rater's feedback.
//!
//! - **The stream**: `--requests` questions (default 300) over four topics (geography, cooking, Python, health), each
//!   from a template and a subject; the rater prefers one style of answer per topic ("Short answer: ..."), and each
//!   request's feedback is that preferred answer (`llm.feedback(id, { score: 1, preferred })`).
//! - **The instant loop**: one step of the instant adapter (rank `--instant-rank` 2, `--instant-lr` 1e-4) per request
//!   on the preferred answer (what `llm.learner` runs).
//! - **The background loop**: every `--every` requests (default 50), the requests since train the base adapter (rank
//!   `--rank` 8, alpha = rank, `--lr` 3e-4, `--ewc` 1e8), `--epochs` passes over them (default 2), then `consolidate`
//!   (EWC++), the instant adapter reset, and the router taught the corrections queued since. The base adapter first
//!   `protect`s the base model's own answers to everyday questions (`--protect 0`: not), as `protect: 'own'` does.
//!   The defaults are `LearningLoop`'s.
//! - **The router**: a semantic router (`index::Collection::route`) on all-MiniLM-L6-v2 embeddings, seeded with one
//!   general utterance per topic ("A question about food."); a request routed to the wrong topic (or none) queues a
//!   correction (`llm.feedback(id, { route })`), added as an utterance of its topic at the next background run.
//! - **Measured** as the model answers (the quantized forward pass with the base and instant adapters applied, as
//!   generation runs them), before the stream, just before each background run (the instant adapter at its fullest)
//!   and just after it: the perplexity of the preferred answers to held-out questions (other subjects, never trained
//!   on), the perplexity of unrelated text (the reference prompts' continuations, llama.cpp's greedy text:
//!   forgetting), and the router's accuracy on the held-out questions.
//!
//! ```text
//! cargo bench -p ruvllm --bench learning_stream -- --model M --embedder E [--requests 300] [--every 50]
//!     [--epochs 2] [--rank 8] [--lr 3e-4] [--ewc 1e8] [--instant-rank 2] [--instant-lr 1e-4] [--protect 1]
//!     [--layers 4] [--threads 1]
//! ```
//!
//! One JSON line per measurement, then the summary line.

use std::sync::Arc;
use std::time::Instant;

use ruvllm::index::{Collection, HnswParams, Metric};
use ruvllm::model::lora::{AdapterSet, Proj};
use ruvllm::training::{MicroLora, MicroLoraOptions};
use ruvllm::{EmbedOptions, Model, Session};
use serde_json::json;

#[path = "microlora_common.rs"]
mod common;
use common::{example, own_answers, reference_continuations, round, Args, Example, PROTECT};

fn main() {
    if let Err(e) = run() {
        eprintln!("learning_stream bench: {e}");
        std::process::exit(1);
    }
}

/// A topic: the router's one utterance for it to start with, how its questions are asked, the answer the rater
/// prefers (`{}`: the subject), the subjects the stream asks about, and the held-out ones.
struct Topic {
    name: &'static str,
    seed: &'static str,
    question: &'static str,
    preferred: &'static str,
    subjects: &'static [&'static str],
    held_out: &'static [&'static str],
}

const TOPICS: [Topic; 4] = [
    Topic {
        name: "geography",
        seed: "A question about travel and the world.",
        question: "Where is {} and what is it known for?",
        preferred: "Short answer: {} is a place worth finding on a map, and one line is all it needs.",
        subjects: &[
            "Peru", "Norway", "Kenya", "Vietnam", "Chile", "Iceland", "Morocco", "Nepal", "Portugal", "Ghana",
            "Finland", "Laos", "Bolivia", "Latvia", "Oman", "Malta", "Cuba", "Fiji",
        ],
        held_out: &["Uruguay", "Bhutan", "Estonia", "Namibia", "Jordan", "Tonga", "Slovenia", "Panama"],
    },
    Topic {
        name: "cooking",
        seed: "A question about food.",
        question: "How should I cook {} for dinner?",
        preferred: "Short answer: cook {} gently, season it well, and taste it before you serve.",
        subjects: &[
            "salmon",
            "lentils",
            "tofu",
            "chicken thighs",
            "broccoli",
            "rice",
            "mushrooms",
            "eggplant",
            "pork chops",
            "chickpeas",
            "carrots",
            "shrimp",
            "polenta",
            "cabbage",
            "quinoa",
            "beef stew",
            "leeks",
            "cod",
        ],
        held_out: &["duck breast", "barley", "zucchini", "mussels", "tempeh", "parsnips", "lamb shanks", "spinach"],
    },
    Topic {
        name: "python",
        seed: "A question about programming.",
        question: "How do I {} in Python?",
        preferred: "Short answer: to {}, write a small function and test it on one example first.",
        subjects: &[
            "reverse a list",
            "read a file",
            "sort a dictionary",
            "parse JSON",
            "count words",
            "merge two lists",
            "remove duplicates",
            "format a date",
            "find the maximum",
            "split a string",
            "copy a folder",
            "zip two lists",
            "flatten a list",
            "round a number",
            "check a prefix",
            "join paths",
            "sum a column",
            "time a loop",
        ],
        held_out: &[
            "transpose a matrix",
            "read a CSV file",
            "rename a file",
            "filter a list",
            "encode base64",
            "compare two sets",
            "pad a string",
            "shuffle a list",
        ],
    },
    Topic {
        name: "health",
        seed: "A question about staying well.",
        question: "Is {} good for my health?",
        preferred: "Short answer: {} is fine for most people in moderation; ask a doctor if unsure.",
        subjects: &[
            "coffee",
            "running",
            "dark chocolate",
            "fasting",
            "yoga",
            "red wine",
            "napping",
            "swimming",
            "oatmeal",
            "cold showers",
            "cycling",
            "green tea",
            "walking",
            "sauna",
            "eggs",
            "stretching",
            "honey",
            "hiking",
        ],
        held_out: &["rowing", "kimchi", "pilates", "almonds", "dancing", "black tea", "gardening", "yogurt"],
    },
];

fn fill(template: &str, subject: &str) -> String {
    template.replacen("{}", subject, 1)
}

/// The mean cross-entropy per answer token of `set` as the model answers with `base` and `instant` applied: the
/// quantized forward pass generation runs, all positions' logits, log-softmax in f64.
fn deployed_loss(session: &mut Session, base: &MicroLora, instant: &MicroLora, set: &[Example]) -> Result<f64, String> {
    let model = session.model().clone();
    let adapters = AdapterSet::new(vec![
        (Arc::new(base.adapter(&model, "base")), 1.0),
        (Arc::new(instant.adapter(&model, "instant")), 1.0),
    ]);
    session.set_adapters(&adapters).map_err(|e| e.to_string())?;
    let vocab = model.config.vocab_size;
    let (mut sum, mut n) = (0.0, 0usize);
    for (ids, first) in set {
        session.reset();
        let logits = session.eval(ids, true).map_err(|e| e.to_string())?;
        for (pos, &target) in ids.iter().enumerate().skip(*first) {
            let row = &logits[(pos - 1) * vocab..pos * vocab];
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
            let log_sum = row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
            sum += log_sum - row[target as usize] as f64;
            n += 1;
        }
    }
    Ok(sum / n as f64)
}

fn run() -> Result<(), String> {
    let args = Args::from_env();
    let num = |name: &str, default: f64| args.num(name, default);
    let path = args.path("--model", "RUVLLM_MODEL")?;
    let embedder_path = args.path("--embedder", "RUVLLM_EMBED_MODEL")?;
    let threads = num("--threads", 1.0)? as usize;
    ruvllm::parallel::set_threads(threads).map_err(|e| e.to_string())?;
    let requests = num("--requests", 300.0)? as usize;
    let every = (num("--every", 50.0)? as usize).max(1);
    let epochs = num("--epochs", 2.0)? as usize;
    let protect = num("--protect", 1.0)? != 0.0;
    let model = Arc::new(Model::from_file(&path).map_err(|e| format!("{path}: {e}"))?);
    let embedder = Model::from_file(&embedder_path).map_err(|e| format!("{embedder_path}: {e}"))?;
    let layers = num("--layers", 4.0)? as usize;
    let rank = num("--rank", 8.0)? as usize;
    let ewc_lambda = num("--ewc", 1e8)? as f32;
    let base_options = MicroLoraOptions {
        rank,
        alpha: rank as f32,
        layers,
        projections: vec![Proj::Q, Proj::V],
        learning_rate: num("--lr", 3e-3)? as f32,
        ewc_lambda,
        ..MicroLoraOptions::default()
    };
    let instant_options = MicroLoraOptions {
        rank: num("--instant-rank", 2.0)? as usize,
        layers,
        projections: vec![Proj::Q, Proj::V],
        learning_rate: num("--instant-lr", 1e-4)? as f32,
        ..MicroLoraOptions::default()
    };

    // The stream, and the held-out questions with their preferred answers.
    let stream: Vec<(usize, String, String)> = (0..requests)
        .map(|i| {
            let (t, topic) = (i % TOPICS.len(), &TOPICS[i % TOPICS.len()]);
            let subject = topic.subjects[(i / TOPICS.len()) % topic.subjects.len()];
            (t, fill(topic.question, subject), fill(topic.preferred, subject))
        })
        .collect();
    let held_out: Vec<(usize, String, String)> = TOPICS
        .iter()
        .enumerate()
        .flat_map(|(t, topic)| {
            topic.held_out.iter().map(move |s| (t, fill(topic.question, s), fill(topic.preferred, s)))
        })
        .collect();
    let held_examples: Vec<Example> =
        held_out.iter().map(|(_, q, a)| example(&model, q, a)).collect::<Result<_, _>>()?;
    let unrelated = reference_continuations()?;

    // The two adapters; the base one protecting the base model's own answers to everyday questions, if asked.
    let mut base = MicroLora::new(&model, base_options.clone()).map_err(|e| e.to_string())?;
    if protect {
        base.protect(&model, &own_answers(&model, &PROTECT)?).map_err(|e| e.to_string())?;
    }
    let mut instant = MicroLora::new(&model, instant_options.clone()).map_err(|e| e.to_string())?;
    let mut session = Session::new(model.clone());

    // The router: one utterance per topic to start.
    let embed = |texts: &[&str]| embedder.embed(texts, &EmbedOptions::default()).map_err(|e| e.to_string());
    let dims = embedder.config.d_model;
    let mut router = Collection::new(Metric::Cosine, dims, HnswParams::default()).map_err(|e| e.to_string())?;
    for topic in &TOPICS {
        let v = embed(&[topic.seed])?.remove(0);
        router.add(&v, topic.seed, topic.name, 0).map_err(|e| e.to_string())?;
    }
    let held_vectors = embed(&held_out.iter().map(|(_, q, _)| q.as_str()).collect::<Vec<_>>())?;
    let stream_vectors = embed(&stream.iter().map(|(_, q, _)| q.as_str()).collect::<Vec<_>>())?;

    let accuracy = |router: &Collection| -> Result<f64, String> {
        let mut right = 0;
        for ((t, _, _), v) in held_out.iter().zip(&held_vectors) {
            let d = router.route(v, 10, 64).map_err(|e| e.to_string())?;
            right += usize::from(d.route.is_some_and(|r| r.label == TOPICS[*t].name));
        }
        Ok(right as f64 / held_out.len() as f64)
    };

    // (requests, when, preferred ppl, unrelated ppl, router accuracy), `when` "before" or "after" a background run.
    let mut curve: Vec<(usize, &str, f64, f64, f64)> = Vec::new();
    let mut corrections = 0;
    let mut step_ms = Vec::new();
    let mut run_ms = Vec::new();
    let mut measure = |n: usize,
                       when: &'static str,
                       base: &MicroLora,
                       instant: &MicroLora,
                       router: &Collection,
                       corrections: usize|
     -> Result<(), String> {
        let preferred = deployed_loss(&mut session, base, instant, &held_examples)?.exp();
        let other = deployed_loss(&mut session, base, instant, &unrelated)?.exp();
        let acc = accuracy(router)?;
        let point = json!({
            "bench": "learning_stream", "requests": n, "when": when, "held_out_preferred_ppl": round(preferred),
            "unrelated_ppl": round(other), "router_accuracy": round(acc), "corrections": corrections,
        });
        println!("{point}");
        curve.push((n, when, preferred, other, acc));
        Ok(())
    };
    measure(0, "after", &base, &instant, &router, 0)?;
    let mut batch: Vec<Example> = Vec::new();
    let mut queued: Vec<(usize, &[f32], &str)> = Vec::new();
    for (i, ((t, question, preferred), v)) in stream.iter().zip(&stream_vectors).enumerate() {
        // The router's decision; a wrong one queues a correction.
        let decision = router.route(v, 10, 64).map_err(|e| e.to_string())?;
        if decision.route.is_none_or(|r| r.label != TOPICS[*t].name) {
            queued.push((*t, v, question));
        }
        // The instant loop: one step toward the preferred answer.
        let (ids, first) = example(&model, question, preferred)?;
        let started = Instant::now();
        instant.train_step(&model, &ids, first, 1.0).map_err(|e| e.to_string())?;
        step_ms.push(started.elapsed().as_secs_f64() * 1e3);
        batch.push((ids, first));
        // The background loop.
        if (i + 1) % every == 0 {
            measure(i + 1, "before", &base, &instant, &router, corrections)?;
            let started = Instant::now();
            for _ in 0..epochs {
                for (ids, first) in &batch {
                    base.train_step(&model, ids, *first, 1.0).map_err(|e| e.to_string())?;
                }
            }
            base.consolidate();
            instant.reset(&model).map_err(|e| e.to_string())?;
            for (t, v, question) in queued.drain(..) {
                router.add(v, question, TOPICS[t].name, i as u64 + 1).map_err(|e| e.to_string())?;
                corrections += 1;
            }
            batch.clear();
            run_ms.push(started.elapsed().as_secs_f64() * 1e3);
            measure(i + 1, "after", &base, &instant, &router, corrections)?;
        }
    }
    step_ms.sort_by(f64::total_cmp);
    let (first, last) = (curve[0], curve[curve.len() - 1]);
    let worst = curve.iter().map(|c| c.3).fold(first.3, f64::max);
    println!(
        "{}",
        json!({
            "bench": "learning_stream_summary", "runtime": "native", "threads": threads, "requests": requests,
            "every": every, "epochs": epochs, "rank": rank, "instant_rank": instant_options.rank, "layers": layers,
            "learning_rate": base_options.learning_rate, "instant_learning_rate": instant_options.learning_rate,
            "ewc_lambda": ewc_lambda, "protect": protect, "held_out_questions": held_out.len(),
            "held_out_preferred_ppl_change": round(last.2 / first.2 - 1.0),
            "unrelated_ppl_change": round(last.3 / first.3 - 1.0),
            "unrelated_ppl_change_worst": round(worst / first.3 - 1.0),
            "router_accuracy": [round(first.4), round(last.4)], "corrections": corrections,
            "median_instant_step_ms": round(step_ms[step_ms.len() / 2]),
            "median_background_run_ms": round(run_ms.get(run_ms.len() / 2).copied().unwrap_or(0.0)),
        })
    );
    Ok(())
}
