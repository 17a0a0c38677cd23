//! Speed of the WebGPU backend: prefill and greedy decode tok/s, dispatches per token, and GPU time
//! per kernel from timestamp queries (when the device offers TIMESTAMP_QUERY). One JSON object per line.
//!
//!   cargo bench -p ruvllm --features gpu --bench gpu_bench -- --model M [--prompt-tokens 128] [--gen-tokens 64]
//!   gpu_bench --write-twin-header M OUT   (the model's header and tensor table, a few MB)
//!   gpu_bench --twin OUT ...               (a same-shape model with random valid weights)
//!   gpu_bench --twin OUT --write-twin G    (only write that model to G: other engines run the same bytes)
//!   --no-subgroups                         (the kernels' variant without subgroup operations)
//!   --no-coop                              (prefill in f32 even where cooperative matrices are offered)
//!   --check                                (first: the prompt's logits at every position against the
//!                                           CPU backend's, the largest difference and the argmax agreement)
//!   --prefix-cache                         (instead: the prefix cache's transfers of the prompt's keys
//!                                           and values down from and up to the GPU)
//!   --stream M                             (the model M streamed to the GPU in 8 MiB reads, as a page streams a
//!                                           download: the file is never held; the first line gives the load's
//!                                           time, the bytes held and the process's peak resident memory)
//!
//! The twin is for machines the model file cannot be copied to: speed does not depend on the
//! weight values, only on their types and shapes, which the header keeps.

use std::sync::Arc;
use std::time::Instant;

use ruvllm::engine::sampler::top_k_probs;
use ruvllm::gguf::Gguf;
use ruvllm::gpu::{block_on, GpuModel, GpuModelStream, GpuOptions, GpuSession};
use ruvllm::quant::GgmlType;
use ruvllm::{Backend, GenerateOptions, Model, SamplerConfig, Session, SessionOptions, Step};
use serde_json::json;

