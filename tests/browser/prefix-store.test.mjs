// The prefix cache in Chromium's real IndexedDB: a chat continued after a page reload starts from the pages the
// first page load stored, with the same answer as without any cache; damaged records and another model's are refused
// and deleted; a database of the first version is upgraded with its pages; two tabs of the origin chatting at once on
// the store (a shared system prompt, each tab continuing a turn the other stored) leave only whole records, each of
// which a fresh page load reads and takes, pages of both tabs among them, answering as without any cache; a page with
// a tiny storage quota still answers and says it could not persist. The store itself: two pages counting under its
// lock (Web Locks) lose no update, a tab closed while it writes leaves each write whole or absent, and a record over
// `maxBytes` is refused unread.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL_PATH } from '../../npm/test/helpers.mjs';
import { examplePage, quotaPage } from './chromium.mjs';

const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence.' };
const A1 = { role: 'user', content: 'What is the capital of France?' };
const A2 = { role: 'user', content: 'And what river flows through it?' };

const ex = examplePage({ '/model.gguf': MODEL_PATH });

/**
 * In `page`: answer each of `conversations` in turn (greedy, `maxTokens`), each from a forgotten conversation (`reset`:
 * only the prefix cache carries over), then wait for the store. The model (one thread, with `prefixCache`) is loaded,
 * or taken from the page's last call with `keep`, and kept for the next call if this one has `keep`. Per answer,
 * `fromStore` is the prompt tokens it read from the store; `span` is when the first request began and the store's
 * writes ended (ms since the epoch).
 */
function chats(page, conversations, { prefixCache, maxTokens = 16, keep = false }) {
  return page.evaluate(
    async ({ conversations, prefixCache, maxTokens, keep }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      const llm = window.keptLlm ?? (await LLM.load('/model.gguf', { threads: 1, prefixCache }));
      window.keptLlm = keep ? llm : undefined;
      try {
        const start = Date.now();
        const answers = [];
        for (const messages of conversations) {
          await llm.reset();
          const loaded = llm.info().prefixCache.loadedTokens;
          const r = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: maxTokens });
          answers.push({ message: r.choices[0].message, usage: r.usage, fromStore: llm.info().prefixCache.loadedTokens - loaded });
        }
        await llm.flushPrefixCache();
        return { answers, cache: llm.info().prefixCache, span: [start, Date.now()] };
      } finally {
        if (!keep) llm.dispose();
      }
    },
    { conversations, prefixCache, maxTokens, keep },
  );
}

/** Load the model in the page (one thread) with `prefixCache`, run one greedy chat request, wait for the store. */
async function chat(messages, prefixCache) {
  const { answers, cache } = await chats(ex.page, [messages], { prefixCache });
  return { ...answers[0], cache };
}

/** The page's stored records: [key, byte length]. */
const records = () =>
  ex.page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const open = indexedDB.open('ruvllm-prefix-cache');
        open.onerror = () => reject(open.error);
        open.onsuccess = () => {
          const all = open.result.transaction('pages').objectStore('pages').getAll();
          all.onsuccess = () => {
            open.result.close();
            resolve(all.result.map((r) => [r.key, r.bytes.byteLength]));
          };
          all.onerror = () => reject(all.error);
        };
      }),
  );

test('a chat continued after a page reload starts from the pages IndexedDB kept, with the same answer', async () => {
  const first = await chat([SYSTEM, A1], { store: 'indexeddb' });
  assert.ok(first.cache.storedBytes > 0 && first.cache.storeError === null, JSON.stringify(first.cache));
  assert.ok((await records()).length >= 2);

  await ex.page.reload();
  const turn2 = [SYSTEM, A1, first.message, A2];
  const second = await chat(turn2, { store: 'indexeddb' });
  const fromStore = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(fromStore >= Math.floor(first.usage.prompt_tokens / 16) * 16, `${fromStore} tokens from IndexedDB`);
  assert.equal(second.cache.loadedTokens, fromStore);
  const cold = await chat(turn2, { budgetBytes: 0 });
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  assert.deepEqual(second.message, cold.message, 'the same answer as without any cache');
});

test('damaged records are refused and deleted, and the answer stays the same', async () => {
  const before = await records();
  await ex.page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const open = indexedDB.open('ruvllm-prefix-cache');
        open.onsuccess = () => {
          const tx = open.result.transaction('pages', 'readwrite');
          const pages = tx.objectStore('pages');
          const all = pages.getAll();
          all.onsuccess = () => {
            for (const r of all.result) {
              const bytes = new Uint8Array(r.bytes);
              bytes[bytes.length >> 1] ^= 0xff; // one byte in the middle of the keys and values
              pages.put({ ...r, bytes });
            }
          };
          tx.oncomplete = () => resolve();
          tx.onerror = () => reject(tx.error);
        };
      }),
  );
  await ex.page.reload();
  const again = await chat([SYSTEM, A1, A2], { store: 'indexeddb' });
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(again.cache.loadedTokens, 0);
  const cold = await chat([SYSTEM, A1, A2], { budgetBytes: 0 });
  assert.deepEqual(again.message, cold.message);
  // The first damaged page was deleted, then written again whole; the rest stay until they are asked for or old.
  assert.ok((await records()).length > 0 && before.length > 0);
});

