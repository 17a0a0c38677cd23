//! The WebGPU backend on the real default model (SmolLM2-135M-Instruct Q4_1), natively through
//! wgpu (Mesa lavapipe on a machine without a GPU): llama.cpp's next-token distributions, the greedy
//! France answer, and the fallbacks (no hardware adapter, lost device, too-small limits).
//! Native only: the synchronous Session cannot wait for WebGPU inside a browser or Node.
#![cfg(not(target_arch = "wasm32"))]

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;

use ruvllm::gpu::{block_on, GpuModel, GpuOptions, GpuSession};
use ruvllm::{Backend, Error, FinishReason, GenerateOptions, GpuFault, SamplerConfig, Session, SessionOptions, Step};
use support::default_model as model;
use support::test;

const FRANCE: &str = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
const FRANCE_IDS: [u32; 8] = [504, 3575, 282, 4649, 314, 7042, 30, 2];

fn gpu_session(opts: &SessionOptions) -> Session {
    let s = Session::with_backend(model(), opts, Backend::WebGpu)
        .expect("a WebGPU session (is mesa-vulkan-drivers installed?)");
    assert!(s.on_gpu());
    s
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, sampler: SamplerConfig::greedy(), ..GenerateOptions::default() }
}

#[test]
fn greedy_chat_answers_the_france_question_exactly_on_the_gpu() {
    let ids = model().tokenizer().encode_with_special(FRANCE, true).unwrap();
    let mut session = gpu_session(&SessionOptions::default());
    let out = session.generate(&ids, greedy(32), None, |_| {}).unwrap();
    assert_eq!(out.ids, FRANCE_IDS);
    assert_eq!(out.text, "The capital of France is Paris.");
    assert!(session.on_gpu());
}

#[test]
fn teacher_forced_distributions_match_llama_cpp_on_the_gpu() {
    let model = model();
    support::logits::assert_matches_llama_cpp(model.config.vocab_size, |ids| {
        let mut session = gpu_session(&SessionOptions::default());
        session.eval(ids, true).unwrap().to_vec()
    });
}

/// The France prompt's ids and the CPU's greedy answer, for comparisons.
fn france_prompt() -> Vec<u32> {
    model().tokenizer().encode_with_special(FRANCE, true).unwrap()
}

#[test]
fn run_ahead_greedy_decoding_reads_back_only_ids() {
    let prompt = france_prompt();
    let gm = Arc::new(
        block_on(GpuModel::new(model(), &GpuOptions { allow_software: true, ..GpuOptions::default() })).unwrap(),
    );
    let mut s = block_on(GpuSession::new(gm, 256, 64)).unwrap();
    let first = block_on(s.eval_argmax(&prompt, 0)).unwrap();
    // All 7 remaining steps are submitted before any id is read.
    let rest = block_on(s.decode_greedy(prompt.len(), 7)).unwrap();
    assert_eq!([vec![first], rest].concat(), FRANCE_IDS);
    assert_eq!(s.dispatches_per_token(), 5 * model().config.n_layers + 3, "embed, 5 per layer, output layer, argmax");
}

#[test]
fn tensors_larger_than_a_binding_are_split_across_buffers() {
    // 8 MiB bindings: token_embd (Q8_0, 30 MB, tied to the output) is split by rows over 4 buffers,
    // and all-logits calls over several submissions.
    let opts = GpuOptions { allow_software: true, max_binding_bytes: Some(8 << 20), ..GpuOptions::default() };
    let gm = Arc::new(block_on(GpuModel::new(model(), &opts)).unwrap());
    assert!(gm.arena_count() >= 12, "{} weight buffers", gm.arena_count());
    let mut split = block_on(GpuSession::new(gm, 256, 64)).unwrap();
    let prompt = france_prompt();
    let mut logits = Vec::new();
    block_on(split.eval(&prompt, 0, true, &mut logits)).unwrap();
    let mut whole = gpu_session(&SessionOptions { n_ctx: 256, n_batch: 64 });
    let want = whole.eval(&prompt, true).unwrap();
    assert_eq!(logits.len(), want.len());
    let max_diff = logits.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(max_diff < 1e-3, "split and whole weights differ by {max_diff}");
    // Greedy decoding through the split output layer (the cache is simply overwritten from 0).
    let first = block_on(split.eval_argmax(&prompt, 0)).unwrap();
    let rest = block_on(split.decode_greedy(prompt.len(), 7)).unwrap();
    assert_eq!([vec![first], rest].concat(), FRANCE_IDS);
}

