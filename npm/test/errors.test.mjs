// Bad arguments and misuse: each gets a RuvllmError with a code, and the model stays usable.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, drain, rejectsWith } from './helpers.mjs';

const llm = await LLM.load(MODEL_PATH);
after(() => llm.dispose());
const gen = async (prompt, options) => drain(llm.generate(prompt, options));

test('generation options out of range are refused with E_INVALID_ARGUMENT, naming the option', async () => {
  const cases = [
    [{ maxTokens: -1 }, /maxTokens/],
    [{ maxTokens: 2.5 }, /maxTokens/],
    [{ maxTokens: '10' }, /maxTokens/],
    [{ topP: 1.5 }, /top_p/],
    [{ topP: -0.1 }, /top_p/],
    [{ minP: 2 }, /min_p/],
    [{ temperature: -1 }, /temperature/],
    [{ temperature: Number.NaN }, /temperature/],
    [{ topK: -1 }, /topK/],
    [{ seed: 1.5 }, /seed/],
    [{ seed: -1 }, /seed/],
    [{ seed: 2 ** 60 }, /seed/],
    [{ stop: '' }, /stop/],
    [{ stop: [1] }, /stop/],
    [{ max_tokens: 5 }, /unknown option 'max_tokens'/],
    [{ signal: 'soon' }, /signal/],
  ];
  for (const [options, message] of cases) {
    const e = await rejectsWith(gen(FRANCE.prompt, options), 'E_INVALID_ARGUMENT');
    assert.match(e.message, message, JSON.stringify(options));
  }
  assert.deepEqual((await llm.complete(FRANCE.prompt, { temperature: 0 })).ids, FRANCE.ids);
});

test('bad prompts are refused with a code', async () => {
  await rejectsWith(gen(42), 'E_INVALID_ARGUMENT');
  await rejectsWith(gen([]), 'E_INVALID_ARGUMENT');
  await rejectsWith(gen(''), 'E_INVALID_ARGUMENT');
  await rejectsWith(gen([1, -2, 3]), 'E_INVALID_ARGUMENT');
  await rejectsWith(gen([1, 2.5]), 'E_INVALID_ARGUMENT');
  await rejectsWith(gen([1, llm.info().vocabSize]), 'E_TOKEN_OUT_OF_RANGE');
  assert.throws(() => llm.tokenize(null), { code: 'E_INVALID_ARGUMENT' });
  assert.throws(() => llm.detokenize('1,2'), { code: 'E_INVALID_ARGUMENT' });
  await rejectsWith(llm.score([1, 2], { topK: 0 }), 'E_INVALID_ARGUMENT');
  assert.deepEqual((await llm.complete(FRANCE.prompt, { temperature: 0 })).ids, FRANCE.ids);
});

test('a prompt longer than the context window is refused with E_CONTEXT_OVERFLOW', async () => {
  const small = await LLM.load(MODEL_PATH, { contextSize: 32 });
  try {
    assert.equal(small.info().contextSize, 32);
    const e = await rejectsWith(small.complete('word '.repeat(40)), 'E_CONTEXT_OVERFLOW');
    assert.match(e.message, /context window of 32/);
    // Generation stops at the end of the window with finishReason "length".
    const r = await small.complete(FRANCE.prompt, { temperature: 0, maxTokens: 100, ignoreEos: true });
    assert.equal(r.finishReason, 'length');
    assert.ok(r.usage.promptTokens + r.usage.completionTokens <= 32);
  } finally {
    small.dispose();
  }
});

test('bad chat completion requests are refused with E_INVALID_ARGUMENT', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const bad = [
    [{ messages: 'Hi' }, /messages/],
    [{ messages: [{ role: 'user', content: ['parts'] }] }, /content/],
    [{ messages, n: 2 }, /n = 1/],
    [{ messages, logit_bias: { 1: 5 } }, /logit_bias/],
    [{ messages, top_p: 3 }, /top_p/],
    [{ messages, max_tokens: -5 }, /maxTokens/],
  ];
  for (const [body, message] of bad) {
    const e = await rejectsWith(
      (async () => {
        const r = await llm.chat.completions.create(body);
        if (body.stream) for await (const _ of r);
      })(),
      'E_INVALID_ARGUMENT',
    );
    assert.match(e.message, message);
  }
});

test('every call after dispose() fails with E_DISPOSED; dispose() is idempotent', async () => {
  const doomed = await LLM.load(MODEL_PATH);
  doomed.dispose();
  doomed.dispose();
  assert.throws(() => doomed.info(), { code: 'E_DISPOSED' });
  assert.throws(() => doomed.tokenize('x'), { code: 'E_DISPOSED' });
  assert.throws(() => doomed.detokenize([1]), { code: 'E_DISPOSED' });
  assert.throws(() => doomed.applyChatTemplate([]), { code: 'E_DISPOSED' });
  assert.throws(() => doomed.generate('x'), { code: 'E_DISPOSED' });
  await rejectsWith(doomed.complete('x'), 'E_DISPOSED');
  await rejectsWith(doomed.score([1, 2]), 'E_DISPOSED');
  await rejectsWith(doomed.reset(), 'E_DISPOSED');
  await rejectsWith(doomed.chat.completions.create({ messages: [{ role: 'user', content: 'x' }] }), 'E_DISPOSED');
});

test('dispose() during a generation ends it (and the queued ones) with E_DISPOSED', async () => {
  const doomed = await LLM.load(MODEL_PATH);
  const seen = [];
  const running = (async () => {
    for await (const c of doomed.generate(FRANCE.prompt, { temperature: 0 })) {
      seen.push(c);
      if (seen.length === 2) doomed.dispose();
    }
  })();
  const queued = doomed.complete(FRANCE.prompt);
  await rejectsWith(running, 'E_DISPOSED');
  await rejectsWith(queued, 'E_DISPOSED');
  assert.equal(seen.length, 2);
  assert.throws(() => doomed.info(), { code: 'E_DISPOSED' });
});
