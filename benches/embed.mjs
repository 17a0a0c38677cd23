// Embedding throughput of all-MiniLM-L6-v2 (issue 22's goal): 32 texts of ~30 tokens (the first 96 sentences of
// tests/fixtures/embed_sentences.txt, three to a text), ours natively (target/release/ruvllm embed) and on wasm32
// (the npm package in Node, npm/dist: `llm.embed(texts)`, all texts in one call) against llama.cpp (node-llama-cpp
// 3.22.1, benches/setup.sh), with 1 and 2 threads. Prints one JSON line per run.
//   node benches/embed.mjs [MODEL.gguf]     (default: scripts/fetch-embed-model.sh's F16 file; its Q8_0 twin works too)
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const model = process.argv[2] ?? `${process.env.HOME}/.cache/ruvllm/all-MiniLM-L6-v2.F16.gguf`;
const lines = readFileSync(`${root}/tests/fixtures/embed_sentences.txt`, 'utf8').split('\n').filter((s) => s.length);
const texts = Array.from({ length: 32 }, (_, i) => lines.slice(3 * i, 3 * i + 3).join(' '));
const file = `${mkdtempSync(`${tmpdir()}/embed-`)}/texts.txt`;
writeFileSync(file, texts.join('\n') + '\n');
const REPEATS = 3; // best of

const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
const { LLM } = await import(pathToFileURL(`${root}/npm/dist/node.js`).href);
for (const threads of [1, 2]) {
  let best = Infinity;
  let tokens = 0;
  for (let r = 0; r < REPEATS; r++) {
    const out = JSON.parse(execFileSync(`${root}/target/release/ruvllm`, ['embed', '--model', model, '--file', file, '--threads', String(threads)], { maxBuffer: 1 << 26 }));
    best = Math.min(best, out.embed_ms);
    tokens = out.tokens;
  }
  console.log(JSON.stringify({ engine: 'ruvllm-native', threads, texts: texts.length, tokens, ms: +best.toFixed(1), tok_s: +(tokens / best * 1e3).toFixed(0) }));

  const llm = await LLM.load(model, { threads });
  await llm.embed(texts[0]); // warm-up
  best = Infinity;
  for (let r = 0; r < REPEATS; r++) {
    const t0 = performance.now();
    const { tokens: n } = await llm.embedWithUsage(texts);
    best = Math.min(best, performance.now() - t0);
    if (n !== tokens) throw new Error(`wasm counted ${n} tokens, native ${tokens}`);
  }
  console.log(JSON.stringify({ engine: `ruvllm-wasm (${llm.info().build})`, threads, texts: texts.length, tokens, ms: +best.toFixed(1), tok_s: +(tokens / best * 1e3).toFixed(0) }));
  llm.dispose();

  const llama = await getLlama({ gpu: false, build: 'never', skipDownload: true, usePrebuiltBinaries: true, existingPrebuiltBinaryMustMatchBuildOptions: false, progressLogs: false, maxThreads: threads, logLevel: LlamaLogLevel.error });
  const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
  const ctx = await m.createEmbeddingContext({ contextSize: 512, batchSize: 512, threads });
  await ctx.getEmbeddingFor(texts[0]); // warm-up
  best = Infinity;
  for (let r = 0; r < REPEATS; r++) {
    const t0 = performance.now();
    for (const t of texts) await ctx.getEmbeddingFor(t);
    best = Math.min(best, performance.now() - t0);
  }
  console.log(JSON.stringify({ engine: 'llama.cpp (node-llama-cpp, one text per call)', threads, texts: texts.length, tokens, ms: +best.toFixed(1), tok_s: +(tokens / best * 1e3).toFixed(0) }));
  await ctx.dispose();
  await m.dispose();
}
