// The vector index, the semantic router and the long-term memory through the package, with all-MiniLM-L6-v2 as the
// embedder and Node's file store: answers survive a new process; damaged, foreign and mismatched records are typed
// errors that leave the store as it was; a full store says so and catches up once it has room.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM, Memory, Router, VectorIndex } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, MODEL_PATH, PACKAGE_DIR, rejectsWith } from './helpers.mjs';

const root = mkdtempSync(join(tmpdir(), 'ruvllm-vectors-'));
after(() => rmSync(root, { recursive: true, force: true }));
const embedder = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
after(() => embedder.dispose());

export const ROUTES = [
  { name: 'weather', utterances: ['What is the weather like today?', 'Will it rain tomorrow?', 'How hot is it outside?', 'Is it going to snow this weekend?'] },
  { name: 'code', utterances: ['How do I reverse a list in Python?', 'Fix this JavaScript error', 'Write a Rust function that sorts numbers', 'Why does my SQL query fail?'] },
  { name: 'greeting', utterances: ['Hello!', 'Hi there, how are you?', 'Good morning', 'Hey, nice to meet you'], threshold: 0.5 },
];
const QUERIES = ['Do I need an umbrella this afternoon?', 'My TypeScript build throws a type error', 'hello friend', 'What is the capital of France?'];

/** Seeded vectors of `dims` values. */
function vectors(n, dims, seed = 1) {
  let s = seed;
  const next = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
  return Array.from({ length: n }, () => Float32Array.from({ length: dims }, next));
}

/** Run `code` (a module body with LLM, Router, Memory, VectorIndex and `embedder` in scope) in a new Node process;
 * its last line of output, parsed. */
