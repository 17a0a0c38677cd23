// Embeddings through the package (the single-thread and threaded wasm builds): all-MiniLM-L6-v2 (F16 GGUF from
// scripts/fetch-embed-model.sh) against llama.cpp's vectors of tests/fixtures/embed_sentences.txt, the OpenAI shape,
// pooling options, and the typed refusals.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, MODEL_PATH, REPO_DIR, rejectsWith } from './helpers.mjs';

const fixtures = join(REPO_DIR, 'tests', 'fixtures');
const sentences = readFileSync(join(fixtures, 'embed_sentences.txt'), 'utf8').split('\n').filter((s) => s.length);
const { n_embd: dims } = JSON.parse(readFileSync(join(fixtures, 'embed_reference.json'), 'utf8'));
const flat = new Float32Array(new Uint8Array(readFileSync(join(fixtures, 'embed_reference.f32'))).buffer);
const reference = sentences.map((_, i) => flat.subarray(i * dims, (i + 1) * dims));

const cosine = (a, b) => {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
};

for (const threads of [1, 2]) {
  test(`llm.embed equals llama.cpp's vectors on every reference sentence (${threads} thread${threads > 1 ? 's' : ''})`, async () => {
    const llm = await LLM.load(EMBED_MODEL_PATH, { threads });
    try {
      assert.equal(llm.info().architecture, 'bert');
      const got = await llm.embed(sentences);
      assert.equal(got.length, sentences.length);
      const cosines = got.map((v, i) => cosine(v, reference[i]));
      const min = Math.min(...cosines);
      console.log(`${threads} thread(s): min cosine ${min.toFixed(7)} over ${sentences.length} sentences`);
      assert.ok(min >= 0.999, `min cosine ${min}`);
    } finally {
      llm.dispose();
    }
  });
}

test('embeddings.create has the OpenAI shape; pooling and normalize; an encoder does not generate', async () => {
  const llm = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
  after(() => llm.dispose());
  const r = await llm.embeddings.create({ input: ['hello world', 'a cat'], model: 'minilm' });
  assert.equal(r.object, 'list');
  assert.equal(r.model, 'minilm');
  assert.deepEqual(r.data.map((d) => [d.object, d.index, d.embedding.length]), [['embedding', 0, dims], ['embedding', 1, dims]]);
  assert.deepEqual(r.usage, { prompt_tokens: 4 + 4, total_tokens: 8 }); // [CLS] hello world [SEP], [CLS] a cat [SEP]
  assert.ok(cosine(r.data[0].embedding, reference[sentences.indexOf('hello world')]) > 0.999);

  const [raw] = await llm.embed('hello world', { pooling: 'cls', normalize: false });
  assert.ok(Math.abs(Math.hypot(...raw) - 1) > 1e-3, 'not normalized');
  await rejectsWith(llm.embed('x', { pooling: 'max' }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.embeddings.create({ input: 'x', dimensions: 8 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(llm.embed('word '.repeat(600)), 'E_CONTEXT_OVERFLOW');
  await rejectsWith(llm.complete('hi'), 'E_MODEL');
});

test('a decoder model gives mean-pooled embeddings too', async () => {
  const llm = await LLM.load(MODEL_PATH, { threads: 1 });
  after(() => llm.dispose());
  const [mean, last] = await Promise.all([llm.embed('The capital of France is'), llm.embed('The capital of France is', { pooling: 'last' })]);
  assert.equal(mean[0].length, llm.info().embeddingSize);
  assert.ok(Math.abs(Math.hypot(...mean[0]) - 1) < 1e-5);
  assert.ok(cosine(mean[0], last[0]) < 0.999);
});
