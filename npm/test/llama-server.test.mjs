// LLM.connect against llama.cpp's own server: llama-server built from the llama.cpp sources that llama-cpp-python's
// sdist vendors (scripts/fetch-llama-cpp.sh server, once; $RUVLLM_LLAMA_SERVER names the directory holding it),
// serving the default model as a child process on 127.0.0.1, one slot, one thread. No mocks: its greedy answer to the
// reference prompt is llama.cpp's reference, whole and streamed, with its usage; its chat template is the model's
// (--jinja), rendered as the local engine renders it; tokens come from its /tokenize; an abort mid-stream frees its
// slot at once; a wrong key and a bad request keep its status and message; killed, it is E_REMOTE_UNAVAILABLE, and a
// request retries until it is back on the same port.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { LLM, RemoteError, RemoteLLM } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, REPO_DIR, abortAfter, freePort, rejectsWith } from './helpers.mjs';

const SERVER_DIR =
  process.env.RUVLLM_LLAMA_SERVER ??
  execFileSync(join(REPO_DIR, 'scripts', 'fetch-llama-cpp.sh'), ['server'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
const KEY = 'llama-key-3c9d';
const FRANCE_MESSAGES = [{ role: 'user', content: 'What is the capital of France?' }];
/** Far more tokens than a test waits for: a generation this long that ends at once was stopped. */
const LONG_CHAT = { messages: [{ role: 'user', content: 'Tell me a very long story.' }], max_tokens: 4000, temperature: 0 };

/** llama-server on `port`; resolves once its /health answers 200 (it answers 503 while the model loads). */
async function startLlamaServer(port) {
  const args = ['-m', MODEL_PATH, '--host', '127.0.0.1', '--port', String(port), '--api-key', KEY, '--jinja', '-np', '1', '-t', '1', '-c', '4096'];
  const child = spawn(join(SERVER_DIR, 'llama-server'), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  let exit = null;
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve((exit = { code, signal }))));
  const url = `http://127.0.0.1:${port}`;
  for (const t0 = Date.now(); ; await new Promise((r) => setTimeout(r, 100))) {
    if (exit) throw new Error(`llama-server exited (${JSON.stringify(exit)}):\n${log}`);
    if (Date.now() - t0 > 120_000) throw new Error(`llama-server not ready within 120 s:\n${log}`);
    const ok = await fetch(`${url}/health`).then((r) => r.ok, () => false);
    if (ok) break;
  }
  return { url, log: () => log, kill: (signal) => (child.kill(signal), exited) };
}

/** The server's one slot: whether it is generating, and how many tokens it has decoded. */
async function slot(url) {
  const slots = await (await fetch(`${url}/slots`, { headers: { authorization: `Bearer ${KEY}` } })).json();
  assert.equal(slots.length, 1, JSON.stringify(slots));
  return slots[0];
}

let server;
let remote; // no retries: each failure shows as it is
let llm; // the same model in this process: its chat template and tokenizer

before(async () => {
  server = await startLlamaServer(await freePort());
  remote = await LLM.connect({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
  llm = await LLM.load(MODEL_PATH, { threads: 1 });
});

after(async () => {
  llm?.dispose();
  remote?.dispose();
  await server?.kill('SIGTERM');
});

test('completions are llama.cpp\'s reference answer, whole and streamed, with the server\'s usage', async () => {
  assert.ok(remote instanceof RemoteLLM);
  assert.equal(remote.info().engine, 'remote');
  const prompt = await remote.tokenize(FRANCE.prompt, { prompt: true });
  assert.deepEqual(prompt, FRANCE.promptIds);
  const whole = await remote.complete(FRANCE.prompt, { temperature: 0, maxTokens: 24 });
  assert.equal(whole.text, FRANCE.text);
  assert.equal(whole.finishReason, 'stop');
  assert.equal(whole.usage.promptTokens, prompt.length);
  assert.equal(whole.usage.completionTokens, FRANCE.ids.length);
  assert.equal(whole.usage.totalTokens, prompt.length + FRANCE.ids.length);

  // From token ids, streamed: the same text in pieces, the usage with the last.
  const pieces = [];
  const it = remote.generate(prompt, { temperature: 0, maxTokens: 24 });
  let r;
  while (!(r = await it.next()).done) pieces.push(r.value.text);
  assert.ok(pieces.length > 3, `streamed in pieces: ${JSON.stringify(pieces)}`);
  assert.equal(pieces.join(''), FRANCE.text);
  const { promptTokens, completionTokens, totalTokens } = r.value.usage;
  assert.deepEqual({ promptTokens, completionTokens, totalTokens }, { promptTokens: prompt.length, completionTokens: FRANCE.ids.length, totalTokens: prompt.length + FRANCE.ids.length });
  // The server kept the first request's prompt: all of it but its last token came from its cache.
  assert.equal(r.value.usage.cachedTokens, prompt.length - 1);
});

test('chat renders the model\'s own template as the local engine does; the answer is the server\'s completion of it', async () => {
  // The template's prompt begins with the model's default system turn, after which this llama.cpp (newer than the one
  // that wrote the reference) and ours part at a near tie (llama-server: "L" -1.92, "The" -2.01 as the first token's
  // log-probabilities): its answer is checked against its own completion of the prompt ours renders, not ours.
  const request = { messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 24 };
  const rendered = llm.applyChatTemplate(FRANCE_MESSAGES);
  const applied = await (await fetch(`${server.url}/apply-template`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: JSON.stringify({ messages: FRANCE_MESSAGES }) })).json();
  assert.equal(applied.prompt, rendered);

  const whole = await remote.chat.completions.create(request);
  assert.equal(whole.usage.prompt_tokens, llm.tokenizeChat(FRANCE_MESSAGES).length);
  const completed = await remote.complete(rendered, { temperature: 0, maxTokens: 24 });
  assert.equal(whole.choices[0].message.content, completed.text);
  assert.equal(whole.choices[0].finish_reason, completed.finishReason);
  assert.equal(whole.usage.completion_tokens, completed.usage.completionTokens);

  const chunks = [];
  for await (const c of await remote.chat.completions.create({ ...request, stream: true })) chunks.push(c);
  assert.ok(chunks.length > 3, 'streamed in pieces');
  assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), whole.choices[0].message.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.equal(chunks.at(-1).usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(chunks.at(-1).usage.prompt_tokens, whole.usage.prompt_tokens);
});

test('tokenize and detokenize go to the server\'s /tokenize and /detokenize: llama.cpp\'s ids and text', async () => {
  const reference = FRANCE.promptIds;
  assert.deepEqual(await remote.tokenize(FRANCE.prompt, { special: true }), reference);
  assert.deepEqual(await remote.tokenize(FRANCE.prompt, { special: true }), llm.tokenize(FRANCE.prompt, { special: true }));
  // Without special-token parsing, "<|im_start|>" is text: more, other ids.
  const plain = await remote.tokenize(FRANCE.prompt);
  assert.ok(plain.length > reference.length, `${plain.length} ids`);
  assert.equal(await remote.detokenize(FRANCE.ids.slice(0, FRANCE.ids.length - 1)), FRANCE.text);
});

test('an abort mid-stream frees the server\'s slot at once: the next request is answered', async () => {
  const controller = new AbortController();
  const stream = await remote.chat.completions.create({ ...LONG_CHAT, stream: true }, { signal: controller.signal });
  await abortAfter(5, stream, controller);
  // One slot, one thread: a generation of 4,000 tokens that went on would hold the slot for minutes.
  const t0 = performance.now();
  for (;;) {
    const s = await slot(server.url);
    if (!s.is_processing) break;
    assert.ok(performance.now() - t0 < 5000, `the slot still generates: ${JSON.stringify(s)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const reply = await remote.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 4 });
  assert.equal(reply.choices[0].finish_reason, 'length');
  assert.equal(reply.usage.completion_tokens, 4);
});

test('errors keep the server\'s status and message: a wrong key is E_REMOTE_AUTH, a bad request E_REMOTE_HTTP', async () => {
  const auth = await rejectsWith(LLM.connect({ baseURL: `${server.url}/v1`, apiKey: 'not-the-key' }), 'E_REMOTE_AUTH');
  assert.ok(auth instanceof RemoteError);
  assert.equal(auth.status, 401);
  assert.match(auth.message, /Invalid API Key/);

  // A prompt longer than the server's context.
  const long = Array.from({ length: 5000 }, () => FRANCE.promptIds[1]);
  const bad = await rejectsWith(remote.complete(long, { maxTokens: 1 }), 'E_REMOTE_HTTP');
  assert.equal(bad.status, 400);
  assert.match(bad.message, /context/);
});

// Last: it kills the server and starts it again on the same port.
test('a server killed mid-stream is E_REMOTE_UNAVAILABLE, never retried; requests retry until it is back', async () => {
  let fetches = 0;
  const counted = (...args) => {
    fetches++;
    return fetch(...args);
  };
  const patient = await LLM.connect({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 8, fetch: counted });
  const stream = await patient.chat.completions.create({ ...LONG_CHAT, stream: true });
  assert.equal(fetches, 2, 'the models list, then the request');
  let n = 0;
  let killed;
  await rejectsWith((async () => {
    for await (const _ of stream) if (++n === 3) killed = server.kill('SIGKILL');
  })(), 'E_REMOTE_UNAVAILABLE');
  assert.equal(fetches, 2, 'a stream that has begun is not retried');
  assert.equal((await killed).signal, 'SIGKILL');

  const down = await rejectsWith(remote.complete('Hi', { maxTokens: 1 }), 'E_REMOTE_UNAVAILABLE');
  assert.equal(down.status, null);

  const pending = patient.complete(FRANCE.prompt, { temperature: 0, maxTokens: 24 });
  while (fetches < 4) await new Promise((r) => setTimeout(r, 20)); // refused, and retried at least once
  server = await startLlamaServer(Number(new URL(server.url).port));
  const reply = await pending;
  assert.equal(reply.text, FRANCE.text);
  patient.dispose();
});
