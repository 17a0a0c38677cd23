// The file store (FileStore, Node) under hostile directories, kills and two writers, with real files and processes:
// names that are not regular files (a FIFO, a link to /dev/zero, a directory) and records over a size limit are
// refused at once with a typed E_STORE, and the package around the store answers and says so; a store that cannot be
// made is E_STORE on every call, never an unhandled rejection; temporary files of dead writers are removed when a
// store opens, a live writer's kept; a writer SIGKILLed at 20 points leaves only whole records and every one it had
// committed; two processes under `lock` lose no update, and a holder killed while holding it is taken over.
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { FileStore, IndexedDbStore, LLM, RefusedRecords, RuvllmError, VectorIndex } from '@ruvector/ruvllm';
import { MODEL_PATH, PACKAGE_DIR, rejectsWith, seededRandom as random } from './helpers.mjs';

const root = mkdtempSync(join(tmpdir(), 'ruvllm-filestore-'));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newDir = () => {
  const dir = join(root, `s${dirs++}`);
  mkdirSync(dir);
  return dir;
};
const mkfifo = (path) => execFileSync('mkfifo', [path]);
const names = (dir) => readdirSync(dir).sort();

// No store failure may escape as an unhandled rejection (it would end the process).
const unhandled = [];
process.on('unhandledRejection', (e) => unhandled.push(e));
after(() => assert.deepEqual(unhandled, [], 'no unhandled rejections'));

/** A directory with a FIFO, a link to /dev/zero and a directory named like records, and (`withRecord`) one whole
 * record `ok`. */
function hostileDir(withRecord = true) {
  const dir = newDir();
  mkfifo(join(dir, 'fifo.rec'));
  symlinkSync('/dev/zero', join(dir, 'zero.rec'));
  mkdirSync(join(dir, 'dir.rec'));
  if (withRecord) writeFileSync(join(dir, 'ok.rec'), 'a record');
  return dir;
}

// The package around the store: a model without a prefix cache for the answers, and the page keys one conversation
// writes (from a store of its own).

const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence.' };
const A1 = { role: 'user', content: 'What is the capital of France?' };
const GREEDY = { temperature: 0, max_tokens: 8 };
const plain = await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
after(() => plain.dispose());
const want = (await plain.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY })).choices[0].message;

/** A model with its prefix cache in `dir`: one answer to SYSTEM + A1 (which must be the plain one), then `then(llm)`. */
async function chatWith(dir, then = async () => {}) {
  const llm = await LLM.load(MODEL_PATH, { prefixCache: { store: dir } });
  try {
    const r = await llm.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY });
    assert.deepEqual(r.choices[0].message, want, 'the same answer as without a store');
    await llm.flushPrefixCache();
    await then(llm);
    return llm.info().prefixCache;
  } finally {
    llm.dispose();
  }
}

const pagesDir = newDir();
await chatWith(pagesDir);
const pageKeys = names(pagesDir).map((n) => n.slice(0, -4));
assert.ok(pageKeys.length >= 2, `${pageKeys.length} pages`);

test('names that are not regular files are not listed, and reading one is refused at once', { timeout: 10_000 }, async () => {
  const dir = hostileDir();
  writeFileSync(join(dir, 'big.rec'), '');
  truncateSync(join(dir, 'big.rec'), 2 ** 31); // sparse: 2 GiB long, no data on disk
  const store = new FileStore(dir);
  assert.deepEqual((await store.list()).map((r) => r.key).sort(), ['big', 'ok']);
  const why = { fifo: 'a FIFO', zero: 'a symbolic link', dir: 'a directory', big: 'more than the 1073741824' };
  for (const [key, reason] of Object.entries(why)) {
    const e = await rejectsWith(store.get(key), 'E_STORE');
    assert.ok(e instanceof RefusedRecords && e.message.includes(`${key} (`) && e.message.includes(reason), e.message);
    assert.deepEqual(e.keys, [key]);
  }
  assert.equal(new TextDecoder().decode(await store.get('ok')), 'a record');
  assert.equal(await store.get('absent'), undefined, 'absent is undefined, not a refusal');
});

