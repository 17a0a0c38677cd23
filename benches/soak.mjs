// A long-lived app: --turns chat turns on the default model through the npm package, with the prefix cache in a
// store, a Router and a long-term Memory (on the chat model as embedder, in stores of their own) used on every turn,
// and --aborts of the turns aborted at a seeded random point (the store's read, the prefill, the decode, the store's
// write: lib/soak_loop.js). One JSON line every --every turns per runtime:
//   node       this process, stores in a temporary directory: its RSS and V8 heap, the wasm memory, the stores' bytes
//   chromium   headless Chromium, the package on the page's main thread (benches/web/soak.html), stores in IndexedDB:
//              the renderer's RSS (from /proc), the wasm memory, the origin's storage use (navigator.storage)
// A healthy engine holds memory flat after the warm-up, keeps each store within its budget and answers every turn
// that was not aborted (the run exits 1 otherwise). benches/README.md ("Soak") has the curves.
//
// Usage: node benches/soak.mjs [--model M] [--runtimes node,chromium] [--turns 1000] [--aborts 200] [--every 50]
//          [--seed 1] [--max-tokens 12] [--prefix-budget 8388608] [--memory-budget 1048576]
// (run `scripts/build-wasm.sh` and `npm run build` in npm/ first)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, parseArgs, round } from './lib/common.mjs';
import { soak } from './lib/soak_loop.js';

const args = parseArgs({
  model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`,
  runtimes: 'node,chromium',
  chromium: '/usr/bin/chromium',
  turns: '1000',
  aborts: '200',
  every: '50',
  seed: '1',
  'max-tokens': '12',
  'prefix-budget': String(8 << 20),
  'memory-budget': String(1 << 20),
});
const options = {
  turns: Number(args.turns),
  aborts: Number(args.aborts),
  every: Number(args.every),
  seed: Number(args.seed),
  maxTokens: Number(args['max-tokens']),
  prefixBudget: Number(args['prefix-budget']),
  memoryBudget: Number(args['memory-budget']),
};
const print = (runtime, line) => console.log(JSON.stringify({ bench: 'soak', runtime, ...line }));
let failed = false;

async function node() {
  const pkg = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ruvllm-soak-'));
  const stores = { prefix: { store: path.join(dir, 'prefix') }, router: { store: path.join(dir, 'router') }, memory: { store: path.join(dir, 'memory') } };
  const bytes = (d) => (fs.existsSync(d) ? fs.readdirSync(d).reduce((n, f) => n + fs.statSync(path.join(d, f)).size, 0) : 0);
  const counts = await soak(pkg, args.model, stores, options, (line) => {
    const m = process.memoryUsage();
    print('node', {
      ...line,
      rss_mb: round(m.rss / 1e6, 1),
      heap_mb: round(m.heapUsed / 1e6, 1),
      prefix_store_mb: round(bytes(stores.prefix.store) / 1e6, 2),
      router_store_kb: round(bytes(stores.router.store) / 1e3, 1),
      memory_store_kb: round(bytes(stores.memory.store) / 1e3, 1),
    });
  });
  fs.rmSync(dir, { recursive: true, force: true });
  return counts;
}

async function chromium() {
  const { openPage, chromiumPeaks } = await import('./lib/chromium.mjs');
  const browser = await openPage('soak.html', args.model, { executablePath: args.chromium, ready: 'soakBench' });
  try {
    await browser.page.exposeFunction('soakCheckpoint', (line) => {
      // The page's renderer: the largest (Chromium may keep a spare one).
      const renderer = chromiumPeaks().filter((p) => p.type === 'renderer').sort((a, b) => b.rss_mb - a.rss_mb)[0];
      print('chromium', { ...line, renderer_rss_mb: renderer?.rss_mb ?? null, renderer_peak_mb: renderer?.peak_rss_mb ?? null });
    });
    return await browser.page.evaluate(({ model, options }) => window.soakBench(model, options), { model: browser.modelUrl, options });
  } finally {
    await browser.close();
  }
}

for (const runtime of args.runtimes.split(',')) {
  const counts = await (runtime === 'node' ? node() : chromium());
  for (const e of counts.errors) console.error(`${runtime}: ${e}`);
  if (counts.failed > 0 || counts.answered + counts.aborted < options.turns) failed = true;
}
if (failed) process.exitCode = 1;
