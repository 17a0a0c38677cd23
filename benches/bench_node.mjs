// Benchmark the wasm32 engine in Node: load, prefill, decode, peak RSS. Prints one JSON line.
//
// Usage: node benches/bench_node.mjs --pkg npm/wasm --model M [--threads 1]
//          [--prompt FILE | --prompt-tokens 128] [--gen-tokens 64] [--reps 3] [--ctx 0]
// --pkg is a `wasm-bindgen --target web` build as scripts/build-wasm.sh makes them: npm/wasm (one thread) or the
// threaded npm/wasm-mt, whose pool of --threads workers starts as the npm package starts it in Node (worker_threads
// behind the Web Worker API, npm/dist/node-workers.js: run `npm run build` in npm/ first). --ctx 0 is the engine's
// default context window. Without --prompt (a file as lib/common.mjs readPrompt reads it) the prompt is the CLI
// bench's text (cli/src/bench_prompt.txt) cut to --prompt-tokens tokens, as `ruvllm bench` does.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, parseArgs, nowMs, loadavg1m, readPrompt, round, result } from './lib/common.mjs';
import { benchEngine } from './lib/engine_bench.js';

const args = parseArgs({ 'prompt-tokens': '128', 'gen-tokens': '64', reps: '3', ctx: '0', threads: '1' });
const loadavgStart = loadavg1m();
const threads = Number(args.threads);
const pkg = path.resolve(args.pkg);

// Node does not wait for a wasm thread to settle a Promise: hold the process open until the end.
const keepAlive = setInterval(() => {}, 1 << 30);
let ruvllm;
const start = async () => {
  ruvllm = await import(pathToFileURL(path.join(pkg, 'ruvllm.js')).href);
  await ruvllm.default({ module_or_path: readFileSync(path.join(pkg, 'ruvllm_bg.wasm')) });
  if (typeof ruvllm.initThreadPool === 'function') await ruvllm.initThreadPool(threads);
  else if (threads > 1) throw new Error(`${pkg} is the single-thread build: ${threads} threads need npm/wasm-mt`);
};
const { withWebWorkers } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node-workers.js')).href);
await withWebWorkers(start);

// Load = reading the file + parsing the GGUF into wasm memory + allocating the session.
const t0 = nowMs();
const engine = new ruvllm.Engine(readFileSync(args.model), Number(args.ctx));
const loadMs = nowMs() - t0;

const promptIds = args.prompt
  ? readPrompt(args.prompt).ids
  : Array.from(engine.tokenize(readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8')
    .repeat(Math.max(8, Math.floor(Number(args['prompt-tokens']) / 64) + 1)), false))
      .slice(0, Number(args['prompt-tokens']));

const b = await benchEngine(engine, promptIds, { genTokens: Number(args['gen-tokens']), reps: Number(args.reps) });
clearInterval(keepAlive);
console.log(JSON.stringify(result({
  engine: 'ruvllm',
  // The relaxed-SIMD builds' rows are their own (compare.mjs's labels): the engine says which build it is.
  runtime: `wasm32 in Node ${process.versions.node.split('.')[0]}${b.info.relaxed_simd ? ', relaxed SIMD' : ''}`,
  threads: b.info.threads,
  model: args.model,
  promptTokens: b.promptTokens,
  genTokens: b.genTokens,
  loadMs,
  // Whole Node process: Node itself, the file read into a Buffer, and the wasm memory.
  peakRssMb: (process.resourceUsage().maxRSS * 1024) / 1e6,
  runs: b.runs,
  loadavgStart,
  extra: {
    version: `node ${process.version}, simd128=${b.info.simd128}, build ${path.basename(pkg)}`,
    wasm_memory_mb: round(b.info.wasm_memory_bytes / 1e6, 1),
    kv_cache_mb: round(b.info.kv_cache_bytes / 1e6, 1),
    decode_text: b.decodeText,
  },
})));