test('maxBytes refuses a larger record unread, and getMany names every refused key', { timeout: 10_000 }, async () => {
  const dir = hostileDir();
  const store = new FileStore(dir);
  await store.put([{ key: 'small', bytes: new Uint8Array(10) }, { key: 'large', bytes: new Uint8Array(11) }]);
  assert.equal((await store.get('large', 11)).length, 11);
  const one = await rejectsWith(store.get('large', 10), 'E_STORE');
  assert.match(one.message, /large \(11 bytes, more than the 10 it may have\)/);
  const many = await rejectsWith(store.getMany(['small', 'large', 'absent', 'fifo'], 10), 'E_STORE');
  assert.deepEqual(many.keys, ['large', 'fifo']);
  // Nothing was lost: the refused records are still there, and the others read.
  assert.deepEqual((await store.getMany(['small', 'absent'], 10)).map((b) => b?.length), [10, undefined]);
  assert.equal((await store.get('large')).length, 11);
  await rejectsWith(store.get('small', -1), 'E_INVALID_ARGUMENT');
});

test('delete and clear remove files named like records, a link itself and never its target, and leave a directory', { timeout: 10_000 }, async () => {
  const dir = hostileDir();
  const store = new FileStore(dir);
  await store.delete(['dir', 'absent']);
  assert.ok(names(dir).includes('dir.rec'));
  await store.clear();
  assert.deepEqual(names(dir), ['dir.rec']);
});

test('a store that cannot be made is E_STORE on every call, never an unhandled rejection', { timeout: 20_000 }, async () => {
  const file = join(newDir(), 'file');
  writeFileSync(file, 'not a directory');
  const cases = [
    [join(file, 'store'), 'ENOTDIR'], // under a regular file
    [file, 'ENOTDIR'], // a regular file itself
    ['/sys/ruvllm-store', 'EPERM'], // sysfs refuses new directories, even to root
    ['/proc/ruvllm/store', 'ENOENT'], // procfs: Node's recursive mkdir would loop here for ever
  ];
  const parent = join(newDir(), 'read-only');
  mkdirSync(parent, { mode: 0o555 });
  // Root is not held back by a mode: a read-only parent fails for other users only.
  if (process.getuid?.() !== 0) cases.push([join(parent, 'store'), 'EACCES']);
  for (const [path, code] of cases) {
    const store = new FileStore(path);
    await new Promise((resolve) => setTimeout(resolve, 20)); // its mkdir has failed by now
    for (const call of [() => store.list(), () => store.get('a'), () => store.put([{ key: 'a', bytes: new Uint8Array(1) }]), () => store.clear(), () => store.lock(async () => {})]) {
      const e = await rejectsWith(call(), 'E_STORE');
      assert.ok(e.message.includes(path) && e.message.includes(code), e.message);
    }
  }
  chmodSync(parent, 0o755);
});

test('temporary files of dead writers are removed when a store opens; a live writer\'s are kept', { timeout: 10_000 }, async () => {
  const dir = newDir();
  const dead = spawnSync(process.execPath, ['-e', '']).pid; // a process that has exited
  const live = process.pid;
  const files = {
    [`a.rec.${dead}.0a1b2c.tmp`]: false,
    [`b.rec.${dead}.tmp`]: false, // an earlier version's name
    [`c.rec.${live}.0a1b2c.tmp`]: true,
    [`d.rec.${live}.3d4e5f.tmp`]: false, // a live pid, but an hour old: a reused pid's
    'e.rec': true,
    'notes.tmp': true, // not a store's name
  };
  for (const name of Object.keys(files)) writeFileSync(join(dir, name), 'x');
  const hourAgo = Date.now() / 1000 - 3600;
  utimesSync(join(dir, `d.rec.${live}.3d4e5f.tmp`), hourAgo, hourAgo);
  mkdirSync(join(dir, `lock.${dead}.0a1b2c`)); // a locker's prepared lock
  writeFileSync(join(dir, `lock.${dead}.0a1b2c`, `${dead}.0a1b2c`), '');
  await new FileStore(dir).list();
  const kept = Object.keys(files).filter((n) => files[n]);
  assert.deepEqual(names(dir), kept.sort());
});

