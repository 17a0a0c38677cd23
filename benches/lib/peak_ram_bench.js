// One model load and a short greedy generation through the npm package, the same in Node (benches/peak_ram.mjs's
// child process) and in a page (benches/web/peak_ram.html): what the package reports of its memory afterwards.
// wasm memory never shrinks, so `wasmMemoryBytes` after the run is the instance's peak.

/** Load `source` (a path in Node, a URL in a page) with one thread on the CPU, generate `genTokens` greedy tokens;
 * `measure()`, if given, runs while the model is still loaded and its answer goes into the result. */
export async function loadAndGenerate(LLM, { source, ctx, genTokens, prompt }, measure) {
  const t0 = performance.now();
  const llm = await LLM.load(source, { threads: 1, backend: 'cpu', contextSize: ctx });
  const loadMs = performance.now() - t0;
  const t1 = performance.now();
  let tokens = 0;
  const gen = llm.generate(prompt, { maxTokens: genTokens, temperature: 0, ignoreEos: true });
  for await (const _ of gen) tokens += 1;
  const genMs = performance.now() - t1;
  const i = llm.info();
  const out = {
    build: i.build,
    threads: i.threads,
    backend: i.backend,
    layers: i.layers,
    vocab_size: i.vocabSize,
    context_size: i.contextSize,
    file_bytes: i.fileBytes,
    kv_cache_bytes: i.kvCacheBytes,
    wasm_memory_bytes: i.wasmMemoryBytes,
    generated_tokens: tokens,
    load_ms: Math.round(loadMs),
    generate_ms: Math.round(genMs),
    ...(measure && { measured: await measure() }),
  };
  llm.dispose();
  return out;
}
