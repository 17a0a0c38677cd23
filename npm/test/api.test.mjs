// The package API against the real default model: streaming, stop strings, seeds, abort, queueing, chat.
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { AbortError, LLM, RuvllmError } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, drain, rejectsWith } from './helpers.mjs';

const llm = await LLM.load(MODEL_PATH);
after(() => llm.dispose());
const GREEDY = { temperature: 0 };
const STORY = 'Once upon a time, in a small village by the sea,';

test('streams the reference answer to the raw ChatML France prompt, yielding to the event loop between tokens', async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 0);
  const seen = [];
  let result;
  try {
    const it = llm.generate(FRANCE.prompt, GREEDY);
    for (let r = await it.next(); ; r = await it.next()) {
      if (r.done) {
        result = r.value;
        break;
      }
      seen.push({ ...r.value, ticks });
    }
  } finally {
    clearInterval(timer);
  }
  assert.deepEqual(seen.map((c) => c.id), FRANCE.ids);
  assert.equal(seen.map((c) => c.text).join(''), FRANCE.text);
  assert.deepEqual(result.ids, FRANCE.ids);
  assert.equal(result.text, FRANCE.text);
  assert.equal(result.finishReason, 'stop');
  // Every chunk but the last (the end-of-generation token, which needs no forward pass and can come back within the
  // same millisecond) took a forward pass of ~10 ms, during which a 1 ms timer must have run.
  for (let i = 1; i < seen.length - 1; i++) assert.ok(seen[i].ticks > seen[i - 1].ticks, `a timer ran between chunks ${i - 1} and ${i}`);
});

test('complete() returns the same result with usage and timings', async () => {
  const r = await llm.complete(FRANCE.prompt, GREEDY);
  assert.deepEqual(r.ids, FRANCE.ids);
  const promptTokens = llm.tokenize(FRANCE.prompt, { prompt: true }).length;
  assert.equal(r.usage.promptTokens, promptTokens);
  assert.equal(r.usage.completionTokens, FRANCE.ids.length);
  assert.equal(r.usage.totalTokens, promptTokens + FRANCE.ids.length);
  assert.ok(r.timings.decodeTokensPerSecond > 0 && r.timings.prefillMs >= 0);
});

test('token ids as the prompt give the same answer as the text', async () => {
  const r = await llm.complete(llm.tokenize(FRANCE.prompt, { prompt: true }), GREEDY);
  assert.deepEqual(r.ids, FRANCE.ids);
});

test('stop strings end generation and are not returned, even across tokens', async () => {
  for (const [stop, expected] of [
    [' Paris', 'The capital of France is'],
    [['nothing like this', 'France is P'], 'The capital of '],
  ]) {
    const { chunks, result } = await drain(llm.generate(FRANCE.prompt, { ...GREEDY, stop }));
    assert.equal(result.text, expected);
    assert.equal(chunks.map((c) => c.text).join(''), expected);
    assert.equal(result.finishReason, 'stop');
  }
});

test('maxTokens ends generation with finishReason "length"', async () => {
  const r = await llm.complete(FRANCE.prompt, { ...GREEDY, maxTokens: 3 });
  assert.deepEqual(r.ids, FRANCE.ids.slice(0, 3));
  assert.equal(r.finishReason, 'length');
});

test('sampling is deterministic for a seed and varies across seeds', async () => {
  const opts = { temperature: 1, topK: 0, topP: 1, minP: 0, maxTokens: 16 };
  const a = await llm.complete(STORY, { ...opts, seed: 7 });
  const b = await llm.complete(STORY, { ...opts, seed: 7 });
  assert.deepEqual(a.ids, b.ids);
  const others = new Set();
  for (const seed of [1, 2, 3, 4]) others.add((await llm.complete(STORY, { ...opts, seed })).ids.join());
  others.add(a.ids.join());
  assert.ok(others.size > 1, 'different seeds gave the same tokens');
  assert.equal(a.seed, 7);
  // Without a seed each request draws a fresh one, which its result names: asking again samples anew, and the
  // named seed replays the answer.
  const fresh = [await llm.complete(STORY, opts), await llm.complete(STORY, opts)];
  assert.notEqual(fresh[0].seed, fresh[1].seed);
  for (const r of fresh) {
    assert.ok(Number.isSafeInteger(r.seed) && r.seed >= 0, `seed ${r.seed}`);
    assert.deepEqual((await llm.complete(STORY, { ...opts, seed: r.seed })).ids, r.ids);
  }
  const chat = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me a story.' }], temperature: 1, max_tokens: 8 });
  const again = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me a story.' }], temperature: 1, max_tokens: 8, seed: chat.seed });
  assert.equal(again.choices[0].message.content, chat.choices[0].message.content);
});