test("a record of another model is refused and replaced, and the answer stays the same", async () => {
  // The first page of the conversation (the record whose parent is no stored record) made another model's: its model
  // id changed and its CRC-32 made right again, so only the model check can refuse it.
  const forged = await ex.page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const crc32 = (bytes) => {
          let c = ~0;
          for (const b of bytes) {
            c ^= b;
            for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
          }
          return ~c >>> 0;
        };
        const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
        const open = indexedDB.open('ruvllm-prefix-cache');
        open.onsuccess = () => {
          const tx = open.result.transaction('pages', 'readwrite');
          const pages = tx.objectStore('pages');
          const all = pages.getAll();
          let key;
          all.onsuccess = () => {
            const keys = new Set(all.result.map((r) => r.key));
            const first = all.result.find((r) => !keys.has(hex(r.bytes.subarray(76, 92))));
            const bytes = new Uint8Array(first.bytes);
            bytes[28] ^= 0xff; // the model id
            new DataView(bytes.buffer).setUint32(bytes.length - 4, crc32(bytes.subarray(0, bytes.length - 4)), true);
            key = first.key;
            pages.put({ ...first, bytes });
          };
          tx.oncomplete = () => resolve({ key, model: hex(all.result[0].bytes.subarray(28, 60)) });
          tx.onerror = () => reject(tx.error);
        };
      }),
  );
  await ex.page.reload();
  const again = await chat([SYSTEM, A1, A2], { store: 'indexeddb' });
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(again.cache.loadedTokens, 0);
  assert.deepEqual(again.message, (await chat([SYSTEM, A1, A2], { budgetBytes: 0 })).message);
  // Deleted, then written again whole by this run: the key holds this model's page now.
  const model = await ex.page.evaluate(
    (key) =>
      new Promise((resolve, reject) => {
        const open = indexedDB.open('ruvllm-prefix-cache');
        open.onsuccess = () => {
          const get = open.result.transaction('pages').objectStore('pages').get(key);
          get.onsuccess = () => {
            open.result.close();
            resolve(Array.from(get.result.bytes.subarray(28, 60), (x) => x.toString(16).padStart(2, '0')).join(''));
          };
          get.onerror = () => reject(get.error);
        };
      }),
    forged.key,
  );
  assert.equal(model, forged.model);
});

test('a database of the first version (the last use in each page row) keeps its pages', async () => {
  // Rewrite the database as version 1 held it: one object store of { key, bytes, used }.
  await ex.page.evaluate(
    () =>
      new Promise((resolve, reject) => {
        const open = indexedDB.open('ruvllm-prefix-cache');
        open.onsuccess = () => {
          const all = open.result.transaction('pages').objectStore('pages').getAll();
          all.onsuccess = () => {
            open.result.close();
            const del = indexedDB.deleteDatabase('ruvllm-prefix-cache');
            del.onsuccess = () => {
              const v1 = indexedDB.open('ruvllm-prefix-cache', 1);
              v1.onupgradeneeded = () => v1.result.createObjectStore('pages', { keyPath: 'key' });
              v1.onsuccess = () => {
                const tx = v1.result.transaction('pages', 'readwrite');
                for (const r of all.result) tx.objectStore('pages').put({ key: r.key, bytes: r.bytes, used: Date.now() });
                tx.oncomplete = () => {
                  v1.result.close();
                  resolve();
                };
                tx.onerror = () => reject(tx.error);
              };
            };
            del.onerror = () => reject(del.error);
          };
        };
        open.onerror = () => reject(open.error);
      }),
  );
  await ex.page.reload();
  const again = await chat([SYSTEM, A1, A2], { store: 'indexeddb' });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'pages read from the upgraded database');
  assert.equal(again.cache.loadedTokens, again.usage.prompt_tokens_details.cached_tokens);
});

