//! `ruvllm`: the native command line, with machine-readable output for tests and benchmarks.
//! `ruvllm --help` lists the commands, `ruvllm COMMAND --help` one command: both come from `COMMANDS` below.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use ruvllm::constraint::GrammarSource;
use ruvllm::kv::{KvCacheOptions, KvType, DEFAULT_HOT_TOKENS};
use ruvllm::{
    AdapterSet, Backend, ChatMessage, EmbedOptions, GenerateOptions, LoraAdapter, Model, Pooling, RenderOptions,
    SamplerConfig, Session, SessionOptions, TextModel,
};
use serde_json::json;

mod args;
use args::{flag, repeated, required, value, Args, Command, Opt, Parsed};

/// Each command's options and positionals: the parser checks command lines against this, and the usage shows it.
const COMMANDS: &[Command] = &[
    Command { name: "tokenize", run: tokenize, options: &[flag("special")], positional: Some("TEXT") },
    Command {
        name: "generate",
        run: generate,
        options: &[
            required("prompt", "TEXT"),
            flag("chat"),
            value("max-tokens", "N"),
            value("temperature", "T"),
            value("top-k", "K"),
            value("top-p", "P"),
            value("min-p", "P"),
            value("repeat-penalty", "R"),
            value("seed", "S"),
            repeated("stop", "S"),
            flag("ignore-eos"),
            flag("json"),
            repeated("lora", "FILE[:SCALE]"),
            value("json-schema", "FILE"),
            value("grammar", "FILE"),
            value("regex", "RX"),
        ],
        positional: None,
    },
    Command { name: "score", run: score, options: &[required("ids", "1,2,3"), value("top-k", "K")], positional: None },
    Command {
        name: "embed",
        run: embed,
        options: &[
            repeated("text", "TEXT"),
            value("file", "F"),
            value("pooling", "mean|cls|last"),
            flag("no-normalize"),
        ],
        positional: None,
    },
    Command {
        name: "bench",
        run: bench,
        options: &[value("prompt-tokens", "N"), value("gen-tokens", "N"), repeated("lora", "FILE[:SCALE]")],
        positional: None,
    },
];

/// Options every command takes.
const COMMON: &[Opt] = &[
    value("model", "M"),
    value("threads", "N"),
    value("ctx", "N"),
    value("backend", "auto|webgpu|cpu"),
    value("kv-cold", "f16|q8_0|q4_0"),
    value("kv-hot", "N"),
];

const NOTES: &str = "\
--model defaults to $RUVLLM_MODEL. --threads: default all cores. --ctx: the context window. --backend: default auto
(a hardware GPU when there is one and the build has the `gpu` feature, else the CPU).
--kv-cold: the two-tier KV cache, positions older than the hot window stored as q8_0 or q4_0 (default f16: one
tier; the CPU runs it). --kv-hot: positions the hot window keeps in f16, a multiple of 32 (default 128).
--lora (generate, bench): a llama.cpp GGUF LoRA adapter applied at SCALE (default 1), several in the order given.
--seed (generate): the sampler's seed; default a fresh random one, which --json prints.
--json-schema, --grammar, --regex (generate, one of them): the output is JSON valid under the schema in FILE, follows
the grammar in FILE (llama.cpp's GBNF; llguidance's Lark when FILE ends in .lark), or matches RX.
`--name=value` is `--name value`. `--` ends the options: what follows is TEXT even if it begins with `-`.";

/// The usage of `cmd`, or of every command.
fn usage(cmd: Option<&Command>) -> String {
    let synopses = match cmd {
        Some(cmd) => cmd.synopsis("usage: "),
        None => {
            let list: Vec<_> = COMMANDS.iter().map(|c| c.synopsis("  ")).collect();
            format!("usage: ruvllm COMMAND ... (ruvllm COMMAND --help: its usage)\n{}", list.join("\n"))
        }
    };
    let common = COMMON.iter().map(Opt::usage).chain(["[--help]".to_string()]);
    format!("{synopses}\n{}\n{NOTES}", args::wrap("Every command also takes", common))
}

