//! The prefix cache natively: time to the first token of a prompt whose first `--prefix-tokens` tokens an earlier
//! session evaluated, against the same prompt cold (the cache cleared), in one process on one `Model`:
//!   memory    a new `Session` on the same model, whose prefix cache holds the prefix
//!   records   the cache cleared, then its pages read back from files of page records, as a store would keep them
//!             (natively nothing persists by itself: this is the npm file store's path without Node, `missing`,
//!             the files read, `load` checking and taking them, then the session restoring them)
//! One JSON line per source, medians of `--reps`.
//!
//!   cargo bench -p ruvllm --bench prefix_cache -- --model M [--prefix-tokens 512] [--threads 1] [--reps 3] [--ctx N]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ruvllm::{GenerateOptions, Model, SamplerConfig, Session, SessionOptions};
use serde_json::json;

fn main() {
    if let Err(e) = run() {
        eprintln!("prefix_cache bench: {e}");
        std::process::exit(1);
    }
}

/// One timed first token: wall milliseconds, the token, cached prompt tokens, the session's restore and prefill ms,
/// and for `records` the milliseconds reading the files and loading them into the cache.
#[derive(Clone, Copy, Default)]
struct Ttft {
    ms: f64,
    id: u32,
    cached: usize,
    restore_ms: f64,
    prefill_ms: f64,
    read_ms: f64,
    load_ms: f64,
}

fn first_token(model: &Arc<Model>, n_ctx: usize, prompt: &[u32]) -> Result<Ttft, String> {
    let opts = GenerateOptions {
        max_tokens: 1,
        sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
        ..GenerateOptions::default()
    };
    let t0 = Instant::now();
    let mut session = Session::with_options(model.clone(), &SessionOptions { n_ctx, ..SessionOptions::default() })
        .map_err(|e| e.to_string())?;
    let out = session.generate(prompt, opts, None, |_| {}).map_err(|e| e.to_string())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let s = &out.stats;
    Ok(Ttft {
        ms,
        id: out.ids[0],
        cached: s.cached_tokens,
        restore_ms: s.restore_ms,
        prefill_ms: s.prefill_ms,
        ..Ttft::default()
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let num = |name: &str, default: usize| -> Result<usize, String> {
        opt(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: not a number: {v}")))
    };
    let path = opt("--model")
        .or_else(|| std::env::var("RUVLLM_MODEL").ok())
        .ok_or("--model M is required (or set RUVLLM_MODEL)")?;
    let (prefix_tokens, threads, reps) = (num("--prefix-tokens", 512)?, num("--threads", 1)?, num("--reps", 3)?);
    let n_ctx = num("--ctx", 0)?;
    ruvllm::parallel::set_threads(threads).map_err(|e| e.to_string())?;
    let model = Arc::new(Model::from_file(&path).map_err(|e| format!("{path}: {e}"))?);
    let text = include_str!("../cli/src/bench_prompt.txt").repeat(8 + prefix_tokens / 100);
    let tok = model.tokenizer();
    let mut prompt = tok.encode(&text, false).map_err(|e| e.to_string())?;
    if prompt.len() < prefix_tokens {
        return Err(format!("the text has only {} tokens", prompt.len()));
    }
    prompt.truncate(prefix_tokens);
    prompt.extend(tok.encode(" Question: what comes next?", false).map_err(|e| e.to_string())?);
    let cache = model.prefix_cache();
    let dir = std::env::temp_dir().join(format!("ruvllm-prefix-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = |key: &ruvllm::kv::PageKey| -> PathBuf { dir.join(format!("{}.kv", key.hex())) };
    let loadavg_start = loadavg();

    // Untimed: page the model's weights in.
    cache.set_budget(0);
    first_token(&model, n_ctx, &prompt[..16])?;
    cache.set_budget(
        ruvllm::model::DEFAULT_PREFIX_CACHE_BYTES.max(2 * prompt.len() * cache.page_bytes() / ruvllm::kv::PAGE_TOKENS),
    );

    let (mut cold, mut memory, mut records) = (Vec::new(), Vec::new(), Vec::new());
    let mut record_bytes = 0;
    for _ in 0..reps {
        cache.clear();
        cache.set_persistent(true);
        cold.push(first_token(&model, n_ctx, &prompt)?);
        // What a store would write: the pages the cold request added, one file each.
        record_bytes = 0;
        for (key, bytes) in cache.take_unsaved() {
            record_bytes += bytes.len();
            std::fs::write(file(&key), bytes).map_err(|e| e.to_string())?;
        }
        cache.set_persistent(false);
        memory.push(first_token(&model, n_ctx, &prompt)?);

        // A restart: nothing in memory, the pages in files.
        cache.clear();
        let t0 = Instant::now();
        let before = &prompt[..prompt.len() - 1];
        let mut found = Vec::new();
        for key in cache.missing(before) {
            match std::fs::read(file(&key)) {
                Ok(bytes) => found.push(bytes),
                Err(_) => break,
            }
        }
        let read_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let slices: Vec<&[u8]> = found.iter().map(Vec::as_slice).collect();
        let loaded = cache.load(before, &slices);
        let load_ms = t1.elapsed().as_secs_f64() * 1e3;
        if !loaded.refused.is_empty() {
            return Err(format!("records refused: {:?}", loaded.refused));
        }
        let mut r = first_token(&model, n_ctx, &prompt)?;
        r.ms += read_ms + load_ms;
        (r.read_ms, r.load_ms) = (read_ms, load_ms);
        records.push(r);
    }
    std::fs::remove_dir_all(&dir).ok();

    let runtime = format!("native {}", std::env::consts::ARCH);
    let cold_ms = median(cold.iter().map(|r| r.ms).collect());
    for (source, warm) in [("memory", &memory), ("records", &records)] {
        let med = |f: fn(&Ttft) -> f64| round(median(warm.iter().map(f).collect()));
        let warm_ms = med(|r| r.ms);
        let same = cold.iter().zip(warm.iter()).all(|(c, w)| c.id == w.id);
        println!(
            "{}",
            json!({
                "bench": "prefix_cache", "source": source, "runtime": runtime, "threads": threads,
                "prefix_tokens": prefix_tokens, "prompt_tokens": prompt.len(),
                "cached_tokens": warm.iter().map(|r| r.cached).collect::<Vec<_>>(),
                "cold_ttft_ms": round(cold_ms), "warm_ttft_ms": warm_ms, "speedup": round(cold_ms / warm_ms),
                "warm_store_read_ms": med(|r| r.read_ms), "warm_store_load_ms": med(|r| r.load_ms),
                "warm_restore_ms": med(|r| r.restore_ms), "warm_prefill_ms": med(|r| r.prefill_ms),
                "store_bytes": if source == "records" { record_bytes } else { 0 },
                "same_token": same,
                "cold_reps_ms": cold.iter().map(|r| round(r.ms)).collect::<Vec<_>>(),
                "warm_reps_ms": warm.iter().map(|r| round(r.ms)).collect::<Vec<_>>(),
                "loadavg_start": loadavg_start, "loadavg_end": loadavg(),
            })
        );
    }
    Ok(())
}
