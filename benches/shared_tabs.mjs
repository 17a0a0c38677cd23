// A second tab of the same app (issue 39): in headless Chromium, tab A loads the default model and answers once; tab B
// opens the same page and imports the package; then B loads the same URL. With `shared: true` B gets A's engine; with
// the default (a dedicated worker per tab) it loads its own copy. For each mode: how long B's load took, how many
// requests for the model B made, and how much the browser's memory grew with B's load (the proportional set size,
// PSS, of all the browser's processes, from /proc: Linux only), also as a share of the model file's size.
// Prints one JSON line per mode.
// Usage: node benches/shared_tabs.mjs [--model M]
// (after `npm run build` in npm/ and scripts/build-wasm.sh; the model defaults to $RUVLLM_MODEL or scripts/fetch-model.sh's)
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { MODEL_PATH, PACKAGE_DIR } from '../npm/test/helpers.mjs';
import { serve } from '../npm/test/server.mjs';
import { launchChromium } from '../tests/browser/chromium.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1];
};
const model = arg('model', MODEL_PATH);
const fileBytes = statSync(model).size;

/** The PSS in bytes of the processes of the browser whose profile is `profile` (it and all its descendants). */
function browserPss(profile) {
  const procs = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  const parent = new Map();
  let root = null;
  for (const pid of procs) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      parent.set(pid, stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!root && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`--user-data-dir=${profile}`)) root = pid;
    } catch {
      // the process ended meanwhile
    }
  }
  const inTree = (pid) => {
    for (let p = pid; p && p !== '0' && p !== '1'; p = parent.get(p)) if (p === root) return true;
    return false;
  };
  let pss = 0;
  for (const pid of procs) {
    if (!inTree(pid)) continue;
    try {
      const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
      if (m) pss += Number(m[1]) * 1024;
    } catch {
      // the process ended meanwhile
    }
  }
  return pss;
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 1500));

for (const shared of [true, false]) {
  const server = await serve({ root: PACKAGE_DIR, files: { '/model.gguf': model } });
  const browser = await launchChromium();
  try {
    const open = async () => {
      const page = await browser.context.newPage();
      await page.goto(`${server.origin}/examples/browser/index.html`);
      await page.evaluate(() => import('@ruvector/ruvllm'));
      return page;
    };
    const load = (page) =>
      page.evaluate(async (shared) => {
        const { LLM } = await import('@ruvector/ruvllm');
        const t0 = performance.now();
        window.llm = await LLM.load('/model.gguf', { shared });
        const ms = performance.now() - t0;
        await window.llm.complete('Hello', { temperature: 0, maxTokens: 4 });
        return { ms, engine: window.llm.info().engine, pages: window.llm.info().pages };
      }, shared);
    const a = await open();
    await load(a);
    const b = await open();
    await settle();
    const requests = server.hits.get('/model.gguf') ?? 0;
    const before = browserPss(browser.profile);
    const second = await load(b);
    await settle();
    const after = browserPss(browser.profile);
    const grew = after - before;
    console.log(
      JSON.stringify({
        bench: 'shared_tabs',
        model,
        shared,
        engine: second.engine,
        pages: second.pages,
        secondTabLoadMs: Math.round(second.ms),
        secondTabModelRequests: (server.hits.get('/model.gguf') ?? 0) - requests,
        memoryGrowthMB: +(grew / 2 ** 20).toFixed(1),
        memoryGrowthOfModel: +(grew / fileBytes).toFixed(3),
        fileMB: +(fileBytes / 2 ** 20).toFixed(1),
      }),
    );
  } finally {
    await browser.close();
    await server.close();
  }
}
