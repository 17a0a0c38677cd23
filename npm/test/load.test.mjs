// Loading from every kind of source, with progress, and the errors of bad files and sources.
import assert from 'node:assert/strict';
import { mkdtempSync, openSync, closeSync, ftruncateSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { LLM, MAX_MODEL_BYTES } from '@ruvector/ruvllm';
import { spawnSync } from 'node:child_process';
import { FRANCE, MODEL_PATH, PACKAGE_DIR, REPO_DIR, rejectsWith } from './helpers.mjs';
import { serve } from './server.mjs';

const modelBytes = readFileSync(MODEL_PATH);
const dir = mkdtempSync(join(tmpdir(), 'ruvllm-load-'));
let server;
before(async () => {
  server = await serve({ files: { '/model.gguf': MODEL_PATH, '/package.json': join(PACKAGE_DIR, 'package.json') } });
});
after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Load, check the progress reports and that the model answers, then free it. */
async function loadsAndAnswers(source) {
  const progress = [];
  const llm = await LLM.load(source, { onProgress: (p) => progress.push(p) });
  try {
    assert.ok(progress.length >= 1);
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].loaded > progress[i - 1].loaded);
    assert.deepEqual(progress.at(-1), { loaded: modelBytes.length, total: modelBytes.length, fromCache: 0, file: 1, files: 1 });
    const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 2 });
    assert.deepEqual(r.ids, FRANCE.ids.slice(0, 2));
  } finally {
    llm.dispose();
  }
}

test('loads from a path and a file: URL, with progress', async () => {
  await loadsAndAnswers(MODEL_PATH);
  await loadsAndAnswers(pathToFileURL(MODEL_PATH));
});

test('loads from a Uint8Array, an ArrayBuffer and a Blob, with progress', async () => {
  await loadsAndAnswers(new Uint8Array(modelBytes));
  await loadsAndAnswers(modelBytes.buffer.slice(modelBytes.byteOffset, modelBytes.byteOffset + modelBytes.length));
  await loadsAndAnswers(new Blob([modelBytes]));
});

test('loads from an http URL (string, URL object and Response), streaming with progress', async () => {
  await loadsAndAnswers(`${server.origin}/model.gguf`);
  await loadsAndAnswers(new URL('/model.gguf', server.origin));
  await loadsAndAnswers(await fetch(`${server.origin}/model.gguf`));
});

test('loads from a Response over a stream that is not a byte stream (no BYOB reads), with progress', async () => {
  const stream = new ReadableStream({
    start(controller) {
      for (let at = 0; at < modelBytes.length; at += 1 << 20) controller.enqueue(modelBytes.slice(at, at + (1 << 20)));
      controller.close();
    },
  });
  assert.throws(() => stream.getReader({ mode: 'byob' }).releaseLock(), TypeError);
  await loadsAndAnswers(new Response(stream, { headers: { 'content-length': String(modelBytes.length) } }));
});

test('a file that is not GGUF is refused with E_GGUF', async () => {
  const e = await rejectsWith(LLM.load(join(PACKAGE_DIR, 'package.json')), 'E_GGUF');
  assert.match(e.message, /magic/);
  await rejectsWith(LLM.load(new TextEncoder().encode('hello, not a model')), 'E_GGUF');
  await rejectsWith(LLM.load(`${server.origin}/package.json`), 'E_GGUF');
});

test('a truncated file is refused with E_GGUF, naming the problem', async () => {
  const half = join(dir, 'half.gguf');
  writeFileSync(half, modelBytes.subarray(0, modelBytes.length >> 1));
  for (const source of [half, modelBytes.subarray(0, 1 << 20), modelBytes.subarray(0, 10)]) {
    const e = await rejectsWith(LLM.load(source), 'E_GGUF');
    assert.match(e.message, /truncated|shorter|past the end|cannot fit/);
  }
});

test('a model too large for wasm32 memory is refused before reading, naming its size', async () => {
  const big = join(dir, 'big.gguf');
  const fd = openSync(big, 'w');
  ftruncateSync(fd, 5 * 1024 ** 3); // sparse: takes no disk space
  closeSync(fd);
  let progressed = false;
  const t0 = performance.now();
  const e = await rejectsWith(LLM.load(big, { onProgress: () => (progressed = true) }), 'E_MODEL_TOO_LARGE');
  assert.ok(performance.now() - t0 < 2000, 'refused at once');
  assert.equal(progressed, false, 'nothing was read');
  assert.match(e.message, /5\.37 GB \(5368709120 bytes\)/);
  assert.match(e.message, new RegExp(`${MAX_MODEL_BYTES} bytes`));
  // The same from a server's Content-Length, without downloading the body.
  await rejectsWith(LLM.load(`${server.origin}/too-large.gguf`), 'E_MODEL_TOO_LARGE');
});

