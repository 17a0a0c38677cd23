// The vector index, the semantic router and the long-term memory through the package, with all-MiniLM-L6-v2 as the
// embedder and Node's file store: answers survive a new process; damaged, foreign and mismatched records are typed
// errors that leave the store as it was; a full store says so and catches up once it has room. Two writers of one
// store (in one process, in two) lose nothing; a writer killed at any point leaves the last complete index; an
// embedder of the same name but other weights is refused; records too large for any index are refused unread.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM, Memory, Router, VectorIndex } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, MODEL_PATH, PACKAGE_DIR, rejectsWith, quotaStore } from './helpers.mjs';

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
  // OpenAI's text parts read as their joined text, in the question and in the system message the note joins.
  const parts = await memory.augment(
    [
      { role: 'system', content: [{ type: 'text', text: 'Be ' }, { type: 'text', text: 'brief.' }] },
      { role: 'user', content: [{ type: 'text', text: 'What treats can I give ' }, { type: 'text', text: 'my beagle?' }] },
    ],
    { conversation: 'now', k: 1 },
  );
  assert.deepEqual(parts.recalled.map((t) => t.content), r2.map((t) => t.content));
  assert.equal(parts.messages[0].content, messages[0].content);
  await assert.rejects(memory.augment([{ role: 'user', content: [{ type: 'image_url' }] }]), { code: 'E_INVALID_ARGUMENT' });
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
  const store = quotaStore();
  const index = await VectorIndex.open({ dims: 8, store });
  const vs = vectors(80, 8, 5);
  vs.slice(0, 40).forEach((v) => index.add(v));
  await index.flush();
  store.full = true;
  vs.slice(40).forEach((v) => index.add(v));
  index.remove(0);
  await rejectsWith(index.flush(), 'E_STORE_FULL');
  assert.equal(index.info().storeError.code, 'E_STORE_FULL');
  store.full = false;
  await index.flush();
  assert.equal(index.info().storeError, null);
  const back = await VectorIndex.open({ dims: 8, store });
  assert.equal(back.info().entries, 79);
  assert.deepEqual(back.search(vs[50], { k: 3 }).map((h) => h.id), index.search(vs[50], { k: 3 }).map((h) => h.id));
  await back.close();
  await index.close();
});

/** CRC-32 (IEEE), bit by bit, to re-seal a record after an edit (zlib.crc32 needs Node 20.15). */
function crc32(bytes) {
  let crc = ~0;
  for (const b of bytes) {
    crc ^= b;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return ~crc >>> 0;
}

/** The texts of an index's entries, sorted. */
const textsOf = (index) => index.entries().map((e) => e.text).sort();

test('two indexes on one directory: a stale writer\'s commit loses nothing, in either order', async () => {
  for (const aFirst of [true, false]) {
    const dir = join(root, `two-writers-${aFirst}`);
    const vs = vectors(1100, 12, 21);
    const seed = await VectorIndex.open({ dims: 12, store: dir });
    vs.slice(0, 1000).forEach((v, i) => seed.add(v, { text: `seed ${i}` }));
    await seed.flush();
    await seed.close();
    // Both open the 1,000 entries; A adds 90, B (stale once A commits) removes one and adds one.
    const a = await VectorIndex.open({ dims: 12, store: dir });
    const b = await VectorIndex.open({ dims: 12, store: dir });
    const added = vs.slice(1000, 1090).map((v, i) => a.add(v, { text: `a ${i}` }));
    const gone = b.entries()[17];
    assert.equal(b.remove(gone.id), true);
    const bAdded = b.add(vs[1099], { text: 'b 0' });
    assert.ok(!added.includes(bAdded), 'the writers take ids from leases of their own');
    const [first, second] = aFirst ? [a, b] : [b, a];
    await first.flush();
    await second.flush();
    // The later writer now holds the store's state; the earlier one catches up at its next commit.
    assert.equal(second.info().entries, 1090);
    await first.flush();
    assert.deepEqual(textsOf(first), textsOf(second));
    await a.close();
    await b.close();
    const back = await VectorIndex.open({ dims: 12, store: dir });
    assert.equal(back.info().entries, 1000 - 1 + 90 + 1, `A first: ${aFirst}`);
    assert.equal(back.get(gone.id), undefined);
    added.forEach((id, i) => assert.equal(back.get(id)?.text, `a ${i}`));
    assert.equal(back.get(bAdded)?.text, 'b 0');
    assert.equal(back.search(vs[1042], { k: 1 })[0].id, added[42]);
    await back.close();
  }
});

/** Run `code` (a module body; VectorIndex in scope) in a new Node process; the process, its stdout
 * lines as they come (`lines`), and `done` (its exit code and stderr). */
function child(code) {
  const body = `
    import { VectorIndex } from '@ruvector/ruvllm';
    const vector = (dims) => Float32Array.from({ length: dims }, () => Math.random() * 2 - 1);
    ${code}`;
  const p = spawn(process.execPath, ['--input-type=module', '-e', body], { cwd: PACKAGE_DIR, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines = [];
  let out = '';
  let err = '';
  const listeners = [];
  p.stdout.on('data', (d) => {
    out += d;
    const parts = out.split('\n');
    out = parts.pop();
    for (const line of parts) {
      lines.push(line);
      listeners.forEach((l) => l());
    }
  });
  p.stderr.on('data', (d) => (err += d));
  const done = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal, err })));
  const waitLines = (n) => new Promise((resolve) => {
    const check = () => lines.length >= n && resolve();
    listeners.push(check);
    check();
  });
  return { p, lines, done, waitLines };
}

