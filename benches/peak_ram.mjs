// Peak memory of a model loaded and run through the npm package (wasm32, one thread, backend cpu), against the
// model's file plus its KV cache (issue 24's goal: peak <= 1.15 x (file + KV)). One JSON line per runtime:
//   node       a Node process of its own (this script again, with --child): `process.resourceUsage().maxRSS`
//              (the process's peak RSS), and the wasm instance's memory (`info().wasmMemoryBytes`: wasm memory
//              never shrinks, so after the run it is the peak)
//   chromium   headless Chromium, the package on the page's main thread (benches/web/peak_ram.html): the peak RSS
//              (VmHWM) of the renderer process, which holds the page and its wasm memory, read from /proc, and the
//              same `wasmMemoryBytes`; `measureUserAgentSpecificMemory()` where the page is cross-origin isolated
//              (lib/serve.mjs sends COOP/COEP) and answers in time
// Each runtime loads the model, generates --gen-tokens greedy tokens after a short prompt, and reports; nothing
// else runs in its process. A load or run that fails is a line with `error` (the message and where), not a crash.
//
// Usage: node benches/peak_ram.mjs [--model M] [--ctx 4096] [--gen-tokens 8] [--runtimes node,chromium]
//          [--chromium /usr/bin/chromium] [--timeout-s 1800]
// (run `scripts/build-wasm.sh st` and `npm run build` in npm/ first; benches/README.md has the figures)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT, parseArgs, round, loadavg1m, log, procMemMb } from './lib/common.mjs';
import { loadAndGenerate } from './lib/peak_ram_bench.js';

