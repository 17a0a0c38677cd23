// LLM.connect against `ruvllm serve` run as a child process (no mocks: every answer comes from the real server): the
// remote answers equal the local engine's, streams, the server's usage, aborts and timeouts that stop the server's
// generation, errors mapped to codes with the server's message, retries across a restart but never mid-stream,
// `LLM.loadOrConnect`, and what needs a local engine refused with E_UNSUPPORTED.
import assert from 'node:assert/strict';
import { basename } from 'node:path';
import { after, before, test } from 'node:test';
import { LLM, RemoteError, RemoteLLM } from '@ruvector/ruvllm';
import { EMBED_MODEL_PATH, FRANCE, MODEL_PATH, abortAfter, health, rejectsWith, startServe, until } from './helpers.mjs';
import { serve as serveFiles } from './server.mjs';
import { sseData } from '../dist/remote.js';

const KEY = 'connect-key-7f2e';
const MODEL = basename(MODEL_PATH);
const FRANCE_MESSAGES = [{ role: 'user', content: 'What is the capital of France?' }];
/** Far more tokens than a test waits for: a generation this long that ends at once was stopped. */
const LONG_CHAT = { messages: [{ role: 'user', content: 'Tell me a very long story.' }], max_tokens: 4000, temperature: 0 };
const SERVE_ARGS = ['--api-key', KEY, '--embed-model', EMBED_MODEL_PATH, '--max-queue', '2'];

let server;
let baseURL;
let remote; // no retries: each failure shows as it is
let llm; // the same model in this process, loaded by loadOrConnect: what the server's answers must equal

before(async () => {
  server = await startServe(...SERVE_ARGS);
  baseURL = `${server.url}/v1`;
  remote = await LLM.connect({ baseURL, apiKey: KEY, maxRetries: 0 });
  llm = await LLM.loadOrConnect(MODEL_PATH, { threads: 1 }, { baseURL, apiKey: KEY });
});

after(async () => {
  llm?.dispose();
  remote?.dispose();
  if (server) {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
  }
});

test('loadOrConnect runs a model that fits here locally; the remote greedy chat answer and its usage equal the local one', async () => {
  assert.ok(llm instanceof LLM);
  assert.ok(remote instanceof RemoteLLM);
  assert.deepEqual(remote.info(), { engine: 'remote', name: MODEL, baseURL: `${baseURL}/`, models: [MODEL, basename(EMBED_MODEL_PATH)], localError: null });
  const request = { messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 24 };
  const [there, here] = [await remote.chat.completions.create(request), await llm.chat.completions.create(request)];
  assert.equal(there.model, MODEL);
  assert.equal(there.choices[0].message.content, here.choices[0].message.content);
  assert.equal(there.choices[0].finish_reason, here.choices[0].finish_reason);
  // The client has no tokenizer: these counts can only be the server's.
  assert.equal(there.usage.prompt_tokens, here.usage.prompt_tokens);
  assert.equal(there.usage.completion_tokens, here.usage.completion_tokens);

  // generate over /v1/completions, from text and from token ids: llama.cpp's reference answer, token count included.
  const fromText = await remote.complete(FRANCE.prompt, { temperature: 0, maxTokens: 24 });
  const ids = llm.tokenize(FRANCE.prompt, { prompt: true });
  const fromIds = await remote.complete(ids, { temperature: 0, maxTokens: 24 });
  const local = await llm.complete(FRANCE.prompt, { temperature: 0, maxTokens: 24 });
  assert.deepEqual(local.ids, FRANCE.ids);
  for (const r of [fromText, fromIds]) {
    assert.equal(r.text, local.text);
    assert.equal(r.finishReason, 'stop');
    assert.equal(r.usage.completionTokens, local.usage.completionTokens);
    assert.equal(r.usage.promptTokens, ids.length);
    assert.equal(r.usage.totalTokens, ids.length + local.usage.completionTokens);
  }
});

