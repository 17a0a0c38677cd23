// The witness log (npm/src/vectors/witness.ts) in Node: with `llm.witness` set, every request of the default model is
// an entry written after its answer (its id and session, the route and times the app adds, the model, tokens, the
// engine's latencies, how it ended or its error code), and a score given later is read back into it; entries by field
// and as JSON Lines; a directory another process reads and adds to; similarity search with all-MiniLM-L6-v2 as the
// embedder; the budget drops the oldest entries and a full queue drops new ones, counted; a full store keeps the model
// answering and says so.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM, WitnessLog } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, FRANCE, MODEL_PATH, PACKAGE_DIR, rejectsWith, quotaStore } from './helpers.mjs';

const root = mkdtempSync(join(tmpdir(), 'ruvllm-witness-'));
after(() => rmSync(root, { recursive: true, force: true }));
const llm = await LLM.load(MODEL_PATH, { threads: 1 });
after(() => llm.dispose());
const QUESTION = 'What is the capital of France?';

/** Entry `requestId` of `log`. */
const entryOf = (log, requestId) => log.entries().find((e) => e.requestId === requestId);

test('every request is an entry after its answer; a score comes back into it; entries by field and as JSON Lines', async () => {
  const log = await WitnessLog.open({ store: join(root, 'log') });
  llm.witness = log;
  try {
    const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 4, session: 'a' });
    assert.match(r.requestId, /^req-[0-9a-f]{16}$/);
    const chat = await llm.chat.completions.create({
      messages: [{ role: 'user', content: QUESTION }],
      max_tokens: 4,
      temperature: 0,
      session: 'b',
      witness: { route: { label: 'geography', score: 0.8 }, latencyMs: { retrieval: 2.5 } },
    });
    const stop = new AbortController();
    await assert.rejects(async () => {
      for await (const _ of llm.generate('Tell me a long story.', { maxTokens: 64, signal: stop.signal, session: 'a' })) stop.abort();
    }, { name: 'AbortError' });
    await rejectsWith(llm.complete('x', { grammar: { type: 'gbnf', grammar: 'root ::= (' }, requestId: 'bad-grammar' }), 'E_GRAMMAR');
    await llm.complete('x', { maxTokens: 1, witness: false });
    await log.flush();
    assert.equal(log.entries().length, 4, 'a request with witness: false is not recorded');

    const generated = entryOf(log, r.requestId);
    assert.equal(generated.kind, 'generate');
    assert.equal(generated.session, 'a');
    assert.equal(generated.query, FRANCE.prompt);
    assert.deepEqual(generated.tokens, { prompt: r.usage.promptTokens, cached: r.usage.cachedTokens, generated: r.usage.completionTokens });
    assert.equal(generated.latencyMs.prefill, r.timings.prefillMs);
    assert.equal(generated.latencyMs.decode, r.timings.decodeMs);
    assert.ok(generated.latencyMs.total >= r.timings.prefillMs + r.timings.decodeMs, JSON.stringify(generated.latencyMs));
    assert.equal(generated.latencyMs.embedding, null);
    assert.deepEqual([generated.finishReason, generated.error, generated.quality, generated.route], ['length', null, null, null]);
    assert.deepEqual(generated.model, { name: llm.info().name, architecture: 'llama', backend: 'cpu' });

    const chatted = entryOf(log, chat.id);
    assert.equal(chatted.kind, 'chat');
    assert.equal(chatted.query, QUESTION);
    assert.deepEqual(chatted.route, { label: 'geography', score: 0.8 });
    assert.equal(chatted.latencyMs.retrieval, 2.5);
    assert.equal(chatted.tokens.generated, chat.usage.completion_tokens);
    const aborted = log.entries({ error: 'E_ABORTED' });
    assert.equal(aborted.length, 1);
    assert.equal(aborted[0].finishReason, null);
    assert.equal(entryOf(log, 'bad-grammar').error, 'E_GRAMMAR');

    await llm.feedback(r.requestId, { score: -1 });
    await llm.feedback(r.requestId, { score: 0.2 });
    await llm.feedback(chat.id, { score: 0.9 });
    await log.flush();
    assert.equal(entryOf(log, r.requestId).quality, 0.2, 'the last score counts');
    assert.deepEqual(log.entries({ minQuality: 0.5 }).map((e) => e.requestId), [chat.id]);
    assert.deepEqual(log.entries({ maxQuality: 0.5 }).map((e) => e.requestId), [r.requestId]);
    assert.equal(log.entries({ error: true }).length, 2);
    assert.equal(log.entries({ session: 'a' }).length, 2);
    assert.deepEqual(log.entries({ kind: 'chat' }).map((e) => e.requestId), [chat.id]);
    assert.deepEqual(log.entries({ limit: 1 }), log.entries().slice(-1));
    assert.deepEqual(log.entries({ since: Date.now() + 1000 }), []);
    const lines = log.export().trimEnd().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines, log.entries());
    assert.deepEqual({ ...log.info(), bytes: 0 }, { entries: 4, bytes: 0, budgetBytes: 8 << 20, pending: 0, dropped: 0, embedder: null, storeError: null });

    await rejectsWith(llm.complete('x', { session: '' }), 'E_INVALID_ARGUMENT');
    await rejectsWith(llm.complete('x', { witness: { latencyMs: { routing: -1 } } }), 'E_INVALID_ARGUMENT');
    assert.throws(() => log.score(r.requestId, Number.NaN), { code: 'E_INVALID_ARGUMENT' });
    assert.throws(() => log.record({ requestId: '' }), { code: 'E_INVALID_ARGUMENT' });
  } finally {
    llm.witness = null;
  }
  await llm.complete('x', { maxTokens: 1 });
  await log.flush();
  assert.equal(log.entries().length, 4, 'no log, no entry');
  await rejectsWith(llm.feedback('req-0', { score: 1 }), 'E_INVALID_ARGUMENT');
  await log.close();
});

