//! The two-tier KV cache (the most recent positions in f16, older blocks of 32 in Q8_0 or Q4_0) on the real default
//! model (SmolLM2-135M-Instruct Q4_1, head size 64): teacher-forced distributions and greedy generation against the
//! f16 cache on contexts long enough to move many blocks to the cold tier; the prefix cache's pages and records and
//! the saved states in the cold format, each refused by a model of another KV type; rewinding a session below the
//! tiers' boundary; the GPU backend's refusal. Runs natively and on wasm32 (headless Chromium), where greedy
//! generation runs attention over a cold tier through the simd128 kernels, but not the teacher-forced distributions
//! (two minutes of thousand-token scoring on one browser thread, of the same kernels) nor the bookkeeping cases
//! (pages, states, rewinds: the same Rust code as natively).
//!
//! The tiers change what attention reads, so ids are not expected to equal the f16 cache's everywhere: where the
//! f16 cache's top token leads clearly, the two-tier cache's must be the same (the measure benches/kv_tiers.mjs
//! reports over more positions, against llama.cpp's own quantized caches).

#[path = "support/mod.rs"]
mod support;

use std::sync::{Arc, OnceLock};

use ruvllm::engine::sampler::top_k_probs;
#[cfg(not(target_arch = "wasm32"))]
use ruvllm::kv::PAGE_TOKENS;
use ruvllm::kv::{KvCacheOptions, KvType};
use ruvllm::{Backend, GenerateOptions, Model, SamplerConfig, Session, SessionOptions};
use support::test;

/// The default model with the KV cache `kv` (the f16 one is the shared `support::default_model`).
fn model(kv: KvCacheOptions) -> Arc<Model> {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    let bytes = BYTES.get_or_init(|| support::read_file(&support::model_path())).clone();
    Arc::new(Model::from_bytes(bytes).unwrap().with_kv_cache(kv).expect("head size 64 takes a cold tier"))
}

fn q8_0(hot_tokens: usize) -> KvCacheOptions {
    KvCacheOptions { cold: KvType::Q8_0, hot_tokens }
}

/// About `n` tokens of varied text: the reference tokenizer cases' plain texts (code, prose, numbers, other
/// scripts, markup), then the CLI bench text.
fn context(n: usize) -> Vec<u32> {
    let cases = support::read_json(&format!("{}/tokenizer.json", support::reference_dir()));
    let mut texts: Vec<&str> = cases
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["parse_special"].as_bool().unwrap() && !c["name"].as_str().unwrap().starts_with("long_repeated"))
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    texts.push(include_str!("../../cli/src/bench_prompt.txt"));
    let ids = support::default_model().tokenizer().encode(&texts.join("\n\n"), false).unwrap();
    assert!(ids.len() >= n, "{} tokens of context text", ids.len());
    ids[..n].to_vec()
}

/// The long context, then the ChatML France question: what a session answers after a long conversation.
fn long_prompt(n: usize) -> Vec<u32> {
    let question = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let mut ids = context(n);
    ids.extend(support::default_model().tokenizer().encode(question, true).unwrap());
    ids
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    let sampler = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    GenerateOptions { max_tokens, sampler, ignore_eog: true, ..GenerateOptions::default() }
}

fn session(model: &Arc<Model>, n_ctx: usize) -> Session {
    Session::with_options(model.clone(), &SessionOptions { n_ctx, ..SessionOptions::default() }).unwrap()
}

/// How two teacher-forced runs of the same ids compare from position `from` on.
#[cfg(not(target_arch = "wasm32"))]
struct Agreement {
    /// Positions where the first run's top-1 leads its second by at least the margin asked for, and of those, how
    /// many have the same top-1 in the second run.
    clear: usize,
    agree: usize,
    /// Mean and max of |p(t) - p_first(t)| for `t` the first run's top-1 (bounded by the second run's last listed
    /// probability where `t` is not among its top ones).
    mean_dp: f64,
    max_dp: f64,
}