test('streams: chat chunks join to the local text with the usage on the finish chunk; generate yields the same text', async () => {
  const request = { messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 24, stream: true };
  const collect = async (stream) => {
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    return chunks;
  };
  const there = await collect(await remote.chat.completions.create(request));
  const here = await collect(await llm.chat.completions.create(request));
  const text = (chunks) => chunks.map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text(there), text(here));
  assert.ok(there.length > 3, 'streamed in pieces');
  const [last, lastHere] = [there.at(-1), here.at(-1)];
  assert.equal(last.choices[0].finish_reason, lastHere.choices[0].finish_reason);
  assert.equal(last.usage.completion_tokens, lastHere.usage.completion_tokens);
  assert.equal(last.usage.prompt_tokens, lastHere.usage.prompt_tokens);
  assert.ok(there.slice(0, -1).every((c) => c.usage === undefined), 'usage only on the last chunk');

  const it = remote.generate(FRANCE.prompt, { temperature: 0, maxTokens: 24 });
  const pieces = [];
  let r;
  while (!(r = await it.next()).done) pieces.push(r.value);
  assert.ok(pieces.length > 3 && pieces.every((p) => p.id === null && p.text !== ''));
  assert.equal(pieces.map((p) => p.text).join(''), FRANCE.text);
  assert.equal(r.value.text, pieces.map((p) => p.text).join(''));
});

test('response_format and tools pass through: the structured answer and the call equal the local ones', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  const structured = { messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 24, response_format: { type: 'json_schema', json_schema: { name: 'city', schema } } };
  const [a, b] = [await remote.chat.completions.create(structured), await llm.chat.completions.create(structured)];
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(typeof JSON.parse(a.choices[0].message.content).city, 'string');

  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const call = { messages: [{ role: 'user', content: 'What is the weather in Paris?' }], temperature: 0, max_tokens: 32, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
  const [c, d] = [await remote.chat.completions.create(call), await llm.chat.completions.create(call)];
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  assert.equal(c.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.equal(c.choices[0].message.tool_calls[0].function.arguments, d.choices[0].message.tool_calls[0].function.arguments);
});

test('embeddings come from the server\'s embedding model: the local vectors, the server\'s token count', async () => {
  const embedder = await LLM.load(EMBED_MODEL_PATH, { threads: 1 });
  try {
    const input = ['The cat sits on the mat.', 'A feline rests on a rug.'];
    const answer = await remote.embeddings.create({ input });
    const local = await embedder.embedWithUsage(input);
    assert.equal(answer.data.length, 2);
    for (const [i, d] of answer.data.entries()) {
      assert.equal(d.index, i);
      assert.equal(d.embedding.length, 384);
      const cos = d.embedding.reduce((s, v, j) => s + v * local.embeddings[i][j], 0);
      assert.ok(cos > 0.9999, `cosine ${cos}`);
    }
    assert.equal(answer.usage.prompt_tokens, local.tokens);
    const { embeddings, tokens } = await remote.embedWithUsage(input[0]);
    assert.deepEqual(embeddings, [answer.data[0].embedding]);
    assert.ok(tokens > 0 && tokens < local.tokens);
  } finally {
    embedder.dispose();
  }
});

test('an abort or a loop left early stops the server\'s generation: the next request answers at once', async () => {
  const before = await health(server.url);
  const controller = new AbortController();
  const stream = await remote.chat.completions.create({ ...LONG_CHAT, stream: true }, { signal: controller.signal });
  await abortAfter(5, stream, controller);
  await until(server.url, (h) => h.requests === 0 && h.aborted === before.aborted + 1);

  let pieces = 0;
  for await (const _ of remote.generate('Once upon a time', { maxTokens: 4000, ignoreEos: true })) if (++pieces === 3) break;
  const t0 = performance.now();
  const h = await until(server.url, (x) => x.requests === 0 && x.aborted === before.aborted + 2);
  const reply = await remote.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 4 });
  assert.equal(reply.choices[0].finish_reason, 'length');
  assert.equal(h.served, before.served); // neither long one was served to its end
  assert.ok(performance.now() - t0 < 5000);
});

