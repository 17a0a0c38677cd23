// The learning loops (npm/src/vectors/learning.ts) in Node, on the default model with all-MiniLM-L6-v2 as the
// embedder: the background loop runs on its own once the model is idle, teaches the base adapter the good answers
// (the taught fact becomes the greedy answer with the loop's adapters), resets the instant adapter, teaches the
// Router its corrections and leaves low-scored answers alone; a request during a run waits at most one step; a process
// killed mid-run loses that run's work only, and the checkpoint is the same in a new process; a full store keeps the
// run in memory and the model answering, and the next run writes the checkpoint; the deep loop prunes a
// near-duplicate, clusters the rest into a pattern bank that long-term memory recalls, and archives the witness log;
// a conversation too long to train on leaves the queue; bad options and calls are typed errors.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LearningLoop, LLM, Memory, Router, WitnessLog } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, MODEL_PATH, PACKAGE_DIR, quotaStore, rejectsWith } from './helpers.mjs';

const root = mkdtempSync(join(tmpdir(), 'ruvllm-learning-'));
after(() => rmSync(root, { recursive: true, force: true }));
const llm = await LLM.load(MODEL_PATH, { threads: 1 });
const embedder = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
after(() => {
  llm.dispose();
  embedder.dispose();
});

const ZORBANIA = [{ role: 'user', content: 'What is the capital of Zorbania?' }];
const TAUGHT = 'The capital of Zorbania is Quillmere.';
const greedy = async (messages, adapters) =>
  (await llm.chat.completions.create({ messages, max_tokens: 12, temperature: 0, adapters })).choices[0].message.content;
const until = async (what, ok, ms = 120_000) => {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

test('the background loop runs when the model is idle: good answers into the base adapter, the instant adapter reset, corrections into the Router', async () => {
  const router = await Router.open({
    embedder,
    routes: [
      { name: 'geography', utterances: ['What is the capital of France?', 'Which river flows through Cairo?'] },
      { name: 'cooking', utterances: ['How do I bake bread?', 'What goes into a pesto?'] },
    ],
  });
  const loop = await LearningLoop.open(llm, { store: join(root, 'a'), embedder, router, idleMs: 3000, intervalMs: 200, epochs: 8, base: { learningRate: 0.01, ewcLambda: 1e6 }, instant: { learningRate: 0.01 } });
  assert.equal(llm.learner, loop.instant);
  assert.equal(llm.trajectories, loop);
  assert.deepEqual(loop.adapters(), [{ id: loop.base.id, scale: 1 }, { id: loop.instant.id, scale: 1 }]);
  assert.deepEqual([loop.info().baseSteps, loop.info().instantSteps, loop.info().runs], [0, 0, 0]);
  const before = await greedy(ZORBANIA, loop.adapters());
  assert.doesNotMatch(before, /Quillmere/);

  // Three answered requests: one given a preferred answer, one scored low, one scored low but with a route correction.
  const zorbania = await llm.chat.completions.create({ messages: ZORBANIA, max_tokens: 4, adapters: loop.adapters() });
  const low = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 4 });
  const PASTA = 'Which city is famous for its pasta dishes?';
  const pasta = await llm.chat.completions.create({ messages: [{ role: 'user', content: PASTA }], max_tokens: 4 });
  assert.equal((await router.route(PASTA)).route, 'geography', 'before the correction');
  const taught = await llm.feedback(zorbania.id, { score: 1, preferred: TAUGHT });
  assert.equal(taught.step, 'scheduled', 'the instant loop trains too');
  await taught.learned;
  await llm.feedback(low.id, { score: 0.2 });
  await llm.feedback(pasta.id, { score: 0.3, route: 'cooking' });
  await loop.flush();
  assert.deepEqual([loop.info().pending, loop.info().corrections], [1, 1], 'the low-scored answers are not queued');
  assert.ok(loop.info().instantSteps >= 1);

  await until('a background run', () => loop.info().runs >= 1 && !loop.info().running);
  const info = loop.info();
  const run = info.lastRun;
  assert.equal(info.lastError, null);
  assert.deepEqual([run.trajectories, run.steps, run.corrections, run.stopped], [1, 8, 1, false], JSON.stringify(run));
  assert.equal(run.consolidated, 8);
  assert.deepEqual([info.pending, info.learned, info.corrections, info.baseSteps, info.instantSteps], [0, 1, 0, 8, 0]);
  assert.ok(info.bytes > 0 && info.bytes <= info.budgetBytes);
  const stored = readdirSync(join(root, 'a', 'adapters')).filter((f) => f.endsWith('.rec')).map((f) => statSync(join(root, 'a', 'adapters', f)).size);
  assert.deepEqual(stored.sort(), [loop.instant.info().stateBytes, loop.base.info().stateBytes].sort(), 'the adapters\' records are what info says');
  assert.equal(info.adapterBytes, stored[0] + stored[1]);
  assert.match(await greedy(ZORBANIA, loop.adapters()), /Quillmere/, 'the base adapter learned the preferred answer');
  assert.doesNotMatch(await greedy(ZORBANIA, []), /Quillmere/, 'the model itself is unchanged');
  assert.equal((await router.route(PASTA)).route, 'cooking', 'the Router learned the correction');
  assert.ok(router.utterances('cooking').includes(PASTA));
  // Nothing new to learn: no more runs.
  await new Promise((r) => setTimeout(r, 800));
  assert.equal(loop.info().runs, 1);
  await loop.close();
  assert.deepEqual([llm.learner, llm.trajectories], [null, null]);
  await router.close();
  await rejectsWith(loop.run(), 'E_DISPOSED');
});