#[cfg(not(target_arch = "wasm32"))]
fn agreement(first: &[Vec<(u32, f64)>], second: &[Vec<(u32, f64)>], from: usize, margin: f64) -> Agreement {
    let (mut clear, mut agree, mut sum_dp, mut max_dp) = (0, 0, 0f64, 0f64);
    for (a, b) in first[from..].iter().zip(&second[from..]) {
        let (t, p1) = a[0];
        if p1 - a[1].1 >= margin {
            clear += 1;
            agree += (b[0].0 == t) as usize;
        }
        let p = b.iter().find(|(id, _)| *id == t).map_or(b[b.len() - 1].1, |&(_, p)| p);
        sum_dp += (p - p1).abs();
        max_dp = max_dp.max((p - p1).abs());
    }
    Agreement { clear, agree, mean_dp: sum_dp / (first.len() - from) as f64, max_dp }
}

/// Generated `ids` after `prompt` against the f16 cache teacher-forced on the whole sequence: wherever the f16
/// cache's top token leads by at least 0.1, it is the generated one. (Logits only where the ids were chosen: the
/// output head over the prompt would cost a fifth of its prefill, and most of a browser test's time.)
fn assert_follows_f16(prompt: &[u32], ids: &[u32], what: &str) {
    let mut f16 = session(&support::default_model(), 2048);
    let (context, last) = prompt.split_at(prompt.len() - 1);
    f16.eval(context, false).unwrap();
    let forced: Vec<u32> = last.iter().chain(&ids[..ids.len() - 1]).copied().collect();
    let vocab = support::default_model().config.vocab_size;
    for (i, (&id, row)) in ids.iter().zip(f16.eval(&forced, true).unwrap().chunks_exact(vocab)).enumerate() {
        let top = top_k_probs(row, 2);
        if top[0].1 - top[1].1 >= 0.1 {
            assert_eq!(
                id,
                top[0].0,
                "{what}: generated token {i} where the f16 cache's top-1 leads by {:.3}",
                top[0].1 - top[1].1
            );
        }
    }
}

/// Teacher-forced over ~1,000 tokens (30 cold blocks at the end): with a Q8_0 cold tier the top-1 is the f16
/// cache's wherever that leads by 0.05 or more, at 99% of such positions at least, and the probabilities move no
/// more than llama.cpp's own Q8_0 cache moves them against its f16 one on such sequences (benches/kv_tiers.mjs:
/// its mean and max are the bounds here). With every whole block cold (no hot window) the same holds; a Q4_0 cold
/// tier moves them more.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn teacher_forced_distributions_follow_the_f16_cache() {
    let ids = long_prompt(980);
    let f16 = session(&support::default_model(), 1024).score(&ids, 10).unwrap();
    let q4_0 = KvCacheOptions::tiered(KvType::Q4_0);
    let cases = [(q4_0, 0.95, 0.05, 1.0), (q8_0(128), 0.99, 0.02, 0.2), (q8_0(0), 0.99, 0.02, 0.2)];
    for (kv, min_agree, mean_dp, max_dp) in cases {
        let tiered = session(&model(kv), 1024).score(&ids, 10).unwrap();
        // Positions before the first block leaves the hot window read the same f16 rows: the same bits.
        assert_eq!(f16[..kv.hot_tokens], tiered[..kv.hot_tokens], "{kv:?}: the hot window alone");
        let a = agreement(&f16, &tiered, 256, 0.05);
        eprintln!(
            "{kv:?}: top-1 agrees at {} of {} positions with a margin >= 0.05; |dp| mean {:.4}, max {:.4}",
            a.agree, a.clear, a.mean_dp, a.max_dp
        );
        assert!(a.clear > 400, "{} positions", a.clear);
        assert!(a.agree as f64 >= min_agree * a.clear as f64, "{kv:?}: {} of {}", a.agree, a.clear);
        assert!(a.mean_dp <= mean_dp && a.max_dp <= max_dp, "{kv:?}: |dp| mean {}, max {}", a.mean_dp, a.max_dp);
    }
}

/// Greedy generation after a prompt of ~400 tokens (9 blocks cold when it starts, more as it goes): the two-tier
/// cache's tokens are the f16 cache's wherever that one is clear.
#[test]
fn greedy_generation_with_a_q8_0_cold_tier() {
    let prompt = long_prompt(400);
    let tiered = model(q8_0(128));
    let mut s = session(&tiered, 1024);
    let out = s.generate(&prompt, greedy(32), None, |_| {}).unwrap();
    assert_eq!(out.ids.len(), 32);
    assert!(s.kv_cache_bytes() * 3 < session(&support::default_model(), 1024).kv_cache_bytes() * 2);
    let want = session(&support::default_model(), 1024).generate(&prompt, greedy(32), None, |_| {}).unwrap();
    let same = out.ids.iter().zip(&want.ids).take_while(|(a, b)| a == b).count();
    eprintln!("q8_0 cold tier: the first {same} of 32 greedy ids are the f16 cache's: {:?}", out.text);
    assert_follows_f16(&prompt, &out.ids, "q8_0 greedy");
}

