// The ruvllm wasm measurement, shared by Node (bench_node.mjs) and the browser page (web/ruvllm_worker.js) so both
// time exactly the same thing. Plain ES module: no Node or DOM APIs.
//
// `engine` is the wasm-bindgen `Engine` of either build (the threaded build's `start` and `nextStep` return
// Promises: its forward passes run on the thread pool, so they are awaited). Each repetition prefills `promptIds` from an empty cache and then
// generates 1 + genTokens greedy tokens (EOS ignored); the speeds are the engine's own timings (Engine.finish):
// prefill = prompt tokens / prefill time, decode = genTokens / time of the genTokens steps after the first token.
// decode_wall_tok_s is decode as the caller sees it: the same steps timed around `await engine.nextStep()`, so it
// also counts handing each step to the pool and the Promise settling back in JS (the threaded build).
export async function benchEngine(engine, promptIds, { genTokens, reps }) {
  // Every repetition prefills the whole prompt: no prefix cache (benches/prefix_cache.mjs measures that).
  engine.setPrefixCacheBudget(0);
  const generate = async (ids, maxTokens) => {
    const { out, decodeSteps } = await timedGeneration(engine, ids, maxTokens);
    out.decode_wall_tok_s = decodeSteps.length / (decodeSteps.reduce((a, b) => a + b, 0) / 1000);
    return out;
  };

  await generate(promptIds.slice(0, 16), 2); // warm-up (compiles hot paths, touches the weights), not measured

  const runs = [];
  let first = null;
  for (let r = 0; r < reps; r++) {
    const out = await generate(promptIds, genTokens + 1);
    if (out.cached_tokens !== 0 || out.prompt_tokens !== promptIds.length) {
      throw new Error(`prefilled ${out.prompt_tokens - out.cached_tokens} of ${promptIds.length} prompt tokens`);
    }
    runs.push({ prefill_tok_s: out.prefill_tok_s, decode_tok_s: out.decode_tok_s, decode_wall_tok_s: out.decode_wall_tok_s });
    first ??= out;
  }
  return {
    runs,
    promptTokens: first.prompt_tokens,
    genTokens: first.generated_tokens - 1,
    decodeText: first.text,
    info: JSON.parse(engine.info()),
  };
}

/**
 * One greedy generation of `maxTokens` tokens (EOS ignored) after prefilling `ids` from an empty KV cache: the
 * engine's own result (Engine.finish) and the wall time in ms of each decode step, timed around
 * `await engine.nextStep()`. Each step that returns a token, but the last, also feeds it back (one forward pass)
 * for the next: those steps are the engine's decode time.
 */
export async function timedGeneration(engine, ids, maxTokens) {
  engine.reset(); // an empty KV cache, so nothing of the prompt is reused from the previous run
  await engine.start(Uint32Array.from(ids), JSON.stringify({ maxTokens, temperature: 0, ignoreEos: true }));
  const tokenSteps = [];
  for (;;) {
    const t0 = performance.now();
    const step = await engine.nextStep();
    if (step === undefined) break;
    if (step.id !== undefined) tokenSteps.push(performance.now() - t0);
  }
  return { out: JSON.parse(engine.finish(false)), decodeSteps: tokenSteps.slice(0, -1) };
}
