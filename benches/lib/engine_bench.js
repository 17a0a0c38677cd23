// The ruvllm wasm measurement, shared by Node (bench_node.mjs) and the browser page (web/ruvllm_worker.js) so both
// time exactly the same thing. Plain ES module: no Node or DOM APIs.
//
// `engine` is the wasm-bindgen `Engine` of either build (the threaded build's `start` and `nextStep` return
// Promises: its forward passes run on the thread pool, so they are awaited). Each repetition prefills `promptIds` from an empty cache and then
// generates 1 + genTokens greedy tokens (EOS ignored); the speeds are the engine's own timings (Engine.finish):
// prefill = prompt tokens / prefill time, decode = genTokens / time of the genTokens steps after the first token.
export async function benchEngine(engine, promptIds, { genTokens, reps }) {
  const generate = async (ids, maxTokens) => {
    engine.reset(); // an empty KV cache, so nothing of the prompt is reused from the previous run
    await engine.start(Uint32Array.from(ids), JSON.stringify({ maxTokens, temperature: 0, ignoreEos: true }));
    while ((await engine.nextStep()) !== undefined);
    return JSON.parse(engine.finish(false));
  };

  await generate(promptIds.slice(0, 16), 2); // warm-up (compiles hot paths, touches the weights), not measured

  const runs = [];
  let first = null;
  for (let r = 0; r < reps; r++) {
    const out = await generate(promptIds, genTokens + 1);
    if (out.cached_tokens !== 0 || out.prompt_tokens !== promptIds.length) {
      throw new Error(`prefilled ${out.prompt_tokens - out.cached_tokens} of ${promptIds.length} prompt tokens`);
    }
    runs.push({ prefill_tok_s: out.prefill_tok_s, decode_tok_s: out.decode_tok_s });
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
