// The model store in Node (`LLM.load(url, { cache })`, `LLM.models`): real HTTP servers on 127.0.0.1 with ranges and
// validators, a directory of the file system. A URL loads a second time with no request; a download cut at half (or
// aborted) keeps its bytes and the next load transfers only the rest (the server counts the bytes it sends); a resume
// the server answers with the whole file (the file changed) starts over; without a validator nothing of a cut download
// is kept; a SHA-256 mismatch is E_INTEGRITY and keeps nothing; list, delete and clear; a store without room is
// E_STORE_FULL with the sizes before any download; a split GGUF loads from its first shard (URL or path) and generates
// the one file's token ids, and one of its later shards alone is refused.
// Run: node --test test/models.test.mjs   (RUVLLM_FIXTURES: the tiny models of tests/fixtures/make_tiny_models.py)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, REPO_DIR, rejectsWith } from './helpers.mjs';
import { serve } from './server.mjs';

const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const TINY = join(FIXTURES, 'tiny-llama3.gguf');
const SHARDS = [1, 2, 3].map((i) => join(FIXTURES, `tiny-llama3-split-0000${i}-of-00003.gguf`));
const work = mkdtempSync(join(tmpdir(), 'ruvllm-models-'));
const sha256 = (path) => createHash('sha256').update(readFileSync(path)).digest('hex');
const size = (path) => statSync(path).size;

/** The files the servers send; `changing` is a copy whose mtime (so ETag and Last-Modified) a test moves. */
const changing = join(work, 'changing.gguf');
copyFileSync(TINY, changing);
const files = {
  '/tiny.gguf': TINY,
  '/changing.gguf': changing,
  '/model.gguf': MODEL_PATH,
  ...Object.fromEntries(SHARDS.map((p, i) => [`/split/tiny-llama3-split-0000${i + 1}-of-00003.gguf`, p])),
};

/** Bytes after which each path's next response is cut (once). */
const cuts = new Map();
const cut = (req) => {
  const path = new URL(req.url, 'http://x').pathname;
  const at = cuts.get(path);
  cuts.delete(path);
  return at;
};
let server; // ranges, ETag and Last-Modified
let plain; // the same files without validators
before(async () => {
  server = await serve({ files, cut });
  plain = await serve({ files, cut, validators: false });
});
after(async () => {
  await server.close();
  await plain.close();
  rmSync(work, { recursive: true, force: true });
});

let dirs = 0;
/** A fresh store directory. */
const store = () => join(work, `store-${++dirs}`);

/** Load `source` (one thread), generate 8 greedy tokens from a fixed prompt, free it; the ids and the progress. */
async function generate(source, options = {}) {
  const progress = [];
  const llm = await LLM.load(source, { threads: 1, onProgress: (p) => progress.push(p), ...options });
  try {
    const { ids } = await llm.complete('The quick brown fox', { temperature: 0, maxTokens: 8, ignoreEos: true });
    return { ids, progress };
  } finally {
    llm.dispose();
  }
}

const hits = (s, path) => s.hits.get(path) ?? 0;
/** The last request `s` had for `path`. */
const lastRequest = (s, path) => s.requests.findLast((r) => r.path === path);

test('a URL kept in a directory loads again with no request, with the same ids; the list has it with its SHA-256', async () => {
  const cache = store();
  const url = `${server.origin}/tiny.gguf`;
  const { ids: want } = await generate(TINY);
  const before = Date.now();
  const first = await generate(url, { cache });
  assert.deepEqual(first.ids, want);
  assert.deepEqual(first.progress.at(-1), { loaded: size(TINY), total: size(TINY), fromCache: 0, file: 1, files: 1 });
  const [entry, ...others] = await LLM.models.list({ cache });
  assert.deepEqual(others, []);
  assert.deepEqual({ ...entry, saved: 0 }, { url, bytes: size(TINY), total: size(TINY), complete: true, sha256: sha256(TINY), saved: 0 });
  assert.ok(entry.saved >= before && entry.saved <= Date.now());

  const requests = hits(server, '/tiny.gguf');
  const second = await generate(url, { cache, sha256: sha256(TINY) });
  assert.equal(hits(server, '/tiny.gguf'), requests, 'the second load requested the file');
  assert.deepEqual(second.ids, want);
  assert.deepEqual(second.progress.at(-1), { loaded: size(TINY), total: size(TINY), fromCache: size(TINY), file: 1, files: 1 });
});