function inNewProcess(code) {
  const body = `
    import { LLM, Memory, Router, VectorIndex } from '@ruvector/ruvllm';
    const embedder = await LLM.load(${JSON.stringify(EMBED_MODEL_PATH)}, { threads: 1 });
    ${code}
    embedder.dispose();`;
  const p = spawnSync(process.execPath, ['--input-type=module', '-e', body], { cwd: PACKAGE_DIR, encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  return JSON.parse(p.stdout.trim().split('\n').pop());
}

test('a vector index finds the exact nearest vectors, removes, and refuses bad vectors', async () => {
  const index = await VectorIndex.open({ dims: 16 });
  const vs = vectors(300, 16);
  const ids = vs.map((v, i) => index.add(v, { text: `v${i}`, label: i % 2 ? 'odd' : 'even' }));
  assert.deepEqual(ids, vs.map((_, i) => i));
  const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / Math.hypot(...a) / Math.hypot(...b);
  for (const q of vectors(10, 16, 7)) {
    const exact = vs.map((v, i) => [i, cos(q, v)]).sort((a, b) => b[1] - a[1]).slice(0, 5);
    const hits = index.search(q, { k: 5, ef: 100 });
    assert.deepEqual(hits.map((h) => h.id), exact.map(([i]) => i));
    hits.forEach((h, i) => assert.ok(Math.abs(h.score - exact[i][1]) < 1e-5));
    assert.ok(index.search(q, { k: 5, label: 'odd' }).every((h) => h.label === 'odd' && h.id % 2 === 1));
    assert.ok(index.search(q, { k: 5, exceptLabel: 'odd' }).every((h) => h.label === 'even'));
  }
  assert.equal(index.remove(3), true);
  assert.equal(index.remove(3), false);
  assert.equal(index.get(3), undefined);
  assert.equal(index.get(4).text, 'v4');
  assert.ok(!index.search(vs[3], { k: 3 }).some((h) => h.id === 3));
  assert.equal(index.info().entries, 299);
  await rejectsWith(Promise.resolve().then(() => index.add([1, 2, 3])), 'E_INVALID_ARGUMENT');
  await rejectsWith(Promise.resolve().then(() => index.add(new Float32Array(16).fill(Number.NaN))), 'E_INVALID_ARGUMENT');
  await rejectsWith(Promise.resolve().then(() => index.search(vs[0], { k: 0 })), 'E_INVALID_ARGUMENT');
  await rejectsWith(VectorIndex.open({ dims: 0 }), 'E_INVALID_ARGUMENT');
  await index.close();
  await rejectsWith(Promise.resolve().then(() => index.search(vs[0])), 'E_DISPOSED');
});

test('a vector index in a directory is the same in a new process; a damaged record is E_INDEX and is kept', async () => {
  const dir = join(root, 'index');
  const index = await VectorIndex.open({ dims: 24, metric: 'l2', store: dir });
  for (const v of vectors(150, 24, 3)) index.add(v, { text: 'x' });
  index.remove(10);
  await index.flush();
  const queries = vectors(5, 24, 9).map((v) => [...v]);
  const here = queries.map((q) => index.search(q, { k: 4 }).map((h) => h.id));
  await index.close();
  const there = inNewProcess(`
    const index = await VectorIndex.open({ dims: 24, store: ${JSON.stringify(dir)} });
    console.log(JSON.stringify({ info: index.info(), hits: ${JSON.stringify(queries)}.map((q) => index.search(q, { k: 4 }).map((h) => h.id)) }));`);
  assert.deepEqual(there.hits, here);
  assert.equal(there.info.metric, 'l2');
  assert.equal(there.info.entries, 149);

  const files = readdirSync(dir).filter((n) => n.endsWith('.rec'));
  const entry = files.find((n) => n.startsWith('e'));
  const bytes = readFileSync(join(dir, entry));
  const damaged = Buffer.from(bytes);
  damaged[20] ^= 0xff;
  writeFileSync(join(dir, entry), damaged);
  const err = await rejectsWith(VectorIndex.open({ dims: 24, store: dir }), 'E_INDEX');
  assert.match(err.message, /checksum/);
  assert.deepEqual(readdirSync(dir).filter((n) => n.endsWith('.rec')).sort(), files.sort());
  writeFileSync(join(dir, entry), bytes);
  await rejectsWith(VectorIndex.open({ dims: 12, store: dir }), 'E_INVALID_ARGUMENT');
  await (await VectorIndex.open({ dims: 24, store: dir })).close();
});

test('the router routes by example utterances, learns a correction, and routes the same in a new process', async () => {
  const dir = join(root, 'router');
  const router = await Router.open({ embedder, routes: ROUTES, threshold: 0.3, store: dir });
  assert.deepEqual(router.routes().map((r) => [r.name, r.utterances, r.threshold]), [['code', 4, 0.3], ['greeting', 4, 0.5], ['weather', 4, 0.3]]);
  const decisions = [];
  for (const q of QUERIES) decisions.push(await router.route(q));
  assert.deepEqual(decisions.map((d) => d.route), ['weather', 'code', 'greeting', null]);
  for (const d of decisions) {
    assert.ok(d.candidates.length >= 2);
    assert.ok(d.candidates.every((c, i, all) => i === 0 || all[i - 1].score >= c.score));
  }
  console.log(decisions.map((d, i) => `${QUERIES[i]} -> ${d.route} ${d.candidates.map((c) => `${c.route} ${c.score.toFixed(3)}`).join(', ')}`).join('\n'));
  // A correction: the geography question becomes a route of its own.
  await router.add('What is the capital of Germany?', 'geography');
  assert.equal((await router.route(QUERIES[3])).route, 'geography');
  await router.flush();
  await router.close();

  const there = inNewProcess(`
    const router = await Router.open({ embedder, routes: ${JSON.stringify(ROUTES)}, store: ${JSON.stringify(dir)} });
    const out = [];
    for (const q of ${JSON.stringify(QUERIES)}) out.push(await router.route(q));
    console.log(JSON.stringify({ routes: router.routes(), out }));`);
  assert.deepEqual(there.out.map((d) => d.route), ['weather', 'code', 'greeting', 'geography']);
  // Reopening with the same routes adds nothing twice.
  assert.deepEqual(there.routes.map((r) => [r.name, r.utterances]), [['code', 4], ['geography', 1], ['greeting', 4], ['weather', 4]]);
  for (let i = 0; i < 3; i++) assert.ok(Math.abs(there.out[i].score - decisions[i].score) < 1e-6);

  const chat = await LLM.load(MODEL_PATH, { threads: 1 });
  try {
    const err = await rejectsWith(Router.open({ embedder: chat, store: dir }), 'E_INDEX');
    assert.match(err.message, /not the embedder loaded/);
  } finally {
    chat.dispose();
  }
  await rejectsWith(Router.open({ embedder, routes: [{ name: '', utterances: [] }] }), 'E_INVALID_ARGUMENT');
  await rejectsWith(Router.open({ routes: ROUTES }), 'E_INVALID_ARGUMENT');
});

const TRIP = [
  { role: 'user', content: 'I am planning a trip to Kyoto in April to see the cherry blossoms.' },
  { role: 'assistant', content: 'April is a great time for Kyoto; book hotels early because of the sakura season.' },
];
const PET = [
  { role: 'user', content: 'My dog Biscuit is a three year old beagle who loves carrots.' },
  { role: 'assistant', content: 'Carrots are a healthy treat for beagles in moderation.' },
];

test('the memory recalls other conversations\' turns into the prompt, within its budget, across processes', async () => {
  const dir = join(root, 'memory');
  const memory = await Memory.open({ embedder, store: dir });
  assert.equal((await memory.remember('trip', TRIP)).length, 2);
  assert.equal((await memory.remember('pet', PET)).length, 2);
  assert.deepEqual(await memory.remember('trip', TRIP), []); // already held
  const recalled = await memory.recall('When should I visit Japan for the blossoms?', { k: 2 });
  assert.deepEqual(recalled.map((t) => t.conversation), ['trip', 'trip']);
  assert.equal(recalled[0].content, TRIP[0].content);
  const { messages, recalled: r2 } = await memory.augment(
    [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'What treats can I give my beagle?' }],
    { conversation: 'now', k: 1 },
  );
  assert.equal(r2.length, 1);
  assert.equal(r2[0].conversation, 'pet');
  assert.equal(messages.length, 2);
  assert.equal(messages[0].content, `Be brief.\n\nRelevant turns from earlier conversations (most relevant first):\n- ${r2[0].role}: ${r2[0].content}`);
  assert.deepEqual(messages[1], { role: 'user', content: 'What treats can I give my beagle?' });
  assert.deepEqual((await memory.recall('cherry blossoms', { exceptConversation: 'trip' })).map((t) => t.conversation).filter((c) => c === 'trip'), []);
  await memory.flush();
  const info = memory.info();
  await memory.close();

  const there = inNewProcess(`
    const memory = await Memory.open({ embedder, store: ${JSON.stringify(dir)} });
    const r = await memory.recall('When should I visit Japan for the blossoms?', { k: 2 });
    console.log(JSON.stringify({ info: memory.info(), r }));`);
  assert.deepEqual(there.r.map((t) => t.content), recalled.map((t) => t.content));
  assert.equal(there.info.turns, 4);
  assert.equal(there.info.bytes, info.bytes);

  // A budget of about three turns drops the least recently remembered or recalled one.
  const before = await Memory.open({ embedder, store: dir });
  const [oldest] = before.turns().sort((a, b) => a.used - b.used || a.id - b.id);
  await before.close();
  const small = await Memory.open({ embedder, store: dir, budgetBytes: Math.floor((info.bytes / 4) * 3.2) });
  const left = small.turns().map((t) => t.id);
  assert.equal(left.length, 3);
  assert.ok(!left.includes(oldest.id));
  await small.close();
});

test('a full store is said by flush and info, and the index catches up once there is room', async () => {
  const records = new Map();
  let full = false;
  const store = {
    async list() {
      return [...records].map(([key, bytes]) => ({ key, bytes: bytes.length, used: 0 }));
    },
    async get(key) {
      return records.get(key);
    },
    async put(rs) {
      if (full) throw new DOMException('quota', 'QuotaExceededError');
      for (const { key, bytes } of rs) records.set(key, bytes.slice());
    },
    async delete(keys) {
      for (const k of keys) records.delete(k);
    },
    async clear() {
      records.clear();
    },
  };
  const index = await VectorIndex.open({ dims: 8, store });
  const vs = vectors(80, 8, 5);
  vs.slice(0, 40).forEach((v) => index.add(v));
  await index.flush();
  full = true;
  vs.slice(40).forEach((v) => index.add(v));
  index.remove(0);
  await rejectsWith(index.flush(), 'E_STORE_FULL');
  assert.equal(index.info().storeError.code, 'E_STORE_FULL');
  full = false;
  await index.flush();
  assert.equal(index.info().storeError, null);
  const back = await VectorIndex.open({ dims: 8, store });
  assert.equal(back.info().entries, 79);
  assert.deepEqual(back.search(vs[50], { k: 3 }).map((h) => h.id), index.search(vs[50], { k: 3 }).map((h) => h.id));
  await back.close();
  await index.close();
});
