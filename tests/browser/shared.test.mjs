// One engine for all tabs of an origin (`LLM.load(src, { shared: true })`) in Chromium: two pages of one origin load
// the default model once (the second page's load sends no request for it and its engine is the first's), chat at once
// with their own answers and their own conversations (saveState), take turns fairly, and a page closed mid-generation
// frees its turn and its session. Where SharedWorker is missing (as on Chrome for Android), a leader tab's worker
// serves the others over a BroadcastChannel; when the leader closes, another tab takes over, loads the model again
// from the package's model store (no download), and answers the next request.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FRANCE, MODEL_PATH, PACKAGE_DIR } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';
import { launchChromium } from './chromium.mjs';

const OTHER = 'The three primary colors are';

/** Two pages of one origin on the package's example page, in a Chromium of their own; `init` runs in each before
 * its scripts. */
async function twoPages(t, init) {
  const server = await serve({ root: PACKAGE_DIR, files: { '/model.gguf': MODEL_PATH } });
  const browser = await launchChromium();
  t.after(async () => {
    await browser.close();
    await server.close();
  });
  if (init) await browser.context.addInitScript(init);
  const open = async () => {
    const page = await browser.context.newPage();
    await page.goto(`${server.origin}/examples/browser/index.html`);
    return page;
  };
  return { server, pages: [await open(), await open()] };
}

/** In a page: load the model shared, keep it as `window.llm`; its info and how long the load took. */
const load = (page, options = {}) =>
  page.evaluate(async (options) => {
    const { LLM } = await import('@ruvector/ruvllm');
    const t0 = performance.now();
    window.llm = await LLM.load('/model.gguf', { shared: true, ...options });
    const ms = performance.now() - t0;
    const { engine, pages, wasmMemoryBytes } = window.llm.info();
    return { ms, engine, pages, wasmMemoryBytes };
  }, options);

/** In a page: a greedy answer to `prompt`, its ids. */
const answer = (page, prompt, maxTokens = 12) => page.evaluate(async ([prompt, maxTokens]) => (await window.llm.complete(prompt, { temperature: 0, maxTokens })).ids, [prompt, maxTokens]);

