// The prefix cache kept in a directory across processes (Node's file store): a chat continued in a new process
// starts from the pages the first one wrote, with the same answer as without any cache; damaged records are skipped
// and deleted; a store that is full goes on in memory and says so.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH, PACKAGE_DIR } from './helpers.mjs';

const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence.' };
const A1 = { role: 'user', content: 'What is the capital of France?' };
const A2 = { role: 'user', content: 'And what river flows through it?' };
const GREEDY = { temperature: 0, max_tokens: 16 };
const dir = mkdtempSync(join(tmpdir(), 'ruvllm-store-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** One chat request in a new Node process with the store in `dir` (and a memory budget, if given): its reply, usage and
 * prefix-cache info. */
function inNewProcess(messages, budgetBytes) {
  const code = `
    import { LLM } from '@ruvector/ruvllm';
    const prefixCache = { store: ${JSON.stringify(dir)}, budgetBytes: ${JSON.stringify(budgetBytes)} };
    const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { prefixCache });
    const r = await llm.chat.completions.create({ messages: ${JSON.stringify(messages)}, ...${JSON.stringify(GREEDY)} });
    await llm.flushPrefixCache();
    console.log(JSON.stringify({ message: r.choices[0].message, usage: r.usage, cache: llm.info().prefixCache }));
    llm.dispose();`;
  const p = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: PACKAGE_DIR, encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  return JSON.parse(p.stdout.trim().split('\n').pop());
}

const plain = await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
after(() => plain.dispose());
const answer = async (messages) => (await plain.chat.completions.create({ messages, ...GREEDY })).choices[0].message;

test('a chat continued in a new process starts from the pages the first process stored', async () => {
  const first = inNewProcess([SYSTEM, A1]);
  assert.deepEqual(first.message, await answer([SYSTEM, A1]));
  assert.ok(first.cache.store && first.cache.storedBytes > 0 && first.cache.storeError === null, JSON.stringify(first.cache));
  assert.ok(readdirSync(dir).filter((n) => n.endsWith('.rec')).length >= 2);

  const turn2 = [SYSTEM, A1, first.message, A2];
  const second = inNewProcess(turn2);
  const fromStore = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(fromStore >= Math.floor(first.usage.prompt_tokens / 16) * 16, `${fromStore} tokens from the store`);
  assert.equal(second.cache.loadedTokens, fromStore);
  assert.deepEqual(second.message, await answer(turn2), 'the same answer as without any cache');
});

test('damaged records are skipped and deleted, and the answer stays the same', async () => {
  const files = readdirSync(dir).filter((n) => n.endsWith('.rec'));
  for (const f of files) truncateSync(join(dir, f), 100);
  const again = inNewProcess([SYSTEM, A1, A2]);
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(again.cache.loadedTokens, 0);
  assert.deepEqual(again.message, await answer([SYSTEM, A1, A2]));
  // The damaged first page was deleted (and written again whole by this run): fewer damaged files are left.
  const damaged = readdirSync(dir).filter((n) => n.endsWith('.rec') && statSync(join(dir, n)).size === 100);
  assert.ok(damaged.length < files.length, `${damaged.length} of ${files.length} still damaged`);
});

test('a conversation longer than the memory budget is read back as far as the budget holds, and nothing is deleted', async () => {
  // About 400 prompt tokens: more pages than one read from the store brings (16).
  const long = { role: 'user', content: `Summarize this text in one sentence: ${'the river flows through the old city and past the bridge '.repeat(30)}` };
  const first = inNewProcess([SYSTEM, long]);
  const pages = Math.floor((first.usage.prompt_tokens + first.usage.completion_tokens - 1) / 16);
  assert.ok(pages > 20, `${pages} pages`);
  const pageBytes = first.cache.bytes / ((first.cache.insertedTokens + first.cache.loadedTokens) / 16);
  const records = () => readdirSync(dir).filter((n) => n.endsWith('.rec')).length;
  const stored = records();

  // Room for 20 pages: the first 20 come from the store, the rest is evaluated; no record is refused or deleted.
  const turn2 = [SYSTEM, long, first.message, A2];
  const small = inNewProcess(turn2, 20 * pageBytes);
  assert.equal(small.usage.prompt_tokens_details.cached_tokens, 20 * 16);
  assert.equal(small.cache.loadedTokens, 20 * 16);
  assert.ok(records() >= stored, `${records()} of ${stored} records left`);
  const whole = inNewProcess(turn2);
  assert.equal(whole.usage.prompt_tokens_details.cached_tokens, pages * 16);
  const want = await answer(turn2);
  assert.deepEqual(small.message, want);
  assert.deepEqual(whole.message, want);
});

test('a store over its budget drops the pages conversations start with last: a shared system prompt outlives them', async () => {
  const system = {
    role: 'system',
    content: 'You are a careful assistant for questions about geography, history and science. Answer every question in one short sentence, without lists, examples or follow-up questions.',
  };
  const questions = ['What is the capital of France?', 'Name a large ocean.', 'What is the tallest mountain?', 'Which planet is red?', 'Who wrote Hamlet?', 'What is water made of?'];
  const storeDir = mkdtempSync(join(tmpdir(), 'ruvllm-store-lru-'));
  try {
    const info = plain.info();
    const pageBytes = info.layers * 2 * 16 * (info.embeddingSize / info.heads) * info.kvHeads * 2;
    // Room for 8 records (a record is a page and a small header): fewer than the conversations below write.
    const prefixCache = { store: storeDir, storeBudgetBytes: Math.floor(8.5 * pageBytes) };
    const writer = await LLM.load(MODEL_PATH, { prefixCache });
    let last;
    try {
      for (const q of questions) {
        last = [system, { role: 'user', content: q }];
        last.push((await writer.chat.completions.create({ messages: last, ...GREEDY })).choices[0].message);
        await writer.flushPrefixCache();
      }
      assert.ok(writer.info().prefixCache.insertedTokens / 16 > 8, 'more pages were written than the store holds');
    } finally {
      writer.dispose();
    }
    // Another instance (its memory empty) reopens the last conversation: every page of it comes from the store.
    const reader = await LLM.load(MODEL_PATH, { prefixCache });
    try {
      const turn2 = [...last, A2];
      const r = await reader.chat.completions.create({ messages: turn2, ...GREEDY });
      const held = reader.tokenize(reader.applyChatTemplate(last, { addGenerationPrompt: false }), { prompt: true }).length;
      const fromStore = r.usage.prompt_tokens_details.cached_tokens;
      assert.ok(fromStore >= Math.floor((held - 1) / 16) * 16 - 16 && fromStore > 0, `${fromStore} of ${held} tokens from the store`);
      assert.equal(reader.info().prefixCache.loadedTokens, fromStore);
      assert.deepEqual(r.choices[0].message, await answer(turn2));
    } finally {
      reader.dispose();
    }
  } finally {
    rmSync(storeDir, { recursive: true, force: true });
  }
});

test('a full store is given up and the model answers from memory, saying why', async () => {
  const full = Object.assign(new Error('the quota is used up'), { name: 'QuotaExceededError' });
  let puts = 0;
  const store = {
    list: async () => [],
    get: async () => undefined,
    put: async () => {
      puts++;
      throw full;
    },
    delete: async () => {},
    clear: async () => {},
  };
  const llm = await LLM.load(MODEL_PATH, { prefixCache: { store } });
  try {
    const r = await llm.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY });
    assert.deepEqual(r.choices[0].message, await answer([SYSTEM, A1]));
    await llm.flushPrefixCache();
    assert.equal(puts, 2, 'one retry after making room');
    assert.equal(llm.info().prefixCache.storeError?.code, 'E_STORE_FULL');
    const again = await llm.chat.completions.create({ messages: [SYSTEM, A1, r.choices[0].message, A2], ...GREEDY });
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'the in-memory cache still works');
    assert.equal(puts, 2, 'no more writes');
  } finally {
    llm.dispose();
  }
});

test('bad store options are E_INVALID_ARGUMENT', async () => {
  for (const prefixCache of [{ store: 42 }, { store: { get() {} } }, { store: 'indexeddb' }, { storeBudgetBytes: -1 }]) {
    await assert.rejects(LLM.load(MODEL_PATH, { prefixCache }), { code: 'E_INVALID_ARGUMENT' }, JSON.stringify(prefixCache));
  }
});