test('the prefix cache in a store that cannot be made answers and reports E_STORE', { timeout: 60_000 }, async () => {
  const file = join(newDir(), 'file');
  writeFileSync(file, 'not a directory');
  for (const store of [join(file, 'store'), '/sys/ruvllm-store']) {
    const info = await chatWith(store, (llm) => llm.clearPrefixCache().catch((e) => assert.equal(e.code, 'E_STORE')));
    assert.equal(info.storeError?.code, 'E_STORE', JSON.stringify(info));
    assert.ok(info.storeError.message.includes(store), info.storeError.message);
  }
});

test('pages named by a FIFO, a link to /dev/zero or a directory: answers, never hangs, and a directory is E_STORE', { timeout: 60_000 }, async () => {
  // A FIFO and a link are not records (not listed, so not read); the new pages are written over them.
  const dir = newDir();
  mkfifo(join(dir, `${pageKeys[0]}.rec`));
  symlinkSync('/dev/zero', join(dir, `${pageKeys[1]}.rec`));
  const info = await chatWith(dir);
  assert.equal(info.storeError, null, JSON.stringify(info.storeError));
  const stored = new FileStore(dir);
  assert.deepEqual((await stored.list()).map((r) => r.key).sort(), [...pageKeys].sort());

  // A directory cannot be written over: the store is given up, typed; clearing it leaves the directory.
  const withDir = newDir();
  mkdirSync(join(withDir, `${pageKeys[0]}.rec`));
  const failed = await chatWith(withDir, (llm) => llm.clearPrefixCache());
  assert.equal(failed.storeError?.code, 'E_STORE', JSON.stringify(failed));
  assert.ok(failed.storeError.message.includes(pageKeys[0]), failed.storeError.message);
  assert.deepEqual(names(withDir), [`${pageKeys[0]}.rec`]);
});

test('page records of 1 GiB are dropped unread: the model answers, and writes its pages again whole', { timeout: 60_000 }, async () => {
  const dir = newDir();
  for (const key of pageKeys) {
    writeFileSync(join(dir, `${key}.rec`), '');
    truncateSync(join(dir, `${key}.rec`), 2 ** 30 + 1); // sparse
  }
  const rss = process.memoryUsage().rss;
  const info = await chatWith(dir);
  // Their listed size is not a page record's: deleted without a read, which is no store failure.
  assert.equal(info.storeError, null, JSON.stringify(info));
  assert.ok(process.memoryUsage().rss - rss < 512 << 20, 'nothing of the 1 GiB records was read');
  const sizes = pageKeys.map((key) => statSync(join(dir, `${key}.rec`)).size);
  assert.ok(sizes.every((n) => n === sizes[0] && n < 2 ** 20), `written again whole: ${sizes}`);
});

test('a vector index opens, and a MicroLoRA is E_STORE, on a store with a FIFO, a link and a directory named like records', { timeout: 60_000 }, async () => {
  const dir = hostileDir(false);
  const index = await VectorIndex.open({ dims: 4, store: dir });
  index.add([1, 0, 0, 0], { text: 'x' });
  await index.flush();
  assert.equal(index.info().storeError, null);
  await index.close();

  const loraDir = newDir();
  mkfifo(join(loraDir, 'microlorafifo.rec'));
  symlinkSync('/dev/zero', join(loraDir, 'microlorazero.rec'));
  mkdirSync(join(loraDir, 'microloradir.rec'));
  const llm = await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
  try {
    for (const name of ['fifo', 'zero', 'dir']) {
      const e = await rejectsWith(llm.microLora({ store: loraDir, name }), 'E_STORE');
      assert.match(e.message, new RegExp(`microlora${name} \\(a `));
    }
  } finally {
    llm.dispose();
  }
});