test('a download cut at half keeps its bytes; the next load transfers only the rest and answers', async () => {
  const cache = store();
  const url = `${server.origin}/model.gguf`;
  const total = size(MODEL_PATH);
  cuts.set('/model.gguf', total >> 1);
  const e = await rejectsWith(LLM.load(url, { threads: 1, cache }), 'E_FETCH');
  assert.match(e.message, /broke off at .* of .*; the \d+ bytes that came are kept, and the next load resumes/);
  const [partial] = await LLM.models.list({ cache });
  assert.equal(partial.complete, false);
  assert.equal(partial.sha256, null);
  assert.equal(partial.total, total);
  assert.ok(partial.bytes > 0 && partial.bytes <= total >> 1, `${partial.bytes} bytes kept`);

  const progress = [];
  const llm = await LLM.load(url, { threads: 1, cache, onProgress: (p) => progress.push(p) });
  try {
    const resume = lastRequest(server, '/model.gguf');
    assert.deepEqual({ ...resume, ifRange: typeof resume.ifRange }, { method: 'GET', path: '/model.gguf', range: `bytes=${partial.bytes}-`, ifRange: 'string', status: 206, sent: total - partial.bytes });
    assert.deepEqual(progress.at(-1), { loaded: total, total, fromCache: partial.bytes, file: 1, files: 1 });
    const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 4 });
    assert.deepEqual(r.ids, FRANCE.ids.slice(0, 4));
  } finally {
    llm.dispose();
  }
  const [whole] = await LLM.models.list({ cache });
  assert.deepEqual({ complete: whole.complete, bytes: whole.bytes, sha256: whole.sha256 }, { complete: true, bytes: total, sha256: sha256(MODEL_PATH) });
});

test('a load aborted mid-download keeps what came, and the next load resumes from there', async () => {
  const cache = store();
  const url = `${server.origin}/model.gguf`;
  const total = size(MODEL_PATH);
  const controller = new AbortController();
  const onProgress = ({ loaded }) => loaded > 40e6 && controller.abort();
  await rejectsWith(LLM.load(url, { threads: 1, cache, signal: controller.signal, onProgress }), 'E_ABORTED');
  const [partial] = await LLM.models.list({ cache });
  assert.ok(!partial.complete && partial.bytes > 40e6 && partial.bytes < total, `${partial.bytes} bytes kept`);
  const llm = await LLM.load(url, { threads: 1, cache, sha256: sha256(MODEL_PATH) });
  llm.dispose();
  const resume = lastRequest(server, '/model.gguf');
  assert.deepEqual([resume.range, resume.status, resume.sent], [`bytes=${partial.bytes}-`, 206, total - partial.bytes]);
  assert.equal((await LLM.models.list({ cache }))[0].complete, true);
});

test('a resume the server answers with the whole file (it changed since) starts over', async () => {
  const cache = store();
  const url = `${server.origin}/changing.gguf`;
  cuts.set('/changing.gguf', size(changing) >> 1);
  await rejectsWith(LLM.load(url, { threads: 1, cache }), 'E_FETCH');
  const [partial] = await LLM.models.list({ cache });
  assert.ok(partial.bytes > 0 && !partial.complete);
  const t = new Date(Date.now() + 60_000);
  utimesSync(changing, t, t); // a new ETag and Last-Modified: If-Range does not match
  const { ids } = await generate(url, { cache });
  const resume = lastRequest(server, '/changing.gguf');
  assert.deepEqual([resume.range, resume.status, resume.sent], [`bytes=${partial.bytes}-`, 200, size(changing)], 'the whole file came');
  assert.deepEqual(ids, (await generate(TINY)).ids);
  const [whole] = await LLM.models.list({ cache });
  assert.deepEqual({ complete: whole.complete, bytes: whole.bytes, sha256: whole.sha256 }, { complete: true, bytes: size(changing), sha256: sha256(changing) });
});

test('without a validator (no ETag, no Last-Modified) nothing of a cut download is kept', async () => {
  const cache = store();
  cuts.set('/tiny.gguf', size(TINY) >> 1);
  const e = await rejectsWith(LLM.load(`${plain.origin}/tiny.gguf`, { threads: 1, cache }), 'E_FETCH');
  assert.match(e.message, /no validator .* nothing is kept/);
  assert.deepEqual(await LLM.models.list({ cache }), []);
});

test('a SHA-256 mismatch is E_INTEGRITY and keeps nothing; a stored file of another SHA-256 is fetched again', async () => {
  const cache = store();
  const url = `${server.origin}/tiny.gguf`;
  const wrong = '0'.repeat(64);
  const e = await rejectsWith(LLM.load(url, { threads: 1, cache, sha256: wrong }), 'E_INTEGRITY');
  assert.ok(e.message.includes(sha256(TINY)) && e.message.includes(wrong), e.message);
  assert.deepEqual(await LLM.models.list({ cache }), []);
  assert.deepEqual(readdirSync(join(cache, 'parts')), [], 'parts left behind');

  await generate(url, { cache, sha256: sha256(TINY).toUpperCase() });
  assert.equal((await LLM.models.list({ cache }))[0].sha256, sha256(TINY));
  const requests = hits(server, '/tiny.gguf');
  await rejectsWith(LLM.load(url, { threads: 1, cache, sha256: wrong }), 'E_INTEGRITY');
  assert.equal(hits(server, '/tiny.gguf'), requests + 1);
  assert.deepEqual(await LLM.models.list({ cache }), []);
  // Without a store, a file (here a path) is checked too.
  await rejectsWith(LLM.load(TINY, { threads: 1, sha256: wrong }), 'E_INTEGRITY');
  await rejectsWith(LLM.load(TINY, { threads: 1, sha256: 'abc' }), 'E_INVALID_ARGUMENT');
});

