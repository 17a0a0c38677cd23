// The two wasm builds in Node: the threaded one (rayon on worker threads) and the single-thread one give
// the same greedy answer; `threads` picks the build, and info() says which one runs.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, PACKAGE_DIR, rejectsWith } from './helpers.mjs';

const GREEDY = { temperature: 0 };
const threaded = await LLM.load(MODEL_PATH, { threads: 2 });
const single = await LLM.load(MODEL_PATH, { threads: 1 });
after(() => {
  threaded.dispose();
  single.dispose();
});

test('threads: 2 runs the threaded build on 2 threads, threads: 1 the single-thread build', () => {
  assert.deepEqual([threaded.info().build, threaded.info().threads], ['wasm-mt', 2]);
  assert.deepEqual([single.info().build, single.info().threads], ['wasm', 1]);
});

test('both builds give the reference answer to the France prompt', async () => {
  for (const llm of [threaded, single]) {
    const r = await llm.complete(FRANCE.prompt, GREEDY);
    assert.deepEqual(r.ids, FRANCE.ids, llm.info().build);
    assert.equal(r.text, FRANCE.text);
  }
});

test('both builds score alike, and the threaded one streams across calls like the other', async () => {
  const ids = [...threaded.tokenize(FRANCE.prompt, { prompt: true }), ...FRANCE.ids.slice(0, -1)];
  const [a, b] = await Promise.all([threaded.score(ids, { topK: 1 }), single.score(ids, { topK: 1 })]);
  assert.deepEqual(a.map((p) => p[0][0]), b.map((p) => p[0][0]));
  for (const [i, p] of a.entries()) assert.ok(Math.abs(p[0][1] - b[i][0][1]) < 1e-4, `position ${i}`);
  // Aborting a threaded generation midway leaves the model usable.
  const controller = new AbortController();
  await rejectsWith((async () => {
    for await (const c of threaded.generate('Once upon a time', { maxTokens: 50, signal: controller.signal })) controller.abort();
  })(), 'E_ABORTED');
  assert.deepEqual((await threaded.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
});

test('the thread count is fixed by the first threaded load; bad counts are refused', async () => {
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 3 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 0 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1.5 }), 'E_INVALID_ARGUMENT');
});

test('a script awaiting a threaded generation at top level runs to the end and exits', () => {
  // Node does not wait for wasm threads by itself: the package must hold the process open while a
  // forward pass runs on the pool, and must not keep it alive afterwards.
  const script = `import { LLM } from '@ruvector/ruvllm';
const llm = await LLM.load(${JSON.stringify(MODEL_PATH)});
const r = await llm.complete(${JSON.stringify(FRANCE.prompt)}, { temperature: 0 });
console.log(JSON.stringify({ build: llm.info().build, threads: llm.info().threads, ids: r.ids }));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: PACKAGE_DIR, encoding: 'utf8', timeout: 120_000 });
  const cores = Math.min(availableParallelism(), 8);
  assert.deepEqual(JSON.parse(out), { build: cores > 1 ? 'wasm-mt' : 'wasm', threads: cores, ids: FRANCE.ids });
});
