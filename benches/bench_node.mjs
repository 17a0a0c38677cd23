// Benchmark the wasm32 engine in Node: load, prefill (N-token prompt), decode (M tokens), peak RSS.
// Usage: node benches/bench_node.mjs --pkg target/wasm-node --model M [--prompt-tokens 128] [--gen-tokens 64]
// Prints one JSON line.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const require = createRequire(import.meta.url);
const { Engine } = require(path.resolve(args.pkg, 'ruvllm.js'));
const nPrompt = Number(args['prompt-tokens'] ?? 128);
const nGen = Number(args['gen-tokens'] ?? 64);

const t0 = performance.now();
const engine = new Engine(readFileSync(args.model), 0);
const loadMs = performance.now() - t0;

const text = readFileSync(new URL('../cli/src/bench_prompt.txt', import.meta.url), 'utf8').repeat(8);
const ids = Array.from(engine.tokenize(text, false)).slice(0, nPrompt);
// Warm-up, not measured.
engine.start(Uint32Array.from(ids.slice(0, 16)), JSON.stringify({ maxTokens: 2, temperature: 0, ignoreEos: true }));
while (engine.nextStep() !== undefined);
engine.finish(false);
engine.reset();

engine.start(Uint32Array.from(ids), JSON.stringify({ maxTokens: nGen + 1, temperature: 0, ignoreEos: true }));
while (engine.nextStep() !== undefined);
const out = JSON.parse(engine.finish(false));
console.log(JSON.stringify({
  engine: 'ruvllm-wasm32-node', threads: 1, prompt_tokens: out.prompt_tokens, gen_tokens: out.generated_tokens,
  load_ms: loadMs, prefill_tok_s: out.prefill_tok_s, decode_tok_s: out.decode_tok_s,
  peak_rss_mb: process.resourceUsage().maxRSS / 1024 * 1.048576,
  wasm_memory_mb: JSON.parse(engine.info()).wasm_memory_bytes / 1e6,
  model_mb: readFileSync(args.model).length / 1e6, kv_cache_mb: JSON.parse(engine.info()).kv_cache_bytes / 1e6,
}));