test('a request during a run waits at most one step, and the run waits for it', async () => {
  const loop = await LearningLoop.open(llm, { intervalMs: 0, epochs: 2, instant: false, protect: false });
  assert.equal(loop.instant, null);
  for (const [i, q] of ['Name a red fruit.', 'Name a blue bird.', 'Name a green vegetable.'].entries()) {
    loop.take({ requestId: `r${i}`, messages: [{ role: 'user', content: q }], response: `Answer ${i}.`, score: 1, preferred: null, route: null, time: Date.now() + i });
  }
  await loop.flush();
  const running = loop.run();
  await until('the first step', () => loop.base.info().steps >= 1, 60_000);
  const answered = await llm.complete('Hello', { maxTokens: 8 });
  assert.equal(answered.finishReason !== undefined, true);
  const run = await running;
  assert.ok(run.interrupted >= 1, JSON.stringify(run));
  assert.deepEqual([run.trajectories, run.steps, loop.info().learned], [3, 6, 3]);
  await loop.close();
});

test('a conversation the model cannot take as an example (past its 1,024 tokens) leaves the queue; the rest are learned', async () => {
  const loop = await LearningLoop.open(llm, { intervalMs: 0, epochs: 1, instant: false, protect: false });
  // A long conversation answers (the context is the model's 8,192 positions) but is too long an example to train on.
  const long = [{ role: 'user', content: `${'word '.repeat(1100)}How many words?` }];
  loop.take({ requestId: 'long', messages: long, response: 'Many.', score: 1, preferred: null, route: null, time: Date.now() });
  loop.take({ requestId: 'short', messages: ZORBANIA, response: TAUGHT, score: 1, preferred: null, route: null, time: Date.now() + 1 });
  await loop.flush();
  const run = await loop.run();
  assert.deepEqual([run.dropped, run.trajectories, run.steps], [1, 1, 1], JSON.stringify(run));
  assert.deepEqual([loop.info().pending, loop.info().learned, loop.info().lastError], [0, 1, null]);
  const next = await loop.run(); // once failed every run
  assert.deepEqual([next.dropped, next.trajectories, loop.info().lastError], [0, 0, null]);
  await loop.close();
});