/// The prefix cache holds a two-tier model's pages in its cold type: a later session restores them (into the tier
/// of each position) and answers as the f16 cache would where that is clear; their records load into another
/// instance of the model with the same KV format, and are refused by one of another.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn prefix_cache_pages_and_records_in_the_cold_type() {
    let tiered = model(q8_0(128));
    let f16 = model(KvCacheOptions::default());
    assert!(tiered.prefix_cache().page_bytes() * 100 < f16.prefix_cache().page_bytes() * 55);
    tiered.prefix_cache().set_persistent(true);
    let prompt = long_prompt(400);
    let first = session(&tiered, 1024).generate(&prompt, greedy(8), None, |_| {}).unwrap();
    let turn2: Vec<u32> = prompt.iter().chain(&first.ids).chain(&prompt[..5]).copied().collect();
    let held = prompt.len() + first.ids.len() - 1;

    let again = session(&tiered, 1024).generate(&turn2, greedy(12), None, |_| {}).unwrap();
    assert_eq!(again.stats.cached_tokens, held / PAGE_TOKENS * PAGE_TOKENS);
    assert_follows_f16(&turn2, &again.ids, "after the prefix cache");

    // Records: another instance (a restart) of the same format loads them; an f16 model asks for other keys and
    // refuses them.
    let records = tiered.prefix_cache().take_unsaved();
    assert_eq!(records.len(), (turn2.len() + again.ids.len() - 1) / PAGE_TOKENS);
    let restarted = model(q8_0(128));
    let keys = restarted.prefix_cache().missing(&turn2);
    let stored: Vec<&[u8]> =
        keys.iter().map_while(|k| records.iter().find(|(key, _)| key == k).map(|(_, r)| r.as_slice())).collect();
    assert_eq!(stored.len(), turn2.len() / PAGE_TOKENS);
    assert_eq!(restarted.prefix_cache().load(&turn2, &stored).tokens, stored.len() * PAGE_TOKENS);
    let resumed = session(&restarted, 1024).generate(&turn2, greedy(12), None, |_| {}).unwrap();
    assert!(resumed.stats.cached_tokens >= again.stats.cached_tokens);
    assert_follows_f16(&turn2, &resumed.ids, "from stored records");
    assert!(f16.prefix_cache().missing(&turn2).iter().all(|k| records.iter().all(|(key, _)| key != k)));
    let refused = f16.prefix_cache().load(&turn2, &stored[..1]).refused;
    assert_eq!(refused.len(), 1, "an f16 cache takes no q8_0 page");
}

/// A two-tier session's saved state restores exactly (the same greedy ids as the session it came from), and a
/// model of another KV format refuses it with `E_KV_CACHE`, as a two-tier model refuses an f16 state.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn saved_states_keep_the_tiers_and_refuse_another_kv_type() {
    let tiered = model(q8_0(64));
    let prompt = long_prompt(300);
    let mut a = session(&tiered, 1024);
    a.set_prefix_cache(false);
    let first = a.generate(&prompt, greedy(6), None, |_| {}).unwrap();
    let state = a.save_state().unwrap();
    let turn2: Vec<u32> = prompt.iter().chain(&first.ids).chain(&prompt[..3]).copied().collect();
    let want = a.generate(&turn2, greedy(8), None, |_| {}).unwrap();

    let mut b = session(&tiered, 1024);
    b.set_prefix_cache(false);
    b.restore_state(&state).unwrap();
    let got = b.generate(&turn2, greedy(8), None, |_| {}).unwrap();
    assert_eq!((got.ids, got.stats.cached_tokens), (want.ids, want.stats.cached_tokens));

    let mut f16 = session(&support::default_model(), 1024);
    let e = f16.restore_state(&state).unwrap_err();
    assert_eq!(e.code(), "E_KV_CACHE", "{e}");
    assert!(f16.tokens().is_empty());
    f16.eval(&prompt[..40], false).unwrap();
    let f16_state = f16.save_state().unwrap();
    let per_token = |bytes: usize, tokens: usize| bytes as f64 / tokens as f64;
    let saved = prompt.len() + first.ids.len() - 1;
    let (tiered_size, f16_size) = (per_token(state.len(), saved), per_token(f16_state.len(), 40));
    assert!(
        tiered_size < 0.75 * f16_size,
        "the cold tier shrinks the state: {tiered_size} vs {f16_size} bytes a token"
    );
    assert_eq!(b.restore_state(&f16_state).unwrap_err().code(), "E_KV_CACHE");
    let other = model(KvCacheOptions::tiered(KvType::Q4_0));
    assert_eq!(session(&other, 1024).restore_state(&state).unwrap_err().code(), "E_KV_CACHE");
}

