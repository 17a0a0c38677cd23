// `ruvllm serve` through OpenAI's own client (the `openai` package): chat (streamed, structured, tools), completions,
// embeddings, models, auth, the bounded queue (429) and client aborts, against the CLI run as a child process; and
// through OpenAI's Python client (tests/python/openai_client.py), with 20 clients at once.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { LLM } from '../dist/node.js';
import { EMBED_MODEL_PATH, FRANCE, MODEL_PATH, REPO_DIR, health, startServe as start, until } from './helpers.mjs';

const run = promisify(execFile);

const KEY = 'test-key-5c1d';
const MODEL = basename(MODEL_PATH);
/** Answered "The capital of France is Paris." with a wide margin (tests/python/openai_client.py says why not "What is…"). */
const FRANCE_MESSAGES = [{ role: 'user', content: 'Name the capital of France.' }];
/** Far more tokens than a test waits for: a generation this long that ends at once was aborted. */
const LONG = { prompt: 'Once upon a time', max_tokens: 4000, ignore_eos: true, temperature: 0 };

let server; // --api-key, --max-queue 2, --embed-model, --cors
let client;
let llm; // the same model in this process: what the server's answers must equal

before(async () => {
  server = await start('--api-key', KEY, '--max-queue', '2', '--embed-model', EMBED_MODEL_PATH, '--cors', 'https://app.example');
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
  llm = await LLM.load(MODEL_PATH, { threads: 1 });
});

after(async () => {
  llm?.dispose();
  if (server) {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
    assert.match(server.stderr(), /closed\n$/);
  }
});

test('chat completion (greedy) is the in-process chat API answer; completions of the raw prompt are llama.cpp\'s', async () => {
  const reply = await client.chat.completions.create({ model: MODEL, messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 48 });
  const direct = await llm.chat.completions.create({ messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 48 });
  assert.equal(reply.object, 'chat.completion');
  assert.equal(reply.model, MODEL);
  assert.equal(reply.choices[0].message.content, direct.choices[0].message.content);
  assert.equal(reply.choices[0].finish_reason, direct.choices[0].finish_reason);
  assert.equal(reply.usage.completion_tokens, direct.usage.completion_tokens);
  console.log(`chat answer: ${JSON.stringify(reply.choices[0].message.content)}`);
  // The reference prompt (ChatML without a system turn) as a raw completion: llama.cpp's greedy answer.
  const completion = await client.completions.create({ model: MODEL, prompt: FRANCE.prompt, temperature: 0, max_tokens: 64 });
  assert.equal(completion.object, 'text_completion');
  assert.equal(completion.choices[0].text, FRANCE.text);
  assert.equal(completion.choices[0].finish_reason, 'stop');
  assert.equal(completion.usage.completion_tokens, FRANCE.ids.length);
});

test('a streamed chat completion joins to the whole answer, with usage in a last chunk of no choices', async () => {
  const messages = [{ role: 'user', content: 'What is the capital of Italy?' }];
  const whole = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 24 });
  const stream = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 24, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length > 3);
  assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), whole.choices[0].message.content);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
  // One prefix cache for all requests: the same prompt again starts from the cache.
  assert.ok(last.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(last.usage));
  assert.equal(chunks.at(-2).choices[0].finish_reason, whole.choices[0].finish_reason);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null);
  // Without include_usage no chunk has usage.
  const plain = [];
  for await (const chunk of await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 4, stream: true })) plain.push(chunk);
  assert.ok(plain.every((c) => c.usage === undefined && c.choices.length === 1));
});

test('completions stream too', async () => {
  const request = { model: MODEL, prompt: 'The three primary colors are', temperature: 0, max_tokens: 12 };
  const whole = await client.completions.create(request);
  const chunks = [];
  for await (const chunk of await client.completions.create({ ...request, stream: true })) chunks.push(chunk);
  assert.equal(chunks.map((c) => c.choices[0].text).join(''), whole.choices[0].text);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 12);
});

