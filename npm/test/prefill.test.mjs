// A long prompt is prefilled in batches, one engine step each: the generate loop yields to the event loop and
// checks its AbortSignal between batches (of 64 tokens), so aborting during the prefill takes effect after the
// current batch.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, rejectsWith } from './helpers.mjs';

const llm = await LLM.load(MODEL_PATH);
after(() => llm.dispose());
const GREEDY = { temperature: 0 };
const PROMPT_TOKENS = 1500;

/** A real-text prompt of exactly PROMPT_TOKENS tokens. */
function longPrompt() {
  const text = 'Once upon a time, in a small village by the sea, there lived an old fisherman and his three daughters. '.repeat(100);
  const ids = llm.tokenize(text, { prompt: true });
  assert.ok(ids.length >= PROMPT_TOKENS, `only ${ids.length} tokens`);
  return ids.slice(0, PROMPT_TOKENS);
}

test('an AbortSignal stops the prefill of a long prompt promptly, with no tokens; the model then answers', async () => {
  const prompt = longPrompt();
  const controller = new AbortController();
  let abortedAt;
  // A timer can only fire while the prefill is running if the loop yields between batches.
  const timer = setTimeout(() => {
    abortedAt = performance.now();
    controller.abort();
  }, 100);
  const chunks = [];
  const startedAt = performance.now();
  try {
    await rejectsWith(
      (async () => {
        for await (const chunk of llm.generate(prompt, { ...GREEDY, maxTokens: 4, signal: controller.signal })) chunks.push(chunk);
      })(),
      'E_ABORTED',
    );
  } finally {
    clearTimeout(timer);
  }
  const endedAt = performance.now();
  assert.ok(abortedAt !== undefined, 'the abort timer ran during the prefill');
  assert.deepEqual(chunks, [], 'no token before or after the abort');

  // For scale, a prefill of 4 batches (256 tokens) from scratch. The abort is due 100 ms after the start; the timer
  // may be late by the batch in progress, and stopping waits for at most one more: together less than 4 batches
  // (the whole prompt is 24, and attention grows along it). A prefill in one call would end before the timer ran.
  await llm.reset();
  await llm.clearPrefixCache();
  const scale = await llm.complete(prompt.slice(0, 256), { ...GREEDY, maxTokens: 1 });
  assert.equal(scale.usage.cachedTokens, 0);
  const scaleMs = scale.timings.prefillMs;
  assert.ok(
    endedAt - startedAt < 100 + scaleMs,
    `aborted ${(abortedAt - startedAt).toFixed(0)} ms and stopped ${(endedAt - startedAt).toFixed(0)} ms after the ` +
      `start; a prefill of 256 tokens takes ${scaleMs.toFixed(0)} ms`,
  );

  assert.deepEqual((await llm.complete(FRANCE.prompt, GREEDY)).ids, FRANCE.ids);
});