/// Exit status of a command line that is wrong (as opposed to one that fails while it runs: 1).
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    let Some(name) = argv.next() else {
        eprintln!("{}", usage(None));
        return ExitCode::from(USAGE_ERROR);
    };
    if matches!(name.as_str(), "-h" | "--help" | "help") {
        // `ruvllm help generate` is `ruvllm generate --help`.
        let cmd = argv.next().and_then(|n| COMMANDS.iter().find(|c| c.name == n));
        println!("{}", usage(cmd));
        return ExitCode::SUCCESS;
    }
    let Some(cmd) = COMMANDS.iter().find(|c| c.name == name) else {
        eprintln!("error: unknown command '{name}' (ruvllm --help lists them)");
        return ExitCode::from(USAGE_ERROR);
    };
    let args = match Args::parse(cmd, COMMON, argv) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            println!("{}", usage(Some(cmd)));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n{}", cmd.synopsis("usage: "));
            return ExitCode::from(USAGE_ERROR);
        }
    };
    match (cmd.run)(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type CliResult = Result<(), String>;

/// `--model`, else $RUVLLM_MODEL.
fn model_path(args: &Args) -> Result<String, String> {
    match args.opt("model") {
        Some(p) => Ok(p.to_string()),
        None => std::env::var("RUVLLM_MODEL").map_err(|_| "--model is required (or set RUVLLM_MODEL)".to_string()),
    }
}

fn load(args: &Args) -> Result<Arc<Model>, String> {
    let threads: usize = args.num("threads", 0)?;
    ruvllm::parallel::set_threads(threads).map_err(|e| e.to_string())?;
    let path = model_path(args)?;
    let model = Model::from_file(&path).map_err(|e| format!("{path}: {e}"))?;
    let cold: KvType = args.opt("kv-cold").unwrap_or("f16").parse().map_err(|e: ruvllm::Error| e.to_string())?;
    let kv = KvCacheOptions { cold, hot_tokens: args.num("kv-hot", DEFAULT_HOT_TOKENS)? };
    if args.flag("kv-hot") && !kv.is_tiered() {
        return Err("--kv-hot needs --kv-cold q8_0 or q4_0".into());
    }
    let model = model.with_kv_cache(kv).map_err(|e| e.to_string())?;
    Ok(Arc::new(model))
}

/// The adapters of each `--lora FILE[:SCALE]`, read for `model`.
fn adapters(args: &Args, model: &Model) -> Result<AdapterSet, String> {
    let mut set = Vec::new();
    for spec in args.all("lora") {
        // FILE:SCALE where what follows the last ':' is a number, else the whole of it is the file.
        let (path, scale) = match spec.rsplit_once(':').map(|(p, s)| (p, s.parse::<f32>())) {
            Some((path, Ok(scale))) => (path, scale),
            _ => (spec.as_str(), 1.0),
        };
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        let adapter = LoraAdapter::from_bytes(model, bytes).map_err(|e| format!("{path}: {e}"))?;
        set.push((Arc::new(adapter), scale));
    }
    Ok(AdapterSet::new(set))
}

/// The seed of a run that names none: random (std's hasher keys come from the OS's random source), below 2^53 so
/// that either CLI takes it back as `--seed`.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8) >> 11
}

/// The grammar of `--json-schema FILE`, `--grammar FILE` or `--regex RX` (at most one).
fn grammar(args: &Args) -> Result<Option<GrammarSource>, String> {
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let chosen = [args.opt("json-schema"), args.opt("grammar"), args.opt("regex")];
    if chosen.iter().flatten().count() > 1 {
        return Err("give one of --json-schema, --grammar and --regex".into());
    }
    Ok(match chosen {
        [Some(path), _, _] => {
            let schema = serde_json::from_str(&read(path)?).map_err(|e| format!("{path}: not JSON: {e}"))?;
            Some(GrammarSource::JsonSchema(schema))
        }
        [_, Some(path), _] if path.ends_with(".lark") => Some(GrammarSource::Lark(read(path)?)),
        [_, Some(path), _] => Some(GrammarSource::Gbnf(read(path)?)),
        [_, _, Some(rx)] => Some(GrammarSource::Regex(rx.to_string())),
        _ => None,
    })
}

