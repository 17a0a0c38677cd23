// MicroLoRA through the package: feedback on the default model teaches it a made-up fact (the taught answer
// becomes the greedy one, and the loss falls), the adapter is kept in a directory and is the same in a new process,
// its GGUF export loads as an adapter file and answers the same, a rejected answer is pushed away from, and bad
// options, feedback and stored records are typed errors that lose nothing.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH, PACKAGE_DIR, drain, rejectsWith } from './helpers.mjs';

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
const dir = mkdtempSync(join(tmpdir(), 'ruvllm-microlora-'));
after(() => {
  llm.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const QUESTION = [{ role: 'user', content: 'What is the capital of Zorbania?' }];
const ANSWER = 'The capital of Zorbania is Quillmere.';
const answer = async (adapters) =>
  (await drain(llm.generate(llm.applyChatTemplate(QUESTION), { temperature: 0, maxTokens: 12, adapters }))).result;

test('feedback teaches a fact: the loss falls, the taught answer becomes the greedy one, and the base model is unchanged', async () => {
  const base = await answer([]);
  assert.doesNotMatch(base.text, /Quillmere/);
  const lora = await llm.microLora({ store: dir, name: 'facts', learningRate: 0.02 });
  assert.deepEqual(lora.info().projections, ['q', 'v']);
  assert.equal(lora.info().steps, 0);
  assert.deepEqual((await answer([{ id: lora.id }])).ids, base.ids, 'a new MicroLoRA is the base model');
  const losses = [];
  for (let i = 0; i < 8; i++) {
    const r = await lora.feedback({ messages: QUESTION, response: ANSWER, accepted: true });
    assert.ok(r.tokens >= 8 && r.steps === i + 1, JSON.stringify(r));
    for (const ms of Object.values(r.timings)) assert.ok(ms >= 0);
    losses.push(r.loss);
  }
  assert.ok(losses.at(-1) < 0.5 * losses[0], `loss ${losses.map((l) => l.toFixed(3)).join(' ')}`);
  const taught = await answer([{ id: lora.id }]);
  assert.match(taught.text, /^The capital of Zorbania is Quillmere\./);
  assert.deepEqual((await answer([])).ids, base.ids, 'without the adapter the answer is the base model\'s');
  assert.equal(await lora.consolidate(), 8);
  assert.equal(await lora.consolidate(), 0);
  // The GGUF export is the same adapter: loaded as a file, it answers the same.
  const file = await llm.loadAdapter(lora.exportGguf());
  assert.deepEqual((await answer([{ id: file }])).ids, taught.ids);
  assert.ok(llm.unloadAdapter(file));

  // A new process opens it from the directory: the same steps, the same answer.
  const script = `
    import { LLM } from '@ruvector/ruvllm';
    const llm = await LLM.load(${JSON.stringify(MODEL_PATH)}, { threads: 1 });
    const lora = await llm.microLora({ store: ${JSON.stringify(dir)}, name: 'facts' });
    const r = await llm.complete(llm.applyChatTemplate(${JSON.stringify(QUESTION)}), { temperature: 0, maxTokens: 12, adapters: [{ id: lora.id }] });
    console.log(JSON.stringify({ steps: lora.info().steps, learningRate: lora.info().learningRate, ids: r.ids }));`;
  const other = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: PACKAGE_DIR, encoding: 'utf8' }));
  assert.deepEqual(other, { steps: 8, learningRate: Math.fround(0.02), ids: taught.ids });
});

test('a rejected answer is pushed away from: its loss rises', async () => {
  const lora = await llm.microLora({ name: 'rejects' });
  // Protecting the model's own answer to another question takes no step.
  const own = await llm.complete(llm.applyChatTemplate([{ role: 'user', content: 'Why is the sky blue?' }]), { temperature: 0, maxTokens: 24 });
  await lora.protect([{ messages: [{ role: 'user', content: 'Why is the sky blue?' }], response: own.text }]);
  assert.equal(lora.info().steps, 0);
  await rejectsWith(lora.protect([]), 'E_INVALID_ARGUMENT');
  await rejectsWith(lora.protect([{ messages: QUESTION, response: '' }]), 'E_INVALID_ARGUMENT');
  const wrong = 'The capital of Zorbania is Paris.';
  const first = await lora.feedback({ messages: QUESTION, response: wrong, accepted: false });
  let last = first;
  for (let i = 0; i < 4; i++) last = await llm.feedback({ messages: QUESTION, response: wrong, reward: -1 });
  assert.equal(last.steps, 5, 'llm.feedback trains the MicroLoRA opened last');
  // The unlikelihood loss -log(1 - p) falls as p, the answer's probability, falls.
  assert.ok(last.loss < first.loss, `${first.loss} -> ${last.loss}`);
  assert.equal(lora.info().stored, false);
});