test('two tabs share one engine: one download, their own answers and conversations, fair turns, a closed tab freed', async (t) => {
  const { server, pages } = await twoPages(t);
  const [a, b] = pages;
  const first = await load(a);
  assert.equal(first.engine, 'shared');
  assert.equal(first.pages, 1);
  const requests = server.hits.get('/model.gguf');
  // The second tab: the same engine (its memory did not grow: one copy of the weights), nothing downloaded.
  const second = await load(b);
  assert.equal(second.engine, 'shared');
  assert.equal(second.pages, 2);
  assert.equal(server.hits.get('/model.gguf'), requests, 'the second tab requested the model');
  assert.equal(second.wasmMemoryBytes, first.wasmMemoryBytes);
  t.diagnostic(`second tab ready in ${second.ms.toFixed(0)} ms (first: ${first.ms.toFixed(0)} ms)`);

  // Alone, each prompt's greedy answer; then both tabs at once: the same answers.
  const otherAlone = await answer(b, OTHER);
  const [franceTogether, otherTogether] = await Promise.all([answer(a, FRANCE.prompt, FRANCE.ids.length + 4), answer(b, OTHER)]);
  assert.deepEqual(franceTogether, FRANCE.ids);
  assert.deepEqual(otherTogether, otherAlone);

  // Each tab's conversation is its own: A's saved state is A's, although B ran since.
  await answer(a, FRANCE.prompt, 4);
  const stateA = await a.evaluate(async () => Array.from(await window.llm.saveState()));
  await answer(b, OTHER, 8);
  const againA = await a.evaluate(async () => Array.from(await window.llm.saveState()));
  assert.ok(stateA.length > 0);
  assert.deepEqual(againA, stateA);

  // Fair turns: A asks three times, then B once, while A's first runs; B's answer comes second, not after all of A's.
  // A's first is long and B asks once it has streamed, so B's request is in before A's first ends however slow the
  // machine (a fixed wait, then "once A's three are sent", both let A's first end before B's request came in on CI).
  const aOrder = a.evaluate(async (prompt) => {
    const stamp = (name) => ({ name, at: performance.timeOrigin + performance.now() });
    window.firstStreamed = 0;
    const first = (async () => {
      for await (const _ of window.llm.generate(prompt, { temperature: 0, maxTokens: 400, ignoreEos: true })) window.firstStreamed++;
      return stamp('a1');
    })();
    const ask = (name) => window.llm.complete(prompt, { temperature: 0, maxTokens: 16, ignoreEos: true }).then(() => stamp(name));
    return Promise.all([first, ask('a2'), ask('a3')]);
  }, OTHER);
  await a.waitForFunction(() => window.firstStreamed >= 2, null, { polling: 1 });
  const bOrder = b.evaluate(async (prompt) => {
    await window.llm.complete(prompt, { temperature: 0, maxTokens: 16, ignoreEos: true });
    return [{ name: 'b1', at: performance.timeOrigin + performance.now() }];
  }, OTHER);
  const order = await Promise.all([aOrder, bOrder]);
  const finished = order.flat().sort((x, y) => x.at - y.at).map((x) => x.name);
  assert.deepEqual(finished, ['a1', 'b1', 'a2', 'a3']);

  // B closes mid-generation: its generation and session end, A's next request runs and says one page holds the model.
  await b.evaluate(() => {
    window.streamed = 0;
    void (async () => {
      for await (const _ of window.llm.generate('Once upon a time', { maxTokens: 2000, ignoreEos: true })) window.streamed++;
    })();
  });
  await b.waitForFunction(() => window.streamed >= 3);
  await b.close();
  const after = await a.evaluate(async (prompt) => {
    const r = await window.llm.complete(prompt, { temperature: 0, maxTokens: 12 });
    return { ids: r.ids, pages: window.llm.info().pages };
  }, FRANCE.prompt);
  assert.deepEqual(after.ids, FRANCE.ids.slice(0, 12));
  assert.equal(after.pages, 1);
  await a.evaluate(() => window.llm.dispose());
});

test('without SharedWorker, a leader tab serves the others; when it closes, another takes over from the model store', async (t) => {
  const { server, pages } = await twoPages(t, () => delete globalThis.SharedWorker);
  const [a, b] = pages;
  assert.equal(await a.evaluate(() => typeof SharedWorker), 'undefined');
  await a.evaluate(() => import('@ruvector/ruvllm').then(({ LLM }) => LLM.models.clear()));
  const first = await load(a, { cache: true });
  assert.equal(first.engine, 'shared');
  const requests = server.hits.get('/model.gguf');
  const second = await load(b, { cache: true });
  assert.equal(second.pages, 2);
  assert.equal(server.hits.get('/model.gguf'), requests, 'the second tab requested the model');
  const [franceTogether, otherTogether] = await Promise.all([answer(a, FRANCE.prompt, FRANCE.ids.length + 4), answer(b, OTHER)]);
  assert.deepEqual(franceTogether, FRANCE.ids);

  // B streams while A, the leader, closes: B's stream fails with E_WORKER (its tokens went with the leader), and B's
  // next request runs on B's own worker, the model loaded there from the store: no download.
  await b.evaluate(() => {
    window.streamed = 0;
    window.ended = (async () => {
      try {
        for await (const _ of window.llm.generate('Once upon a time', { maxTokens: 2000, ignoreEos: true })) window.streamed++;
        return 'finished';
      } catch (e) {
        return e.code;
      }
    })();
  });
  await b.waitForFunction(() => window.streamed >= 3);
  await a.close();
  assert.equal(await b.evaluate(() => window.ended), 'E_WORKER');
  const after = await b.evaluate(async (prompt) => {
    const r = await window.llm.complete(prompt, { temperature: 0, maxTokens: 12 });
    return { ids: r.ids, info: window.llm.info() };
  }, OTHER);
  assert.deepEqual(after.ids, otherTogether);
  assert.equal(after.info.engine, 'shared');
  assert.equal(after.info.pages, 1);
  assert.equal(server.hits.get('/model.gguf'), requests, 'the new leader downloaded the model');
  await b.evaluate(() => window.llm.dispose());
});
