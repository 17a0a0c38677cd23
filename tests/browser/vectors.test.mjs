// The router and the long-term memory in Chromium's real IndexedDB, with all-MiniLM-L6-v2 as the embedder: built on
// one page load, they route and recall the same after a reload; a damaged record is E_INDEX and stays in the store;
// two tabs writing one index lose nothing; a witness log of the default model's requests survives a reload, answers
// similarity queries and exports; a learning loop's checkpoint survives a reload in the middle of a run; a full
// IndexedDB quota keeps the model answering while the witness log and the learning loop say they cannot store.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EMBED_MODEL_PATH, FRANCE, MODEL_PATH } from '../../npm/test/helpers.mjs';
import { examplePage, quotaPage } from './chromium.mjs';

const ROUTES = [
  { name: 'weather', utterances: ['What is the weather like today?', 'Will it rain tomorrow?', 'How hot is it outside?'] },
  { name: 'code', utterances: ['How do I reverse a list in Python?', 'Fix this JavaScript error', 'Why does my SQL query fail?'] },
  { name: 'greeting', utterances: ['Hello!', 'Hi there, how are you?', 'Good morning'], threshold: 0.5 },
];
const QUERIES = ['Do I need an umbrella this afternoon?', 'My TypeScript build throws a type error', 'hello friend', 'What is the capital of Italy?'];
const TURNS = {
  trip: [
    { role: 'user', content: 'I am planning a trip to Kyoto in April to see the cherry blossoms.' },
    { role: 'assistant', content: 'April is a great time for Kyoto; book hotels early because of the sakura season.' },
  ],
  pet: [
    { role: 'user', content: 'My dog Biscuit is a three year old beagle who loves carrots.' },
    { role: 'assistant', content: 'Carrots are a healthy treat for beagles in moderation.' },
  ],
};

const ex = examplePage({ '/embed.gguf': EMBED_MODEL_PATH, '/model.gguf': MODEL_PATH });

/** On the page: open the router and the memory in IndexedDB (`build`: with routes, a correction and turns), route
 * the queries and recall, and return what they answered. */
function session(build) {
  return ex.page.evaluate(
    async ({ build, ROUTES, QUERIES, TURNS }) => {
      const { LLM, Memory, Router } = await import('@ruvector/ruvllm');
      const embedder = await LLM.load('/embed.gguf', { threads: 1 });
      try {
        const router = await Router.open({ embedder, routes: build ? ROUTES : [], threshold: 0.3, store: 'indexeddb' });
        const memory = await Memory.open({ embedder, store: 'indexeddb' });
        if (build) {
          await router.add('What is the capital of Germany?', 'geography');
          for (const [conversation, turns] of Object.entries(TURNS)) await memory.remember(conversation, turns);
        }
        const decisions = [];
        for (const q of QUERIES) decisions.push(await router.route(q));
        const recalled = await memory.recall('When should I visit Japan for the blossoms?', { k: 2 });
        const { messages } = await memory.augment([{ role: 'user', content: 'What treats can I give my beagle?' }], { conversation: 'now', k: 1 });
        await router.flush();
        await memory.flush();
        const out = { routes: router.routes(), decisions, recalled: recalled.map((t) => [t.conversation, t.content]), system: messages[0].content, info: memory.info() };
        await router.close();
        await memory.close();
        return out;
      } catch (e) {
        return { error: { code: e.code, message: e.message } };
      } finally {
        embedder.dispose();
      }
    },
    { build, ROUTES, QUERIES, TURNS },
  );
}

let first;
test('a router and a memory built on one page load route and recall the same after a reload', async () => {
  first = await session(true);
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.deepEqual(first.decisions.map((d) => d.route), ['weather', 'code', 'greeting', 'geography']);
  assert.deepEqual(first.recalled, TURNS.trip.map((t) => ['trip', t.content]));
  assert.match(first.system, /^Relevant turns from earlier conversations[^\n]*\n- (user|assistant): .*(beagle|Biscuit)/);
  assert.equal(first.info.turns, 4);

  await ex.page.reload();
  const second = await session(false);
  assert.equal(second.error, undefined, JSON.stringify(second.error));
  assert.deepEqual(second.routes, first.routes);
  assert.deepEqual(second.decisions.map((d) => d.route), first.decisions.map((d) => d.route));
  second.decisions.forEach((d, i) => d.candidates.forEach((c, j) => {
    assert.equal(c.route, first.decisions[i].candidates[j].route);
    assert.ok(Math.abs(c.score - first.decisions[i].candidates[j].score) < 1e-6);
  }));
  assert.deepEqual(second.recalled, first.recalled);
  assert.equal(second.system, first.system);
});

