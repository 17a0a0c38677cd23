// The build choice in headless Chromium: a page served with COOP/COEP (cross-origin isolated, so
// SharedArrayBuffer is allowed) runs the threaded build on its Web Workers; the same page without
// those headers falls back to the single-thread build. Chromium has relaxed SIMD, so each runs its
// relaxed form unless `simd: 'simd128'` asks for the plain one. All answer the France prompt.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { FRANCE, MODEL_PATH, PACKAGE_DIR } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';
import { ISOLATED, launchChromium } from './chromium.mjs';

let browser, context;
const servers = [];
const pageErrors = [];

before(async () => {
  browser = await launchChromium();
  context = browser.context;
});

after(async () => {
  await browser?.close();
  for (const s of servers) await s.close();
});

/** Open the example page from a server sending `headers`, load the model there with `threads` (and `simd`), answer
 * France. */
async function runPage(headers, threads, simd) {
  const server = await serve({ root: PACKAGE_DIR, files: { '/model.gguf': MODEL_PATH }, headers });
  servers.push(server);
  const page = await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e));
  try {
    await page.goto(`${server.origin}/examples/browser/index.html`);
    return await page.evaluate(async ({ prompt, threads, simd }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      const llm = await LLM.load('/model.gguf', { threads, simd });
      // The page's main thread must stay free while the forward passes run (on the pool, in the threaded build).
      let frames = 0;
      let running = true;
      const frame = () => running && (frames++, requestAnimationFrame(frame));
      requestAnimationFrame(frame);
      const r = await llm.complete(prompt, { temperature: 0 });
      running = false;
      const { build, threads: n, threadFallback, relaxedSimd } = llm.info();
      llm.dispose();
      return { isolated: crossOriginIsolated, build, relaxedSimd, threads: n, threadFallback, ids: r.ids, frames };
    }, { prompt: FRANCE.prompt, threads, simd });
  } finally {
    await page.close();
  }
}

test('with COOP/COEP the page runs the threaded build on 2 threads and answers', async () => {
  const r = await runPage(ISOLATED, 2);
  assert.deepEqual({ isolated: r.isolated, build: r.build, relaxedSimd: r.relaxedSimd, threads: r.threads, ids: r.ids }, { isolated: true, build: 'wasm-mt', relaxedSimd: true, threads: 2, ids: FRANCE.ids });
  assert.equal(r.threadFallback, null);
  console.log(`threaded build in Chromium: ${r.frames} frames painted during the answer`);
});

test('without COOP/COEP the page falls back to the single-thread build and still answers', async () => {
  const r = await runPage({}, 2);
  assert.deepEqual({ isolated: r.isolated, build: r.build, relaxedSimd: r.relaxedSimd, threads: r.threads, ids: r.ids }, { isolated: false, build: 'wasm', relaxedSimd: true, threads: 1, ids: FRANCE.ids });
  assert.equal(r.threadFallback.code, 'E_THREADS');
  assert.match(r.threadFallback.message, /not cross-origin isolated/);
});

test("with COOP/COEP, threads: 1 picks the single-thread build, and simd: 'simd128' its plain form", async () => {
  const r = await runPage(ISOLATED, 1, 'simd128');
  assert.deepEqual({ isolated: r.isolated, build: r.build, relaxedSimd: r.relaxedSimd, threads: r.threads, ids: r.ids }, { isolated: true, build: 'wasm', relaxedSimd: false, threads: 1, ids: FRANCE.ids });
  assert.equal(r.threadFallback, null, 'one thread was asked for');
});

test("simd: 'simd128' runs the plain threaded build", async () => {
  const r = await runPage(ISOLATED, 2, 'simd128');
  assert.deepEqual({ build: r.build, relaxedSimd: r.relaxedSimd, threads: r.threads, ids: r.ids }, { build: 'wasm-mt', relaxedSimd: false, threads: 2, ids: FRANCE.ids });
});

test('no uncaught errors in the pages', () => {
  assert.deepEqual(pageErrors.map(String), []);
});
