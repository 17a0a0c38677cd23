// A model download cut at half, resumed (issue 39): in headless Chromium, `LLM.load(url, { cache: true })` (the
// package's model store, OPFS) of a model whose first response the server cuts after half its bytes; the load fails
// with E_FETCH, keeping what came; a second load resumes with an HTTP Range request. Prints the bytes the server sent
// each time, what the store kept after the cut, the second load's time, and whether a third load (from the store)
// made any request. Default model: the 1B-shaped Q4_K_M file `benches/compare.sh` writes; any GGUF with `--model`.
// Usage: node benches/resume_download.mjs [--model M]
// (after `npm run build` in npm/ and scripts/build-wasm.sh)
import { existsSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { MODEL_PATH, PACKAGE_DIR } from '../npm/test/helpers.mjs';
import { serve } from '../npm/test/server.mjs';
import { launchChromium } from '../tests/browser/chromium.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1];
};
const oneB = join(homedir(), '.cache', 'ruvllm', 'Llama-3.2-1B-shape.random.Q4_K_M.gguf');
const model = arg('model', existsSync(oneB) ? oneB : MODEL_PATH);
const bytes = statSync(model).size;

let cutAt = bytes >> 1;
const server = await serve({
  root: PACKAGE_DIR,
  files: { '/model.gguf': model },
  cut: (req) => {
    if (new URL(req.url, 'http://x').pathname !== '/model.gguf' || req.method !== 'GET') return undefined;
    const at = cutAt;
    cutAt = undefined; // only the model's first response
    return at;
  },
});
const browser = await launchChromium();
try {
  const page = browser.context.pages()[0] ?? (await browser.context.newPage());
  await page.goto(`${server.origin}/examples/browser/index.html`);
  const load = () =>
    page.evaluate(async () => {
      const { LLM } = await import('@ruvector/ruvllm');
      const t0 = performance.now();
      try {
        const llm = await LLM.load('/model.gguf', { cache: true, threads: 1 });
        llm.dispose();
        return { ms: Math.round(performance.now() - t0), list: await LLM.models.list() };
      } catch (e) {
        return { error: e.code, ms: Math.round(performance.now() - t0), list: await LLM.models.list() };
      }
    });
  const sent = () => server.requests.filter((r) => r.path === '/model.gguf').reduce((n, r) => n + r.sent, 0);
  await page.evaluate(async () => (await import('@ruvector/ruvllm')).LLM.models.clear());
  const cut = await load();
  const sentCut = sent();
  const resumed = await load();
  const sentResume = sent() - sentCut;
  const requestsBefore = server.requests.length;
  const again = await load();
  console.log(
    JSON.stringify({
      bench: 'resume_download',
      model,
      fileBytes: bytes,
      firstLoad: cut.error ?? 'loaded',
      keptAfterCut: cut.list[0]?.bytes ?? 0,
      sentBeforeCut: sentCut,
      resumedLoad: resumed.error ?? 'loaded',
      resumedMs: resumed.ms,
      sentOnResume: sentResume,
      resumeRanges: server.requests.slice(-3).map((r) => r.range ?? null),
      thirdLoadRequests: server.requests.length - requestsBefore,
      thirdLoadMs: again.ms,
    }),
  );
} finally {
  await browser.close();
  await server.close();
}
