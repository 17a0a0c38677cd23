// The engine in a worker (`LLM.load(src, { worker: true })`) in Chromium: the same greedy answer as in the page,
// streamed; an AbortSignal stops it and the model stays usable; errors keep their codes; the text side answers
// synchronously in the page as the in-page model's does; states round-trip; dispose ends it. Under a strict
// Content-Security-Policy (no inline scripts, no blob: workers) it answers; with workers forbidden the load is E_WORKER.
// A MicroLoRA trains in the worker as in the page (the same losses, the same answer), and is kept in IndexedDB.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { FRANCE, MODEL_PATH, REPO_DIR } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';
import { examplePage, launchChromium } from './chromium.mjs';

const ex = examplePage({ '/model.gguf': MODEL_PATH });

test('a worker-backed model answers as the in-page one, streams, stops on abort, keeps error codes and its state', async () => {
  const r = await ex.page.evaluate(async (FRANCE) => {
    const { LLM } = await import('@ruvector/ruvllm');
    const code = (p) => p.then(() => 'resolved', (e) => `${e.name} ${e.code}`);
    const local = await LLM.load('/model.gguf', { threads: 1, worker: false });
    const llm = await LLM.load('/model.gguf', { worker: true });
    const out = { engine: llm.info().engine, localEngine: local.info().engine, workerMemory: llm.info().wasmMemoryBytes, fileBytes: llm.info().fileBytes };
    // The text side: synchronous (no Promise) and the in-page model's answers.
    const messages = [{ role: 'user', content: 'What is the capital of France?' }];
    out.tokenizeSync = Array.isArray(llm.tokenize(FRANCE.prompt));
    out.sameTokens = JSON.stringify(llm.tokenize(FRANCE.prompt, { prompt: true })) === JSON.stringify(local.tokenize(FRANCE.prompt, { prompt: true }));
    out.sameChat = JSON.stringify(llm.chatPrompt(messages)) === JSON.stringify(local.chatPrompt(messages));
    // Streaming, greedy.
    const chunks = [];
    const it = llm.generate(FRANCE.prompt, { temperature: 0, maxTokens: FRANCE.ids.length + 4 });
    let result;
    for (;;) {
      const step = await it.next();
      if (step.done) {
        result = step.value;
        break;
      }
      chunks.push(step.value.id);
    }
    out.ids = result.ids;
    out.chunks = chunks;
    // An AbortSignal stops a long generation in the worker; the model answers again after.
    const controller = new AbortController();
    let streamed = 0;
    out.aborted = await (async () => {
      try {
        for await (const _ of llm.generate('Once upon a time', { maxTokens: 500, ignoreEos: true, signal: controller.signal })) {
          if (++streamed === 3) controller.abort();
        }
        return 'finished';
      } catch (e) {
        return `${e.name} ${e.code}`;
      }
    })();
    out.streamedBeforeAbort = streamed;
    out.again = (await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: FRANCE.ids.length + 4 })).ids;
    // Errors keep their codes: checked in the worker's engine.
    out.badGrammar = await code(llm.complete('x', { grammar: { type: 'gbnf', grammar: 'root ::= nope' } }));
    out.badTemperature = await code(llm.complete('x', { temperature: -1 }));
    out.badStore = await code(LLM.load('/model.gguf', { worker: true, prefixCache: { store: { list() {}, get() {}, put() {}, delete() {}, clear() {} } } }));
    // The conversation's state round-trips; the caller's bytes stay theirs.
    const state = await llm.saveState();
    await llm.reset();
    await llm.restoreState(state);
    const again = await llm.saveState();
    out.stateBytes = state.length;
    out.sameState = state.length === again.length && state.every((b, i) => b === again[i]);
    out.badState = await code(llm.restoreState(new Uint8Array(16)));
    // Disposed: every call is E_DISPOSED, the text side too.
    llm.dispose();
    out.disposedGenerate = await code(llm.complete('x'));
    out.disposedTokenize = await code((async () => llm.tokenize('x'))());
    local.dispose();
    return out;
  }, FRANCE);
  assert.equal(r.engine, 'worker');
  assert.equal(r.localEngine, 'page');
  // The model's weights are in the worker's wasm memory; the page holds only the header's text side.
  assert.ok(r.workerMemory >= r.fileBytes, `${r.workerMemory} < ${r.fileBytes}`);
  assert.ok(r.tokenizeSync && r.sameTokens && r.sameChat);
  assert.deepEqual(r.ids, FRANCE.ids);
  assert.deepEqual(r.chunks, FRANCE.ids);
  assert.equal(r.aborted, 'AbortError E_ABORTED');
  assert.ok(r.streamedBeforeAbort >= 3 && r.streamedBeforeAbort < 500, String(r.streamedBeforeAbort));
  assert.deepEqual(r.again, FRANCE.ids);
  assert.equal(r.badGrammar, 'RuvllmError E_GRAMMAR');
  assert.equal(r.badTemperature, 'RuvllmError E_INVALID_ARGUMENT');
  assert.equal(r.badStore, 'RuvllmError E_INVALID_ARGUMENT');
  assert.ok(r.stateBytes > 0 && r.sameState);
  assert.equal(r.badState, 'RuvllmError E_INVALID_ARGUMENT');
  assert.equal(r.disposedGenerate, 'RuvllmError E_DISPOSED');
  assert.equal(r.disposedTokenize, 'RuvllmError E_DISPOSED');
});

