// Hostile model files through the package: each is a typed error within a second or so, never a wasm trap
// (E_ENGINE_CRASHED) or a hang, and the engine stays usable. The files are the real model with one header
// field changed in place (tests/rust/bad_input.rs covers many more, natively and in wasm32).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, rejectsWith } from './helpers.mjs';

const modelBytes = readFileSync(MODEL_PATH);
/** A hang would take minutes; a typed error takes milliseconds. Loose, so a busy machine cannot fail it. */
const PROMPT_MS = 5000;

/** Where the value of metadata `key` starts (after its type), and its type. */
function valueOf(bytes, key) {
  const name = Buffer.from(key);
  const at = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).indexOf(name);
  assert.ok(at > 0, `${key} is in the header`);
  return { type: new DataView(bytes.buffer, bytes.byteOffset).getUint32(at + name.length, true), at: at + name.length + 4 };
}

function withBlockCount(count) {
  const bytes = new Uint8Array(modelBytes);
  const { type, at } = valueOf(bytes, 'llama.block_count');
  assert.equal(type, 4, 'a u32 value');
  new DataView(bytes.buffer).setUint32(at, count, true);
  return bytes;
}

/** The model with its chat template replaced by `template`, padded with a comment to the same length so that
 * no offset in the file moves. */
function withTemplate(template) {
  const bytes = new Uint8Array(modelBytes);
  const { type, at } = valueOf(bytes, 'tokenizer.chat_template');
  assert.equal(type, 8, 'a string value');
  const length = Number(new DataView(bytes.buffer).getBigUint64(at, true));
  const pad = length - template.length - 4;
  assert.ok(pad >= 0, 'the hostile template fits in the real one');
  bytes.set(Buffer.from(`${template}{#${' '.repeat(pad)}#}`), at + 8);
  return bytes;
}

async function timed(promise) {
  const t0 = performance.now();
  try {
    return await promise;
  } finally {
    assert.ok(performance.now() - t0 < PROMPT_MS, `took ${performance.now() - t0} ms`);
  }
}

test('a block count the tensors cannot back is E_MODEL, not an allocation of hundreds of GB', async () => {
  for (const count of [2 ** 31 - 1, 100_000_000, 31]) {
    const e = await timed(rejectsWith(LLM.load(withBlockCount(count)), 'E_MODEL'));
    assert.match(e.message, /block/);
  }
  // The engine was not left broken: the real model loads and answers.
  const llm = await LLM.load(MODEL_PATH);
  assert.deepEqual((await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 2 })).ids, FRANCE.ids.slice(0, 2));
  llm.dispose();
});

test('hostile chat templates are E_CHAT_TEMPLATE on each request, and the model stays usable', async () => {
  const hostile = [
    // ~10^10 steps without a limit
    '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}',
    // billions of spaces from one filter argument
    "{{ messages[0]['content'] | indent(4294967295) }}",
    '{{ messages | tojson(indent=2000000000) }}',
    // a 100 MB string per step, over and over
    "{% for i in range(100000) %}{{ 'x' * 100000000 }}{% endfor %}",
    // a namespace that holds itself, and a list nested a level per step: printing them overflowed the stack
    // (refused when the model loads; the error comes with each chat request)
    '{% set ns = namespace() %}{% set ns.n = ns %}{{ ns }}',
    '{% set ns = namespace(l=[]) %}{% for i in range(90000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}',
  ];
  for (const template of hostile) {
    const llm = await LLM.load(withTemplate(template));
    try {
      const messages = [{ role: 'user', content: 'What is the capital of France?' }];
      await timed(rejectsWith(llm.chat.completions.create({ messages, max_tokens: 4 }), 'E_CHAT_TEMPLATE'));
      await timed(rejectsWith(Promise.resolve().then(() => llm.applyChatTemplate(messages)), 'E_CHAT_TEMPLATE'));
      const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 2 });
      assert.deepEqual(r.ids, FRANCE.ids.slice(0, 2), template);
    } finally {
      llm.dispose();
    }
  }
});

test('a score request too large for wasm memory is E_OUT_OF_MEMORY, and the model stays usable', async () => {
  const llm = await LLM.load(MODEL_PATH);
  try {
    // 2,048 positions x the whole vocabulary: ~100M entries, gigabytes of JSON.
    const ids = Array.from({ length: 2048 }, (_, i) => FRANCE.ids[i % FRANCE.ids.length]);
    const e = await timed(rejectsWith(llm.score(ids, { topK: 49152 }), 'E_OUT_OF_MEMORY'));
    assert.match(e.message, /scored positions/);
    const [first] = await llm.score(FRANCE.ids.slice(0, 3), { topK: 2 });
    assert.equal(first.length, 2);
    assert.deepEqual((await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 2 })).ids, FRANCE.ids.slice(0, 2));
  } finally {
    llm.dispose();
  }
});
