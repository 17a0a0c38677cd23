// The learning loops' costs through the package (issue 43: the instant loop's cost on the request's path <= 1 ms),
// in Node, the default model on one wasm thread, a LearningLoop in a temporary folder:
// - what a request pays: `llm.feedback(requestId, { score })` until it returns (the instant step and the hand-over to
//   the loop run after it), and a chat request's time with the loop open against without (its conversation kept for
//   feedback), median and 99th percentile;
// - the instant step (its `learned` promise), and a background run per step;
// - bytes per trajectory (`info().bytes`) and the adapters' stored states (`info().adapterBytes`, on disk).
// Prints one JSON line.
// Usage: node benches/learning_loop.mjs [--requests 100]   (after `npm run build` in npm/ and scripts/build-wasm.sh)
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MODEL_PATH, REPO_DIR } from '../npm/test/helpers.mjs';

const { LLM, LearningLoop } = await import(pathToFileURL(path.join(REPO_DIR, 'npm/dist/node.js')).href);
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const n = arg('requests', 100);
const root = mkdtempSync(path.join(tmpdir(), 'ruvllm-learning-bench-'));
const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const round = (x) => Math.round(x * 1000) / 1000;
const dirBytes = (dir) => readdirSync(dir).filter((f) => f.endsWith('.rec')).reduce((sum, f) => sum + statSync(path.join(dir, f)).size, 0);
const QUESTIONS = ['What is the capital of Peru?', 'How do I reverse a list in Python?', 'Is green tea good for me?', 'How should I cook lentils?'];
const messagesOf = (i) => [{ role: 'user', content: `${QUESTIONS[i % QUESTIONS.length]} (${i})` }];

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
/** `n` chat requests of one token, each with feedback after it when `feedback` (the instant step awaited, so that the
 * next feedback is not skipped): the requests' and the feedback calls' wall times, the instant steps'. */
async function requests(from, feedback) {
  const out = { ms: [], feedbackMs: [], stepMs: [] };
  for (let i = from; i < from + n; i++) {
    const t = performance.now();
    const c = await llm.chat.completions.create({ messages: messagesOf(i), max_tokens: 1, temperature: 0 });
    out.ms.push(performance.now() - t);
    if (!feedback) continue;
    const f0 = performance.now();
    const f = await llm.feedback(c.id, { score: 1 });
    out.feedbackMs.push(performance.now() - f0);
    const s = performance.now();
    await f.learned;
    out.stepMs.push(performance.now() - s);
  }
  return out;
}

await requests(-4, false); // warm-up
const without = await requests(0, false);
const loop = await LearningLoop.open(llm, { store: path.join(root, 'loop'), intervalMs: 0 });
const withLoop = await requests(n, true);
const { feedbackMs, stepMs } = withLoop;
await loop.flush();
const run = await loop.run();
const info = loop.info();
await loop.close();
console.log(
  JSON.stringify({
    bench: 'learning_loop',
    requests: n,
    feedback_call_ms: { p50: round(quantile(feedbackMs, 0.5)), p99: round(quantile(feedbackMs, 0.99)) },
    chat_request_ms: {
      without_loop: { p50: round(quantile(without.ms, 0.5)), p99: round(quantile(without.ms, 0.99)) },
      with_loop: { p50: round(quantile(withLoop.ms, 0.5)), p99: round(quantile(withLoop.ms, 0.99)) },
    },
    instant_step_ms: round(quantile(stepMs, 0.5)),
    background_run: { trajectories: run.trajectories, steps: run.steps, ms: round(run.ms), ms_per_step: round(run.ms / run.steps) },
    bytes_per_trajectory: round(info.bytes / info.learned),
    adapter_bytes: info.adapterBytes,
    adapter_bytes_on_disk: dirBytes(path.join(root, 'loop', 'adapters')),
  }),
);
llm.dispose();
rmSync(root, { recursive: true, force: true });