#[test]
fn too_small_limits_are_a_typed_error() {
    // A KV cache layer or weight row cannot be split; 1 KiB bindings cannot hold them.
    let opts = GpuOptions { allow_software: true, max_binding_bytes: Some(1024), ..GpuOptions::default() };
    let err = block_on(async {
        let gm = Arc::new(GpuModel::new(model(), &opts).await?);
        GpuSession::new(gm, 256, 64).await
    })
    .err()
    .expect("1 KiB bindings are too small");
    assert!(matches!(err, Error::Gpu { kind: GpuFault::Limits, .. }), "{err}");
    assert_eq!(err.code(), "E_GPU_LIMITS");
}

#[test]
fn auto_uses_the_cpu_without_a_hardware_gpu() {
    let s = Session::with_backend(model(), &SessionOptions::default(), Backend::Auto).unwrap();
    let has_hardware_gpu = block_on(GpuModel::new(model(), &GpuOptions::default())).is_ok();
    assert_eq!(s.on_gpu(), has_hardware_gpu);
    if !has_hardware_gpu {
        let err = block_on(GpuModel::new(model(), &GpuOptions::default())).err().unwrap();
        assert!(matches!(err, Error::Gpu { kind: GpuFault::NoAdapter, .. }), "{err}");
    }
}

#[test]
fn a_lost_device_falls_back_to_the_cpu_under_auto_and_is_an_error_under_webgpu() {
    let prompt = france_prompt();
    // Explicit webgpu: the loss is reported, typed.
    let mut s = gpu_session(&SessionOptions::default());
    s.eval(&prompt, false).unwrap();
    s.simulate_gpu_loss();
    let err = s.eval(&[FRANCE_IDS[0]], false).unwrap_err();
    assert!(matches!(err, Error::Gpu { kind: GpuFault::DeviceLost, .. }), "{err}");

    // Auto (allowed onto the software adapter): generation continues on the CPU, which replays
    // the cached tokens, and gives the same answer token for token.
    let software = GpuOptions { allow_software: true, ..GpuOptions::default() };
    let mut s = Session::with_gpu_options(model(), &SessionOptions::default(), Backend::Auto, &software).unwrap();
    assert!(s.on_gpu());
    let mut ids = vec![s.eval_argmax(&prompt).unwrap()];
    ids.push(s.eval_argmax(&[ids[0]]).unwrap());
    s.simulate_gpu_loss();
    while ids.len() < FRANCE_IDS.len() {
        let next = s.eval_argmax(&[*ids.last().unwrap()]).unwrap();
        ids.push(next);
    }
    assert!(!s.on_gpu(), "the session moved to the CPU");
    assert_eq!(ids, FRANCE_IDS);
}

#[test]
fn decode_across_attention_chunks_agrees_with_prefill() {
    // 140 tokens: decoding the last one splits attention over 2 chunks (128 + 12 positions) and
    // merges them; prefill computes the same position in one causal pass.
    let ids: Vec<u32> = france_prompt().into_iter().cycle().take(140).collect();
    let opts = SessionOptions { n_ctx: 256, n_batch: 128 };
    let mut whole = gpu_session(&opts);
    let want = whole.eval(&ids, false).unwrap().to_vec();
    let mut stepped = gpu_session(&opts);
    stepped.eval(&ids[..139], false).unwrap();
    let got = stepped.eval(&ids[139..], false).unwrap();
    let max_diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(max_diff < 2e-3, "decode and prefill logits differ by {max_diff}");
    assert_eq!(support::logits::argmax(got), support::logits::argmax(&want));
}