fn session(args: &Args, model: Arc<Model>) -> Result<Session, String> {
    let opts = SessionOptions { n_ctx: args.num("ctx", 0)?, ..SessionOptions::default() };
    let backend: Backend = args.opt("backend").unwrap_or("auto").parse().map_err(|e: ruvllm::Error| e.to_string())?;
    Session::with_backend(model, &opts, backend).map_err(|e| e.to_string())
}

fn tokenize(args: &Args) -> CliResult {
    // The header alone: counting tokens reads no weights (a vocabulary-only GGUF is enough).
    let path = model_path(args)?;
    let text_model = TextModel::from_file(&path).map_err(|e| format!("{path}: {e}"))?;
    let text = args.positional.join(" ");
    let ids = text_model.tokenizer().encode(&text, args.flag("special")).map_err(|e| e.to_string())?;
    println!("{}", json!({ "ids": ids }));
    Ok(())
}

fn generate(args: &Args) -> CliResult {
    let model = load(args)?;
    let load_ms = model.load_ms();
    let prompt = args.required("prompt");
    let prompt_ids = if args.flag("chat") {
        let msgs = [ChatMessage::new("user", prompt)];
        model.text().chat_prompt_ids(&msgs, &RenderOptions::default(), false)
    } else {
        model.tokenizer().encode_with_special(prompt, true)
    };
    let prompt_ids = prompt_ids.map_err(|e| e.to_string())?;
    let seed = match args.opt("seed") {
        Some(_) => args.num("seed", 0)?,
        None => fresh_seed(),
    };
    let opts = GenerateOptions {
        max_tokens: args.num("max-tokens", 256)?,
        sampler: SamplerConfig {
            temperature: args.num("temperature", 0.8)?,
            top_k: args.num("top-k", 40)?,
            top_p: args.num("top-p", 0.95)?,
            min_p: args.num("min-p", 0.05)?,
            repeat_penalty: args.num("repeat-penalty", 1.0)?,
            seed,
            ..SamplerConfig::default()
        },
        stop: args.all("stop"),
        ignore_eog: args.flag("ignore-eos"),
        adapters: adapters(args, &model)?,
        grammar: grammar(args)?,
    };
    let json_out = args.flag("json");
    let mut sess = session(args, model)?;
    let mut stdout = std::io::stdout();
    let out = sess
        .generate(&prompt_ids, opts, None, |step| {
            if !json_out {
                let _ = stdout.write_all(step.text.as_bytes());
                let _ = stdout.flush();
            }
        })
        .map_err(|e| e.to_string())?;
    let s = &out.stats;
    if json_out {
        println!(
            "{}",
            json!({
                "prompt_ids": prompt_ids, "ids": out.ids, "text": out.text, "finish_reason": out.finish.as_str(),
                "seed": seed, "load_ms": load_ms, "prefill_tok_s": s.prefill_tok_s(), "decode_tok_s": s.decode_tok_s(),
            })
        );
    } else {
        println!();
        eprintln!(
            "[{} prompt tokens, {} generated; prefill {:.1} tok/s, decode {:.1} tok/s, load {:.0} ms]",
            s.prompt_tokens,
            s.generated_tokens,
            s.prefill_tok_s(),
            s.decode_tok_s(),
            load_ms
        );
    }
    Ok(())
}