test('bad options, feedback and stored records are typed errors, and nothing is lost', async () => {
  await rejectsWith(llm.microLora({ rank: 0 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.microLora({ projections: ['qkv'] }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.microLora({ layers: 1000 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.microLora({ name: 'Not A Key' }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.microLora({ lr: 1 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.microLora({ autosave: 'yes' }), 'E_INVALID_ARGUMENT');
  const lora = await llm.microLora({ store: dir, name: 'checked' });
  for (const bad of [
    { messages: QUESTION, response: '' },
    { messages: [], response: ANSWER },
    { messages: QUESTION, response: ANSWER, reward: 0 },
    { messages: QUESTION, response: ANSWER, reward: 2 },
    { messages: QUESTION, response: ANSWER, accepted: true, reward: 1 },
  ]) {
    await rejectsWith(lora.feedback(bad), 'E_INVALID_ARGUMENT');
  }
  assert.equal(lora.info().steps, 0);
  // A damaged record is E_ADAPTER, and stays as it was.
  const file = readdirSync(dir).find((f) => f.startsWith('microlorachecked'));
  const bytes = readFileSync(join(dir, file));
  bytes[bytes.length >> 1] ^= 1;
  writeFileSync(join(dir, file), bytes);
  await rejectsWith(llm.microLora({ store: dir, name: 'checked' }), 'E_ADAPTER');
  assert.deepEqual(readFileSync(join(dir, file)), bytes);
  // Another model's record (the same bytes under another engine's model id) is refused as well.
  const tiny = await LLM.load(join(process.env.RUVLLM_FIXTURES ?? join(PACKAGE_DIR, '..', 'target', 'fixtures'), 'tiny-llama-spm.gguf'), { threads: 1 });
  try {
    await rejectsWith(tiny.microLora({ store: dir, name: 'facts' }), 'E_ADAPTER');
  } finally {
    tiny.dispose();
  }
  // Removing it lets a new one start there.
  assert.equal(await LLM.removeMicroLora({ store: dir, name: 'checked' }), true);
  assert.equal(await LLM.removeMicroLora({ store: dir, name: 'checked' }), false);
  assert.equal((await llm.microLora({ store: dir, name: 'checked' })).info().steps, 0);
  // The model still answers.
  assert.ok((await answer([])).ids.length > 0);
});

test('the instant loop: feedback on a chat request trains the learner one step after the answer, one step at a time', async () => {
  const lora = await llm.microLora({ name: 'instant', rank: 1 });
  llm.learner = lora;
  try {
    const chat = await llm.chat.completions.create({ messages: QUESTION, max_tokens: 4, temperature: 0 });
    const first = await llm.feedback(chat.id, { score: 1, preferred: ANSWER });
    assert.deepEqual([first.step, first.recorded], ['scheduled', false]);
    assert.equal(lora.info().steps, 0, 'no step on the caller\'s turn');
    assert.equal((await llm.feedback(chat.id, { score: -1 })).step, 'skipped', 'a step is running');
    const taught = await first.learned;
    // The preferred answer's tokens (and the end of turn), not the four the model gave.
    assert.ok(taught.steps === 1 && taught.tokens >= 8, JSON.stringify(taught));
    const pushed = await llm.feedback(chat.id, { score: -0.5 });
    assert.equal(pushed.step, 'scheduled');
    const away = await pushed.learned;
    assert.ok(away.steps === 2 && away.tokens <= 5, JSON.stringify(away));
    assert.equal((await llm.feedback(chat.id, { score: 0 })).step, 'neutral');
    const plain = await llm.complete('Hello', { maxTokens: 2 });
    assert.equal((await llm.feedback(plain.requestId, { score: 1 })).step, 'unknown', 'not a chat request');
    await rejectsWith(llm.feedback(chat.id, { score: 2 }), 'E_INVALID_ARGUMENT');
    await rejectsWith(llm.feedback(chat.id, { score: 1, preferred: '' }), 'E_INVALID_ARGUMENT');
  } finally {
    llm.learner = null;
  }
  await rejectsWith(llm.feedback('req-0', { score: 1 }), 'E_INVALID_ARGUMENT');
});