/// A prompt with a bad id is refused before the cache changes: the GPU session keeps its cached
/// prefix (here the whole France conversation), and the next valid call reuses it with the same ids.
#[test]
fn a_bad_token_id_leaves_the_gpu_cache_usable() {
    let prompt = france_prompt();
    let mut s = gpu_session(&SessionOptions { n_ctx: 256, n_batch: 64 });
    let first = s.generate(&prompt, greedy(32), None, |_| {}).unwrap();
    assert_eq!(first.ids, FRANCE_IDS);
    let cached = s.tokens().to_vec();
    assert_eq!(cached.len(), prompt.len() + FRANCE_IDS.len() - 1, "the last token is never fed back");

    // A prompt sharing only 3 tokens with the cache, then a bad id: an error, and nothing truncated.
    let vocab = model().config.vocab_size as u32;
    let bad = [&prompt[..3], &[vocab]].concat();
    let err = s.start(&bad, greedy(4)).unwrap_err();
    assert_eq!(err, Error::TokenOutOfRange { id: vocab, vocab_size: vocab as usize });
    assert_eq!(s.tokens(), cached);
    assert_eq!(s.eval(&[prompt[0], vocab], false).unwrap_err(), err);
    assert_eq!(s.tokens(), cached);

    let again = s.generate(&prompt, greedy(32), None, |_| {}).unwrap();
    assert_eq!((again.stats.cached_tokens, again.stats.prefilled_tokens), (prompt.len() - 1, 1));
    assert_eq!(again.ids, FRANCE_IDS);
    assert!(s.on_gpu());
}

/// A long prompt is prefilled on the GPU one `n_batch` batch per `next_step` (so a caller, such as
/// the browser's WebGPU engine, can abort between batches); cancelling mid-prefill keeps the batches
/// done, and the same prompt then resumes from them with the ids of an uninterrupted generation.
#[test]
fn a_long_gpu_prefill_runs_one_batch_per_step() {
    let prompt: Vec<u32> = france_prompt().into_iter().cycle().take(70).collect();
    let opts = SessionOptions { n_ctx: 256, n_batch: 16 };
    let want = gpu_session(&opts).generate(&prompt, greedy(4), None, |_| {}).unwrap();

    let mut s = gpu_session(&opts);
    s.start(&prompt, greedy(4)).unwrap();
    let mut prefilled = Vec::new();
    let mut ids = Vec::new();
    while let Some(step) = s.next_step().unwrap() {
        match step {
            Step::Prefill { done, total } => {
                assert_eq!((total, ids.len()), (prompt.len(), 0));
                assert_eq!(s.tokens(), &prompt[..done], "{done} prompt tokens in the cache");
                prefilled.push(done);
            }
            Step::Token(t) => ids.push(t.id),
        }
    }
    assert_eq!(prefilled, [16, 32, 48, 64, 70]);
    assert_eq!(ids, want.ids);

    s.reset();
    s.start(&prompt, greedy(4)).unwrap();
    assert_eq!(s.next_step().unwrap(), Some(Step::Prefill { done: 16, total: 70 }));
    assert_eq!(s.next_step().unwrap(), Some(Step::Prefill { done: 32, total: 70 }));
    let cancelled = s.cancel().unwrap();
    assert_eq!((cancelled.finish, cancelled.stats.prefilled_tokens), (FinishReason::Cancelled, 32));
    assert_eq!(s.tokens(), &prompt[..32]);
    let again = s.generate(&prompt, greedy(4), None, |_| {}).unwrap();
    assert_eq!((again.stats.cached_tokens, again.ids), (32, want.ids));
    assert!(s.on_gpu());
}
