// One thread against two, in one Node process at the same minutes: the single-thread build (npm/wasm) and the threaded
// build (npm/wasm-mt, a pool of --threads workers) each load the model, then their reps alternate (1T, 2T, 2T, 1T, ...),
// so a busy stretch of the machine falls on both alike. Each rep prefills the prompt and decodes --gen-tokens greedy
// tokens; the decode steps are also timed one by one (around `await nextStep()`, so the threaded build's hand-off to
// its pool is in them). Prints each build's decode tok/s (the engine's own timing, median over reps), its step times
// (p10 / p50 / p90) and how far they spread (p50 / p10), then 2T/1T at the fastest tenth of the steps, at the
// median step and over the reps (median of each pair's ratio). On this project's VM the one-thread steps stay close
// together while the two-thread steps spread in busy minutes: see the README's "Where two threads lose".
//
// Usage: node benches/thread_steps.mjs --model M [--reps 12] [--gen-tokens 64] [--threads 2]
//          [--prompt FILE | --prompt-tokens 128] [--st npm/wasm] [--mt npm/wasm-mt]
// (the two builds as scripts/build-wasm.sh makes them; run `npm run build` in npm/ first for the worker shim).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, parseArgs, median, readPrompt, round } from './lib/common.mjs';
import { timedGeneration } from './lib/engine_bench.js';

const args = parseArgs({ reps: '12', 'gen-tokens': '64', threads: '2', 'prompt-tokens': '128', st: 'npm/wasm', mt: 'npm/wasm-mt' });
if (!args.model) throw new Error('--model PATH is required');
const genTokens = Number(args['gen-tokens']);

// Node does not wait for a wasm thread to settle a Promise: hold the process open until the end.
const keepAlive = setInterval(() => {}, 1 << 30);
const { withWebWorkers } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node-workers.js')).href);

/** Load one build (a wasm-bindgen `--target web` package) and an engine on the model. */
async function load(pkg, threads) {
  let glue;
  await withWebWorkers(async () => {
    // The query string keeps the two builds' glue modules apart (same file name in both).
    glue = await import(pathToFileURL(path.join(path.resolve(ROOT, pkg), 'ruvllm.js')).href + `?${threads}`);
    await glue.default({ module_or_path: readFileSync(path.join(path.resolve(ROOT, pkg), 'ruvllm_bg.wasm')) });
    if (threads > 1) await glue.initThreadPool(threads);
  });
  const engine = new glue.Engine(readFileSync(args.model), 0);
  engine.setPrefixCacheBudget(0); // every step measured, none restored from the prefix cache
  return engine;
}

const builds = [
  { label: '1T', engine: await load(args.st, 1), tokS: [], steps: [] },
  { label: `${args.threads}T`, engine: await load(args.mt, Number(args.threads)), tokS: [], steps: [] },
];
const engine0 = builds[0].engine;
const promptIds = args.prompt
  ? readPrompt(args.prompt).ids
  : Array.from(engine0.tokenize(readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(8), false))
      .slice(0, Number(args['prompt-tokens']));

/** One rep: prefill, then genTokens + 1 tokens; the engine's decode tok/s and the decode steps' wall times (ms). */
async function rep(engine, ids, maxTokens) {
  const { out, decodeSteps } = await timedGeneration(engine, ids, maxTokens);
  return { tokS: out.decode_tok_s, steps: decodeSteps };
}

for (const b of builds) await rep(b.engine, promptIds.slice(0, 16), 2); // warm-up: compiles hot paths, touches weights
for (let r = 0; r < Number(args.reps); r++) {
  for (const b of r % 2 ? [...builds].reverse() : builds) {
    const { tokS, steps } = await rep(b.engine, promptIds, genTokens + 1);
    b.tokS.push(tokS);
    b.steps.push(...steps);
  }
}
clearInterval(keepAlive);

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))];
const stats = builds.map((b) => ({
  build: b.label,
  decode_tok_s: round(median(b.tokS), 1),
  step_ms: { p10: round(quantile(b.steps, 0.1)), p50: round(quantile(b.steps, 0.5)), p90: round(quantile(b.steps, 0.9)) },
  spread_p50_over_p10: round(quantile(b.steps, 0.5) / quantile(b.steps, 0.1), 3),
}));
const [one, two] = builds;
const ratio = {
  at_p10_step: round(quantile(one.steps, 0.1) / quantile(two.steps, 0.1), 3),
  at_p50_step: round(quantile(one.steps, 0.5) / quantile(two.steps, 0.5), 3),
  decode_tok_s_pairs: round(median(two.tokS.map((t, i) => t / one.tokS[i])), 3),
};
console.log(JSON.stringify({ reps: Number(args.reps), gen_tokens: genTokens, prompt_tokens: promptIds.length, builds: stats, ratio }));
for (const s of stats) {
  console.log(`${s.build}: decode ${s.decode_tok_s} tok/s; steps p10 ${s.step_ms.p10} p50 ${s.step_ms.p50} p90 ${s.step_ms.p90} ms (p50/p10 ${s.spread_p50_over_p10})`);
}
console.log(`${two.label}/1T: ${ratio.at_p10_step}x at the fastest tenth of the steps, ${ratio.at_p50_step}x at the median step, ${ratio.decode_tok_s_pairs}x over the reps`);
process.exit(0);