const PROMPT = 'The capital of France is';
const args = parseArgs({
  model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`,
  ctx: '4096',
  'gen-tokens': '8',
  runtimes: 'node,chromium',
  chromium: '/usr/bin/chromium',
  'timeout-s': '1800',
  child: '',
});
const cfg = { ctx: Number(args.ctx), genTokens: Number(args['gen-tokens']), prompt: PROMPT };
const MB = (bytes) => round(bytes / 1e6, 1);

/** The ratios of a peak to the file plus its KV cache. */
function ratios(r, peaks) {
  const base = r.file_bytes + r.kv_cache_bytes;
  return Object.fromEntries(Object.entries(peaks).map(([k, v]) => [`${k}_over_file_kv`, round(v / base, 3)]));
}

/** The resident bytes of this process's wasm memory of `bytes` bytes: V8 reserves a wasm32 memory's address range
 * with guard regions and makes the memory's current size accessible, which /proc/self/smaps shows as a mapping of
 * exactly that size (NaN if none is found). Untouched pages (a KV cache's unused positions) are not resident. */
function wasmResidentBytes(bytes) {
  let size = 0;
  for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const m = line.match(/^(Size|Rss):\s+(\d+) kB/);
    if (m?.[1] === 'Size') size = Number(m[2]) * 1024;
    else if (m?.[1] === 'Rss' && size === bytes) return Number(m[2]) * 1024;
  }
  return NaN;
}

if (args.child === 'node') {
  // The child: one load and run, then the process's own peak.
  const { LLM } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href);
  const r = await loadAndGenerate(LLM, { ...cfg, source: args.model });
  const maxRss = process.resourceUsage().maxRSS * 1024; // KiB on Linux
  // After the run, against the peak: what is resident now, and V8's own heap (the file's chunks are garbage by now).
  const m = process.memoryUsage();
  const now = { rss_end_mb: MB(m.rss), wasm_resident_mb: MB(wasmResidentBytes(r.wasm_memory_bytes)), v8_heap_used_mb: MB(m.heapUsed), v8_external_mb: MB(m.external) };
  console.log(JSON.stringify({ ...r, peak_rss_bytes: maxRss, vm_hwm_mb: procMemMb(process.pid).peak_rss_mb, ...now }));
  process.exit(0);
}

const fileBytes = fs.statSync(args.model).size;
const common = (runtime, loadavgStart) => ({
  bench: 'memory',
  runtime,
  model: path.basename(args.model),
  file_bytes: fileBytes,
  ctx: cfg.ctx,
  gen_tokens: cfg.genTokens,
  loadavg_start: loadavgStart,
});

function node() {
  const loadavgStart = loadavg1m();
  const self = fileURLToPath(import.meta.url);
  const p = spawnSync(process.execPath, [self, '--child', 'node', '--model', args.model, '--ctx', args.ctx, '--gen-tokens', args['gen-tokens']], {
    encoding: 'utf8',
    timeout: Number(args['timeout-s']) * 1000,
    maxBuffer: 1 << 24,
  });
  const line = p.stdout.trim().split('\n').pop();
  if (p.status !== 0 || !line?.startsWith('{')) {
    const why = p.error?.message ?? (p.signal ? `killed by ${p.signal}` : `exit status ${p.status}`);
    return { ...common('wasm32 in Node ' + process.versions.node, loadavgStart), error: `${why}: ${p.stderr.trim().split('\n').slice(-5).join(' | ')}`, loadavg_end: loadavg1m() };
  }
  const r = JSON.parse(line);
  return {
    ...common('wasm32 in Node ' + process.versions.node, loadavgStart),
    ...r,
    peak_rss_mb: MB(r.peak_rss_bytes),
    wasm_memory_mb: MB(r.wasm_memory_bytes),
    file_kv_mb: MB(r.file_bytes + r.kv_cache_bytes),
    ...ratios(r, { peak_rss: r.peak_rss_bytes, wasm_memory: r.wasm_memory_bytes }),
    loadavg_end: loadavg1m(),
  };
}

async function chromium() {
  const loadavgStart = loadavg1m();
  const { openPage, chromiumPeaks } = await import('./lib/chromium.mjs');
  const browser = await openPage('peak_ram.html', args.model, { executablePath: args.chromium, ready: 'memoryBench', args: ['--enable-precise-memory-info'] });
  const base = common(`wasm32 in Chromium ${browser.version}`, loadavgStart);
  try {
    const { measured: uaMemory, ...r } = await browser.page.evaluate((c) => window.memoryBench.run(c), { ...cfg, source: browser.modelUrl });
    const jsHeap = await browser.page.evaluate(() => performance.memory?.usedJSHeapSize ?? null);
    const procs = chromiumPeaks();
    const renderers = procs.filter((p) => p.type === 'renderer');
    const renderer = renderers.reduce((a, b) => (b.peak_rss_mb > a.peak_rss_mb ? b : a));
    const rendererPeak = renderer.peak_rss_mb * 1e6;
    return {
      ...base,
      ...r,
      renderer_peak_rss_mb: renderer.peak_rss_mb,
      renderer_rss_mb: renderer.rss_mb,
      wasm_memory_mb: MB(r.wasm_memory_bytes),
      file_kv_mb: MB(r.file_bytes + r.kv_cache_bytes),
      ...ratios(r, { renderer_peak_rss: rendererPeak, wasm_memory: r.wasm_memory_bytes }),
      ua_specific_memory: uaMemory.bytes === undefined ? uaMemory : { mb: MB(uaMemory.bytes), breakdown: uaMemory.breakdown.map((b) => ({ mb: MB(b.bytes), types: b.types })) },
      js_heap_used_mb: jsHeap === null ? null : MB(jsHeap),
      chromium_processes: procs.map(({ type, peak_rss_mb, rss_mb }) => ({ type, peak_rss_mb, rss_mb })),
      loadavg_end: loadavg1m(),
    };
  } catch (e) {
    return { ...base, error: String(e?.message ?? e).split('\n').slice(0, 5).join(' | '), chromium_processes: chromiumPeaks(), loadavg_end: loadavg1m() };
  } finally {
    await browser.close();
  }
}

for (const runtime of args.runtimes.split(',')) {
  log(`${runtime}: ${path.basename(args.model)}, ctx ${cfg.ctx}, ${cfg.genTokens} tokens`);
  const line = runtime === 'node' ? node() : runtime === 'chromium' ? await chromium() : { error: `unknown runtime ${runtime}` };
  console.log(JSON.stringify(line));
}