test('a damaged router record is E_INDEX after a reload, and the store keeps its records', async () => {
  const damage = () =>
    ex.page.evaluate(
      () =>
        new Promise((resolve, reject) => {
          const open = indexedDB.open('ruvllm-router');
          open.onerror = () => reject(open.error);
          open.onsuccess = () => {
            const tx = open.result.transaction('pages', 'readwrite');
            const pages = tx.objectStore('pages');
            const all = pages.getAll();
            let count = 0;
            all.onsuccess = () => {
              count = all.result.length;
              const r = all.result.find((r) => r.key.startsWith('e'));
              const bytes = new Uint8Array(r.bytes);
              bytes[12] ^= 0xff;
              pages.put({ ...r, bytes });
            };
            tx.oncomplete = () => {
              open.result.close();
              resolve(count);
            };
            tx.onerror = () => reject(tx.error);
          };
        }),
    );
  const records = await damage();
  assert.ok(records > 4);
  await ex.page.reload();
  const after = await session(false);
  assert.equal(after.error?.code, 'E_INDEX', JSON.stringify(after));
  const left = await ex.page.evaluate(
    () =>
      new Promise((resolve) => {
        const open = indexedDB.open('ruvllm-router');
        open.onsuccess = () => {
          const all = open.result.transaction('pages').objectStore('pages').count();
          all.onsuccess = () => resolve(all.result);
        };
      }),
  );
  assert.equal(left, records);
});

test('two tabs on one IndexedDB index: A adds, a stale B removes, and a reopen has both', async () => {
  const pageA = ex.page;
  const pageB = await ex.browser.context.newPage();
  await pageB.goto(pageA.url());
  // Each page keeps its index open between steps (window.index); the vectors are the same seeded ones on both.
  const step = (page, what) =>
    page.evaluate(async (what) => {
      const { VectorIndex } = await import('@ruvector/ruvllm');
      let s = 5;
      const vector = () => Float32Array.from({ length: 16 }, () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1);
      try {
        if (what === 'open') window.index = await VectorIndex.open({ dims: 16, store: 'indexeddb', database: 'two-tabs' });
        if (what === 'seed') for (let i = 0; i < 300; i++) window.index.add(vector(), { text: `seed ${i}` });
        if (what === 'add') for (let i = 0; i < 50; i++) window.index.add(vector(), { text: `a ${i}` });
        if (what === 'remove') window.index.remove(window.index.entries()[17].id);
        await window.index.flush();
        const texts = window.index.entries().map((e) => e.text);
        if (what === 'close') await window.index.close();
        return { entries: texts.length, removed: !texts.includes('seed 17'), added: texts.filter((t) => t.startsWith('a ')).length };
      } catch (e) {
        return { error: { code: e.code, message: e.message } };
      }
    }, what);
  assert.deepEqual(await step(pageA, 'open'), { entries: 0, removed: true, added: 0 });
  assert.equal((await step(pageA, 'seed')).entries, 300);
  assert.equal((await step(pageB, 'open')).entries, 300);
  assert.equal((await step(pageA, 'add')).entries, 350);
  // B's view is stale: its commit reads A's first and replays its removal on it.
  assert.deepEqual(await step(pageB, 'remove'), { entries: 349, removed: true, added: 50 });
  await step(pageA, 'close');
  await step(pageB, 'close');
  await pageB.close();
  await pageA.reload();
  assert.deepEqual(await step(pageA, 'open'), { entries: 349, removed: true, added: 50 });
  await step(pageA, 'close');
});

test('a witness log in IndexedDB: the model\'s requests and a score survive a reload, the nearest come first, JSON Lines', async () => {
  /** On the page: the witness log in IndexedDB with all-MiniLM-L6-v2 as its embedder; `ask`: the default model (in
   * its worker) answers a chat request and a generation with the log set, and one answer is scored. */
  const visit = (ask) =>
    ex.page.evaluate(
      async ({ ask, prompt }) => {
        const { LLM, WitnessLog } = await import('@ruvector/ruvllm');
        const embedder = await LLM.load('/embed.gguf', { threads: 1 });
        try {
          const log = await WitnessLog.open({ embedder, store: 'indexeddb' });
          let ids = [];
          if (ask) {
            const llm = await LLM.load('/model.gguf', { threads: 1 });
            llm.witness = log;
            const chat = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Which river flows through Vienna?' }], max_tokens: 2, session: 'tab' });
            const done = await llm.complete(prompt, { temperature: 0, maxTokens: 2, session: 'tab' });
            await llm.feedback(done.requestId, { score: 1 });
            ids = [chat.id, done.requestId];
            await log.flush();
            llm.dispose();
          }
          const nearest = await log.search('What is the capital city of France?', { k: 1 });
          const out = { ids, entries: log.entries(), nearest: nearest.map((h) => h.requestId), lines: log.export().trimEnd().split('\n').length, info: log.info() };
          await log.close();
          return out;
        } catch (e) {
          return { error: { code: e.code, message: e.message } };
        } finally {
          embedder.dispose();
        }
      },
      { ask, prompt: FRANCE.prompt },
    );
  const first = await visit(true);
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.deepEqual(first.entries.map((e) => e.requestId).sort(), [...first.ids].sort());
  assert.deepEqual(first.nearest, [first.ids[1]]);
  await ex.page.reload();
  const second = await visit(false);
  assert.equal(second.error, undefined, JSON.stringify(second.error));
  assert.deepEqual(second.entries, first.entries);
  assert.deepEqual(second.nearest, first.nearest);
  assert.equal(second.lines, 2);
  const scored = second.entries.find((e) => e.requestId === first.ids[1]);
  assert.deepEqual([scored.kind, scored.session, scored.quality, scored.model.backend], ['generate', 'tab', 1, 'cpu']);
  assert.equal(second.entries.find((e) => e.requestId === first.ids[0]).kind, 'chat');
  assert.ok(second.info.bytes > 0 && second.info.storeError === null, JSON.stringify(second.info));
});

