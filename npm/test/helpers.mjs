// Shared by the node:test suites: where the model and the llama.cpp reference live, and one loaded model.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE_DIR = fileURLToPath(new URL('..', import.meta.url));
export const REPO_DIR = join(PACKAGE_DIR, '..');

/** The default model: $RUVLLM_MODEL, else the cache path scripts/fetch-model.sh uses. */
export const MODEL_PATH =
  process.env.RUVLLM_MODEL ?? join(process.env.RUVLLM_CACHE ?? join(homedir(), '.cache', 'ruvllm'), 'SmolLM2-135M-Instruct.Q4_1.gguf');

/** The embedding model: $RUVLLM_EMBED_MODEL, else the cache path scripts/fetch-embed-model.sh uses. */
export const EMBED_MODEL_PATH =
  process.env.RUVLLM_EMBED_MODEL ?? join(process.env.RUVLLM_CACHE ?? join(homedir(), '.cache', 'ruvllm'), 'all-MiniLM-L6-v2.F16.gguf');

const referenceDir = process.env.RUVLLM_REFERENCE_DIR ?? join(REPO_DIR, '..', 'shared', 'reference');
const france = JSON.parse(readFileSync(join(referenceDir, 'logits.json'), 'utf8')).prompts.find((p) => p.name === 'chat_france_nosystem');

/** llama.cpp's greedy answer to the raw ChatML France prompt, up to and including its first end-of-generation token. */
export const FRANCE = {
  prompt: france.prompt,
  promptIds: france.prompt_ids,
  ids: france.continuation.ids.slice(0, france.continuation.first_eog_index + 1),
  text: france.continuation.text_until_eog,
};

/** Collect a generation: its chunks and its return value. */
export async function drain(iterator) {
  const chunks = [];
  for (;;) {
    const r = await iterator.next();
    if (r.done) return { chunks, result: r.value };
    chunks.push(r.value);
  }
}

/** Assert that `promise` rejects with a RuvllmError of `code`, and return the error. */
/** A `Store` in memory whose writes fail as a used-up quota does (a `QuotaExceededError`) while its `full` is true. */
export function quotaStore() {
  const records = new Map();
  const store = {
    full: false,
    async list() {
      return [...records].map(([key, bytes]) => ({ key, bytes: bytes.length, used: 0 }));
    },
    async get(key) {
      return records.get(key);
    },
    async put(rs) {
      if (store.full) throw new DOMException('quota', 'QuotaExceededError');
      for (const { key, bytes } of rs) records.set(key, bytes.slice());
    },
    async delete(keys) {
      for (const k of keys) records.delete(k);
    },
    async clear() {
      records.clear();
    },
  };
  return store;
}

export async function rejectsWith(promise, code) {
  const { RuvllmError } = await import('@ruvector/ruvllm');
  try {
    await promise;
  } catch (e) {
    if (!(e instanceof RuvllmError) || !(e instanceof Error)) throw new Error(`expected a RuvllmError ${code}, got ${e?.stack ?? e}`);
    if (e.code !== code) throw new Error(`expected ${code}, got ${e.code}: ${e.message}`);
    return e;
  }
  throw new Error(`expected a rejection with ${code}`);
}

/** A port on 127.0.0.1 that nothing listens on now (for a server that must be told its port). */
export async function freePort() {
  const probe = createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Read `stream` to its `n`th chunk, then abort `controller`: the loop must end in E_ABORTED after exactly `n` chunks. */
export async function abortAfter(n, stream, controller) {
  let seen = 0;
  await rejectsWith((async () => {
    for await (const _ of stream) if (++seen === n) controller.abort();
  })(), 'E_ABORTED');
  if (seen !== n) throw new Error(`the stream ended after ${seen} chunks, not ${n}`);
}

/** A seeded generator of numbers in [0, 1) (mulberry32): the same kill points and delays on every run. */
export function seededRandom(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `ruvllm serve` (the built CLI) on the default model as a child process, on one thread (the tests share two cores) and
 * on a free port unless `args` give a `--port`; resolves once it prints the URL it listens on.
 */
export async function startServe(...args) {
  const port = args.includes('--port') ? [] : ['--port', '0'];
  const cli = join(PACKAGE_DIR, 'dist', 'cli.js');
  const child = spawn(process.execPath, [cli, 'serve', '--model', MODEL_PATH, ...port, '--threads', '1', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    exited.then(({ code }) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  return {
    url,
    pid: child.pid,
    stderr: () => stderr,
    /** SIGTERM; resolves with how it exited. */
    async stop() {
      child.kill('SIGTERM');
      return exited;
    },
  };
}

/** A server's `/health` answer. */
export const health = async (url) => (await fetch(`${url}/health`)).json();

/** Poll a server's `/health` until `check` holds (or fail after `ms`). */
export async function until(url, check, ms = 10000) {
  const t0 = Date.now();
  for (;;) {
    const h = await health(url);
    if (check(h)) return h;
    if (Date.now() - t0 > ms) throw new Error(`/health never got there: ${JSON.stringify(h)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
