// Benchmark the wasm32 engine in Node (1 thread): load, prefill, decode, peak RSS. Prints one JSON line.
//
// Usage: node benches/bench_node.mjs --pkg target/wasm-node --model M
//          [--prompt FILE | --prompt-tokens 128] [--gen-tokens 64] [--reps 3] [--ctx 0]
// --pkg is `wasm-bindgen --target nodejs` output; --ctx 0 is the engine's default context window. Without
// --prompt (a file as lib/common.mjs readPrompt reads it) the prompt is the CLI bench's text
// (cli/src/bench_prompt.txt) cut to --prompt-tokens tokens, as `ruvllm bench` does.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { ROOT, parseArgs, nowMs, loadavg1m, readPrompt, round, result } from './lib/common.mjs';
import { benchEngine } from './lib/engine_bench.js';

const args = parseArgs({ 'prompt-tokens': '128', 'gen-tokens': '64', reps: '3', ctx: '0' });
const loadavgStart = loadavg1m();
const { Engine } = createRequire(import.meta.url)(path.resolve(args.pkg, 'ruvllm.js'));

// Load = reading the file + parsing the GGUF into wasm memory + allocating the session.
const t0 = nowMs();
const engine = new Engine(readFileSync(args.model), Number(args.ctx));
const loadMs = nowMs() - t0;

const promptIds = args.prompt
  ? readPrompt(args.prompt).ids
  : Array.from(engine.tokenize(readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(8), false))
      .slice(0, Number(args['prompt-tokens']));

const b = benchEngine(engine, promptIds, { genTokens: Number(args['gen-tokens']), reps: Number(args.reps) });
console.log(JSON.stringify(result({
  engine: 'ruvllm',
  runtime: 'wasm32 in Node',
  threads: 1,
  model: args.model,
  promptTokens: b.promptTokens,
  genTokens: b.genTokens,
  loadMs,
  // Whole Node process: Node itself, the file read into a Buffer, and the wasm memory.
  peakRssMb: (process.resourceUsage().maxRSS * 1024) / 1e6,
  runs: b.runs,
  loadavgStart,
  extra: {
    version: `node ${process.version}, simd128=${b.info.simd128}`,
    wasm_memory_mb: round(b.info.wasm_memory_bytes / 1e6, 1),
    kv_cache_mb: round(b.info.kv_cache_bytes / 1e6, 1),
    decode_text: b.decodeText,
  },
})));