test('response_format json_schema gives JSON of the schema; a named tool is called with arguments of its schema', async () => {
  const schema = {
    type: 'object',
    properties: { city: { type: 'string' }, population: { type: 'integer' } },
    required: ['city', 'population'],
  };
  const reply = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Name a large city and its population as JSON.' }], temperature: 0, max_tokens: 60,
    response_format: { type: 'json_schema', json_schema: { name: 'city', schema, strict: true } },
  });
  const value = JSON.parse(reply.choices[0].message.content);
  assert.deepEqual(Object.keys(value).sort(), ['city', 'population']);
  assert.equal(typeof value.city, 'string');
  assert.ok(Number.isInteger(value.population));

  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const call = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], temperature: 0, max_tokens: 40,
    tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  assert.equal(call.choices[0].finish_reason, 'tool_calls');
  const [toolCall] = call.choices[0].message.tool_calls;
  assert.equal(toolCall.function.name, 'get_weather');
  assert.equal(typeof JSON.parse(toolCall.function.arguments).city, 'string');
});

test('embeddings come from --embed-model, normalized, as floats and as the client\'s default base64', async () => {
  const input = ['The cat sits on the mat.', 'A feline rests on a rug.'];
  const floats = await client.embeddings.create({ model: basename(EMBED_MODEL_PATH), input, encoding_format: 'float' });
  const base64 = await client.embeddings.create({ model: basename(EMBED_MODEL_PATH), input }); // decoded by the client
  assert.equal(floats.data.length, 2);
  for (const [i, d] of floats.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 384); // all-MiniLM-L6-v2
    assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-4);
    assert.deepEqual(base64.data[i].embedding, Array.from(new Float32Array(d.embedding)));
  }
  assert.ok(floats.usage.prompt_tokens > 0);
});

test('models lists the model files; health answers without the key', async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m.id);
  assert.deepEqual(list, [MODEL, basename(EMBED_MODEL_PATH)]);
  assert.equal((await health(server.url)).status, 'ok');
});

test('--api-key: no key or a wrong key is 401 (AuthenticationError), the key is accepted', async () => {
  const wrong = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-the-key', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
  const none = await fetch(`${server.url}/v1/models`);
  assert.equal(none.status, 401);
  assert.equal((await none.json()).error.type, 'authentication_error');
  assert.ok((await client.models.list()).data.length > 0);
});

test('errors are OpenAI\'s shape with our code: 400 for a bad request, 404, 413', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: FRANCE_MESSAGES, logit_bias: { 1: 2 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'E_INVALID_ARGUMENT' && /logit_bias/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: FRANCE_MESSAGES, response_format: { type: 'gbnf', grammar: 'root ::= (' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'E_GRAMMAR',
  );
  const auth = { authorization: `Bearer ${KEY}` };
  const bad = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: auth, body: '{"messages": [' });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, 'E_INVALID_ARGUMENT');
  const missing = await fetch(`${server.url}/v1/nothing`, { headers: auth });
  assert.equal(missing.status, 404);
  const big = await fetch(`${server.url}/v1/embeddings`, { method: 'POST', headers: auth, body: JSON.stringify({ input: 'x'.repeat(9 << 20) }) });
  assert.equal(big.status, 413);
  assert.equal((await big.json()).error.code, 'body_too_large');
});