test('two tabs chatting at once on one store: a fresh page finds both tabs\' pages, every record whole, same answers', async () => {
  // Each tab asks its own question; then each continues the other tab's question past a fixed answer, starting from
  // the page of that question the other tab stored (the tabs stay open, their models loaded, both writing at once).
  // The system prompt's page is written by both tabs at once; the pages past the fixed answers by one tab each.
  const B1 = { role: 'user', content: 'Name one of the three primary colours.' };
  const B2 = { role: 'user', content: 'And mixed with blue?' };
  const firsts = [
    [SYSTEM, A1],
    [SYSTEM, B1],
  ];
  const seconds = [
    [SYSTEM, B1, { role: 'assistant', content: 'Red.' }, B2],
    [SYSTEM, A1, { role: 'assistant', content: 'Paris.' }, A2],
  ];
  const conversations = [...firsts, ...seconds];
  const write = { prefixCache: { store: 'indexeddb' }, maxTokens: 8, keep: true };
  await ex.page.reload();
  await ex.page.evaluate(async () => {
    const { IndexedDbStore } = await import('@ruvector/ruvllm');
    const store = new IndexedDbStore();
    await store.clear();
    store.close();
  });
  const tab2 = await ex.browser.context.newPage();
  try {
    await tab2.goto(`${ex.server.origin}/examples/browser/index.html`);
    const tabs = [ex.page, tab2];
    await Promise.all(tabs.map((tab) => chats(tab, [], write))); // both models loaded before either tab asks
    const first = await Promise.all(tabs.map((tab, i) => chats(tab, [firsts[i]], write)));
    const second = await Promise.all(tabs.map((tab, i) => chats(tab, [seconds[i]], { ...write, keep: false })));
    for (const [one, two] of [first, second].map((run) => run.map((r) => r.span))) {
      assert.ok(one[0] < two[1] && two[0] < one[1], `the tabs wrote at once: ${one} ${two}`);
    }
    for (const r of [...first, ...second]) assert.ok(r.cache.storeError === null, JSON.stringify(r.cache));
    assert.deepEqual(
      second.map((r) => r.answers[0].fromStore),
      [16, 16],
      "each tab's second conversation read the page of the other tab's question from the store",
    );
    const written = [...first, ...second].map((r) => r.answers[0]);
    // Each answer ends in the last page of its prompt, so every page the tabs stored is a page of these four prompts.
    for (const { usage: u } of written) {
      assert.equal(Math.floor((u.prompt_tokens + u.completion_tokens) / 16), Math.floor((u.prompt_tokens - 1) / 16), JSON.stringify(u));
    }
    // The records as the tabs left them: each one page's size, and the store's index (its `meta` rows, what `list()`
    // reads) naming exactly these, each at its size.
    const stored = (await records()).sort();
    assert.ok(stored.length > 0 && stored.every(([, bytes]) => bytes === stored[0][1]), JSON.stringify(stored));
    const listed = await ex.page.evaluate(async () => {
      const { IndexedDbStore } = await import('@ruvector/ruvllm');
      const store = new IndexedDbStore();
      const list = await store.list();
      store.close();
      return list.map((r) => [r.key, r.bytes]);
    });
    assert.deepEqual(listed.sort(), stored);

    // A fresh page asks the same four again, beside a page that asks them without any cache.
    await ex.page.reload();
    const [fresh, cold] = await Promise.all([
      chats(ex.page, conversations, { prefixCache: { store: 'indexeddb' }, maxTokens: 8 }),
      chats(tab2, conversations, { prefixCache: { budgetBytes: 0 }, maxTokens: 8 }),
    ]);
    assert.equal(fresh.cache.storeError, null, JSON.stringify(fresh.cache));
    // Every whole page of each prompt but its last token (reset forgot the conversation, so from the prefix cache),
    // each conversation reading some from the store: those past the fixed answers only one tab stored.
    fresh.answers.forEach(({ usage, fromStore }, i) => {
      const pages = Math.floor((usage.prompt_tokens - 1) / 16) * 16;
      const why = `conversation ${i}: ${fromStore} from the store, ${JSON.stringify(usage)}`;
      assert.ok(usage.prompt_tokens_details.cached_tokens === pages && fromStore > 0, why);
    });
    // Every stored record was read and taken: none refused (a refused page is evaluated, not loaded), none that no
    // conversation reaches.
    assert.equal(fresh.answers.reduce((n, r) => n + r.fromStore, 0), stored.length * 16, `${stored.length} records`);
    assert.ok(cold.answers.every((r) => r.usage.prompt_tokens_details.cached_tokens === 0), 'the cold run reused nothing');
    const messages = (rs) => rs.map((r) => r.message);
    assert.deepEqual(messages(written), messages(cold.answers), 'the tabs answered as without any cache');
    assert.deepEqual(messages(fresh.answers), messages(cold.answers), 'the fresh page answered as without any cache');
  } finally {
    await tab2.close();
  }
});