test('timeoutMs: an answer that does not come in time is E_REMOTE_TIMEOUT, and the server stops generating it', async () => {
  const before = await health(server.url);
  let fetches = 0;
  const impatient = await LLM.connect({ baseURL, apiKey: KEY, timeoutMs: 300, maxRetries: 3, fetch: (...args) => (fetches++, fetch(...args)) });
  const e = await rejectsWith(impatient.chat.completions.create(LONG_CHAT), 'E_REMOTE_TIMEOUT');
  assert.match(e.message, /within 300 ms/);
  assert.equal(fetches, 2, 'the models list, then one attempt: a timeout is not retried');
  await until(server.url, (h) => h.requests === 0 && h.aborted === before.aborted + 1);
  impatient.dispose();
  await rejectsWith(impatient.complete('Hi'), 'E_DISPOSED');
});

test('past --max-queue a request is E_REMOTE_RATE_LIMIT; with retries it waits the Retry-After and is answered', async () => {
  const controllers = [new AbortController(), new AbortController()];
  // Two long generations fill the queue: one runs, one waits for the model.
  const long = controllers.map((c) => remote.chat.completions.create({ ...LONG_CHAT, stream: true }, { signal: c.signal }).then(async (stream) => {
    for await (const _ of stream);
  }).catch((e) => e));
  await until(server.url, (h) => h.requests === 2);
  const full = await rejectsWith(remote.complete('Hi', { maxTokens: 1 }), 'E_REMOTE_RATE_LIMIT');
  assert.equal(full.status, 429);
  assert.equal(full.remoteCode, 'queue_full');

  const answers = []; // each attempt's status and when it came
  const patient = await LLM.connect({ baseURL, apiKey: KEY, maxRetries: 2, fetch: async (...args) => {
    const res = await fetch(...args);
    answers.push({ status: res.status, at: performance.now() });
    return res;
  } });
  const pending = patient.complete('Hi', { maxTokens: 1, temperature: 0 });
  while (answers.length < 2) await new Promise((r) => setTimeout(r, 10));
  for (const c of controllers) c.abort();
  for (const e of await Promise.all(long)) assert.equal(e?.code, 'E_ABORTED');
  const r = await pending;
  assert.equal(r.usage.completionTokens, 1);
  assert.deepEqual(answers.map((a) => a.status), [200, 429, 200]);
  assert.ok(answers[2].at - answers[1].at >= 1900, 'the Retry-After (2 s) was waited'); // not the 0.5 s backoff
  patient.dispose();
});

test('errors keep the server\'s status, code and message: a wrong key is E_REMOTE_AUTH, a 400 E_REMOTE_HTTP', async () => {
  const auth = await rejectsWith(LLM.connect({ baseURL, apiKey: 'not-the-key' }), 'E_REMOTE_AUTH');
  assert.ok(auth instanceof RemoteError);
  assert.equal(auth.status, 401);
  assert.equal(auth.remoteCode, 'invalid_api_key');
  assert.match(auth.message, /invalid API key/);

  const bad = await rejectsWith(remote.chat.completions.create({ messages: FRANCE_MESSAGES, logit_bias: { 1: 2 } }), 'E_REMOTE_HTTP');
  assert.equal(bad.status, 400);
  assert.equal(bad.remoteCode, 'E_INVALID_ARGUMENT');
  assert.match(bad.message, /unsupported chat completion field 'logit_bias'/);
  // A stream's error before its first token still comes as the answer's status, so `create` rejects.
  const grammar = await rejectsWith(remote.chat.completions.create({ messages: FRANCE_MESSAGES, stream: true, response_format: { type: 'gbnf', grammar: 'root ::= (' } }), 'E_REMOTE_HTTP');
  assert.equal(grammar.remoteCode, 'E_GRAMMAR');
  // generate's grammar goes as llama.cpp's `grammar` field, which ruvllm serve's completions do not take.
  const field = await rejectsWith(remote.complete('Hi', { grammar: { type: 'gbnf', grammar: 'root ::= "a"' } }), 'E_REMOTE_HTTP');
  assert.match(field.message, /unsupported completion field 'grammar'/);
  // The package's own checks run before any request.
  await rejectsWith(remote.complete('Hi', { topK: -1 }), 'E_INVALID_ARGUMENT');
});