test('another process reads the log from its directory and adds to it', async () => {
  const dir = join(root, 'log');
  const body = `
    import { WitnessLog } from '@ruvector/ruvllm';
    const log = await WitnessLog.open({ store: ${JSON.stringify(dir)} });
    const before = log.export();
    log.record({ requestId: 'from-the-child', session: 'c', query: 'hello', latencyMs: { total: 5 }, finishReason: 'stop' });
    await log.flush();
    await log.close();
    console.log(JSON.stringify({ before }));`;
  const p = spawnSync(process.execPath, ['--input-type=module', '-e', body], { cwd: PACKAGE_DIR, encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  const { before } = JSON.parse(p.stdout.trim().split('\n').pop());
  const log = await WitnessLog.open({ store: dir });
  assert.equal(log.export().startsWith(before), true, 'the other process read what this one wrote');
  assert.equal(log.entries().length, 5);
  assert.deepEqual(log.entries({ session: 'c' }).map((e) => [e.requestId, e.query, e.latencyMs.total]), [['from-the-child', 'hello', 5]]);
  await log.close();
});

test('with an embedder, the requests nearest a text come first; the log keeps its embedder', async () => {
  const embedder = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
  try {
    const dir = join(root, 'similar');
    const log = await WitnessLog.open({ store: dir, embedder });
    const queries = [QUESTION, 'How do I reverse a list in Python?', 'Will it rain tomorrow?', 'Which river flows through Paris?'];
    queries.forEach((query, i) => log.record({ requestId: `q${i}`, session: i % 2 ? 'odd' : 'even', query }));
    log.score('q1', -0.5);
    await log.flush();
    const hits = await log.search('Which city is the capital of France?', { k: 2 });
    assert.deepEqual(hits.map((h) => h.requestId), ['q0', 'q3']);
    assert.ok(hits[0].score > hits[1].score && hits[0].score > 0.5, JSON.stringify(hits.map((h) => h.score)));
    const code = await log.search('my Python code throws an error', { k: 1, session: 'odd' });
    assert.deepEqual(code.map((h) => [h.requestId, h.quality]), [['q1', -0.5]]);
    assert.match(log.info().embedder, /^all-MiniLM-L6-v2 384 /);
    await log.close();
    await rejectsWith(WitnessLog.open({ store: dir }), 'E_INDEX');
    const again = await WitnessLog.open({ store: dir, embedder });
    assert.equal(again.entries().length, 4);
    await again.close();
    await rejectsWith((await WitnessLog.open()).search('x'), 'E_INVALID_ARGUMENT');
  } finally {
    embedder.dispose();
  }
});

test('the budget drops the oldest entries; a full queue drops new ones and counts them', async () => {
  const log = await WitnessLog.open({ budgetBytes: 4096, maxPending: 8 });
  for (let i = 0; i < 12; i++) log.record({ requestId: `r${i}`, time: 1_000_000 + i * 1000, query: `request number ${i} `.repeat(8) });
  assert.deepEqual([log.info().pending, log.info().dropped], [8, 4]);
  await log.flush();
  const kept = log.entries().map((e) => e.requestId);
  assert.ok(kept.length > 1 && kept.length < 8, `kept ${kept}`);
  assert.deepEqual(kept, Array.from({ length: kept.length }, (_, i) => `r${8 - kept.length + i}`), 'the newest, in order');
  assert.ok(log.info().bytes <= 4096);
  await log.close();
});

test('a full store keeps the model answering; flush and info say so; the log catches up once there is room', async () => {
  const store = quotaStore();
  const log = await WitnessLog.open({ store });
  llm.witness = log;
  try {
    store.full = true;
    const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 2 });
    assert.deepEqual(r.ids, FRANCE.ids.slice(0, 2));
    await rejectsWith(log.flush(), 'E_STORE_FULL');
    assert.equal(log.info().storeError.code, 'E_STORE_FULL');
    assert.equal(log.entries().length, 1, 'the entry is in the log, not yet in the store');
    store.full = false;
    await log.flush();
    assert.equal(log.info().storeError, null);
    const back = await WitnessLog.open({ store });
    assert.deepEqual(back.entries().map((e) => e.requestId), [r.requestId]);
    await back.close();
  } finally {
    llm.witness = null;
  }
  await log.close();
});
