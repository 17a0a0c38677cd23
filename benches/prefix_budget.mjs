// The prefix cache's byte budgets under a workload: --conversations chats (default 200) on one model in Node with
// the file store, small budgets in memory and on disk so that both evict all along. Conversations pick one of a few
// system prompts (some shared by many), run 1-3 turns of user messages cut from a text with short greedy answers, and
// about a third of them reopen an earlier conversation and add a turn. After every request (the store's writes
// flushed) it records the cache's bytes in memory (`info().prefixCache.bytes`) and the store's directory (the sum of
// its files' sizes, and what they take on disk); it prints the maxima against the budgets, the hit rate (prompt
// tokens from a cache over all prompt tokens), how many of the store's records a prompt can still reach at the end
// (a record is read only after its parent), and, with --restart-probes N, how many tokens a new process finds in the
// store when it reopens N of the conversations.
//
// Usage: node benches/prefix_budget.mjs [--conversations 200] [--budget-mb 32] [--store-budget-mb 64]
//          [--restart-probes 20] [--threads 1] [--seed 1] [--model M]
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT, parseArgs, round, loadavg1m, log } from './lib/common.mjs';

const args = parseArgs({
  model: `${process.env.HOME}/.cache/ruvllm/SmolLM2-135M-Instruct.Q4_1.gguf`,
  conversations: '200',
  'budget-mb': '32',
  'store-budget-mb': '64',
  'restart-probes': '20',
  threads: '1',
  seed: '1',
});
const budget = Math.round(Number(args['budget-mb']) * 2 ** 20);
const storeBudget = Math.round(Number(args['store-budget-mb']) * 2 ** 20);
const loadOptions = (dir) => ({ threads: Number(args.threads), prefixCache: { budgetBytes: budget, store: dir, storeBudgetBytes: storeBudget } });
const GREEDY = { temperature: 0, maxTokens: 4 };
const { LLM } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node.js')).href);

/** mulberry32: the workload is the same for a seed. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** The store's files: their bytes, and what they take on disk (whole blocks). */
function dirBytes(dir) {
  let bytes = 0;
  let onDisk = 0;
  let files = 0;
  for (const name of readdirSync(dir)) {
    const s = statSync(path.join(dir, name), { throwIfNoEntry: false });
    if (!s?.isFile()) continue;
    files++;
    bytes += s.size;
    onDisk += s.blocks * 512;
  }
  return { bytes, onDisk, files };
}

/**
 * The store's records whose chain of parents reaches the first page (the only ones a prompt can ever read: a page is
 * read after its parent), and those whose chain is broken (a parent evicted before them), read from the records'
 * headers (memory/record.rs: model id at 28, key at 60, parent key at 76).
 */
function chains(dir) {
  const parent = new Map();
  let root = null;
  for (const name of readdirSync(dir).filter((n) => n.endsWith('.rec'))) {
    const head = Buffer.alloc(92);
    const fd = openSync(path.join(dir, name), 'r');
    readSync(fd, head, 0, 92, 0);
    closeSync(fd);
    root ??= createHash('sha256').update('root').update(head.subarray(28, 60)).digest().subarray(0, 16).toString('hex');
    parent.set(head.subarray(60, 76).toString('hex'), head.subarray(76, 92).toString('hex'));
  }
  const reachable = (key, seen = 0) => {
    const p = parent.get(key);
    return p === root || (p !== undefined && seen < parent.size && reachable(p, seen + 1));
  };
  const ok = [...parent.keys()].filter((k) => reachable(k)).length;
  return { records: parent.size, reachable: ok, orphans: parent.size - ok };
}

/** A new process reopens `probes` conversations from the store (each continued by one user turn): tokens it found. */
async function probeChild() {
  const llm = await LLM.load(args.model, loadOptions(args.dir));
  const convs = JSON.parse(readFileSync(args.probe, 'utf8'));
  const out = [];
  for (const messages of convs) {
    const r = await llm.chat.completions.create({ messages: [...messages, { role: 'user', content: 'Go on.' }], temperature: 0, max_tokens: 1 });
    out.push({ prompt: r.usage.prompt_tokens, cached: r.usage.prompt_tokens_details.cached_tokens });
  }
  await llm.flushPrefixCache();
  console.log(JSON.stringify({ probes: out, loadedTokens: llm.info().prefixCache.loadedTokens }));
  llm.dispose();
}