fn score(args: &Args) -> CliResult {
    let model = load(args)?;
    let ids: Vec<u32> = args
        .required("ids")
        .split(',')
        .map(|s| s.trim().parse().map_err(|_| format!("bad token id '{s}'")))
        .collect::<Result<_, _>>()?;
    let k: usize = args.num("top-k", 5)?;
    let mut sess = session(args, model)?;
    let positions = sess.score(&ids, k).map_err(|e| e.to_string())?;
    println!("{}", json!({ "positions": positions }));
    Ok(())
}

/// Embeddings of each --text, then of each line of --file: `{"embeddings": [[...]], "tokens", "embed_ms"}`.
fn embed(args: &Args) -> CliResult {
    let model = load(args)?;
    let mut texts: Vec<String> = args.all("text");
    if let Some(path) = args.opt("file") {
        let lines = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        texts.extend(lines.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    let pooling = match args.opt("pooling") {
        None => None,
        Some("mean") => Some(Pooling::Mean),
        Some("cls") => Some(Pooling::Cls),
        Some("last") => Some(Pooling::Last),
        Some(other) => return Err(format!("--pooling must be mean, cls or last, not '{other}'")),
    };
    let opts = EmbedOptions { pooling, normalize: !args.flag("no-normalize") };
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize =
        texts.iter().map(|t| model.tokenizer().encode_with_special(t, false).map_or(0, |ids| ids.len())).sum();
    let t0 = std::time::Instant::now();
    let embeddings = model.embed(&texts, &opts).map_err(|e| e.to_string())?;
    let embed_ms = t0.elapsed().as_secs_f64() * 1e3;
    println!("{}", json!({ "embeddings": embeddings, "tokens": tokens, "embed_ms": embed_ms }));
    Ok(())
}

fn bench(args: &Args) -> CliResult {
    let model = load(args)?;
    let load_ms = model.load_ms();
    let n_prompt: usize = args.num("prompt-tokens", 128)?;
    let n_gen: usize = args.num("gen-tokens", 64)?;
    let file_size = model.file_size();
    // A fixed, real-text prompt cut to exactly n_prompt tokens: the text (over 100 tokens) repeated past that.
    let text = include_str!("bench_prompt.txt").repeat(8.max(n_prompt / 64 + 1));
    let mut ids = model.tokenizer().encode(&text, false).map_err(|e| e.to_string())?;
    ids.truncate(n_prompt);
    let set = adapters(args, &model)?;
    let n_adapters = set.adapters().len();
    let mut sess = session(args, model)?;
    sess.set_prefix_cache(false); // the whole prompt prefilled, as a benchmark of the prefill
    sess.set_adapters(&set).map_err(|e| e.to_string())?;
    // Warm-up (page in the weights), not measured.
    sess.eval(&ids[..ids.len().min(16)], false).map_err(|e| e.to_string())?;
    sess.reset();
    let opts = GenerateOptions {
        max_tokens: n_gen + 1,
        sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
        ignore_eog: true,
        adapters: set,
        ..GenerateOptions::default()
    };
    let out = sess.generate(&ids, opts, None, |_| {}).map_err(|e| e.to_string())?;
    let s = &out.stats;
    println!(
        "{}",
        json!({
            "engine": "ruvllm-native", "backend": if sess.on_gpu() { "webgpu" } else { "cpu" },
            "threads": ruvllm::parallel::threads(),
            "prompt_tokens": s.prompt_tokens, "gen_tokens": s.generated_tokens,
            "load_ms": load_ms, "prefill_tok_s": s.prefill_tok_s(), "decode_tok_s": s.decode_tok_s(),
            "peak_rss_mb": peak_rss_mb(), "model_mb": file_size as f64 / 1e6, "kv_cache_mb": sess.kv_cache_bytes() as f64 / 1e6,
            "kv_cache": sess.model().kv_cache().cold.name(), "adapters": n_adapters,
        })
    );
    Ok(())
}

/// Peak resident memory of this process (Linux VmHWM), in MB.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0 * 1.048576)
}
