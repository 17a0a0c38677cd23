// A long conversation reopened after a reload: time to the first token of its next turn, and where it goes.
// First visit (a fresh page, or process): a chat of about --tokens tokens is evaluated cold and answered, and its
// prefix-cache pages are written to the store. Then a real `page.reload()` (Chromium, IndexedDB) or a new process
// (Node, the file store in a directory) reopens it: the next user turn is sent and its first token timed, broken down
// into the store read, the engine checking and taking the records, the copy into the conversation's cache and the
// prefill of the uncached tail (the rest: templating, tokenizing, the JavaScript around them).
//
// Usage: node benches/long_conversation.mjs [--runtime chromium|node] [--tokens 4096] [--reps 2] [--context 8192]
//          [--budget-mb 128] [--answer-tokens 16] [--kv-cache JSON] [--threads 1] [--http-cache] [--model M]
//          [--chromium /usr/bin/chromium] [--ready]
// --budget-mb: the prefix cache's memory budget (a 4,096-token conversation of the default model takes 94 MB of f16
// keys and values, over the 64 MiB default). --kv-cache: passed to LLM.load as `kvCache` (the two-tier KV cache's
// option, e.g. '{"cold":"q8_0"}'); a build without that option ignores it. --http-cache: the page's files may be
// cached (as a site serves them), so that after the reload Chromium runs the wasm's cached optimized code instead of
// compiling it again from the baseline tier (the default serves everything `no-store`: the worst case). --ready: the
// reopened page first makes the conversation ready (`complete(history, { maxTokens: 0 })`, what a chat page does while
// its user types the next turn), timed on its own (`ready_*`); the first token is then timed from the question.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT, parseArgs, median, round, loadavg1m, log } from './lib/common.mjs';
import { firstVisit, reopen } from './lib/prefix_bench.js';