test('LLM.models lists, deletes and clears; cache: true is the user cache directory', async () => {
  const cache = store();
  const tiny = `${server.origin}/tiny.gguf`;
  const other = `${server.origin}/changing.gguf`;
  await generate(tiny, { cache });
  await generate(other, { cache });
  assert.deepEqual((await LLM.models.list({ cache })).map((m) => m.url), [other, tiny]);
  assert.equal(await LLM.models.delete(tiny, { cache }), true);
  assert.equal(await LLM.models.delete(tiny, { cache }), false);
  assert.deepEqual((await LLM.models.list({ cache })).map((m) => m.url), [other]);
  await LLM.models.clear({ cache });
  assert.deepEqual(await LLM.models.list({ cache }), []);

  const xdg = process.env.XDG_CACHE_HOME;
  process.env.XDG_CACHE_HOME = join(work, 'xdg');
  try {
    await generate(tiny, { cache: true });
    assert.deepEqual((await LLM.models.list()).map((m) => m.url), [tiny]);
    assert.equal(await LLM.models.kind(), 'files');
    assert.ok(existsSync(join(work, 'xdg', 'ruvllm', 'models', 'parts')));
    await LLM.models.clear();
    assert.deepEqual(await LLM.models.list(), []);
  } finally {
    if (xdg === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = xdg;
  }
  await rejectsWith(LLM.models.list({ cache: 'opfs' }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(tiny, { cache: 42 }), 'E_INVALID_ARGUMENT');
});

test('a store without room for the file is E_STORE_FULL with the sizes, before any of it is downloaded', async () => {
  const cache = store();
  const huge = 2 ** 50;
  let bodyBytes = 0;
  const big = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(huge), etag: '"huge"' });
    const more = () => {
      while (res.write(Buffer.alloc(1 << 16))) bodyBytes += 1 << 16;
    };
    res.on('drain', more);
    more();
  });
  await new Promise((resolve) => big.listen(0, '127.0.0.1', resolve));
  try {
    const e = await rejectsWith(LLM.load(`http://127.0.0.1:${big.address().port}/huge.gguf`, { threads: 1, cache }), 'E_STORE_FULL');
    assert.equal(e.name, 'StoreFullError');
    assert.equal(e.needed, huge);
    assert.ok(e.free > 0 && e.free < huge, `free ${e.free}`);
    assert.ok(e.message.includes(String(huge)) && e.message.includes(String(e.free)), e.message);
    assert.ok(bodyBytes < 64 << 20, `${bodyBytes} bytes were sent`);
    assert.deepEqual(await LLM.models.list({ cache }), []);
  } finally {
    big.closeAllConnections();
    await new Promise((resolve) => big.close(resolve));
  }
});

test('a split GGUF loads from its first shard (URL, with its shards kept; or path) with the one file\'s ids', async () => {
  const cache = store();
  const { ids: want } = await generate(TINY);
  const total = SHARDS.map(size).reduce((a, b) => a + b);
  const url = `${server.origin}/split/tiny-llama3-split-00001-of-00003.gguf`;
  const first = await generate(url, { cache, sha256: SHARDS.map(sha256) });
  assert.deepEqual(first.ids, want);
  assert.deepEqual(first.progress.at(-1), { loaded: total, total, fromCache: 0, file: 3, files: 3 });
  assert.ok(first.progress.every((p) => p.total === total), 'one total from the start');
  const kept = await LLM.models.list({ cache });
  assert.deepEqual(kept.map((m) => [m.url.split('/').pop(), m.bytes, m.sha256, m.complete]), SHARDS.map((p) => [p.split('/').pop(), size(p), sha256(p), true]));

  const requests = [...server.hits.keys()].filter((k) => k.startsWith('/split/')).map((k) => hits(server, k));
  const second = await generate(url, { cache });
  assert.deepEqual([...server.hits.keys()].filter((k) => k.startsWith('/split/')).map((k) => hits(server, k)), requests, 'the second load made requests');
  assert.deepEqual(second.ids, want);
  assert.equal(second.progress.at(-1).fromCache, total);

  assert.deepEqual((await generate(SHARDS[0])).ids, want);
  assert.equal(await LLM.models.delete(url, { cache }), true);
  assert.deepEqual(await LLM.models.list({ cache }), []);
  await rejectsWith(LLM.load(url, { threads: 1, sha256: sha256(SHARDS[0]) }), 'E_INVALID_ARGUMENT');
});

test('a later shard of a split model alone is refused (E_GGUF), and so is a first shard without the others', async () => {
  const e = await rejectsWith(LLM.load(`${server.origin}/split/tiny-llama3-split-00002-of-00003.gguf`, { threads: 1 }), 'E_GGUF');
  assert.match(e.message, /shard 2 of 3 of a split model/);
  const lone = join(work, 'lone-00001-of-00001.gguf');
  copyFileSync(SHARDS[0], lone);
  const f = await rejectsWith(LLM.load(lone, { threads: 1 }), 'E_GGUF');
  assert.match(f.message, /shard 1 of 3 of a split model/);
});
