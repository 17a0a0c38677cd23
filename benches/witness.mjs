// The witness log's costs (issue 43: a witness write <= 1 ms on the page's thread, the log's size per entry), in Node
// with the package, a file store in a temporary folder:
// - what a request pays: `record` (the call `LLM.generate` makes after the answer) and the `info()` it reads the
//   model's name from, per call, median and 99th percentile;
// - what the background task then spends per entry (JSON, the collection's add, the commit's encoding and file
//   writes), without an embedder and with all-MiniLM-L6-v2 (its embedding of a query also timed alone);
// - the bytes per entry (`info().bytes`) and on disk.
// Prints one JSON line per log.
// Usage: node benches/witness.mjs [--entries 2000] [--embedded 300]   (after `npm run build` in npm/ and
// scripts/build-wasm.sh)
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { EMBED_MODEL_PATH, MODEL_PATH, REPO_DIR } from '../npm/test/helpers.mjs';

const { LLM, WitnessLog } = await import(pathToFileURL(path.join(REPO_DIR, 'npm/dist/node.js')).href);
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const root = mkdtempSync(path.join(tmpdir(), 'ruvllm-witness-bench-'));
const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const round = (x) => Math.round(x * 1000) / 1000;
const dirBytes = (dir) => readdirSync(dir).reduce((sum, f) => sum + statSync(path.join(dir, f)).size, 0);

const QUESTIONS = ['What is the capital of France?', 'How do I reverse a list in Python?', 'Will it rain tomorrow in Vienna?', 'Summarize this article about solar panels.', 'Write a haiku about autumn.'];
/** What `LLM.generate` records for request `i`. */
const input = (i, model) => ({
  requestId: `req-${i.toString(16).padStart(16, '0')}`,
  session: `conversation-${i % 50}`,
  kind: 'chat',
  query: `${QUESTIONS[i % QUESTIONS.length]} (${i})`,
  route: i % 3 ? { label: 'general', score: 0.61 } : null,
  model,
  adapters: [],
  tokens: { prompt: 40 + (i % 300), cached: 32, generated: 60 },
  latencyMs: { retrieval: 1.2, prefill: 35.5, decode: 410.25, total: 460.75 },
  finishReason: 'stop',
  error: null,
});

async function run(name, embedder, n, model) {
  const dir = path.join(root, name);
  const log = await WitnessLog.open({ store: dir, embedder, maxPending: n + 10 });
  const recordMs = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    log.record(input(i, model));
    recordMs.push(performance.now() - t);
  }
  const t0 = performance.now();
  await log.flush();
  const drainMs = performance.now() - t0;
  let embedMs = 0;
  if (embedder) {
    const t = performance.now();
    for (let i = 0; i < Math.min(n, 50); i++) await embedder.embed(input(i).query);
    embedMs = (performance.now() - t) / Math.min(n, 50);
  }
  const info = log.info();
  await log.close();
  return {
    log: name,
    entries: info.entries,
    record_ms: { p50: round(quantile(recordMs, 0.5)), p99: round(quantile(recordMs, 0.99)) },
    // The background task's time per entry (with an embedder, its query's embedding included; timed apart below).
    drain_ms_per_entry: round(drainMs / n),
    embed_ms_per_query: round(embedMs),
    bytes_per_entry: Math.round(info.bytes / info.entries),
    disk_bytes_per_entry: Math.round(dirBytes(dir) / info.entries),
  };
}

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
const infoMs = [];
for (let i = 0; i < 200; i++) {
  const t = performance.now();
  llm.info();
  infoMs.push(performance.now() - t);
}
const i = llm.info();
const model = { name: i.name, architecture: i.architecture, backend: i.backend };
console.log(JSON.stringify({ what: 'llm.info() per request', p50_ms: round(quantile(infoMs, 0.5)), p99_ms: round(quantile(infoMs, 0.99)) }));
llm.dispose();
console.log(JSON.stringify(await run('by field', undefined, arg('entries', 2000), model)));
const embedder = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
console.log(JSON.stringify(await run('by similarity (all-MiniLM-L6-v2)', embedder, arg('embedded', 300), model)));
embedder.dispose();
rmSync(root, { recursive: true, force: true });