fn main() {
    if let Err(e) = run() {
        eprintln!("gpu_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let num = |name: &str, default: usize| -> Result<usize, String> {
        opt(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name}: '{v}' is not a number")))
    };
    if let Some(i) = args.iter().position(|a| a == "--write-twin-header") {
        let (src, dst) = (args.get(i + 1).ok_or("model path")?, args.get(i + 2).ok_or("output path")?);
        return write_twin_header(src, dst);
    }
    let n_prompt = num("--prompt-tokens", 128)?;
    let n_gen = num("--gen-tokens", 64)?;
    let repeat = num("--repeat", 5)?.max(1);

    let t0 = Instant::now();
    let no_subgroups = args.iter().any(|a| a == "--no-subgroups");
    let no_cooperative_matrix = args.iter().any(|a| a == "--no-coop");
    let opts = GpuOptions {
        allow_software: true,
        timestamps: true,
        no_subgroups,
        no_cooperative_matrix,
        ..GpuOptions::default()
    };
    let gm = match opt("--stream") {
        Some(path) => stream_to_gpu(&path, &opts)?,
        None => {
            let bytes = match (opt("--twin"), opt("--model").or_else(|| std::env::var("RUVLLM_MODEL").ok())) {
                (Some(twin), _) => twin_model(&twin)?,
                (None, Some(path)) => std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?,
                (None, None) => return Err("--model M, --twin T, --stream M or $RUVLLM_MODEL".into()),
            };
            if let Some(dst) = opt("--write-twin") {
                return std::fs::write(&dst, &bytes).map_err(|e| format!("{dst}: {e}"));
            }
            let model = Arc::new(Model::from_bytes(bytes).map_err(|e| e.to_string())?);
            block_on(GpuModel::new(model, &opts)).map_err(|e| e.to_string())?
        }
    };
    let gm = Arc::new(gm);
    let model = gm.model().clone();
    let vocab = model.config.vocab_size;
    let held: usize = model.file().chunks(0..model.file().len()).map(<[u8]>::len).sum();
    let a = gm.adapter();
    println!(
        "{}",
        json!({ "adapter": a.name, "backend": a.backend, "device_type": a.device_type, "driver": a.driver,
                "max_storage_binding": a.max_storage_binding, "timestamps": a.timestamps,
                "subgroups": a.subgroups, "cooperative_matrix": a.cooperative_matrix,
                "weights_mb": gm.weight_bytes() as f64 / 1e6, "weight_buffers": gm.arena_count(),
                "load_ms": t0.elapsed().as_secs_f64() * 1e3, "file_mb": model.file_size() as f64 / 1e6,
                "held_mb": held as f64 / 1e6, "peak_rss_mb": peak_rss_mb() })
    );

    let prompt: Vec<u32> = (0..n_prompt).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
    if args.iter().any(|a| a == "--prefix-cache") {
        drop(gm);
        return prefix_cache_transfers(&model, &opts, &prompt, repeat);
    }
    let n_ctx = (n_prompt + n_gen + 1).next_multiple_of(256);
    let mut s = block_on(GpuSession::new(gm, n_ctx, n_prompt)).map_err(|e| e.to_string())?;
    let err = |e: ruvllm::Error| e.to_string();
    if args.iter().any(|a| a == "--check") {
        check_against_cpu(&model, &mut s, &prompt)?;
    }

    // Warm-up: first use of every pipeline, first touch of every buffer.
    block_on(from_start(&mut s, &prompt)).map_err(err)?;
    block_on(s.decode_greedy(n_prompt, 4)).map_err(err)?;

    let mut prefill = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        block_on(from_start(&mut s, &prompt)).map_err(err)?;
        prefill.push(t.elapsed().as_secs_f64());
    }
    // Decode as a caller that needs each id before the next step (one round trip per token).
    let mut sync = Vec::new();
    for _ in 0..repeat {
        let mut last = block_on(from_start(&mut s, &prompt)).map_err(err)?;
        let t = Instant::now();
        for p in n_prompt..n_prompt + n_gen {
            last = block_on(s.eval_argmax(&[last], p)).map_err(err)?;
        }
        sync.push(t.elapsed().as_secs_f64());
    }
    // Greedy decode with the sampled id fed back on the GPU: every step submitted, ids read once.
    let mut ahead = Vec::new();
    let mut cpu_ms = 0.0;
    for _ in 0..repeat {
        block_on(from_start(&mut s, &prompt)).map_err(err)?;
        let (t, cpu0) = (Instant::now(), s.cpu_submit_ms());
        block_on(s.decode_greedy(n_prompt, n_gen)).map_err(err)?;
        ahead.push(t.elapsed().as_secs_f64());
        cpu_ms += s.cpu_submit_ms() - cpu0;
    }
    // CPU time to encode and submit one decode step: with run-ahead it overlaps the GPU's work and
    // only limits the rate when it is the larger of the two.
    let cpu_ms_per_token = cpu_ms / (repeat * n_gen) as f64;
    let rate = |n: usize, v: &[f64]| n as f64 / median(v);
    println!(
        "{}",
        json!({ "prompt_tokens": n_prompt, "gen_tokens": n_gen, "repeat": repeat,
                "prefill_tok_s": rate(n_prompt, &prefill), "decode_tok_s": rate(n_gen, &ahead),
                "decode_tok_s_sync": rate(n_gen, &sync), "dispatches_per_token": s.dispatches_per_token(),
                "cpu_submit_ms_per_token": cpu_ms_per_token,
                "submissions_per_token": 1 })
    );

    if block_on(s.set_profiling(true)).map_err(err)? {
        block_on(from_start(&mut s, &prompt)).map_err(err)?;
        print_profile("prefill", s.take_profile(), 1);
        block_on(s.decode_greedy(n_prompt, n_gen)).map_err(err)?;
        print_profile("decode", s.take_profile(), n_gen);
    }
    Ok(())
}

