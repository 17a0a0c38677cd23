// MicroLoRA in Chromium's real IndexedDB: feedback on one page load teaches the default model a made-up fact; after a
// reload the adapter comes back from IndexedDB with its steps and gives the taught answer; a damaged record is
// E_ADAPTER and stays in the store.
// Run: node --test tests/browser/   (after `npm ci && npm run build` in npm/ and scripts/build-wasm.sh)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL_PATH } from '../../npm/test/helpers.mjs';
import { examplePage } from './chromium.mjs';

const QUESTION = [{ role: 'user', content: 'What is the capital of Zorbania?' }];
const ANSWER = 'The capital of Zorbania is Quillmere.';

const ex = examplePage({ '/model.gguf': MODEL_PATH });

/** On the page: open the MicroLoRA kept in IndexedDB, give it `steps` pieces of feedback, answer the question with
 * it, and return its steps and the answer (or the error). */
function session(steps) {
  return ex.page.evaluate(
    async ({ steps, QUESTION, ANSWER }) => {
      const { LLM } = await import('@ruvector/ruvllm');
      const llm = await LLM.load('/model.gguf', { threads: 1 });
      try {
        const lora = await llm.microLora({ store: 'indexeddb', name: 'facts', learningRate: 0.02 });
        for (let i = 0; i < steps; i++) await llm.feedback({ messages: QUESTION, response: ANSWER, accepted: true });
        const r = await llm.complete(llm.applyChatTemplate(QUESTION), { temperature: 0, maxTokens: 12, adapters: [{ id: lora.id }] });
        return { steps: lora.info().steps, text: r.text, ids: r.ids };
      } catch (e) {
        return { error: { code: e.code, message: e.message } };
      } finally {
        llm.dispose();
      }
    },
    { steps, QUESTION, ANSWER },
  );
}

test('a MicroLoRA taught on one page load is back from IndexedDB after a reload, with the same answer', async () => {
  const taught = await session(8);
  assert.equal(taught.error, undefined, JSON.stringify(taught.error));
  assert.equal(taught.steps, 8);
  assert.match(taught.text, /^The capital of Zorbania is Quillmere\./);
  await ex.page.reload();
  const back = await session(0);
  assert.deepEqual(back, taught);
});

test('a damaged MicroLoRA record is E_ADAPTER and stays in IndexedDB', async () => {
  const r = await ex.page.evaluate(async () => {
    const { IndexedDbStore, LLM } = await import('@ruvector/ruvllm');
    const store = new IndexedDbStore('ruvllm-microlora');
    const bytes = await store.get('microlorafacts');
    bytes[bytes.length >> 1] ^= 1;
    await store.put([{ key: 'microlorafacts', bytes }]);
    const llm = await LLM.load('/model.gguf', { threads: 1 });
    try {
      await llm.microLora({ store: 'indexeddb', name: 'facts' });
      return { opened: true };
    } catch (e) {
      const kept = await store.get('microlorafacts');
      return { code: e.code, kept: kept.length === bytes.length && kept.every((b, i) => b === bytes[i]) };
    } finally {
      llm.dispose();
    }
  });
  assert.deepEqual(r, { code: 'E_ADAPTER', kept: true });
});
