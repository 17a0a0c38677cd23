// A wasm engine in headless Chromium (playwright-core + the system /usr/bin/chromium): serves benches/web/ with
// COOP/COEP from 127.0.0.1, opens web/<engine>.html, calls its window.runBench(cfg) and prints one JSON result line.
// Peak memory is the VmHWM of the renderer process, which hosts the page, its workers and their wasm memory.
//
// Usage: node benches/engines/browser.mjs --engine ruvllm|wllama --model M --prompt FILE [--threads 1]
//          [--gen-tokens 64] [--reps 3] [--ctx 1024] [--ruvllm-pkg npm/wasm] [--chromium /usr/bin/chromium]
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { BENCHES, ROOT, parseArgs, loadavg1m, readPrompt, result, log } from '../lib/common.mjs';
import { chromiumPeaks } from '../lib/chromium.mjs';
import { startServer } from '../lib/serve.mjs';

const args = parseArgs({
  threads: '1', 'gen-tokens': '64', reps: '3', ctx: '1024', 'ruvllm-pkg': 'npm/wasm', chromium: '/usr/bin/chromium',
  'timeout-s': '1200',
});
const loadavgStart = loadavg1m();
if (!['ruvllm', 'wllama'].includes(args.engine)) throw new Error('--engine must be ruvllm or wllama');
const prompt = readPrompt(args.prompt);

const pkgVersion = (name) => JSON.parse(fs.readFileSync(path.join(BENCHES, 'node_modules', name, 'package.json'), 'utf8')).version;
const { server, origin } = await startServer({
  '/web/': path.join(BENCHES, 'web'),
  '/lib/': path.join(BENCHES, 'lib'),
  '/wllama/': path.join(BENCHES, 'node_modules/@wllama/wllama/esm'),
  '/ruvllm/': path.resolve(ROOT, args['ruvllm-pkg']),
  '/model/': path.dirname(path.resolve(args.model)),
});
const profile = fs.mkdtempSync(path.join(ROOT, 'target', 'chromium-profile-'));
const hardTimer = setTimeout(() => { log('timed out'); process.exit(3); }, Number(args['timeout-s']) * 1000);
let context;
try {
  // launch() refuses --user-data-dir; a persistent context on a fresh folder is the same thing.
  context = await chromium.launchPersistentContext(profile, {
    executablePath: args.chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') log(`[page ${m.type()}]`, m.text()); });
  page.on('pageerror', (e) => log('[page error]', e.message));
  await page.goto(`${origin}/web/${args.engine}.html`);
  await page.waitForFunction(() => typeof window.runBench === 'function', null, { timeout: 60000 });
  const browserVersion = await page.evaluate(() => navigator.userAgent.match(/Chrome\/(\S+)/)?.[1]);

  log(`${args.engine} in Chromium ${browserVersion}: threads=${args.threads} reps=${args.reps}`);
  const r = await page.evaluate((cfg) => window.runBench(cfg), {
    modelUrl: `/model/${path.basename(args.model)}`,
    promptIds: prompt.ids,
    promptText: prompt.text,
    genTokens: Number(args['gen-tokens']),
    reps: Number(args.reps),
    threads: Number(args.threads),
    ctx: Number(args.ctx),
  });
  for (const [i, run] of r.runs.entries()) log(`rep ${i}: prefill ${run.prefill_tok_s.toFixed(1)} tok/s, decode ${run.decode_tok_s.toFixed(1)} tok/s`);
  const peaks = chromiumPeaks();
  const version = args.engine === 'wllama' ? `wllama ${pkgVersion('@wllama/wllama')}` : 'ruvllm (wasm-bindgen --target web)';
  console.log(JSON.stringify(result({
    engine: args.engine === 'wllama' ? 'wllama' : 'ruvllm',
    // Our relaxed-SIMD builds' rows are their own (compare.mjs's labels): the engine says which build it is.
    runtime: `wasm in Chromium${r.extra.relaxed_simd ? ', relaxed SIMD' : ''}`,
    threads: r.threads,
    model: args.model,
    promptTokens: r.promptTokens,
    genTokens: r.genTokens,
    loadMs: r.loadMs,
    peakRssMb: Math.max(...peaks.filter((p) => p.type === 'renderer').map((p) => p.peak_rss_mb)),
    runs: r.runs,
    loadavgStart,
    extra: { version: `${version}, Chromium ${browserVersion}, playwright-core ${pkgVersion('playwright-core')}`, ...r.extra, chromium_peak_rss_mb: peaks },
  })));
} finally {
  clearTimeout(hardTimer);
  if (context) await context.close().catch(() => {});
  server.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