/// The prefix cache on the GPU, through `Session` as a caller runs it: a finished conversation of the
/// prompt's tokens comes down into the cache (`finish`: the keys and values of its whole pages are read
/// back and inserted), and a new session's `start` puts them up into its cache (restored into a host
/// window, written with `queue.write_buffer`; the copy to the GPU runs with the next submission, so the
/// time to the first token, the rest of the prompt evaluated, is given too, with the cold one). The
/// transfers are timed at least 5 times, the first tokens `repeat` times; medians.
fn prefix_cache_transfers(model: &Arc<Model>, opts: &GpuOptions, prompt: &[u32], repeat: usize) -> Result<(), String> {
    let err = |e: ruvllm::Error| e.to_string();
    let so = SessionOptions { n_ctx: (prompt.len() + 1).next_multiple_of(256), n_batch: prompt.len().min(512) };
    let session = || Session::with_gpu_options(model.clone(), &so, Backend::WebGpu, opts).map_err(err);
    let one = GenerateOptions { max_tokens: 1, sampler: SamplerConfig::greedy(), ..GenerateOptions::default() };
    let first_token = |s: &mut Session| -> Result<f64, String> {
        let t = Instant::now();
        s.start(prompt, one.clone()).map_err(err)?;
        while !matches!(s.next_step().map_err(err)?, Some(Step::Token(_)) | None) {}
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let cache = model.prefix_cache();
    cache.clear();
    let mut a = session()?;
    a.set_prefix_cache(false);
    let mut cold = Vec::new();
    for _ in 0..repeat {
        a.reset();
        cold.push(first_token(&mut a)?);
    }
    a.set_prefix_cache(true);
    let mut down = Vec::new();
    for _ in 0..repeat.max(5) {
        cache.clear();
        let t = Instant::now();
        a.finish();
        down.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let stored = cache.stats();
    let mut b = session()?;
    let mut up = Vec::new();
    for _ in 0..repeat.max(5) {
        b.reset();
        let t = Instant::now();
        b.start(prompt, one.clone()).map_err(err)?;
        up.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let restored = cache.stats().restored_tokens as usize / up.len();
    let mut cached = Vec::new();
    for _ in 0..repeat {
        b.reset();
        cached.push(first_token(&mut b)?);
    }
    let per_token = stored.bytes / (stored.inserted_tokens as usize).max(1);
    println!(
        "{}",
        json!({ "prefix_cache": prompt.len(), "down_tokens": stored.inserted_tokens,
                "down_bytes": stored.bytes, "down_ms": median(&down),
                "up_tokens": restored, "up_bytes": restored * per_token, "up_ms": median(&up),
                "first_token_ms_cached": median(&cached), "first_token_ms_cold": median(&cold) })
    );
    Ok(())
}

/// The GPU's logits for every position of `prompt` against the CPU backend's on the same model: the
/// largest difference (and the logits' root mean square, for scale), and at how many positions the
/// argmax agrees, of all and of those where the CPU's top-1 probability leads its second by at least
/// 0.2 (the bound the tests hold the real model to), and how many of the GPU's logits are not finite.
fn check_against_cpu(model: &Arc<Model>, s: &mut GpuSession, prompt: &[u32]) -> Result<(), String> {
    let err = |e: ruvllm::Error| e.to_string();
    let mut gpu = Vec::new();
    block_on(s.eval(prompt, 0, true, &mut gpu)).map_err(err)?;
    let so = SessionOptions { n_ctx: (prompt.len() + 1).next_multiple_of(256), n_batch: prompt.len() };
    let mut cpu_session = Session::with_backend(model.clone(), &so, Backend::Cpu).map_err(err)?;
    let cpu = cpu_session.eval(prompt, true).map_err(err)?.to_vec();
    let vocab = model.config.vocab_size;
    let non_finite = gpu.iter().filter(|v| !v.is_finite()).count();
    let (mut max_diff, mut sq, mut agree, mut decided, mut decided_agree) = (0f64, 0f64, 0, 0, 0);
    for (g, c) in gpu.chunks(vocab).zip(cpu.chunks(vocab)) {
        for (a, b) in g.iter().zip(c) {
            max_diff = max_diff.max((a - b).abs() as f64);
            sq += (*b as f64).powi(2);
        }
        let top = top_k_probs(c, 2);
        let same = top_k_probs(g, 1)[0].0 == top[0].0;
        agree += same as usize;
        if top[0].1 - top[1].1 >= 0.2 {
            decided += 1;
            decided_agree += same as usize;
        }
    }
    println!(
        "{}",
        json!({ "check_positions": prompt.len(), "max_abs_diff": max_diff,
                "logit_rms": (sq / cpu.len() as f64).sqrt(), "argmax_agree": agree,
                "margin_0_2_positions": decided, "margin_0_2_agree": decided_agree,
                "gpu_non_finite": non_finite })
    );
    Ok(())
}

/// The prompt's greedy next id, evaluated from position 0 (a recurrent state, Qwen3.5's, taken back there first).
async fn from_start(s: &mut GpuSession, prompt: &[u32]) -> ruvllm::Result<u32> {
    s.rewind_recurrent(0);
    s.eval_argmax(prompt, 0).await
}

/// The model at `path` streamed to the GPU in reads of 8 MiB (`GpuModelStream`), never held whole.
fn stream_to_gpu(path: &str, opts: &GpuOptions) -> Result<GpuModel, String> {
    use std::io::Read;
    let err = |e: std::io::Error| format!("{path}: {e}");
    let mut file = std::fs::File::open(path).map_err(err)?;
    let len = file.metadata().map_err(err)?.len();
    let mut stream = block_on(GpuModelStream::new(len, opts)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = file.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        block_on(stream.push(&buf[..n])).map_err(|e| e.to_string())?;
    }
    let streamed = stream.finish().map_err(|e| e.to_string())?;
    block_on(streamed.into_gpu_model()).map_err(|e| e.to_string())
}

/// The process's peak resident memory so far (Linux's VmHWM), in MB; 0 where it cannot be read.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok());
    kb.unwrap_or(0.0) / 1e3
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// GPU time per kernel (one pass per dispatch, so the total is above the unprofiled wall time).
fn print_profile(phase: &str, times: Vec<ruvllm::gpu::KernelTime>, per: usize) {
    let total: f64 = times.iter().map(|t| t.ms).sum();
    let kernels: Vec<_> = times
        .iter()
        .map(|t| json!({ "kernel": t.label, "dispatches": t.dispatches / per, "ms": t.ms / per as f64 }))
        .collect();
    println!(
        "{}",
        json!({ "profile": phase, "per": if per == 1 { "call" } else { "token" }, "gpu_ms": total / per as f64, "kernels": kernels })
    );
}

/// The model's bytes up to its tensor data, followed by the whole file's length (u64 LE).
fn write_twin_header(src: &str, dst: &str) -> Result<(), String> {
    let bytes = std::fs::read(src).map_err(|e| format!("{src}: {e}"))?;
    let g = Gguf::parse(&bytes).map_err(|e| e.to_string())?;
    let mut out = bytes[..g.data_offset].to_vec();
    out.extend((bytes.len() as u64).to_le_bytes());
    std::fs::write(dst, out).map_err(|e| format!("{dst}: {e}"))
}

/// A model of the header's shapes and types with random weights: quant blocks of random bytes with
/// small finite f16 scales, float tensors of small values (norm weights 1).
fn twin_model(path: &str) -> Result<Vec<u8>, String> {
    let header = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let (head, len) = header.split_at(header.len().checked_sub(8).ok_or("not a twin header")?);
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
    let mut bytes = head.to_vec();
    bytes.resize(len, 0);
    let g = Gguf::parse(&bytes).map_err(|e| e.to_string())?;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let f16 = |x: f32| half::f16::from_f32(x).to_le_bytes();
    for t in &g.tensors {
        let data = &mut bytes[t.offset as usize..][..t.size];
        let small = |r: u64| ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04;
        match t.ty {
            GgmlType::F32 => {
                for c in data.chunks_exact_mut(4) {
                    let v = if t.dims.len() == 1 { 1.0 } else { small(next()) };
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
            GgmlType::F16 => data.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&f16(small(next())))),
            GgmlType::BF16 => data
                .chunks_exact_mut(2)
                .for_each(|c| c.copy_from_slice(&half::bf16::from_f32(small(next())).to_le_bytes())),
            ty => {
                for c in data.chunks_mut(8) {
                    let r = next().to_le_bytes();
                    c.copy_from_slice(&r[..c.len()]);
                }
                // Byte offsets of each block's f16 scales (d, and the min where the type has one).
                let scales: &[usize] = match ty {
                    GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
                    GgmlType::Q2_K => &[80, 82],
                    GgmlType::Q3_K => &[108],
                    GgmlType::Q6_K => &[208],
                    _ => &[],
                };
                for block in data.chunks_exact_mut(ty.block_bytes()) {
                    for (i, &o) in scales.iter().enumerate() {
                        block[o..o + 2].copy_from_slice(&f16(if i == 0 { 0.01 } else { 0.001 }));
                    }
                }
            }
        }
    }
    Ok(bytes)
}
