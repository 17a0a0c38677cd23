// The two-tier KV cache through the package: `kvCache: { cold: 'q8_0' }` loads, reports its format and smaller KV
// memory in info(), answers after a long prompt whose older blocks went to the q8_0 tier, saves and restores a
// conversation in its format (refused by an f16 model with E_KV_CACHE), and its option is checked.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH, REPO_DIR, rejectsWith } from './helpers.mjs';

// One thread: the single-thread build (the tiers are the same code in every build).
const tiered = LLM.load(MODEL_PATH, { threads: 1, contextSize: 1024, kvCache: { cold: 'q8_0', hotTokens: 32 } });
const plain = LLM.load(MODEL_PATH, { threads: 1, contextSize: 1024 });
after(async () => {
  (await tiered).dispose();
  (await plain).dispose();
});

// ~250 tokens of system prompt, then the question: with a hot window of 32, most blocks are cold when it is answered.
const text = readFileSync(join(REPO_DIR, 'cli/src/bench_prompt.txt'), 'utf8');
const MESSAGES = [
  { role: 'system', content: `Background notes:\n${text}\n${text}` },
  { role: 'user', content: 'What is the capital of France?' },
];

test('info() reports the format, and the two-tier cache takes less memory', async () => {
  const [t, p] = [(await tiered).info(), (await plain).info()];
  assert.deepEqual(t.kvCache, { cold: 'q8_0', hotTokens: 32 });
  assert.deepEqual(p.kvCache, { cold: 'f16', hotTokens: null });
  assert.ok(t.kvCacheBytes * 1.7 < p.kvCacheBytes, `${t.kvCacheBytes} vs ${p.kvCacheBytes} bytes`);
});

test('a q8_0 cold tier answers after a long prompt as the f16 cache does', async () => {
  const request = { messages: MESSAGES, temperature: 0, max_tokens: 12 };
  const got = await (await tiered).chat.completions.create(request);
  const want = await (await plain).chat.completions.create(request);
  assert.ok(got.usage.prompt_tokens > 200, `${got.usage.prompt_tokens} prompt tokens`);
  assert.match(got.choices[0].message.content, /Paris/);
  assert.match(want.choices[0].message.content, /Paris/);
});

test('a conversation saved in the two-tier format restores there, and an f16 model refuses it', async () => {
  const llm = await tiered;
  await llm.chat.completions.create({ messages: MESSAGES, temperature: 0, max_tokens: 4 });
  const state = await llm.saveState();
  const next = { messages: [...MESSAGES, { role: 'assistant', content: 'Paris.' }, { role: 'user', content: 'And of Italy?' }], temperature: 0, max_tokens: 6 };
  const want = await llm.chat.completions.create(next);
  await llm.restoreState(state);
  const again = await llm.chat.completions.create(next);
  assert.equal(again.choices[0].message.content, want.choices[0].message.content);
  await rejectsWith((await plain).restoreState(state), 'E_KV_CACHE');
});

test('the kvCache option is checked', async () => {
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1, kvCache: { cold: 'q5_0' } }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1, kvCache: { cold: 'q8_0', hot: 64 } }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1, kvCache: { cold: 'q8_0', hotTokens: -32 } }), 'E_INVALID_ARGUMENT');
  // Whole blocks of 32 positions: the engine's check, after the model is read.
  await rejectsWith(LLM.load(MODEL_PATH, { threads: 1, kvCache: { cold: 'q8_0', hotTokens: 100 } }), 'E_KV_CACHE');
});