test('two processes adding and removing at once on one store: the index has every committed change', async () => {
  const dir = join(root, 'two-processes');
  const writer = (name) => child(`
    const index = await VectorIndex.open({ dims: 16, store: ${JSON.stringify(dir)} });
    const kept = new Map();
    for (let round = 0; round < 15; round++) {
      for (let i = 0; i < 12; i++) kept.set(index.add(vector(16), { text: '${name} ' + round + ' ' + i }), '${name} ' + round + ' ' + i);
      if (round % 3 === 2) {
        const [id] = [...kept.keys()].filter((_, j) => j % 5 === round % 5);
        index.remove(id);
        kept.delete(id);
      }
      await index.flush();
      console.log(JSON.stringify([...kept.values()]));
    }
    await index.close();`);
  const writers = [writer('p'), writer('q')];
  const results = await Promise.all(writers.map((w) => w.done));
  results.forEach((r) => assert.equal(r.code, 0, r.err));
  const expected = writers.flatMap((w) => JSON.parse(w.lines.at(-1))).sort();
  assert.equal(expected.length, 2 * (15 * 12 - 5));
  const back = await VectorIndex.open({ dims: 16, store: dir });
  assert.deepEqual(textsOf(back), expected);
  await back.close();
});

test('a writer killed (SIGKILL) at ten points while it commits: the next open loads the last complete index', async () => {
  const dir = join(root, 'killed');
  let committed = new Set();
  let removed = new Set();
  const garbage = [];
  for (let kill = 0; kill < 10; kill++) {
    // Each round adds 100 entries and removes one of the round before, says what it removes, flushes, and says that it
    // committed: a kill after the commit but before the line leaves that removal done or not.
    const w = child(`
      const index = await VectorIndex.open({ dims: 32, store: ${JSON.stringify(dir)} });
      let before = [];
      for (let round = 0; ; round++) {
        const ids = [];
        for (let i = 0; i < 100; i++) ids.push(index.add(vector(32), { text: 'k${kill} ' + round + ' ' + i }));
        const gone = before.length ? index.get(before[round % before.length]).text : null;
        if (gone) index.remove(before[round % before.length]);
        console.log(JSON.stringify({ gone }));
        await index.flush();
        console.log(JSON.stringify({ round }));
        before = ids;
      }`);
    // Kill it 0 to 9 ms into the commit of its second to fourth round (the line before the flush has come).
    await w.waitLines(2 * (1 + (kill % 3)) + 1);
    await new Promise((resolve) => setTimeout(resolve, kill));
    w.p.kill('SIGKILL');
    const { signal } = await w.done;
    assert.equal(signal, 'SIGKILL');
    // The rounds it said it committed, and the removal of the round it was killed in (which may have been stored).
    let maybe = null;
    for (const line of w.lines) {
      const { round, gone } = JSON.parse(line);
      if (round === undefined) {
        maybe = gone;
        continue;
      }
      for (let i = 0; i < 100; i++) committed.add(`k${kill} ${round} ${i}`);
      if (maybe) removed.add(maybe);
      maybe = null;
    }
    const files = readdirSync(dir).filter((n) => n.endsWith('.rec')).length;
    const back = await VectorIndex.open({ dims: 32, store: dir });
    const present = new Set(textsOf(back));
    if (maybe && !present.has(maybe)) removed.add(maybe);
    for (const text of committed) assert.equal(present.has(text), !removed.has(text), `after kill ${kill}: ${text}`);
    // What the killed commit wrote is either all there or none of it: a round's 100 entries together.
    const rounds = new Map();
    for (const text of present) rounds.set(text.split(' ').slice(0, 2).join(' '), (rounds.get(text.split(' ').slice(0, 2).join(' ')) ?? 0) + 1);
    for (const [round, n] of rounds) assert.ok(n >= 99, `${round}: ${n} entries`);
    await back.close();
    garbage.push(files - readdirSync(dir).filter((n) => n.endsWith('.rec')).length);
  }
  console.log(`records the next open deleted after each kill (garbage and old generations): ${garbage.join(', ')}`);
});

