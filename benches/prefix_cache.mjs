// The prefix cache's payoff: time to the first token of a prompt whose first PREFIX tokens an earlier request
// evaluated (a conversation reopened), against the same prompt cold. The npm package, wasm32, one thread by default.
// One JSON line per place the prefix comes from:
//   memory     Node, one process: the session reset in between, so only the model's prefix cache can supply it
//   disk       Node, the file store (`prefixCache: { store: dir }`): cold in a new process with an empty store, then
//              restored in another new process that finds the pages on disk
//   chromium   headless Chromium, the package on the page's main thread: cold and from memory in one page load, then
//              after a real `page.reload()` from IndexedDB (`prefixCache: { store: 'indexeddb' }`)
// Cold always starts with the cache and its store cleared. Every cold and restored figure is the first request of
// its process or page load, so both pay the same start-up costs (V8's wasm tier-up, first touches of memory).
//
// Usage: node benches/prefix_cache.mjs [--model M] [--prefix-tokens 512] [--reps 3] [--threads 1]
//          [--sources memory,disk,chromium] [--chromium /usr/bin/chromium]
// (run `scripts/build-wasm.sh` and `npm run build` in npm/ first; benches/README.md has the figures)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT, parseArgs, median, round, loadavg1m, log } from './lib/common.mjs';
import { coldThenWarm, firstToken, prefixPrompt } from './lib/prefix_bench.js';