test('a process killed mid-run loses that run only; the checkpoint is the same in another process', async () => {
  const dir = join(root, 'b');
  const child = (body) => {
    const script = `
      import { LearningLoop, LLM } from '@ruvector/ruvllm';
      const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { threads: 1 });
      const loop = await LearningLoop.open(llm, { store: ${JSON.stringify(dir)}, intervalMs: 0, epochs: 2, protect: false });
      const say = (v) => console.log(JSON.stringify(v));
      ${body}`;
    return spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: PACKAGE_DIR, encoding: 'utf8' });
  };
  // The first process answers three requests, gets feedback on them, and dies after the run's first step.
  const killed = child(`
    for (const q of ['Name a red fruit.', 'Name a blue bird.', 'Name a green vegetable.']) {
      const c = await llm.chat.completions.create({ messages: [{ role: 'user', content: q }], max_tokens: 3 });
      await (await llm.feedback(c.id, { score: 1 })).learned;
    }
    await loop.flush();
    say(loop.info());
    loop.run();
    setInterval(() => loop.base.info().steps >= 1 && process.kill(process.pid, 'SIGKILL'), 1);`);
  assert.equal(killed.signal, 'SIGKILL', killed.stderr);
  const taken = JSON.parse(killed.stdout.trim().split('\n')[0]);
  assert.deepEqual([taken.pending, taken.instantSteps, taken.baseSteps], [3, 3, 0]);

  const loop = await LearningLoop.open(llm, { store: dir, intervalMs: 0, epochs: 2, protect: false });
  assert.deepEqual([loop.info().pending, loop.info().learned, loop.info().baseSteps, loop.info().instantSteps], [3, 0, 0, 3], 'the killed run left nothing half-done');
  const run = await loop.run();
  assert.deepEqual([run.trajectories, run.steps], [3, 6]);
  const base = loop.base.exportGguf();
  await loop.close();

  const reopened = child(`say({ ...loop.info(), base: Buffer.from(loop.base.exportGguf()).toString('base64') }); await loop.close();`);
  assert.equal(reopened.status, 0, reopened.stderr);
  const info = JSON.parse(reopened.stdout.trim().split('\n').pop());
  assert.deepEqual([info.pending, info.learned, info.baseSteps, info.instantSteps], [0, 3, 6, 0]);
  assert.ok(Buffer.from(info.base, 'base64').equals(Buffer.from(base)), 'the same base adapter in the other process');
});