test('a file above 2 GiB loads and answers as the model it holds (wasm32 holds it in pieces)', async () => {
  // The default model behind 2.4 GiB of unused tensors (tests/fixtures/pad_model.py), so its weights lie past 2^31.
  const padded = join(dir, 'padded.gguf');
  const python = join(REPO_DIR, '.venv', 'bin', 'python');
  const pad = String(Math.floor(1.2 * 1024 ** 3));
  const made = spawnSync(python, [join(REPO_DIR, 'tests/fixtures/pad_model.py'), MODEL_PATH, padded, pad, pad], { stdio: 'inherit' });
  assert.equal(made.status, 0, 'pad_model.py wrote the file');
  try {
    const size = statSync(padded).size;
    assert.ok(size > 2 ** 31 + modelBytes.length, `${size} bytes`);
    for (const threads of [1, undefined]) {
      const llm = await LLM.load(padded, { threads, backend: 'cpu' });
      try {
        assert.equal(llm.info().fileBytes, size);
        assert.ok(llm.info().wasmMemoryBytes > size, 'the whole file is in wasm memory');
        const r = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 4 });
        assert.deepEqual(r.ids, FRANCE.ids.slice(0, 4));
      } finally {
        llm.dispose();
      }
    }
  } finally {
    rmSync(padded, { force: true });
  }
});

test('an unsupported architecture is refused with E_UNSUPPORTED_ARCH, naming it', async () => {
  const bytes = new Uint8Array(modelBytes);
  const key = Buffer.from('general.architecture');
  const at = Buffer.from(bytes.buffer).indexOf(key);
  assert.ok(at > 0);
  // key, then value type (u32 = 8, string) and length (u64 = 5), then "llama".
  const value = at + key.length + 4 + 8;
  assert.equal(Buffer.from(bytes.subarray(value, value + 5)).toString(), 'llama');
  bytes.set(Buffer.from('mamba'), value);
  const e = await rejectsWith(LLM.load(bytes), 'E_UNSUPPORTED_ARCH');
  assert.match(e.message, /mamba/);
});

test('a context window too large for wasm memory is refused with E_OUT_OF_MEMORY, naming the size', async () => {
  // Claim a trained context of 2^30 tokens, so that the window asked for passes the model's own limit.
  const bytes = new Uint8Array(modelBytes);
  const key = Buffer.from('llama.context_length');
  const at = Buffer.from(bytes.buffer).indexOf(key);
  const type = at + key.length;
  assert.equal(new DataView(bytes.buffer).getUint32(type, true), 4, 'a u32 value');
  new DataView(bytes.buffer).setUint32(type + 4, 2 ** 30, true);
  const e = await rejectsWith(LLM.load(bytes, { contextSize: 2 ** 22 }), 'E_OUT_OF_MEMORY');
  assert.match(e.message, /cannot allocate \d+ bytes .* for a context window of 4194304 tokens/);
  // Nothing was left allocated or broken: the real model still loads and answers.
  await loadsAndAnswers(MODEL_PATH);
});

test('bad sources and load options are refused with a code', async () => {
  await rejectsWith(LLM.load(join(dir, 'no-such-file.gguf')), 'E_IO');
  await rejectsWith(LLM.load(dir), 'E_IO');
  await rejectsWith(LLM.load(`${server.origin}/missing.gguf`), 'E_FETCH');
  await rejectsWith(LLM.load('http://127.0.0.1:1/model.gguf'), 'E_FETCH');
  await rejectsWith(LLM.load(42), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { contextSize: -1 }), 'E_INVALID_ARGUMENT');
  await rejectsWith(LLM.load(MODEL_PATH, { contextSize: 1e6 }), 'E_INVALID_ARGUMENT');
});

test('an AbortSignal stops loading', async () => {
  const controller = new AbortController();
  await rejectsWith(
    LLM.load(MODEL_PATH, { signal: controller.signal, onProgress: ({ loaded }) => loaded > 10e6 && controller.abort() }),
    'E_ABORTED',
  );
  await rejectsWith(LLM.load(`${server.origin}/model.gguf`, { signal: AbortSignal.abort() }), 'E_ABORTED');
  const c2 = new AbortController();
  await rejectsWith(LLM.load(`${server.origin}/model.gguf`, { signal: c2.signal, onProgress: () => c2.abort() }), 'E_ABORTED');
});

test('the loaded file size matches', async () => {
  const llm = await LLM.load(MODEL_PATH);
  assert.equal(llm.info().fileBytes, statSync(MODEL_PATH).size);
  llm.dispose();
});