test("two pages incrementing a record under the store's lock end at the right count", async () => {
  const second = await ex.browser.context.newPage();
  try {
    await second.goto(`${ex.server.origin}/examples/browser/index.html`);
    // 30 increments each; a pause between reading and writing invites the other page in, which the lock keeps out.
    const count = (page) =>
      page.evaluate(async () => {
        const { IndexedDbStore } = await import('@ruvector/ruvllm');
        const store = new IndexedDbStore('ruvllm-lock-test');
        for (let i = 0; i < 30; i++) {
          await store.lock(async () => {
            const n = Number(new TextDecoder().decode((await store.get('counter')) ?? new Uint8Array()));
            await new Promise((resolve) => setTimeout(resolve, 2));
            await store.put([{ key: 'counter', bytes: new TextEncoder().encode(String(n + 1)) }]);
          });
        }
        store.close();
      });
    await Promise.all([count(ex.page), count(second)]);
    const n = await ex.page.evaluate(async () => {
      const { IndexedDbStore } = await import('@ruvector/ruvllm');
      const store = new IndexedDbStore('ruvllm-lock-test');
      const bytes = await store.get('counter');
      store.close();
      return new TextDecoder().decode(bytes);
    });
    assert.equal(n, '60');
  } finally {
    await second.close();
  }
});

test('a tab closed while it writes: every write it finished is there, the cut one whole or not at all', async () => {
  const writer = await ex.browser.context.newPage();
  await writer.goto(`${ex.server.origin}/examples/browser/index.html`);
  // Writes of 8 records of 128 KB each, one transaction each; `window.done` counts the finished ones.
  await writer.evaluate(async () => {
    const { IndexedDbStore } = await import('@ruvector/ruvllm');
    const store = new IndexedDbStore('ruvllm-closed-tab-test');
    window.done = 0;
    (async () => {
      for (let w = 0; ; w++) {
        const records = Array.from({ length: 8 }, (_, r) => ({ key: `w${w}r${r}`, bytes: new Uint8Array(128 << 10).fill(w & 255) }));
        await store.put(records);
        window.done = w + 1;
      }
    })();
  });
  await writer.waitForFunction(() => window.done >= 3);
  const done = await writer.evaluate(() => window.done);
  await writer.close(); // mid-write: the page keeps writing until it is gone
  const got = await ex.page.evaluate(async () => {
    const { IndexedDbStore } = await import('@ruvector/ruvllm');
    const store = new IndexedDbStore('ruvllm-closed-tab-test');
    const listed = await store.list();
    const bytes = await store.getMany(listed.map((r) => r.key));
    store.close();
    // Per write: its records' keys, and whether each holds its 128 KB of the write's byte.
    const writes = {};
    listed.forEach(({ key }, i) => {
      const w = Number(key.slice(1, key.indexOf('r')));
      (writes[w] ??= []).push(bytes[i].length === 128 << 10 && bytes[i].every((x) => x === (w & 255)));
    });
    return writes;
  });
  for (let w = 0; w < done; w++) assert.ok(got[w], `write ${w} finished before the close, and is there`);
  const writes = Object.entries(got);
  for (const [w, whole] of writes) assert.deepEqual(whole, Array(8).fill(true), `write ${w}: all 8 records, each whole`);
});

test('a record over maxBytes is refused unread, naming it, and the others read', async () => {
  const r = await ex.page.evaluate(async () => {
    const { IndexedDbStore, RefusedRecords } = await import('@ruvector/ruvllm');
    const store = new IndexedDbStore('ruvllm-max-bytes-test');
    await store.put([{ key: 'small', bytes: new Uint8Array(10) }, { key: 'large', bytes: new Uint8Array(11) }]);
    const refusal = (e) => ({ refused: e instanceof RefusedRecords, code: e.code, keys: e.keys, message: e.message });
    const out = {
      one: await store.get('large', 10).then(() => null, refusal),
      many: await store.getMany(['small', 'large', 'absent'], 10).then(() => null, refusal),
      fits: (await store.get('large', 11)).length,
      others: (await store.getMany(['small', 'absent'], 10)).map((b) => b?.length ?? null),
    };
    store.close();
    return out;
  });
  assert.deepEqual(r.one.keys, ['large']);
  assert.ok(r.one.refused && r.one.code === 'E_STORE' && r.one.message.includes('large (11 bytes, more than the 10'), r.one.message);
  assert.deepEqual(r.many.keys, ['large']);
  assert.equal(r.fits, 11);
  assert.deepEqual(r.others, [10, null]);
});

test('a page with a tiny storage quota still answers and says it could not persist', async () => {
  const small = await quotaPage(ex.server.origin, 64 * 1024);
  try {
    ex.page = small.page;
    const r = await chat([SYSTEM, A1], { store: 'indexeddb' });
    const cold = await chat([SYSTEM, A1], { budgetBytes: 0 });
    assert.deepEqual(r.message, cold.message);
    assert.equal(r.cache.storeError?.code, 'E_STORE_FULL', JSON.stringify(r.cache));
    assert.ok(r.cache.bytes > 0, 'the cache goes on in memory');
  } finally {
    await small.close();
  }
});