// ---- kills and two writers ----

/** A Node child running `code` (an ES module with the package and `dir` at hand) with its stdout in lines. */
function child(code, dir) {
  const p = spawn(process.execPath, ['--input-type=module', '-e', `import { FileStore } from '@ruvector/ruvllm'; const dir = ${JSON.stringify(dir)};\n${code}`], {
    cwd: PACKAGE_DIR,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  const waiters = [];
  let stderr = '';
  let rest = '';
  p.stdout.setEncoding('utf8').on('data', (s) => {
    const parts = (rest + s).split('\n');
    rest = parts.pop();
    lines.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  p.stderr.setEncoding('utf8').on('data', (s) => (stderr += s));
  const exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal, stderr })));
  /** Resolves once stdout has had `n` lines. */
  const lineCount = (n) =>
    new Promise((resolve, reject) => {
      const check = () => (lines.length >= n ? resolve() : waiters.push(check));
      exited.then(({ code, stderr }) => reject(new Error(`the child exited (${code}) after ${lines.length} lines: ${stderr}`)));
      check();
    });
  return { process: p, lines, exited, lineCount };
}

// A writer putting records of 100-400 KB over 24 keys in turn: `[n u32][random bytes][sha-256 of both]`, n its write
// count (from `start`); after each put it prints `key n`.
const WRITER = `
  import { createHash, randomBytes } from 'node:crypto';
  const store = new FileStore(dir);
  for (let n = Number(process.argv[1]); ; n++) {
    const body = randomBytes(100_000 + ((n * 7919) % 300_000));
    body.writeUInt32LE(n, 0);
    const sum = createHash('sha256').update(body).digest();
    const key = 'r' + (n % 24);
    await store.put([{ key, bytes: Buffer.concat([body, sum]) }]);
    console.log(key, n);
  }`;

test('a writer SIGKILLed at 20 points: only whole records, every committed one there, temporary files removed', { timeout: 60_000 }, async (t) => {
  const dir = newDir();
  const next = random(36);
  const last = new Map(); // key -> the last n reported committed
  let n = 0;
  let tempsLeft = 0;
  for (let kill = 0; kill < 20; kill++) {
    const c = child(WRITER.replace('process.argv[1]', String(n)), dir);
    await c.lineCount(1);
    await new Promise((resolve) => setTimeout(resolve, next() * 150));
    c.process.kill('SIGKILL');
    const { signal } = await c.exited;
    assert.equal(signal, 'SIGKILL');
    for (const line of c.lines) {
      const [key, at] = line.split(' ');
      last.set(key, Number(at));
      n = Math.max(n, Number(at) + 1);
    }
    n += 1; // past a write the kill may have committed unreported
    if (readdirSync(dir).some((f) => f.endsWith('.tmp'))) tempsLeft++;

    const store = new FileStore(dir);
    const records = await store.list();
    assert.deepEqual(names(dir).filter((f) => f.endsWith('.tmp')), [], 'temporary files removed');
    const bytes = await store.getMany(records.map((r) => r.key));
    for (const [i, { key }] of records.entries()) {
      const b = Buffer.from(bytes[i]);
      const body = b.subarray(0, b.length - 32);
      assert.ok(createHash('sha256').update(body).digest().equals(b.subarray(b.length - 32)), `record ${key} is whole`);
      assert.ok(body.readUInt32LE(0) >= (last.get(key) ?? 0), `record ${key} is its last committed write or a later one`);
    }
    const held = new Set(records.map((r) => r.key));
    for (const key of last.keys()) assert.ok(held.has(key), `committed record ${key} is there`);
  }
  t.diagnostic(`${n} writes; ${tempsLeft} of 20 kills fell inside a write and left its temporary file`);
});