const args = parseArgs({
  model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`,
  'prefix-tokens': '512',
  threads: '1',
  reps: '3',
  sources: 'memory,disk,chromium',
  chromium: '/usr/bin/chromium',
});
const prefixTokens = Number(args['prefix-tokens']);
const TEXT = readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(8 + Math.ceil(prefixTokens / 100));
const threads = Number(args.threads);
const importPackage = async () => (await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href)).LLM;

/** The JSON line of one source: medians of the reps, and every rep. */
function report(source, runtime, reps, loadavgStart, extra = {}) {
  const med = (key, which) => round(median(reps.map((r) => r[which][key])));
  const cold = med('ms', 'cold');
  const warm = med('ms', 'warm');
  return {
    bench: 'prefix_cache',
    source,
    runtime,
    threads,
    prefix_tokens: prefixTokens,
    prompt_tokens: reps[0].cold.prompt_tokens,
    cached_tokens: reps.map((r) => r.warm.cached_tokens),
    cold_ttft_ms: cold,
    warm_ttft_ms: warm,
    speedup: round(cold / warm),
    // Where the warm time went (medians): the store read and the engine taking the records (disk, IndexedDB),
    // copying the cached keys and values into the conversation, the prefill of the uncached tail.
    warm_store_read_ms: med('store_read_ms', 'warm'),
    warm_store_load_ms: med('store_load_ms', 'warm'),
    warm_restore_ms: med('restore_ms', 'warm'),
    warm_prefill_ms: med('prefill_ms', 'warm'),
    store_records: reps[0].warm.store_records,
    store_bytes: reps[0].warm.store_bytes,
    // Greedy: the first token with the cache equals the one without it.
    same_token: reps.every((r) => r.cold.id === r.warm.id),
    cold_reps_ms: reps.map((r) => round(r.cold.ms)),
    warm_reps_ms: reps.map((r) => round(r.warm.ms)),
    loadavg_start: loadavgStart,
    loadavg_end: loadavg1m(),
    ...extra,
  };
}

/** Node, one process: cold, then from the model's prefix cache after `reset()`. */
async function memory() {
  const LLM = await importPackage();
  const llm = await LLM.load(args.model, { threads });
  const loadavgStart = loadavg1m();
  const prompt = prefixPrompt(llm, TEXT, prefixTokens);
  const reps = [];
  for (let rep = 0; rep < Number(args.reps); rep++) reps.push(await coldThenWarm(llm, prompt));
  const out = report('memory', `wasm32 Node ${process.version}`, reps, loadavgStart, { cache_bytes: llm.info().prefixCache.bytes });
  llm.dispose();
  return out;
}

/** One request in this (new) process with the file store in `dir`: `--child cold` clears the store first. */
async function child() {
  const LLM = await importPackage();
  const llm = await LLM.load(args.model, { threads, prefixCache: { store: args.dir } });
  if (args.child === 'cold') await llm.clearPrefixCache();
  const r = await firstToken(llm, prefixPrompt(llm, TEXT, prefixTokens));
  await llm.flushPrefixCache();
  llm.dispose();
  console.log(JSON.stringify(r));
}

/** Node, the file store: cold in a new process, restored from disk in the next one. */
function disk() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ruvllm-prefix-bench-'));
  const run = (which) => {
    const argv = [fileURLToPath(import.meta.url), '--child', which, '--dir', dir, '--model', args.model, '--threads', args.threads, '--prefix-tokens', args['prefix-tokens']];
    const p = spawnSync(process.execPath, argv, { encoding: 'utf8' });
    if (p.status !== 0) throw new Error(`the ${which} process failed: ${p.stderr}`);
    return JSON.parse(p.stdout.trim().split('\n').pop());
  };
  const loadavgStart = loadavg1m();
  try {
    const reps = [];
    for (let rep = 0; rep < Number(args.reps); rep++) {
      const cold = run('cold');
      reps.push({ cold, warm: run('restored') });
    }
    return report('disk', `wasm32 Node ${process.version}`, reps, loadavgStart);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Chromium: cold and from memory in one page load, then from IndexedDB after a reload. */
async function chromium() {
  const { openPage } = await import('./lib/chromium.mjs');
  const browser = await openPage('prefix_cache.html', args.model, { executablePath: args.chromium });
  const cfg = { modelUrl: browser.modelUrl, threads, text: TEXT, prefixTokens };
  const loadavgStart = loadavg1m();
  try {
    const reps = [];
    for (let rep = 0; rep < Number(args.reps); rep++) {
      if (rep > 0) await browser.reload();
      const first = await browser.page.evaluate(async (cfg) => {
        const { LLM, coldThenWarm, prefixPrompt } = window.prefixBench;
        const llm = await LLM.load(cfg.modelUrl, { threads: cfg.threads, backend: 'cpu', prefixCache: { store: 'indexeddb' } });
        try {
          return await coldThenWarm(llm, prefixPrompt(llm, cfg.text, cfg.prefixTokens));
        } finally {
          llm.dispose();
        }
      }, cfg);
      await browser.reload();
      const restored = await browser.page.evaluate(async (cfg) => {
        const { LLM, firstToken, prefixPrompt } = window.prefixBench;
        const llm = await LLM.load(cfg.modelUrl, { threads: cfg.threads, backend: 'cpu', prefixCache: { store: 'indexeddb' } });
        try {
          return await firstToken(llm, prefixPrompt(llm, cfg.text, cfg.prefixTokens));
        } finally {
          llm.dispose();
        }
      }, cfg);
      reps.push({ ...first, restored });
      log(`chromium rep ${rep}: cold ${round(first.cold.ms)} ms, memory ${round(first.warm.ms)} ms, IndexedDB ${round(restored.ms)} ms`);
    }
    const runtime = `wasm32 Chromium ${browser.version}`;
    return [
      report('memory', runtime, reps, loadavgStart),
      report('indexeddb', runtime, reps.map((r) => ({ cold: r.cold, warm: r.restored })), loadavgStart),
    ];
  } finally {
    await browser.close();
  }
}

if (args.child) {
  await child();
} else {
  const sources = String(args.sources).split(',');
  const unknown = sources.filter((s) => !['memory', 'disk', 'chromium'].includes(s));
  if (unknown.length) throw new Error(`unknown --sources ${unknown.join(',')}: memory, disk, chromium`);
  for (const source of sources) {
    log(`${source}: ${prefixTokens}-token prefix, ${args.reps} reps`);
    const lines = { memory, disk, chromium }[source];
    for (const line of [await lines()].flat()) console.log(JSON.stringify(line));
  }
}