test('past --max-queue a request gets 429 with Retry-After (RateLimitError); aborting frees the queue', async () => {
  const controllers = [new AbortController(), new AbortController()];
  // Two long generations: one runs, one waits for the model. Neither is awaited until it is aborted.
  const inFlight = controllers.map((c) => client.completions.create({ model: MODEL, ...LONG, stream: true }, { signal: c.signal }).then(async (s) => {
    for await (const _ of s);
  }).catch((e) => e));
  const { aborted } = await until(server.url, (h) => h.requests === 2);
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 1 }),
    (e) => e instanceof OpenAI.RateLimitError && e.status === 429 && e.code === 'queue_full' && Number(e.headers.get('retry-after')) > 0,
  );
  for (const c of controllers) c.abort();
  // The client ends a stream it aborts quietly, and rejects a request aborted before its stream began.
  for (const e of await Promise.all(inFlight)) assert.ok(e === undefined || e instanceof OpenAI.APIUserAbortError, String(e));
  await until(server.url, (h) => h.requests === 0 && h.aborted === aborted + 2);
});

test('a client that aborts a long stream stops its generation: the next request answers at once', async () => {
  const before = await health(server.url);
  const controller = new AbortController();
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a very long story.' }], temperature: 0, max_tokens: 4000, stream: true }, { signal: controller.signal });
  let n = 0;
  for await (const _ of stream) if (++n === 5) controller.abort(); // the client ends the loop quietly
  assert.equal(n, 5);
  const t0 = performance.now();
  const h = await until(server.url, (x) => x.requests === 0 && x.aborted === before.aborted + 1);
  const reply = await client.chat.completions.create({ model: MODEL, messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 4 });
  const ms = performance.now() - t0;
  assert.equal(reply.choices[0].finish_reason, 'length');
  assert.equal(h.served, before.served); // the long one was not served to the end
  console.log(`after the abort, the next answer came in ${ms.toFixed(0)} ms`);
  assert.ok(ms < 5000, `${ms} ms`);
});

test('--cors answers preflights; a server without flags has no CORS headers, no auth, and binds 127.0.0.1', async () => {
  const preflight = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.match(preflight.headers.get('access-control-allow-headers'), /authorization/);
  assert.equal((await fetch(`${server.url}/health`)).headers.get('access-control-allow-origin'), 'https://app.example');

  const plain = await start();
  try {
    assert.match(plain.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const open = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: 'anything', maxRetries: 0 });
    assert.deepEqual((await open.models.list()).data.map((m) => m.id), [MODEL]);
    assert.equal((await fetch(`${plain.url}/health`)).headers.get('access-control-allow-origin'), null);
    assert.equal((await fetch(`${plain.url}/v1/models`, { method: 'OPTIONS' })).status, 404);
  } finally {
    const { code } = await plain.stop();
    assert.equal(code, 0, plain.stderr());
  }
});

test('OpenAI\'s Python client: chat whole and streamed, embeddings, a closed stream, a wrong key, 20 clients at once with flat memory', async () => {
  // tests/python/openai_client.py makes the checks (a failed one exits non-zero) against a server of its own: a queue
  // of 12 behind the running request, so that of 20 clients at once some are answered and some get 429.
  const python = join(REPO_DIR, '.venv', 'bin', 'python');
  const queued = await start('--api-key', KEY, '--max-queue', '12', '--embed-model', EMBED_MODEL_PATH);
  try {
    const { stdout } = await run(python, [join(REPO_DIR, 'tests', 'python', 'openai_client.py'), `${queued.url}/v1`, KEY, MODEL, String(queued.pid)], { timeout: 600_000 });
    const summary = JSON.parse(stdout.trim().split('\n').at(-1));
    console.log(JSON.stringify(summary));
    // The same greedy answer as OpenAI's npm client gets from the same server.
    const npmClient = new OpenAI({ baseURL: `${queued.url}/v1`, apiKey: KEY, maxRetries: 0 });
    const reply = await npmClient.chat.completions.create({ model: MODEL, messages: FRANCE_MESSAGES, temperature: 0, max_tokens: 32 });
    assert.equal(summary.chat, reply.choices[0].message.content);
    assert.equal(summary.rounds.length, 3);
    for (const r of summary.rounds) assert.equal(r.answered + r['429'], 20);
  } finally {
    const { code } = await queued.stop();
    assert.equal(code, 0, queued.stderr());
  }
});
