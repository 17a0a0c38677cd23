// The model store in Chromium (`LLM.load(url, { cache })`, `LLM.models`) on the tiny llama3 (150 KB): OPFS keeps it
// across a page reload, loaded again with no request; a download cut at half is resumed, the server sending only the
// rest; a SHA-256 mismatch is E_INTEGRITY and leaves nothing in OPFS; a full quota is E_STORE_FULL with the sizes,
// before the download; and the Cache API store (`cache: 'cache-api'`, what runs where OPFS is missing) keeps it too.
// Run: node --test tests/browser/models.test.mjs   (after `npm run build` in npm/ and scripts/build-wasm.sh;
// RUVLLM_FIXTURES: the tiny models of tests/fixtures/make_tiny_models.py)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO_DIR } from '../../npm/test/helpers.mjs';
import { examplePage, quotaPage } from './chromium.mjs';

const TINY = join(process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures'), 'tiny-llama3.gguf');
const BYTES = readFileSync(TINY).length;
const SHA256 = createHash('sha256').update(readFileSync(TINY)).digest('hex');

/** Bytes after which the next response for a path is cut (once). */
const cuts = new Map();
const ex = examplePage(
  { '/tiny.gguf': TINY },
  {
    cut: (req) => {
      const path = new URL(req.url, 'http://x').pathname;
      const at = cuts.get(path);
      cuts.delete(path);
      return at;
    },
  },
);

/** In `page`: load `url` with `options` (one thread), generate 8 greedy tokens, free the model. The ids, the last
 * progress report and the store's list; or the error's code, message and (E_STORE_FULL) sizes. */
function load(page, url, options) {
  return page.evaluate(
    async ({ url, options }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      let progress;
      try {
        const llm = await LLM.load(url, { threads: 1, ...options, onProgress: (p) => (progress = p) });
        try {
          const { ids } = await llm.complete('The quick brown fox', { temperature: 0, maxTokens: 8, ignoreEos: true });
          return { ids, progress, list: await LLM.models.list({ cache: options.cache }) };
        } finally {
          llm.dispose();
        }
      } catch (e) {
        const { code, message, needed, free, quota, usage } = e;
        return { error: { code, message, needed, free, quota, usage }, list: await LLM.models.list({ cache: options.cache }) };
      }
    },
    { url, options },
  );
}

/** The entry directories in OPFS's `ruvllm-models`. */
const opfsEntries = (page) =>
  page.evaluate(async () => {
    const names = [];
    const root = await navigator.storage.getDirectory();
    try {
      for await (const name of (await root.getDirectoryHandle('ruvllm-models')).keys()) names.push(name);
    } catch {
      // no directory yet
    }
    return names;
  });

const hits = () => ex.server.hits.get('/tiny.gguf') ?? 0;

test('OPFS keeps a model across a page reload: the second load makes no request and gives the same ids', async () => {
  const first = await load(ex.page, '/tiny.gguf', { cache: true });
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.equal(await ex.page.evaluate(async () => (await import('@ruvector/ruvllm')).LLM.models.kind()), 'opfs');
  assert.deepEqual(first.list.map(({ url, bytes, complete, sha256 }) => ({ url, bytes, complete, sha256 })), [
    { url: `${ex.server.origin}/tiny.gguf`, bytes: BYTES, complete: true, sha256: SHA256 },
  ]);
  assert.equal(first.progress.fromCache, 0);

  await ex.page.reload();
  const before = hits();
  const second = await load(ex.page, '/tiny.gguf', { cache: true });
  assert.equal(hits(), before, 'the model was requested again');
  assert.deepEqual(second.ids, first.ids);
  assert.deepEqual(second.progress, { loaded: BYTES, total: BYTES, fromCache: BYTES, file: 1, files: 1 });
});

test('a download cut at half is resumed: the server sends only the rest', async () => {
  await ex.page.evaluate(async () => (await import('@ruvector/ruvllm')).LLM.models.clear());
  cuts.set('/tiny.gguf', BYTES >> 1);
  const cut = await load(ex.page, '/tiny.gguf', { cache: 'opfs' });
  assert.equal(cut.error?.code, 'E_FETCH', JSON.stringify(cut));
  assert.match(cut.error.message, /broke off/);
  const [partial] = cut.list;
  assert.ok(!partial.complete && partial.bytes > 0 && partial.bytes <= BYTES >> 1, JSON.stringify(partial));

  await ex.page.reload();
  const resumed = await load(ex.page, '/tiny.gguf', { cache: 'opfs' });
  assert.equal(resumed.error, undefined, JSON.stringify(resumed.error));
  const resume = ex.server.requests.findLast((r) => r.path === '/tiny.gguf');
  assert.deepEqual([resume.range, resume.status, resume.sent], [`bytes=${partial.bytes}-`, 206, BYTES - partial.bytes]);
  assert.equal(resumed.progress.fromCache, partial.bytes);
  assert.deepEqual(resumed.list.map((m) => [m.bytes, m.complete, m.sha256]), [[BYTES, true, SHA256]]);
});

test('a SHA-256 mismatch is E_INTEGRITY and leaves nothing in OPFS', async () => {
  await ex.page.evaluate(async () => (await import('@ruvector/ruvllm')).LLM.models.clear());
  const r = await load(ex.page, '/tiny.gguf', { cache: 'opfs', sha256: 'f'.repeat(64) });
  assert.equal(r.error?.code, 'E_INTEGRITY', JSON.stringify(r));
  assert.ok(r.error.message.includes(SHA256));
  assert.deepEqual(r.list, []);
  assert.deepEqual(await opfsEntries(ex.page), []);
});

test('the Cache API store keeps a model across a reload too', async () => {
  const first = await load(ex.page, '/tiny.gguf', { cache: 'cache-api' });
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.deepEqual(first.list.map((m) => [m.bytes, m.complete, m.sha256]), [[BYTES, true, SHA256]]);
  await ex.page.reload();
  const before = hits();
  const second = await load(ex.page, '/tiny.gguf', { cache: 'cache-api' });
  assert.equal(hits(), before);
  assert.deepEqual(second.ids, first.ids);
  assert.equal(second.progress.fromCache, BYTES);
  await ex.page.evaluate(async () => (await import('@ruvector/ruvllm')).LLM.models.clear({ cache: 'cache-api' }));
  assert.deepEqual(await ex.page.evaluate(() => caches.keys()), []);
});

test('a quota too small for the model is E_STORE_FULL with the sizes, and nothing is kept', async () => {
  // The first write fails, not the check before the download (quotaPage: the page's estimate still reports the
  // profile's quota), which npm/test/models.test.mjs tests against a disk's free space.
  const small = await quotaPage(ex.server.origin, 64 * 1024);
  try {
    const { page } = small;
    const r = await load(page, '/tiny.gguf', { cache: 'opfs' });
    assert.equal(r.error?.code, 'E_STORE_FULL', JSON.stringify(r));
    assert.equal(r.error.needed, BYTES, r.error.message);
    assert.ok(r.error.quota > 0 && r.error.free >= 0, JSON.stringify(r.error));
    assert.match(r.error.message, new RegExp(`needs ${BYTES} bytes in OPFS .* refused a write for want of room \\(it says it has ${r.error.free} bytes free \\(quota ${r.error.quota} bytes`));
    assert.deepEqual(r.list, []);
    assert.deepEqual(await opfsEntries(page), []);
  } finally {
    await small.close();
  }
});
