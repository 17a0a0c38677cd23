// The prefix cache's payoff: time to first token of a prompt whose first PREFIX tokens an earlier request evaluated
// (a conversation reopened: the session's own KV is gone, the model's prefix cache holds it), against the same
// prompt cold (cache cleared). The npm package in Node, wasm32 single thread by default. Prints one JSON line.
//
// Usage: node benches/prefix_cache.mjs [--model M] [--prefix-tokens 512] [--threads 1] [--reps 3]
// (run `scripts/build-wasm.sh` and `npm run build` in npm/ first; benches/README.md has the figures)
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, parseArgs, median, nowMs, round, loadavg1m } from './lib/common.mjs';

const args = parseArgs({ model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`, 'prefix-tokens': '512', threads: '1', reps: '3' });
const { LLM } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href);
const llm = await LLM.load(args.model, { threads: Number(args.threads) });
const text = readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(8);
const prefix = llm.tokenize(text).slice(0, Number(args['prefix-tokens']));
const loadavgStart = loadavg1m();

/** Time to the first token of `prefix` + a question, one greedy token; its cached prompt tokens. */
async function firstToken(question) {
  const prompt = [...prefix, ...llm.tokenize(` Question ${question}: what comes next?`)];
  const t0 = nowMs();
  const r = await llm.complete(prompt, { temperature: 0, maxTokens: 1 });
  return { ms: nowMs() - t0, cached: r.usage.cachedTokens, prompt: r.usage.promptTokens };
}

const cold = [];
const warm = [];
for (let rep = 0; rep < Number(args.reps); rep++) {
  await llm.reset();
  await llm.clearPrefixCache();
  cold.push(await firstToken(2 * rep)); // evaluates everything, and leaves it in the prefix cache
  await llm.reset(); // the session forgets; the prefix cache keeps it
  warm.push(await firstToken(2 * rep + 1));
}
const coldMs = median(cold.map((r) => r.ms));
const warmMs = median(warm.map((r) => r.ms));
console.log(
  JSON.stringify({
    bench: 'prefix_cache',
    runtime: `wasm32 Node ${process.version}`,
    threads: llm.info().threads,
    prefix_tokens: prefix.length,
    prompt_tokens: cold[0].prompt,
    cached_tokens: warm.map((r) => r.cached),
    cold_ttft_ms: round(coldMs),
    warm_ttft_ms: round(warmMs),
    speedup: round(coldMs / warmMs),
    cache_bytes: llm.info().prefixCache.bytes,
    loadavg_start: loadavgStart,
  }),
);
llm.dispose();
