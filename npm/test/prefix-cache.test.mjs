// The prefix cache through the package: a chat continued after another one starts from the cache (OpenAI's
// `cached_tokens`), with the same answer as with the cache off; the budget and clearing.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH } from './helpers.mjs';

const SYSTEM = { role: 'system', content: 'You are a concise assistant. Answer in one short sentence, without lists or examples.' };
const A1 = { role: 'user', content: 'What is the capital of France?' };
const B1 = { role: 'user', content: 'Name a large ocean.' };
const A2 = { role: 'user', content: 'And what river flows through it?' };
const GREEDY = { temperature: 0, max_tokens: 16 };

/** Chat A, then chat B, then A's second turn: a session alone only keeps B, the prefix cache still has A. */
async function conversation(llm) {
  const a1 = await llm.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY });
  const b1 = await llm.chat.completions.create({ messages: [SYSTEM, B1], ...GREEDY });
  const a2 = await llm.chat.completions.create({ messages: [SYSTEM, A1, a1.choices[0].message, A2], ...GREEDY });
  return { a1, b1, a2 };
}

const cached = LLM.load(MODEL_PATH);
const plain = LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } });
after(async () => {
  (await cached).dispose();
  (await plain).dispose();
});

test('a chat continued after another starts from the prefix cache, with the same answers as without it', async () => {
  const [withCache, without] = [await cached, await plain];
  const got = await conversation(withCache);
  const want = await conversation(without);
  for (const turn of ['a1', 'b1', 'a2']) {
    assert.equal(got[turn].choices[0].message.content, want[turn].choices[0].message.content, turn);
  }
  // Without the cache, A's second turn shares only the system prompt with B, the session's last chat.
  const aPrompt = want.a2.usage.prompt_tokens;
  const shared = want.a2.usage.prompt_tokens_details.cached_tokens;
  assert.ok(shared > 0 && shared < want.a1.usage.prompt_tokens, `without the cache: ${shared} cached`);
  // With it, at least A's first prompt (its whole 16-token pages) comes from memory.
  const fromMemory = got.a2.usage.prompt_tokens_details.cached_tokens;
  const firstPrompt = want.a1.usage.prompt_tokens;
  assert.ok(fromMemory >= Math.floor(firstPrompt / 16) * 16 && fromMemory > shared && fromMemory < aPrompt, `${fromMemory} of ${aPrompt} cached`);
  const info = withCache.info().prefixCache;
  assert.ok(info.restoredTokens > 0 && info.bytes > 0 && info.bytes <= info.budgetBytes, JSON.stringify(info));
  assert.deepEqual(without.info().prefixCache.bytes, 0);
});

test('clearPrefixCache forgets it; reset alone does not', async () => {
  const llm = await cached;
  const messages = [SYSTEM, A1];
  await llm.chat.completions.create({ messages, ...GREEDY });
  await llm.reset();
  const again = await llm.chat.completions.create({ messages, ...GREEDY });
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, 'reset keeps the prefix cache');
  await llm.reset();
  await llm.clearPrefixCache();
  assert.equal(llm.info().prefixCache.bytes, 0);
  const cold = await llm.chat.completions.create({ messages, ...GREEDY });
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(cold.choices[0].message.content, again.choices[0].message.content);
});

test('maxTokens: 0 makes a conversation ready without a token; its next turn evaluates only its own tokens', async () => {
  const [llm, without] = [await cached, await plain];
  const first = await without.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY });
  const history = [SYSTEM, A1, first.choices[0].message];
  const want = await without.chat.completions.create({ messages: [...history, A2], ...GREEDY });
  await llm.reset();
  const ready = await llm.complete(llm.applyChatTemplate(history, { addGenerationPrompt: false }), { maxTokens: 0 });
  assert.deepEqual([ready.ids, ready.text, ready.finishReason, ready.usage.completionTokens], [[], '', 'length', 0]);
  const next = await llm.chat.completions.create({ messages: [...history, A2], ...GREEDY });
  assert.equal(next.usage.prompt_tokens_details.cached_tokens, ready.usage.promptTokens);
  assert.equal(next.choices[0].message.content, want.choices[0].message.content);
});

test('a bad prefixCache budget is E_INVALID_ARGUMENT', async () => {
  await assert.rejects(LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: -1 } }), { code: 'E_INVALID_ARGUMENT' });
});

test('saveState/restoreState continue a conversation in another model instance, with the same answer', async () => {
  const [a, b] = [await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } }), await LLM.load(MODEL_PATH, { prefixCache: { budgetBytes: 0 } })];
  try {
    const first = await a.chat.completions.create({ messages: [SYSTEM, A1], ...GREEDY });
    const state = await a.saveState();
    const turn2 = [SYSTEM, A1, first.choices[0].message, A2];
    const want = await a.chat.completions.create({ messages: turn2, ...GREEDY });
    for (const bad of [state.subarray(0, state.length - 1), new Uint8Array(100)]) {
      await assert.rejects(b.restoreState(bad), { code: 'E_INVALID_ARGUMENT' });
    }
    await b.restoreState(state);
    const got = await b.chat.completions.create({ messages: turn2, ...GREEDY });
    assert.equal(got.choices[0].message.content, want.choices[0].message.content);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, want.usage.prompt_tokens_details.cached_tokens);
    assert.ok(got.usage.prompt_tokens_details.cached_tokens > 0);
  } finally {
    a.dispose();
    b.dispose();
  }
});
