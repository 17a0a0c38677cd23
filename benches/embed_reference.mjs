// Reference embeddings for tests/rust/embed.rs, from llama.cpp (node-llama-cpp 3.22.1, benches/package.json) on our
// F16 GGUF of all-MiniLM-L6-v2 (scripts/fetch-embed-model.sh): the GGUF's pooling (mean), L2-normalized here.
// Writes tests/fixtures/embed_reference.json (model hash, llama.cpp's token ids of each sentence of
// tests/fixtures/embed_sentences.txt) and tests/fixtures/embed_reference.f32 (the vectors, little-endian f32, one row
// of n_embd per sentence). CI does not run this (it needs benches/setup.sh); rerun it when the sentences change:
//   node benches/embed_reference.mjs "$(scripts/fetch-embed-model.sh)"
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const modelPath = process.argv[2];
if (!modelPath) throw new Error('usage: node benches/embed_reference.mjs MODEL.F16.gguf');
const sentences = readFileSync(`${root}/tests/fixtures/embed_sentences.txt`, 'utf8').split('\n').filter((s) => s.length);

const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
const llama = await getLlama({
  gpu: false,
  build: 'never',
  skipDownload: true,
  usePrebuiltBinaries: true,
  existingPrebuiltBinaryMustMatchBuildOptions: false,
  progressLogs: false,
  logLevel: LlamaLogLevel.error,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createEmbeddingContext({ contextSize: 512, batchSize: 512 });
const [cls, sep] = [model.tokens.bos, model.tokens.sep ?? model.tokens.eos];

const rows = [];
const ids = [];
for (const text of sentences) {
  // What the embedding context evaluates: llama.cpp's WordPiece tokens between [CLS] and [SEP].
  ids.push([cls, ...model.tokenize(text), sep]);
  const { vector } = await context.getEmbeddingFor(text);
  const norm = Math.hypot(...vector);
  rows.push(vector.map((x) => x / norm));
}
const n_embd = rows[0].length;
const flat = new Float32Array(rows.length * n_embd);
rows.forEach((row, i) => flat.set(row, i * n_embd));
writeFileSync(`${root}/tests/fixtures/embed_reference.f32`, Buffer.from(flat.buffer));
const sha256 = createHash('sha256').update(readFileSync(modelPath)).digest('hex');
const reference = { generator: 'node-llama-cpp 3.22.1, createEmbeddingContext, pooling from the GGUF (mean), L2-normalized', model_sha256: sha256, n_embd, ids };
writeFileSync(`${root}/tests/fixtures/embed_reference.json`, JSON.stringify(reference) + '\n');
console.error(`${rows.length} sentences, ${n_embd} dims; token counts ${Math.min(...ids.map((x) => x.length))}..${Math.max(...ids.map((x) => x.length))}`);
await context.dispose();
await model.dispose();