const args = parseArgs({
  model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`,
  runtime: 'chromium',
  tokens: '4096',
  reps: '2',
  context: '8192',
  'budget-mb': '128',
  'answer-tokens': '16',
  threads: '1',
  chromium: '/usr/bin/chromium',
});
const cfg = {
  text: readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(8),
  tokens: Number(args.tokens),
  contextSize: Number(args.context),
  budgetBytes: Number(args['budget-mb']) << 20,
  answerTokens: Number(args['answer-tokens']),
  threads: Number(args.threads),
  kvCache: args['kv-cache'] === undefined ? undefined : JSON.parse(args['kv-cache']),
  ready: Boolean(args.ready),
};

/** Node: one visit in this (new) process with the file store in --dir (the driver runs each in a process of its own). */
async function child() {
  const { LLM } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href);
  const r =
    args.child === 'first'
      ? await firstVisit(LLM, args.model, cfg, args.dir)
      : await reopen(LLM, args.model, cfg, args.dir, JSON.parse(readFileSync(args.messages, 'utf8')));
  console.log(JSON.stringify(r));
}

/** Node: each rep's first visit and its reopening in two new processes sharing the store's directory. */
function node() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ruvllm-long-bench-'));
  const run = (which, extra = []) => {
    const argv = [fileURLToPath(import.meta.url), ...process.argv.slice(2), '--child', which, '--dir', dir, ...extra];
    const p = spawnSync(process.execPath, argv, { encoding: 'utf8', maxBuffer: 1 << 26 });
    if (p.status !== 0) throw new Error(`the ${which} process failed: ${p.stderr}`);
    return JSON.parse(p.stdout.trim().split('\n').pop());
  };
  const reps = [];
  try {
    for (let rep = 0; rep < Number(args.reps); rep++) {
      const first = run('first');
      const messages = path.join(dir, 'messages.json');
      writeFileSync(messages, JSON.stringify(first.messages));
      const reopened = run('reopen', ['--messages', messages]);
      reps.push({ first, reopened });
      log(`node rep ${rep}: cold ${round(first.cold_ttft_ms)} ms, reopened ${round(reopened.ms)} ms`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { runtime: `wasm32 Node ${process.version}`, store: 'files', reps };
}

async function chromium() {
  const { openPage } = await import('./lib/chromium.mjs');
  const browser = await openPage('prefix_cache.html', args.model, { executablePath: args.chromium, cache: Boolean(args['http-cache']) });
  const reps = [];
  try {
    for (let rep = 0; rep < Number(args.reps); rep++) {
      if (rep > 0) await browser.reload();
      const first = await browser.page.evaluate(
        ({ url, cfg }) => window.prefixBench.firstVisit(window.prefixBench.LLM, url, cfg, 'indexeddb'),
        { url: browser.modelUrl, cfg },
      );
      await browser.reload();
      const reopened = await browser.page.evaluate(
        ({ url, cfg, messages }) => window.prefixBench.reopen(window.prefixBench.LLM, url, cfg, 'indexeddb', messages),
        { url: browser.modelUrl, cfg, messages: first.messages },
      );
      reps.push({ first, reopened });
      log(`chromium rep ${rep}: cold ${round(first.cold_ttft_ms)} ms, reopened ${round(reopened.ms)} ms`);
    }
  } finally {
    await browser.close();
  }
  return { runtime: `wasm32 Chromium ${browser.version}`, store: 'indexeddb', reps };
}

if (args.child) {
  await child();
} else {
  if (!['chromium', 'node'].includes(args.runtime)) throw new Error('--runtime must be chromium or node');
  log(`${args.runtime}: a ${cfg.tokens}-token conversation, ${args.reps} reps`);
  const loadavgStart = loadavg1m();
  const { runtime, store, reps } = args.runtime === 'node' ? node() : await chromium();
  const med = (f) => round(median(reps.map(f)));
  const r = (f) => reps.map((x) => round(f(x)));
  const ttft = med((x) => x.reopened.ms);
  const parts = (x) => [x.store_read_ms, x.store_load_ms, x.restore_ms, x.prefill_ms].reduce((a, b) => a + (b ?? 0), 0);
  console.log(
    JSON.stringify({
      bench: 'long_conversation',
      runtime,
      store,
      threads: cfg.threads,
      kv_cache: cfg.kvCache ?? null,
      http_cache: Boolean(args['http-cache']),
      budget_bytes: cfg.budgetBytes,
      context: cfg.contextSize,
      history_tokens: reps[0].first.prompt_tokens + cfg.answerTokens,
      prompt_tokens: reps[0].reopened.prompt_tokens,
      cached_tokens: r((x) => x.reopened.cached_tokens),
      ttft_ms: ttft,
      // Where the reopened turn's first token went (medians over the reps).
      store_read_ms: med((x) => x.reopened.store_read_ms),
      store_load_ms: med((x) => x.reopened.store_load_ms),
      restore_ms: med((x) => x.reopened.restore_ms),
      prefill_ms: med((x) => x.reopened.prefill_ms),
      other_ms: med((x) => x.reopened.ms - parts(x.reopened)),
      // --ready: making the reopened conversation ready before the question (the same parts; null without it).
      ...(cfg.ready && {
        ready_ms: med((x) => x.reopened.ready.ms),
        ready_cached_tokens: r((x) => x.reopened.ready.cached_tokens),
        ready_store_read_ms: med((x) => x.reopened.ready.store_read_ms),
        ready_store_load_ms: med((x) => x.reopened.ready.store_load_ms),
        ready_restore_ms: med((x) => x.reopened.ready.restore_ms),
        ready_prefill_ms: med((x) => x.reopened.ready.prefill_ms),
      }),
      store_records: reps[0].reopened.store_records,
      store_bytes: reps[0].reopened.store_bytes,
      ttft_reps_ms: r((x) => x.reopened.ms),
      // The first visit: its cold first token (the whole conversation prefilled) and writing its pages.
      cold_ttft_ms: med((x) => x.first.cold_ttft_ms),
      store_write_ms: med((x) => x.first.store_write_ms),
      store_error: reps[0].first.store_error,
      loadavg_start: loadavgStart,
      loadavg_end: loadavg1m(),
    }),
  );
}