// Increments the record `counter` under the lock 50 times; a pause between reading and writing it invites the other
// writer in, which the lock must keep out.
const COUNTER = `
  const store = new FileStore(dir);
  for (let i = 0; i < 50; i++) {
    await store.lock(async () => {
      const n = Number(new TextDecoder().decode((await store.get('counter')) ?? new Uint8Array()));
      await new Promise((resolve) => setTimeout(resolve, 1));
      await store.put([{ key: 'counter', bytes: new TextEncoder().encode(String(n + 1)) }]);
    });
  }
  console.log('done');`;

test('two processes incrementing a record under lock end at 100, starting from a dead holder\'s lock', { timeout: 60_000 }, async () => {
  const dir = newDir();
  // A lock left by a killed process: both writers find it held by a dead pid and take it over at once.
  const dead = spawnSync(process.execPath, ['-e', '']).pid;
  mkdirSync(join(dir, 'lock'));
  writeFileSync(join(dir, 'lock', `${dead}.0a1b2c`), '');
  const writers = [child(COUNTER, dir), child(COUNTER, dir)];
  for (const w of writers) assert.equal((await w.exited).code, 0, (await w.exited).stderr);
  assert.equal(new TextDecoder().decode(await new FileStore(dir).get('counter')), '100');
  assert.deepEqual(names(dir), ['counter.rec'], 'the lock released, nothing left behind');
});

test('a lock holder SIGKILLed while holding it: the next locker waits while it lives and takes over once it is dead', { timeout: 30_000 }, async (t) => {
  const dir = newDir();
  const holder = child(`await new FileStore(dir).lock(async () => { console.log('held'); await new Promise(() => setInterval(() => {}, 1000)); });`, dir);
  await holder.lineCount(1);
  const store = new FileStore(dir);
  let got = null;
  const waiting = store.lock(async () => (got = performance.now()));
  await new Promise((resolve) => setTimeout(resolve, 500));
  assert.equal(got, null, 'a live holder keeps the lock');
  const killed = performance.now();
  holder.process.kill('SIGKILL');
  await holder.exited;
  await waiting;
  t.diagnostic(`taken over ${Math.round(got - killed)} ms after the kill`);
  assert.ok(got - killed < 2000, `taken over ${Math.round(got - killed)} ms after the kill`);
  assert.deepEqual(names(dir), []);
  // Two lockers in one process take turns too.
  const order = [];
  const turn = (name) => new FileStore(dir).lock(async () => {
    order.push(`${name} in`);
    await new Promise((resolve) => setTimeout(resolve, 20));
    order.push(`${name} out`);
  });
  await Promise.all([turn('a'), turn('b')]);
  const [first, second] = order[0] === 'a in' ? ['a', 'b'] : ['b', 'a'];
  assert.deepEqual(order, [`${first} in`, `${first} out`, `${second} in`, `${second} out`]);
  await rejectsWith(store.lock(async () => { throw new RuvllmError('E_INDEX', 'thrown inside'); }), 'E_INDEX');
  assert.deepEqual(names(dir), [], 'released after a rejection too');
});

test("IndexedDbStore's in-page lock, where navigator.locks is missing: one holder at a time, results and rejections passed on", { skip: globalThis.navigator?.locks ? 'this runtime has Web Locks' : false }, async () => {
  const store = new IndexedDbStore('ruvllm-lock-test'); // no database is opened: the lock needs none
  let inside = 0;
  let most = 0;
  const hold = (value) =>
    store.lock(async () => {
      most = Math.max(most, ++inside);
      await new Promise((resolve) => setTimeout(resolve, 5));
      inside--;
      if (value === 'fail') throw new RuvllmError('E_INDEX', 'thrown inside');
      return value;
    });
  const got = await Promise.allSettled([hold(1), hold('fail'), hold(3), new IndexedDbStore('ruvllm-lock-test').lock(async () => 4)]);
  assert.deepEqual(got.map((r) => r.value ?? r.reason.code), [1, 'E_INDEX', 3, 4]);
  assert.equal(most, 1);
});