async function main() {
  const random = rng(Number(args.seed));
  const pick = (n) => Math.floor(random() * n);
  const words = readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').split(/\s+/).filter(Boolean);
  const slice = (n) => {
    const at = pick(words.length);
    return Array.from({ length: n }, (_, i) => words[(at + i) % words.length]).join(' ');
  };
  // Eight system prompts of 30-150 words; the first ones are picked far more often (a few apps, one popular).
  const systems = Array.from({ length: 8 }, (_, i) => `You are assistant number ${i}. ${slice(30 + pick(120))}`);
  const pickSystem = () => systems[Math.min(systems.length - 1, Math.floor(-Math.log(1 - random()) * 2))];

  const dir = mkdtempSync(path.join(os.tmpdir(), 'ruvllm-budget-bench-'));
  const llm = await LLM.load(args.model, loadOptions(dir));
  const loadavgStart = loadavg1m();
  const t0 = performance.now();
  const convs = [];
  const max = { memory: 0, store: 0, storeOnDisk: 0, storeFiles: 0 };
  const over = [];
  let prompt = 0;
  let cached = 0;
  let requests = 0;
  try {
    for (let c = 0; c < Number(args.conversations); c++) {
      // A third reopen an earlier conversation for one more turn; the others start anew, for 1-3 turns.
      const reopen = convs.length > 0 && random() < 0.33;
      const messages = reopen ? convs[pick(convs.length)] : [{ role: 'system', content: pickSystem() }];
      const turns = reopen ? 1 : 1 + pick(3);
      for (let t = 0; t < turns; t++) {
        messages.push({ role: 'user', content: slice(10 + pick(50)) });
        const r = await llm.chat.completions.create({ messages, temperature: GREEDY.temperature, max_tokens: GREEDY.maxTokens });
        messages.push(r.choices[0].message);
        prompt += r.usage.prompt_tokens;
        cached += r.usage.prompt_tokens_details.cached_tokens;
        requests++;
        await llm.flushPrefixCache();
        const memory = llm.info().prefixCache.bytes;
        const store = dirBytes(dir);
        max.memory = Math.max(max.memory, memory);
        max.store = Math.max(max.store, store.bytes);
        max.storeOnDisk = Math.max(max.storeOnDisk, store.onDisk);
        max.storeFiles = Math.max(max.storeFiles, store.files);
        if (memory > budget || store.bytes > storeBudget) over.push({ conversation: c, request: requests, memory, store: store.bytes });
      }
      if (!reopen) convs.push(messages);
      if ((c + 1) % 20 === 0) log(`${c + 1} conversations, ${requests} requests, hit rate ${round(cached / prompt, 3)}, ${round((performance.now() - t0) / 1000, 1)} s`);
    }
    const info = llm.info().prefixCache;
    llm.dispose();
    const store = chains(dir);

    let restart = null;
    const probes = Number(args['restart-probes']);
    if (probes > 0) {
      // The last conversations first (the store keeps the newest), then random older ones.
      const chosen = [...convs.slice(-Math.ceil(probes / 2)), ...Array.from({ length: Math.floor(probes / 2) }, () => convs[pick(convs.length)])];
      const file = path.join(dir, 'probes.json');
      writeFileSync(file, JSON.stringify(chosen));
      const argv = [fileURLToPath(import.meta.url), ...process.argv.slice(2), '--child', '--dir', dir, '--probe', file];
      const p = spawnSync(process.execPath, argv, { encoding: 'utf8' });
      if (p.status !== 0) throw new Error(`the restart process failed: ${p.stderr}`);
      const r = JSON.parse(p.stdout.trim().split('\n').pop());
      const sum = (f) => r.probes.reduce((n, x) => n + f(x), 0);
      restart = { probes: r.probes.length, prompt_tokens: sum((x) => x.prompt), from_store_tokens: r.loadedTokens, cached_tokens: sum((x) => x.cached) };
    }
    console.log(
      JSON.stringify({
        bench: 'prefix_budget',
        runtime: `wasm32 Node ${process.version}`,
        threads: Number(args.threads),
        conversations: Number(args.conversations),
        requests,
        budget_bytes: budget,
        max_memory_bytes: max.memory,
        store_budget_bytes: storeBudget,
        max_store_bytes: max.store,
        max_store_on_disk_bytes: max.storeOnDisk,
        max_store_files: max.storeFiles,
        over_budget: over,
        hit_rate: round(cached / prompt, 3),
        prompt_tokens: prompt,
        cached_tokens: cached,
        evicted_pages: info.evictedPages,
        // The store at the end: records a prompt can reach, and records whose parent went first (never readable).
        store_records: store.records,
        store_reachable: store.reachable,
        store_orphans: store.orphans,
        store_error: info.storeError,
        restart,
        seconds: round((performance.now() - t0) / 1000, 1),
        loadavg_start: loadavgStart,
        loadavg_end: loadavg1m(),
      }),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (args.child) await probeChild();
else await main();