test('a MicroLoRA trains in the worker as in the page, applies, exports, and is back from IndexedDB in a new worker', async () => {
  const r = await ex.page.evaluate(async () => {
    const { LLM, MicroLora } = await import('@ruvector/ruvllm');
    const code = (p) => p.then(() => 'resolved', (e) => `${e.name} ${e.code}`);
    const QUESTION = [{ role: 'user', content: 'What is the capital of Zorbania?' }];
    const ANSWER = 'The capital of Zorbania is Quillmere.';
    const greedy = { temperature: 0, maxTokens: 12 };
    await LLM.removeMicroLora({ store: 'indexeddb', name: 'wk' });
    const local = await LLM.load('/model.gguf', { threads: 1, worker: false });
    let llm = await LLM.load('/model.gguf', { worker: true, threads: 1 });
    const out = {};
    // The same example, the same four steps, from the same start: in the worker (stored) and in the page (in memory).
    const lora = await llm.microLora({ store: 'indexeddb', name: 'wk', learningRate: 0.05 });
    const mine = await local.microLora({ name: 'wk', learningRate: 0.05 });
    out.instance = lora instanceof MicroLora;
    out.opened = lora.info();
    const feedback = { messages: QUESTION, response: ANSWER, accepted: true };
    const train = async (model, lora) => {
      const steps = [];
      // llm.feedback trains the MicroLoRA opened last, as lora.feedback does.
      for (let i = 0; i < 4; i++) steps.push(await (i % 2 ? lora : model).feedback(feedback));
      return steps.map(({ loss, tokens, steps }) => ({ loss, tokens, steps }));
    };
    out.workerSteps = await train(llm, lora);
    out.pageSteps = await train(local, mine);
    out.info = lora.info();
    out.pageInfo = mine.info();
    const prompt = llm.applyChatTemplate(QUESTION);
    out.base = (await llm.complete(prompt, greedy)).ids;
    out.adapted = (await llm.complete(prompt, { ...greedy, adapters: [{ id: lora.id }] })).ids;
    out.adaptedInPage = (await local.complete(prompt, { ...greedy, adapters: [{ id: mine.id }] })).ids;
    const gguf = lora.exportGguf();
    const pageGguf = mine.exportGguf();
    out.magic = new TextDecoder().decode(gguf.subarray(0, 4));
    out.sameGguf = gguf.length === pageGguf.length && gguf.every((b, i) => b === pageGguf[i]);
    out.consolidated = await lora.consolidate();
    await lora.save();
    out.badStore = await code(llm.microLora({ store: { list() {}, get() {}, put() {}, delete() {}, clear() {} } }));
    llm.dispose();
    out.disposedInfo = await code((async () => lora.info())());
    out.disposedFeedback = await code(lora.feedback(feedback));
    // A new worker: the record the first one wrote to IndexedDB opens with its steps and answers the same.
    llm = await LLM.load('/model.gguf', { worker: true, threads: 1 });
    const back = await llm.microLora({ store: 'indexeddb', name: 'wk' });
    out.backSteps = back.info().steps;
    out.backAdapted = (await llm.complete(prompt, { ...greedy, adapters: [{ id: back.id }] })).ids;
    llm.dispose();
    local.dispose();
    out.removed = await LLM.removeMicroLora({ store: 'indexeddb', name: 'wk' });
    return out;
  });
  assert.ok(r.instance);
  assert.deepEqual(
    { name: r.opened.name, steps: r.opened.steps, stored: r.opened.stored, rank: r.opened.rank, learningRate: r.opened.learningRate },
    { name: 'wk', steps: 0, stored: true, rank: 2, learningRate: Math.fround(0.05) },
  );
  assert.deepEqual(r.workerSteps.map((s) => s.steps), [1, 2, 3, 4]);
  assert.ok(r.workerSteps.every((s) => Number.isFinite(s.loss) && s.loss > 0 && s.tokens > 0), JSON.stringify(r.workerSteps));
  assert.ok(r.workerSteps[3].loss < r.workerSteps[0].loss, JSON.stringify(r.workerSteps));
  // Both run the one-thread build: the worker's steps are the page's.
  assert.deepEqual(r.workerSteps, r.pageSteps);
  assert.equal(r.info.steps, 4);
  assert.deepEqual({ ...r.info, stored: false }, r.pageInfo);
  assert.notDeepEqual(r.adapted, r.base);
  assert.deepEqual(r.adapted, r.adaptedInPage);
  assert.equal(r.magic, 'GGUF');
  assert.ok(r.sameGguf);
  assert.equal(r.consolidated, 4);
  assert.equal(r.badStore, 'RuvllmError E_INVALID_ARGUMENT');
  assert.equal(r.disposedInfo, 'RuvllmError E_DISPOSED');
  assert.equal(r.disposedFeedback, 'RuvllmError E_DISPOSED');
  assert.equal(r.backSteps, 4);
  assert.deepEqual(r.backAdapted, r.adapted);
  assert.equal(r.removed, true);
});