test('the learning loop in IndexedDB: a run checkpoints the base adapter; a reload mid-run loses that run only', async () => {
  /** On the page: the default model (in its worker) with a learning loop kept in IndexedDB; `questions` are asked
   * and scored well (each trains the instant adapter); `run`: 'await' a background run, 'start' one and return after
   * its first step (the test reloads the page then), or none. */
  const visit = (questions, run) =>
    ex.page.evaluate(
      async ({ questions, run }) => {
        const { LLM, LearningLoop } = await import('@ruvector/ruvllm');
        const llm = await LLM.load('/model.gguf', { threads: 1 });
        try {
          const loop = await LearningLoop.open(llm, { store: 'indexeddb', intervalMs: 0, epochs: 2, protect: false });
          const opened = loop.info();
          for (const q of questions) {
            const c = await llm.chat.completions.create({ messages: [{ role: 'user', content: q }], max_tokens: 3, adapters: loop.adapters() });
            await (await llm.feedback(c.id, { score: 1 })).learned;
          }
          await loop.flush();
          let ran = null;
          if (run === 'await') ran = await loop.run();
          if (run === 'start') {
            const steps = loop.base.info().steps;
            loop.run();
            while (loop.base.info().steps === steps) await new Promise((r) => setTimeout(r, 5));
          }
          return { opened, ran, info: loop.info() };
        } catch (e) {
          return { error: { code: e.code, message: e.message } };
        }
      },
      { questions, run },
    );
  const first = await visit(['Name a red fruit.', 'Name a blue bird.'], 'await');
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.deepEqual([first.opened.baseSteps, first.opened.pending], [0, 0]);
  assert.deepEqual([first.ran.trajectories, first.ran.steps], [2, 4]);
  assert.deepEqual([first.info.learned, first.info.baseSteps, first.info.instantSteps], [2, 4, 0]);
  const cut = await visit(['Name a green vegetable.', 'Name a yellow flower.'], 'start');
  assert.equal(cut.error, undefined, JSON.stringify(cut.error));
  assert.equal(cut.info.running, true);
  assert.ok(cut.info.baseSteps > 4);
  await ex.page.reload();
  const back = await visit([], 'await');
  assert.equal(back.error, undefined, JSON.stringify(back.error));
  assert.deepEqual([back.opened.baseSteps, back.opened.learned, back.opened.pending], [4, 2, 2], 'the checkpoint before the cut run');
  assert.deepEqual([back.ran.trajectories, back.ran.steps], [2, 4]);
  assert.deepEqual([back.info.learned, back.info.pending, back.info.baseSteps, back.info.instantSteps], [4, 0, 8, 0]);
});

test('a full IndexedDB quota: the model answers, the witness log keeps its entries in memory and says so, a loop cannot open', async () => {
  const small = await quotaPage(ex.server.origin, 64 * 1024);
  try {
    const { page } = small;
    const r = await page.evaluate(async (prompt) => {
      const { LLM, LearningLoop, WitnessLog } = await import('@ruvector/ruvllm');
      const llm = await LLM.load('/model.gguf', { threads: 1 });
      const log = await WitnessLog.open({ store: 'indexeddb' });
      llm.witness = log;
      const answers = [];
      // Three requests of the model, and 40 entries of 2,000-character queries: more than the quota holds.
      for (let i = 0; i < 3; i++) answers.push((await llm.complete(prompt, { temperature: 0, maxTokens: 4 + i })).text);
      for (let i = 0; i < 40; i++) log.record({ requestId: `big${i}`, query: `${i} `.repeat(1000) });
      const flushed = await log.flush().then(() => null, (e) => e.code);
      const loop = await LearningLoop.open(llm, { store: 'indexeddb' }).then(() => null, (e) => e.code);
      const after = (await llm.complete(prompt, { temperature: 0, maxTokens: 4 })).text;
      return { answers, flushed, info: log.info(), entries: log.entries().length, loop, after };
    }, FRANCE.prompt);
    assert.equal(r.flushed, 'E_STORE_FULL', JSON.stringify(r));
    assert.equal(r.info.storeError?.code, 'E_STORE_FULL');
    assert.equal(r.entries, 43, 'the entries stay in memory');
    assert.equal(r.loop, 'E_STORE_FULL');
    assert.ok(r.answers.every((a) => a.length > 0) && r.after.length > 0, JSON.stringify(r));
  } finally {
    await small.close();
  }
});