/// A session keeps the prefix it shares with its next prompt. Cut far below the tiers' boundary (100 of ~330
/// tokens, with a hot window of 32), its cold rows before the cut stay, the block the cut falls in goes back to f16,
/// and generation goes on from there as the f16 cache would where that is clear.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn rewinding_below_the_cold_boundary() {
    let tiered = model(q8_0(32));
    let prompt = long_prompt(300);
    let mut s = session(&tiered, 1024);
    s.set_prefix_cache(false);
    s.generate(&prompt, greedy(8), None, |_| {}).unwrap();
    let mut other = prompt[..100].to_vec();
    other.extend(long_prompt(300)[180..260].iter());
    let out = s.generate(&other, greedy(16), None, |_| {}).unwrap();
    assert_eq!(out.stats.cached_tokens, 100);
    assert_follows_f16(&other, &out.ids, "after a rewind");
    // And back up again past the boundary: the rewound session keeps working as the hot window fills.
    let longer: Vec<u32> = other.iter().chain(&out.ids).chain(&prompt[..120]).copied().collect();
    let more = s.generate(&longer, greedy(8), None, |_| {}).unwrap();
    assert_eq!(more.stats.cached_tokens, other.len() + out.ids.len() - 1);
    assert_follows_f16(&longer, &more.ids, "after growing again");
}

/// The GPU backend keeps an f16 KV cache: under `WebGpu` a two-tier model is a typed GPU error, under `Auto` it
/// runs on the CPU. The option itself is checked where the model takes it.
#[test]
fn the_gpu_backend_refuses_a_two_tier_cache() {
    let tiered = model(q8_0(128));
    let opts = SessionOptions { n_ctx: 256, ..SessionOptions::default() };
    let e = Session::with_backend(tiered.clone(), &opts, Backend::WebGpu).err().expect("refused");
    assert_eq!(e.code(), "E_GPU_UNSUPPORTED", "{e}");
    assert!(e.to_string().contains("two-tier"), "{e}");
    let auto = Session::with_backend(tiered, &opts, Backend::Auto).unwrap();
    assert!(!auto.on_gpu());
    let odd = Model::from_bytes(support::read_file(&support::model_path())).unwrap().with_kv_cache(q8_0(100));
    assert_eq!(odd.err().map(|e| e.code()), Some("E_KV_CACHE"));
    // At 4,096 positions the Q8_0 tier takes at least 1.8 times less memory than f16.
    let at_4096 = |m: &Arc<Model>| session(m, 4096).kv_cache_bytes() as f64;
    assert!(at_4096(&support::default_model()) / at_4096(&model(q8_0(128))) >= 1.8);
}

/// With the tiers, results do not depend on the thread count: the same bits on 1 and 3 threads, for a prefill's
/// batches (a task per token and KV head) and for decode steps (a task per KV head and block of positions).
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let ids = long_prompt(400);
    let tiered = model(q8_0(64));
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut s = session(&tiered, 1024);
            let prefill = s.eval(&ids[..ids.len() - 24], true).unwrap().to_vec();
            let decode: Vec<f32> =
                ids[ids.len() - 24..].iter().flat_map(|&t| s.eval(&[t], false).unwrap().to_vec()).collect();
            (prefill, decode)
        })
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let ((p1, d1), (p3, d3)) = (run(1), run(3));
    assert!(bits(&p1) == bits(&p3), "prefill logits differ between 1 and 3 threads");
    assert!(bits(&d1) == bits(&d3), "decode logits differ between 1 and 3 threads");
}