/** The CSP page (tests/browser/worker-csp/) served beside the package with `csp`; what its app answered. */
async function underCsp(csp) {
  const dir = join(REPO_DIR, 'tests', 'browser', 'worker-csp');
  const server = await serve({
    root: join(REPO_DIR, 'npm'),
    files: { '/model.gguf': MODEL_PATH, '/csp/index.html': join(dir, 'index.html'), '/csp/app.js': join(dir, 'app.js') },
    headers: { 'content-security-policy': csp },
  });
  const browser = await launchChromium();
  try {
    const page = browser.context.pages()[0] ?? (await browser.context.newPage());
    await page.goto(`${server.origin}/csp/index.html?prompt=${encodeURIComponent(FRANCE.prompt)}`);
    return await page.evaluate(() => window.result);
  } finally {
    await browser.close();
    await server.close();
  }
}

test("under a strict CSP (worker-src 'self', no blob:), the worker engine answers; with workers forbidden, E_WORKER", async () => {
  const strict = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; connect-src 'self'";
  const r = await underCsp(strict);
  assert.equal(r.error, undefined, JSON.stringify(r.error));
  assert.equal(r.engine, 'worker');
  assert.deepEqual(r.ids, FRANCE.ids);
  const refused = await underCsp(strict.replace("worker-src 'self'", "worker-src 'none'"));
  assert.equal(refused.error?.code, 'E_WORKER', JSON.stringify(refused));
});
