//! The learning loops on a stream of requests (issue 43's goals), natively: the training calls the package's loops
//! make, on a replayed stream of chat requests with a rater's feedback.
//!
//! - **The stream**: `--requests` questions (default 300) over four topics (geography, cooking, Python, health), each
//!   from a template and a subject; the rater prefers one style of answer per topic ("Short answer: ..."), and each
//!   request's feedback is that preferred answer (`llm.feedback(id, { score: 1, preferred })`).
//! - **The instant loop**: one MicroLoRA step per request on the preferred answer (what `llm.learner` runs).
//! - **The background loop**: every `--every` requests (default 50), `consolidate` (EWC++: the steps since folded into
//!   what later steps are held toward, the importance estimate decayed by `fisherDecay`). Before the stream, the
//!   adapter `protect`s the base model's own answers to everyday questions (as microlora.rs does).
//! - **The router**: a semantic router (`index::Collection::route`) on all-MiniLM-L6-v2 embeddings, seeded with one
//!   general utterance per topic ("A question about food."); a request routed to the wrong topic (or none) is a correction, added as an utterance of its
//!   topic (what `router.add(text, route)` does).
//! - **Measured at each checkpoint** (before the stream and after every `--every` requests): the perplexity of the
//!   preferred answers to held-out questions (other subjects, never trained on), the perplexity of unrelated text (the
//!   reference prompts' continuations, llama.cpp's greedy text: forgetting), and the router's accuracy on the held-out
//!   questions.
//!
//! ```text
//! cargo bench -p ruvllm --bench learning_stream -- --model M --embedder E [--requests 300] [--every 50]
//!     [--rank 2] [--layers 4] [--lr 1e-2] [--ewc 1e7] [--threads 1]
//! ```
//!
//! One JSON line per checkpoint, then the summary line.

use std::sync::Arc;
use std::time::Instant;

use ruvllm::index::{Collection, HnswParams, Metric};
use ruvllm::model::lora::Proj;
use ruvllm::training::{MicroLora, MicroLoraOptions};
use ruvllm::{EmbedOptions, Model};
use serde_json::json;

#[path = "microlora_common.rs"]
mod common;
use common::{example, mean_loss, own_answers, reference_continuations, round, Args, Example, PROTECT};

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

fn run() -> Result<(), String> {
    let args = Args::from_env();
    let num = |name: &str, default: f64| args.num(name, default);
    let path = args.path("--model", "RUVLLM_MODEL")?;
    let embedder_path = args.path("--embedder", "RUVLLM_EMBED_MODEL")?;
    let threads = num("--threads", 1.0)? as usize;
    ruvllm::parallel::set_threads(threads).map_err(|e| e.to_string())?;
    let requests = num("--requests", 300.0)? as usize;
    let every = (num("--every", 50.0)? as usize).max(1);
    let model = Arc::new(Model::from_file(&path).map_err(|e| format!("{path}: {e}"))?);
    let embedder = Model::from_file(&embedder_path).map_err(|e| format!("{embedder_path}: {e}"))?;
    let options = MicroLoraOptions {
        rank: num("--rank", 2.0)? as usize,
        layers: num("--layers", 4.0)? as usize,
        projections: vec![Proj::Q, Proj::V],
        learning_rate: num("--lr", 1e-2)? as f32,
        ewc_lambda: num("--ewc", 1e7)? as f32,
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

    // The adapter, protecting the base model's own answers to everyday questions.
    let mut lora = MicroLora::new(&model, options.clone()).map_err(|e| e.to_string())?;
    lora.protect(&model, &own_answers(&model, &PROTECT)?).map_err(|e| e.to_string())?;

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

    let mut curve = Vec::new();
    let mut corrections = 0;
    let mut step_ms = Vec::new();
    let mut checkpoint =
        |n: usize, lora: &mut MicroLora, router: &Collection, corrections: usize| -> Result<(), String> {
            let (preferred, other) =
                (mean_loss(lora, &model, &held_examples)?.exp(), mean_loss(lora, &model, &unrelated)?.exp());
            let acc = accuracy(router)?;
            let point = json!({
                "bench": "learning_stream", "requests": n, "held_out_preferred_ppl": round(preferred),
                "unrelated_ppl": round(other), "router_accuracy": round(acc), "corrections": corrections,
            });
            println!("{point}");
            curve.push((preferred, other, acc));
            Ok(())
        };
    checkpoint(0, &mut lora, &router, 0)?;
    for (i, ((t, question, preferred), v)) in stream.iter().zip(&stream_vectors).enumerate() {
        // The router's decision, corrected when wrong.
        let decision = router.route(v, 10, 64).map_err(|e| e.to_string())?;
        if decision.route.is_none_or(|r| r.label != TOPICS[*t].name) {
            router.add(v, question, TOPICS[*t].name, i as u64 + 1).map_err(|e| e.to_string())?;
            corrections += 1;
        }
        // The instant loop: one step toward the preferred answer.
        let (ids, first) = example(&model, question, preferred)?;
        let started = Instant::now();
        lora.train_step(&model, &ids, first, 1.0).map_err(|e| e.to_string())?;
        step_ms.push(started.elapsed().as_secs_f64() * 1e3);
        // The background loop.
        if (i + 1) % every == 0 {
            lora.consolidate();
            checkpoint(i + 1, &mut lora, &router, corrections)?;
        }
    }
    step_ms.sort_by(f64::total_cmp);
    let (first, last) = (curve[0], curve[curve.len() - 1]);
    println!(
        "{}",
        json!({
            "bench": "learning_stream_summary", "runtime": "native", "threads": threads, "requests": requests,
            "rank": options.rank, "layers": options.layers, "learning_rate": options.learning_rate,
            "ewc_lambda": options.ewc_lambda, "held_out_questions": held_out.len(),
            "held_out_preferred_ppl_change": round(last.0 / first.0 - 1.0),
            "unrelated_ppl_change": round(last.1 / first.1 - 1.0),
            "router_accuracy": [round(first.2), round(last.2)], "corrections": corrections,
            "median_step_ms": round(step_ms[step_ms.len() / 2]),
        })
    );
    Ok(())
}
