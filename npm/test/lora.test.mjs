// LoRA adapters through the package: a rank-8 adapter on every projection of SmolLM2 (tests/fixtures/
// make_lora_adapters.py, in $RUVLLM_FIXTURES) gives llama.cpp's greedy tokens with the same adapter
// (tests/fixtures/lora-smollm2-reference.json) while their lead is clear; scale 0 is the base model; adapters are
// chosen per request, in generate and the chat API; bad files and ids are typed errors. (The adapter's numerics,
// position by position against llama.cpp's distributions, are tests/rust/lora.rs's: its delta moves few greedy
// tokens, so tokens alone do not tell it from the base model.)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, REPO_DIR, drain, rejectsWith } from './helpers.mjs';

const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const ADAPTER = join(FIXTURES, 'lora-smollm2-r8.gguf');
const reference = JSON.parse(readFileSync(join(REPO_DIR, 'tests', 'fixtures', 'lora-smollm2-reference.json'), 'utf8'));
const france = reference.prompts.find((p) => p.name === 'chat_france_nosystem');
/** llama.cpp leads by >= 0.1 on the first 18 tokens of its continuation (the reference's margins). */
const CLEAR = 18;

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
after(() => llm.dispose());
const greedy = async (options) => (await drain(llm.generate(france.prompt, { temperature: 0, maxTokens: CLEAR, ignoreEos: true, ...options }))).result;

test('an adapter gives llama.cpp\'s greedy tokens under the same adapter; scale 0 is the base model', async () => {
  const id = await llm.loadAdapter(ADAPTER);
  const adapted = await greedy({ adapters: [{ id }] });
  assert.deepEqual(adapted.ids, france.continuation.ids.slice(0, CLEAR));
  const base = await greedy({});
  assert.deepEqual(base.ids.slice(0, FRANCE.ids.length), FRANCE.ids);
  // This adapter's random delta leaves most clear leads as they were (llama.cpp's top-1 too); a larger scale moves them.
  assert.notDeepEqual((await greedy({ adapters: [{ id, scale: 8 }] })).ids, base.ids);
  assert.deepEqual((await greedy({ adapters: [{ id, scale: 0 }] })).ids, base.ids);
  // Switching per request: the adapted answer again, then the base one, each as from a fresh session.
  assert.deepEqual((await greedy({ adapters: [{ id, scale: 1 }] })).ids, adapted.ids);
  assert.deepEqual((await greedy({})).ids, base.ids);
  const chat = await llm.chat.completions.create({
    messages: [{ role: 'user', content: 'What is the capital of France?' }],
    temperature: 0,
    max_tokens: 6,
    adapters: [{ id }],
  });
  assert.equal(chat.choices[0].message.content, llm.detokenize(adapted.ids.slice(0, 6)));
  assert.equal(llm.unloadAdapter(id), true);
  assert.equal(llm.unloadAdapter(id), false);
  await rejectsWith(greedy({ adapters: [{ id }] }), 'E_ADAPTER');
});

test('bad adapter files and options are typed errors, and the model stays usable', async () => {
  const bytes = new Uint8Array(readFileSync(ADAPTER));
  await rejectsWith(llm.loadAdapter(bytes.subarray(0, bytes.length >> 1)), 'E_GGUF');
  await rejectsWith(llm.loadAdapter(MODEL_PATH), 'E_ADAPTER'); // a model, not an adapter
  await rejectsWith(llm.loadAdapter(join(FIXTURES, 'lora-bad-arch.gguf')), 'E_ADAPTER'); // another architecture
  await rejectsWith(greedy({ adapters: [{ id: 1e6 }] }), 'E_ADAPTER');
  await rejectsWith(greedy({ adapters: [{ scale: 1 }] }), 'E_INVALID_ARGUMENT');
  await rejectsWith(greedy({ adapters: [{ id: 0, scale: Number.NaN }] }), 'E_INVALID_ARGUMENT');
  assert.deepEqual((await greedy({})).ids.slice(0, FRANCE.ids.length), FRANCE.ids);
});