test('an embedder of the same name and dims but other weights is refused; a store tagged by name is taken once', async () => {
  const dir = join(root, 'router-weights');
  const router = await Router.open({ embedder, routes: ROUTES, store: dir });
  await router.close();
  // The Q8_0 conversion of the same model: the same general.name and 384 dims, other weights.
  const q8 = await LLM.load(EMBED_MODEL_PATH.replace('F16', 'Q8_0'), { threads: 1 });
  // The F16 file with one weight byte changed (in its last 4 KiB, which the model id samples).
  const bytes = new Uint8Array(readFileSync(EMBED_MODEL_PATH));
  bytes[bytes.length - 2] ^= 1;
  const flipped = await LLM.load(bytes, { threads: 1 });
  try {
    assert.equal(q8.info().name, embedder.info().name);
    assert.equal(flipped.info().name, embedder.info().name);
    const ids = new Set([embedder, q8, flipped].map((m) => m.info().modelId));
    assert.equal(ids.size, 3);
    assert.match(embedder.info().modelId, /^[0-9a-f]{64}$/);
    for (const other of [q8, flipped]) {
      const err = await rejectsWith(Router.open({ embedder: other, store: dir }), 'E_INDEX');
      assert.match(err.message, /not the embedder loaded/);
    }
  } finally {
    q8.dispose();
    flipped.dispose();
  }
  // The same weights open it.
  const again = await Router.open({ embedder, store: dir });
  assert.equal((await again.route(QUERIES[0])).route, 'weather');
  await again.close();

  // A store of the first release was tagged with the embedder's name and dims only: the first embedder of that name
  // takes it and tags it with its weights, after which other weights are refused.
  const metaPath = join(dir, 'meta.rec');
  const meta = readFileSync(metaPath);
  const tagLength = meta.readUInt16LE(41);
  assert.equal(meta.toString('utf8', 43, 43 + tagLength), `${embedder.info().name} 384 ${embedder.info().modelId}`);
  const legacy = Buffer.from(`${embedder.info().name} 384`);
  const body = Buffer.concat([meta.subarray(0, 41), Buffer.from([legacy.length, 0]), legacy, meta.subarray(43 + tagLength, meta.length - 4)]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32LE(crc32(body));
  writeFileSync(metaPath, Buffer.concat([body, crc]));
  const migrated = await Router.open({ embedder, store: dir });
  assert.equal((await migrated.route(QUERIES[0])).route, 'weather');
  await migrated.close();
  const q8again = await LLM.load(EMBED_MODEL_PATH.replace('F16', 'Q8_0'), { threads: 1 });
  try {
    await rejectsWith(Router.open({ embedder: q8again, store: dir }), 'E_INDEX');
  } finally {
    q8again.dispose();
  }
});

test('records larger than any index record are E_INDEX unread, and the engine keeps working', async () => {
  const [GIB_1_2, GIB_2_5] = [Math.floor(1.2 * 2 ** 30), 2.5 * 2 ** 30];
  // The index of a plain store, then stores that return or list records of 2.5 GiB, 4 x 1.2 GiB (virtual memory:
  // Node allocates their pages only when touched), and bytes that lie about their length.
  const good = new Map();
  const plain = {
    async list() {
      return [...good].map(([key, bytes]) => ({ key, bytes: bytes.length, used: 0 }));
    },
    async get(key) {
      return good.get(key);
    },
    async put(rs) {
      for (const { key, bytes } of rs) good.set(key, bytes.slice());
    },
    async delete(keys) {
      keys.forEach((k) => good.delete(k));
    },
    async clear() {
      good.clear();
    },
  };
  const index = await VectorIndex.open({ dims: 8, store: plain });
  vectors(300, 8, 4).forEach((v) => index.add(v));
  await index.flush();
  await index.close();
  const entries = [...good.keys()].filter((k) => k.startsWith('e'));
  const segment = [...good.keys()].find((k) => k.startsWith('h'));
  const hostile = (over) => ({ ...plain, gets: 0, ...over });
  const cases = {
    'a 2.5 GiB record, listed as such': hostile({
      async list() {
        return [...(await plain.list()), { key: 'e000000000000ffff', bytes: GIB_2_5, used: 0 }];
      },
      async get() {
        this.gets++;
        throw new Error('read');
      },
    }),
    'a 2.5 GiB index record, listed small': hostile({
      async get(key) {
        return key === segment ? new Uint8Array(GIB_2_5) : good.get(key);
      },
    }),
    'four 1.2 GiB entries, listed small': hostile({
      async get(key) {
        return entries.slice(0, 4).includes(key) ? new Uint8Array(GIB_1_2) : good.get(key);
      },
    }),
    'records listed as 4 x 1.2 GiB': hostile({
      async list() {
        return (await plain.list()).map((r, i) => ({ ...r, bytes: i < 4 ? GIB_1_2 : r.bytes }));
      },
    }),
    'a Proxy of 16 bytes saying it holds 2.5 GiB': hostile({
      async get(key) {
        const lie = (p) => p === 'length' || p === 'byteLength';
        return key === segment ? new Proxy(new Uint8Array(16), { get: (t, p) => (lie(p) ? GIB_2_5 : Reflect.get(t, p)) }) : good.get(key);
      },
    }),
  };
  for (const [name, store] of Object.entries(cases)) {
    const t0 = performance.now();
    const err = await VectorIndex.open({ dims: 8, store }).then(() => null, (e) => e);
    assert.ok(['E_INDEX', 'E_STORE'].includes(err?.code), `${name}: ${err?.code} ${err?.message}`);
    assert.ok(performance.now() - t0 < 2000, `${name}: ${performance.now() - t0} ms`);
    assert.equal(store.gets, 0, `${name}: refused unread`);
    console.log(`${name}: ${err.code} ${err.message}`);
  }
  // Nothing was lost, and neither the engine nor the index build crashed.
  assert.equal(embedder.info().architecture, 'bert');
  assert.equal((await embedder.embed('still here'))[0].length, 384);
  const back = await VectorIndex.open({ dims: 8, store: plain });
  assert.equal(back.info().entries, 300);
  await back.close();
});