test('the event reader takes CR, LF and CR LF line ends and UTF-8 split anywhere across chunks', async () => {
  const bytes = new TextEncoder().encode('data: a\r\ndata: b\n\n: a comment\nevent: x\r\ndata:c\r\rid: 1\ndata: caf\u00e9\n\ndata: [DONE]');
  const expected = ['a\nb', 'c', 'caf\u00e9', '[DONE]']; // the last event ends with the body, without an empty line
  // Every way of cutting the body in two, then one byte at a time: a CR LF and the two bytes of the é cut too.
  const cuts = [...Array.from({ length: bytes.length - 1 }, (_, i) => [bytes.subarray(0, i + 1), bytes.subarray(i + 1)]), Array.from(bytes, (b) => Uint8Array.of(b))];
  for (const chunks of cuts) {
    let i = 0;
    const read = async () => (i < chunks.length ? { done: false, value: chunks[i++] } : { done: true, value: undefined });
    const events = [];
    for await (const data of sseData(read)) events.push(data);
    assert.deepEqual(events, expected, `cut into ${chunks.map((c) => c.length)}`);
  }
});

test('what needs an engine in this process is E_UNSUPPORTED, and so is tokenize on a server without /tokenize', async () => {
  for (const call of [() => remote.score([1, 2]), () => remote.saveState(), () => remote.restoreState(new Uint8Array(1)), () => remote.loadAdapter('x.gguf'),
    () => remote.microLora(), () => remote.feedback({ messages: FRANCE_MESSAGES, answer: 'Paris', accepted: true }), () => remote.reset(), () => remote.tokenize('Hi'), () => remote.detokenize([1])]) {
    await rejectsWith(call(), 'E_UNSUPPORTED');
  }
  assert.throws(() => remote.applyChatTemplate(FRANCE_MESSAGES), { code: 'E_UNSUPPORTED' });
  assert.throws(() => remote.tokenizeChat(FRANCE_MESSAGES), { code: 'E_UNSUPPORTED' });
  assert.throws(() => remote.generate('Hi', { adapters: [{ id: 0 }] }), { code: 'E_UNSUPPORTED' });
  await rejectsWith(remote.embed('Hi', { normalize: false }), 'E_UNSUPPORTED');
});

test('loadOrConnect: a model too large for wasm32 is served remotely; other load errors are thrown', async () => {
  const files = await serveFiles({});
  try {
    const big = await LLM.loadOrConnect(`${files.origin}/too-large.gguf`, { threads: 1 }, { baseURL, apiKey: KEY });
    assert.ok(big instanceof RemoteLLM);
    assert.equal(big.info().localError.code, 'E_MODEL_TOO_LARGE');
    const reply = await big.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 2 });
    assert.equal(reply.usage.completion_tokens, 2);
    big.dispose();
    await rejectsWith(LLM.loadOrConnect('/nonexistent/model.gguf', { threads: 1 }, { baseURL, apiKey: KEY }), 'E_IO');
  } finally {
    await files.close();
  }
});

// Last: it stops the server and starts it again on the same port.
test('a server gone mid-stream is E_REMOTE_UNAVAILABLE, never retried; while it is down requests retry until it is back', async () => {
  let fetches = 0;
  const counted = (...args) => {
    fetches++;
    return fetch(...args);
  };
  const patient = await LLM.connect({ baseURL, apiKey: KEY, maxRetries: 8, fetch: counted });
  const stream = await patient.chat.completions.create({ ...LONG_CHAT, stream: true });
  assert.equal(fetches, 2);
  let n = 0;
  let stopped;
  await rejectsWith((async () => {
    for await (const _ of stream) if (++n === 3) stopped = server.stop();
  })(), 'E_REMOTE_UNAVAILABLE');
  assert.equal(fetches, 2, 'a stream that has begun is not retried');
  assert.equal((await stopped).code, 0);

  const down = await rejectsWith(remote.complete('Hi', { maxTokens: 1 }), 'E_REMOTE_UNAVAILABLE');
  assert.equal(down.status, null);

  const pending = patient.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 8 });
  while (fetches < 4) await new Promise((r) => setTimeout(r, 20)); // refused, and retried at least once
  server = await startServe(...SERVE_ARGS, '--port', new URL(server.url).port);
  const reply = await pending;
  const local = await llm.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 8 });
  assert.equal(reply.choices[0].message.content, local.choices[0].message.content);
  patient.dispose();
});