test('the deep loop: a near-duplicate pruned, the rest clustered into a pattern bank that memory recalls, the witness log archived', async () => {
  const loop = await LearningLoop.open(llm, { embedder, intervalMs: 0, epochs: 1, instant: false, protect: false });
  const pairs = [
    ['How do I bake sourdough bread?', 'Feed the starter, knead, proof overnight, bake hot.', 0.9],
    ['What temperature bakes bread best?', 'Around 230 degrees Celsius.', 0.8],
    ['How long should dough rise?', 'One to two hours, until doubled.', 0.7],
    ['What is the capital of Peru?', 'Lima.', 0.9],
    ['Which river flows through Cairo?', 'The Nile.', 0.8],
    ['What is the capital of Peru?', 'Lima is the capital.', 0.6],
  ];
  pairs.forEach(([q, a, score], i) => loop.take({ requestId: `d${i}`, messages: [{ role: 'user', content: q }], response: a, score, preferred: null, route: null, time: 1000 + i }));
  await loop.run();
  assert.equal(loop.info().learned, 6);
  const memory = await Memory.open({ embedder, minScore: 0.2 });
  const witness = await WitnessLog.open({ budgetBytes: 1 << 20 });
  for (let i = 0; i < 40; i++) witness.record({ requestId: `w${i}`, time: 1000 + i, query: `request ${i} `.repeat(20), latencyMs: { total: i } });
  await witness.flush();
  const kept = witness.info().bytes;

  const deep = await loop.deep({ clusters: 2, memory, witness, keepWitnessBytes: Math.floor(kept / 2) });
  assert.equal(deep.pruned, 1, 'the lower-scored Peru answer is a near-duplicate');
  assert.equal(loop.info().learned, 5);
  assert.equal(deep.patterns.length, 2);
  assert.deepEqual(deep.patterns.map((p) => p.members).sort(), [2, 3]);
  const baking = deep.patterns.find((p) => p.members === 3);
  assert.match(baking.query, /bread|dough/);
  assert.ok(baking.score > 0.7 && baking.score < 0.9, String(baking.score));
  assert.equal(memory.turns('patterns').length, 4, 'each pattern a question and its answer');
  const recalled = await memory.recall('Tips for baking a loaf of bread?');
  assert.equal(recalled[0].conversation, 'patterns');
  assert.ok(recalled.slice(0, 2).some((t) => /bread|dough/i.test(t.content)), JSON.stringify(recalled));

  assert.ok(deep.archived.entries > 0 && deep.archived.entries < 40, String(deep.archived.entries));
  const archived = deep.archived.jsonl.trimEnd().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(archived.map((e) => e.requestId), Array.from({ length: deep.archived.entries }, (_, i) => `w${i}`), 'the oldest first');
  assert.ok(witness.info().bytes <= kept / 2);
  assert.equal(witness.entries().length, 40 - deep.archived.entries);
  await Promise.all([loop.close(), memory.close(), witness.close()]);
});

test('a full store: the run says so and keeps its work in memory, the model answers, the next run writes the checkpoint', async () => {
  const [trajectories, adapters] = [quotaStore(), quotaStore()];
  const loop = await LearningLoop.open(llm, { store: { trajectories, adapters }, intervalMs: 0, epochs: 1, protect: false });
  loop.take({ requestId: 'q', messages: ZORBANIA, response: TAUGHT, score: 1, preferred: null, route: null, time: Date.now() });
  await loop.flush();
  trajectories.full = adapters.full = true;
  await rejectsWith(loop.run(), 'E_STORE_FULL');
  assert.equal(loop.info().lastError.code, 'E_STORE_FULL');
  assert.deepEqual([loop.info().pending, loop.info().learned, loop.info().baseSteps, loop.info().instantSteps], [0, 1, 1, 0], 'the run is whole in memory');
  assert.ok((await llm.complete('Hello', { maxTokens: 2, adapters: loop.adapters() })).text.length > 0);
  trajectories.full = adapters.full = false;
  const run = await loop.run();
  assert.deepEqual([run.trajectories, loop.info().lastError], [0, null]);
  await loop.close();
  const again = await LearningLoop.open(llm, { store: { trajectories, adapters }, intervalMs: 0, protect: false });
  assert.deepEqual([again.info().pending, again.info().learned, again.info().baseSteps, again.info().instantSteps], [0, 1, 1, 0], 'the checkpoint, written late');
  await again.close();
});

test('bad options and calls are typed errors', async () => {
  await rejectsWith(LearningLoop.open(llm, { name: 'Bad Name' }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LearningLoop.open(llm, { minScore: 2 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LearningLoop.open(llm, { store: {} }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LearningLoop.open(llm, { epochs: 0 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LearningLoop.open({}), 'E_INVALID_ARGUMENT');
  await rejectsWith(LearningLoop.open(llm, { protect: [{ messages: ZORBANIA, response: '' }] }), 'E_INVALID_ARGUMENT');
  const loop = await LearningLoop.open(llm, { intervalMs: 0, protect: false });
  await rejectsWith(loop.deep(), 'E_INVALID_ARGUMENT');
  const chat = await llm.chat.completions.create({ messages: ZORBANIA, max_tokens: 2 });
  await rejectsWith(llm.feedback(chat.id, { score: 1, route: '' }), 'E_INVALID_ARGUMENT');
  await loop.close();
});