test('an AbortSignal stops generation promptly and leaves the model usable', async () => {
  const controller = new AbortController();
  const seen = [];
  const err = await rejectsWith(
    (async () => {
      for await (const chunk of llm.generate(STORY, { ...GREEDY, maxTokens: 200, ignoreEos: true, signal: controller.signal })) {
        seen.push(chunk);
        if (seen.length === 2) controller.abort();
      }
    })(),
    'E_ABORTED',
  );
  assert.ok(err instanceof AbortError && err.name === 'AbortError');
  assert.equal(seen.length, 2, 'no token after the abort');
  assert.deepEqual((await llm.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
  // Already aborted: nothing runs.
  await rejectsWith(drain(llm.generate(FRANCE.prompt, { signal: AbortSignal.abort() })), 'E_ABORTED');
});

test('leaving the loop early cancels the generation and leaves the model usable', async () => {
  for await (const chunk of llm.generate(STORY, { ...GREEDY, maxTokens: 100 })) {
    assert.ok(chunk.id >= 0);
    break;
  }
  assert.deepEqual((await llm.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
});

test('concurrent generate calls on one model are queued, in order, without interleaving', async () => {
  const order = [];
  const run = async (name) => {
    const { chunks, result } = await drain(
      (async function* () {
        for await (const c of llm.generate(FRANCE.prompt, GREEDY)) {
          order.push(name);
          yield c;
        }
      })(),
    );
    return { ids: chunks.map((c) => c.id), result };
  };
  const [a, b, c] = await Promise.all([run('a'), run('b'), run('c')]);
  for (const r of [a, b, c]) assert.deepEqual(r.ids, FRANCE.ids);
  const n = FRANCE.ids.length;
  assert.equal(order.join(''), 'a'.repeat(n) + 'b'.repeat(n) + 'c'.repeat(n));
});

test('a queued call whose signal aborts leaves the queue; the running one finishes', async () => {
  const controller = new AbortController();
  const first = llm.complete(FRANCE.prompt, GREEDY);
  const second = llm.complete(FRANCE.prompt, { ...GREEDY, signal: controller.signal });
  controller.abort();
  await rejectsWith(second, 'E_ABORTED');
  assert.deepEqual((await first).ids, FRANCE.ids);
  assert.deepEqual((await llm.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
});

test('tokenize and detokenize agree with llama.cpp on the reference cases', () => {
  const referenceDir = join(new URL('.', import.meta.url).pathname, '..', '..', '..', 'shared', 'reference');
  const cases = JSON.parse(readFileSync(join(process.env.RUVLLM_REFERENCE_DIR ?? referenceDir, 'tokenizer.json'), 'utf8'));
  assert.ok(cases.length >= 10);
  for (const c of cases) {
    assert.deepEqual(llm.tokenize(c.text, { special: c.parse_special }), c.ids, c.name);
    assert.equal(llm.detokenize(c.ids), c.text, c.name);
  }
});

test('info() describes the model', () => {
  const info = llm.info();
  assert.equal(info.architecture, 'llama');
  assert.equal(info.fileBytes, statSync(MODEL_PATH).size);
  assert.equal(typeof llm.detokenize([info.vocabSize - 1]), 'string');
  assert.throws(() => llm.detokenize([info.vocabSize]), (e) => e instanceof RuvllmError && e.code === 'E_TOKEN_OUT_OF_RANGE');
  assert.ok(info.contextSize > 0 && info.contextSize <= info.trainedContextLength);
  assert.equal(info.simd128, true);
  assert.equal(info.hasChatTemplate, true);
});

test('chat.completions.create without streaming answers in the OpenAI shape', async () => {
  const messages = [{ role: 'user', content: 'What is the capital of France?' }];
  const reply = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 48 });
  assert.equal(reply.object, 'chat.completion');
  assert.match(reply.id, /^chatcmpl-/);
  assert.equal(reply.choices.length, 1);
  assert.equal(reply.choices[0].message.role, 'assistant');
  // The same as generating from the model's own template (which adds a default system turn).
  const prompt = llm.applyChatTemplate(messages);
  assert.ok(prompt.startsWith('<|im_start|>system\n'));
  const direct = await llm.complete(prompt, { ...GREEDY, maxTokens: 48 });
  assert.equal(reply.choices[0].message.content, direct.text);
  assert.equal(reply.choices[0].finish_reason, direct.finishReason);
  console.log(`chat.completions answered the France question with: ${JSON.stringify(direct.text)}`);
  const promptTokens = llm.tokenize(prompt, { prompt: true }).length;
  assert.deepEqual(
    [reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens],
    [promptTokens, direct.ids.length, promptTokens + direct.ids.length],
  );
});

test('chat.completions.create with stream: true streams deltas, then finish_reason and usage', async () => {
  const messages = [
    { role: 'system', content: 'You are a terse geography tutor.' },
    { role: 'user', content: 'What is the capital of Italy?' },
  ];
  const whole = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 24 });
  const stream = await llm.chat.completions.create({ messages, temperature: 0, max_tokens: 24, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const last = chunks.at(-1);
  assert.equal(last.choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.deepEqual(last.usage.completion_tokens, whole.usage.completion_tokens);
  for (const c of chunks.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);
  for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk');
  const text = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, whole.choices[0].message.content);
  assert.ok(chunks.length > 3, 'more than one content chunk');
});

test('leaving a chat stream early leaves the model usable', async () => {
  const stream = await llm.chat.completions.create({ messages: [{ role: 'user', content: 'Tell me a long story.' }], stream: true });
  let n = 0;
  for await (const _ of stream) if (++n === 3) break;
  assert.deepEqual((await llm.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
});

test('score() is consistent with greedy decoding (teacher forcing)', async () => {
  const prompt = llm.tokenize(FRANCE.prompt, { prompt: true });
  const ids = [...prompt, ...FRANCE.ids.slice(0, -1)];
  const positions = await llm.score(ids, { topK: 3 });
  assert.equal(positions.length, ids.length);
  for (const top of positions) {
    assert.equal(top.length, 3);
    assert.ok(top[0][1] >= top[1][1] && top[1][1] >= top[2][1]);
    assert.ok(top.reduce((s, [, p]) => s + p, 0) <= 1 + 1e-9);
  }
  const greedy = positions.slice(prompt.length - 1).map((top) => top[0][0]);
  assert.deepEqual(greedy, FRANCE.ids);
});

test('errors are RuvllmError instances with a code', async () => {
  const err = await rejectsWith(llm.complete([], GREEDY), 'E_INVALID_ARGUMENT');
  assert.ok(err instanceof RuvllmError && err instanceof Error);
});
