// llama.cpp natively, through node-llama-cpp's prebuilt CPU binary (@node-llama-cpp/linux-x64; nothing is built
// or downloaded). Prints one JSON result line (lib/common.mjs `result`).
//
// Usage: NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node benches/engines/llama_node.mjs --model M --prompt FILE
//          [--threads 1] [--gen-tokens 64] [--reps 3] [--ctx 1024]
import fs from 'node:fs';
import path from 'node:path';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import { BENCHES, parseArgs, nowMs, loadavg1m, readPrompt, result, log } from '../lib/common.mjs';

const args = parseArgs({ threads: '1', 'gen-tokens': '64', reps: '3', ctx: '1024' });
const loadavgStart = loadavg1m();
const threads = Number(args.threads);
const nGen = Number(args['gen-tokens']);
const prompt = readPrompt(args.prompt);
const promptIds = prompt.ids;
const version = JSON.parse(fs.readFileSync(path.join(BENCHES, 'node_modules/node-llama-cpp/package.json'), 'utf8')).version;

// Load = model + context (the context allocates the KV cache and compute buffers). Loading the native binding
// itself (dlopen, CPU feature probing; about a second here) is process start-up, reported apart as load_binding_ms.
const tb = nowMs();
const llama = await getLlama({
  gpu: false,
  build: 'never',
  skipDownload: true,
  usePrebuiltBinaries: true,
  existingPrebuiltBinaryMustMatchBuildOptions: false,
  progressLogs: false,
  maxThreads: threads,
  logLevel: LlamaLogLevel.warn,
});
const bindingMs = nowMs() - tb;
const t0 = nowMs();
const model = await llama.loadModel({ modelPath: args.model, gpuLayers: 0 });
const context = await model.createContext({ contextSize: Number(args.ctx), batchSize: 512, threads, sequences: 1 });
const loadMs = nowMs() - t0;
const seq = context.getSequence();
// We prefill ruvllm's ids; this records whether llama.cpp's own tokenizer agrees on them (wllama gets the text).
const sameTokens = JSON.stringify(model.tokenize(prompt.text, false)) === JSON.stringify(promptIds);

// Greedy generation of `n` tokens after prefilling `ids`; returns the ids and the time each one arrived.
async function generate(ids, n) {
  await seq.clearHistory();
  const out = [];
  const times = [];
  for await (const id of seq.evaluate(ids, { temperature: 0, yieldEogToken: true })) {
    out.push(id);
    times.push(nowMs());
    if (out.length >= n) break;
  }
  return { ids: out, times };
}

await generate(promptIds.slice(0, 16), 2); // warm-up, not measured

const runs = [];
let decodeIds = null;
for (let r = 0; r < Number(args.reps); r++) {
  // Prefill: the whole prompt as one batch, no sampling.
  await seq.clearHistory();
  const tp = nowMs();
  await seq.evaluateWithoutGeneratingNewTokens(promptIds);
  const prefillMs = nowMs() - tp;
  // Decode: 1 + nGen greedy tokens; speed over the nGen single-token steps after the first token.
  const g = await generate(promptIds, nGen + 1);
  const decodeMs = g.times[g.times.length - 1] - g.times[0];
  runs.push({ prefill_tok_s: (promptIds.length * 1000) / prefillMs, decode_tok_s: (nGen * 1000) / decodeMs });
  decodeIds ??= g.ids;
  log(`rep ${r}: prefill ${runs[r].prefill_tok_s.toFixed(1)} tok/s, decode ${runs[r].decode_tok_s.toFixed(1)} tok/s`);
}

const line = result({
  engine: 'llama.cpp',
  runtime: 'native (node-llama-cpp)',
  threads: context.currentThreads,
  model: args.model,
  promptTokens: promptIds.length,
  genTokens: nGen,
  loadMs,
  // Whole Node process (Node itself is about 50 MB of this).
  peakRssMb: (process.resourceUsage().maxRSS * 1024) / 1e6,
  runs,
  loadavgStart,
  extra: {
    version: `node-llama-cpp ${version} (prebuilt ${llama.llamaCppRelease?.release ?? '?'})`,
    system_info: llama.systemInfo, // the CPU variant of the binary picked at run time (AVX2, AVX512, ...)
    load_binding_ms: Math.round(bindingMs),
    prompt_tokenizes_same: sameTokens,
    decode_text: model.detokenize(decodeIds, false),
  },
});
await context.dispose();
await model.dispose();
await llama.dispose();
console.log(JSON.stringify(line));
