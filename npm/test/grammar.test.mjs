// Constrained decoding (response_format, grammar) against the real default model: real-world JSON Schemas give JSON
// that validates, streaming gives the same text, the other grammar kinds hold, and bad grammars fail before any token.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { LLM, RuvllmError } from '@ruvector/ruvllm';
import { MODEL_PATH, REPO_DIR, drain, rejectsWith } from './helpers.mjs';

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
after(() => llm.dispose());

// Kubernetes v1.37.0's schemas (draft 2020-12), each standalone (scripts/fetch-schemas.sh), or $RUVLLM_SCHEMAS.
const SCHEMA_DIR =
  process.env.RUVLLM_SCHEMAS ??
  execFileSync(join(REPO_DIR, 'scripts', 'fetch-schemas.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
// The sample: tests/fixtures/kubernetes-schemas.txt (files of at most 3 KB, in name order, shuffled with mulberry32
// seeded 37, the number, the first 50), which tests/rust/constrained.rs generates for too.
const SAMPLE = 50;
const MAX_TOKENS = 160;

function sample() {
  return readFileSync(join(REPO_DIR, 'tests', 'fixtures', 'kubernetes-schemas.txt'), 'utf8')
    .split('\n')
    .filter((line) => line && !line.startsWith('#'));
}

function request(file, schema, extra = {}) {
  const what = schema.title ?? file.replace(/\.json$/, '');
  return {
    messages: [{ role: 'user', content: `Write an example ${what} as JSON.` }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
    temperature: 0,
    // Greedy, this model tends to repeat a pattern inside a string ("1.1.1.1...") until max_tokens; llama.cpp's
    // classic repeat penalty ends most such loops, so that most answers finish and get validated.
    repeat_penalty: 1.1,
    max_tokens: MAX_TOKENS,
    ...extra,
  };
}

const readSchema = (file) => JSON.parse(readFileSync(join(SCHEMA_DIR, file), 'utf8'));

// Non-streamed answers by file, shared by the tests that need the same request.
const answers = new Map();
async function answer(file) {
  if (!answers.has(file)) answers.set(file, await llm.chat.completions.create(request(file, readSchema(file))));
  return answers.get(file);
}

/** Chunks of `iterator` until it ends or throws: what came before an error, and the error. */
async function until(iterator) {
  const chunks = [];
  try {
    for await (const c of iterator) chunks.push(c);
  } catch (error) {
    return { chunks, error };
  }
  return { chunks, error: null };
}

function chatPrompt(content) {
  return llm.tokenizeChat([{ role: 'user', content }]);
}

test(`json_schema: answers to ${SAMPLE} real-world schemas that finish are JSON that validates`, async () => {
  const files = sample();
  assert.equal(files.length, SAMPLE, 'tests/fixtures/kubernetes-schemas.txt lists them');
  const ajv = new Ajv2020({ strict: false });
  addFormats(ajv);
  const started = performance.now();
  const failures = [];
  const rejected = [];
  let finished = 0;
  for (const file of files) {
    const schema = readSchema(file);
    const validate = ajv.compile(schema);
    let reply;
    try {
      reply = await answer(file);
    } catch (e) {
      // Each of these schemas is valid (ajv compiled it above) and real-world: the engine must take it.
      if (!(e instanceof RuvllmError)) throw e;
      rejected.push(`${file}: ${e.code}: ${e.message.split('\n').join(' ')}`);
      continue;
    }
    const { content } = reply.choices[0].message;
    const reason = reply.choices[0].finish_reason;
    assert.ok(reason === 'stop' || reason === 'length', `${file}: finish_reason ${reason}`);
    assert.ok(reply.usage.completion_tokens <= MAX_TOKENS, `${file}: ${reply.usage.completion_tokens} tokens`);
    // Only a finished answer is a whole JSON text; one cut at max_tokens is a prefix of one.
    if (reason !== 'stop') continue;
    finished++;
    let value;
    try {
      value = JSON.parse(content);
    } catch (e) {
      failures.push(`${file}: not JSON (${e.message}): ${JSON.stringify(content)}`);
      continue;
    }
    if (!validate(value)) failures.push(`${file}: ${ajv.errorsText(validate.errors)}: ${content}`);
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `json_schema: ${files.length} schemas (tests/fixtures/kubernetes-schemas.txt), ${rejected.length} rejected, ` +
      `${finished} finished (${Math.round((100 * finished) / files.length)}%), ${failures.length} invalid, ${seconds.toFixed(1)} s`,
  );
  assert.deepEqual(rejected, [], 'schemas the engine would not take');
  assert.deepEqual(failures, [], 'finished answers that are not JSON valid under their schema');
  // Most answers must finish, so that the validation above is not over a handful of answers.
  assert.ok(finished >= 0.8 * files.length, `only ${finished} of ${files.length} answers finished within ${MAX_TOKENS} tokens`);
});

test('json_schema with stream: true streams the non-streamed answer, chunk by chunk', async () => {
  const file = sample()[0];
  const whole = await answer(file);
  const stream = await llm.chat.completions.create(request(file, readSchema(file), { stream: true }));
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const text = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, whole.choices[0].message.content);
  assert.ok(chunks.filter((c) => c.choices[0].delta.content).length > 3, 'more than a few content chunks');
  const last = chunks.at(-1);
  assert.equal(last.choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens);
});

test('generate() with a regex, a GBNF grammar and json_object gives text of that form', async () => {
  const phone = await llm.complete(chatPrompt('What is your phone number?'), {
    temperature: 0,
    maxTokens: 32,
    grammar: { type: 'regex', pattern: '[0-9]{3}-[0-9]{4}' },
  });
  // The whole text matches, and the grammar ends the answer once it is complete.
  assert.match(phone.text, /^[0-9]{3}-[0-9]{4}$/);
  assert.equal(phone.finishReason, 'stop');

  // Sampled, not greedy: every seed's answer is one of the two, and both occur over the seeds.
  const seen = new Set();
  for (let seed = 1; seed <= 8; seed++) {
    const r = await llm.complete(chatPrompt('Is the sky blue? Answer yes or no.'), {
      temperature: 1.5,
      topK: 0,
      topP: 1,
      minP: 0,
      seed,
      maxTokens: 8,
      grammar: { type: 'gbnf', grammar: 'root ::= "yes" | "no"' },
    });
    assert.ok(r.text === 'yes' || r.text === 'no', `seed ${seed}: ${JSON.stringify(r.text)}`);
    assert.equal(r.finishReason, 'stop');
    seen.add(r.text);
  }
  assert.equal(seen.size, 2, `only ${[...seen]} over 8 seeds`);

  const object = await llm.complete(chatPrompt('Give a JSON object with a name and an age.'), {
    temperature: 0,
    maxTokens: 96,
    grammar: { type: 'json_object' },
  });
  assert.equal(object.finishReason, 'stop', `cut at 96 tokens: ${object.text}`);
  const value = JSON.parse(object.text);
  assert.ok(typeof value === 'object' && value !== null && !Array.isArray(value), `not an object: ${object.text}`);
});

test('a schema that allows one text forces all of it: forcedTokens counts the tokens not sampled', async () => {
  const schema = { type: 'object', properties: { answer: { const: 'forty-two' } }, required: ['answer'], additionalProperties: false };
  const r = await llm.complete(chatPrompt('What is the answer?'), { temperature: 0, maxTokens: 32, grammar: { type: 'json_schema', schema } });
  assert.equal(r.text, '{"answer": "forty-two"}');
  assert.equal(r.finishReason, 'stop');
  // Every token, the end-of-generation one included, was forced: nothing was sampled.
  assert.equal(r.usage.forcedTokens, r.usage.completionTokens, JSON.stringify(r.usage));
  assert.ok(r.usage.completionTokens > 1);
  // Free text forces nothing.
  const free = await llm.complete(chatPrompt('What is the answer?'), { temperature: 0, maxTokens: 8 });
  assert.equal(free.usage.forcedTokens, 0);
});

// Grammars that do not compile: E_GRAMMAR, before any token, with a message that names the culprit.
const BAD = [
  ['a schema with an unknown type', { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'objekt' } } }, /objekt/],
  [
    'a schema with a remote $ref',
    { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: 'https://example.com/schemas/pod.json' } } },
    /https:\/\/example\.com\/schemas\/pod\.json/,
  ],
  ['a GBNF grammar with an undefined rule', { type: 'gbnf', grammar: 'root ::= "a" missing' }, /undefined rule `missing`/],
  ['a regex syntax error', { type: 'regex', pattern: '([0-9]{3}-' }, /unclosed group/],
  ['a Lark syntax error', { type: 'lark', grammar: 'start: ("a" | "b"' }, /Expected token '\)'/],
];
// Requests of the wrong shape: E_INVALID_ARGUMENT, before the engine sees them, with a message that names the field.
const MALFORMED = [
  [
    'an unknown field in response_format',
    { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} }, schema: {} } },
    /unknown field 'schema'/,
  ],
  ['an unknown field in a grammar response_format', { response_format: { type: 'regex', pattern: 'a', flags: 'i' } }, /unknown field 'flags'/],
  ['json_schema without a name', { response_format: { type: 'json_schema', json_schema: { schema: { type: 'object' } } } }, /json_schema\.name/],
  ['grammar with a non-text response_format', { grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, /not both/],
  ['an unknown response_format type', { response_format: { type: 'xml' } }, /"xml"/],
];
const NORMAL = { messages: [{ role: 'user', content: 'What is the capital of France?' }], temperature: 0, max_tokens: 32 };

test('bad grammars reject with E_GRAMMAR before any token, malformed requests with E_INVALID_ARGUMENT; the model stays usable', async () => {
  const before = await llm.chat.completions.create(NORMAL);
  assert.ok(before.choices[0].message.content.length > 0);
  const prompt = chatPrompt('Say something.');

  for (const [what, response_format, message] of BAD) {
    const body = { ...NORMAL, response_format };
    const e = await rejectsWith(llm.chat.completions.create(body), 'E_GRAMMAR');
    assert.match(e.message, message, what);
    // Streamed: `create` resolves (it runs nothing yet); the stream gives its opening chunk (the role, no content),
    // then rejects: no chunk with content, no finish chunk.
    const stream = await llm.chat.completions.create({ ...body, stream: true });
    const { chunks, error } = await until(stream);
    assert.ok(error instanceof RuvllmError && error.code === 'E_GRAMMAR', `${what}, streamed: ${error?.stack ?? 'no error'}`);
    assert.deepEqual(
      chunks.map((c) => c.choices[0]),
      [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null, logprobs: null }],
      `${what}, streamed: the chunks before the error`,
    );
    // generate(): the first next() rejects.
    const grammar = response_format.type === 'json_schema' ? { type: 'json_schema', schema: response_format.json_schema.schema } : response_format;
    const direct = await until(llm.generate(prompt, { grammar }));
    assert.ok(direct.error instanceof RuvllmError && direct.error.code === 'E_GRAMMAR', `${what}, generate: ${direct.error?.stack ?? 'no error'}`);
    assert.equal(direct.chunks.length, 0, `${what}, generate: tokens before the error`);
  }
  // GBNF given as the llama.cpp server's `grammar` field fails the same way.
  const server = await rejectsWith(llm.chat.completions.create({ ...NORMAL, grammar: 'root ::= undefined-rule' }), 'E_GRAMMAR');
  assert.match(server.message, /undefined rule `undefined-rule`/);

  for (const [what, fields, message] of MALFORMED) {
    const e = await rejectsWith(llm.chat.completions.create({ ...NORMAL, ...fields }), 'E_INVALID_ARGUMENT');
    assert.match(e.message, message, what);
    await rejectsWith(llm.chat.completions.create({ ...NORMAL, ...fields, stream: true }), 'E_INVALID_ARGUMENT');
  }
  const unknown = await rejectsWith(
    (async () => drain(llm.generate(prompt, { grammar: { type: 'ebnf', grammar: 'root ::= "a"' } })))(),
    'E_INVALID_ARGUMENT',
  );
  assert.match(unknown.message, /grammar\.type .*"ebnf"/);
  // Grammars over the engine's 1 MiB of text: refused in wasm, or before the copy into wasm when far over; a schema
  // that JSON cannot hold (a cycle) is a malformed request.
  for (const [pattern, message] of [
    ['a'.repeat(1.5 * 2 ** 20), /the grammar is 1572864 bytes, more than the 1048576 allowed/], // the engine's check
    ['a'.repeat(7 * 2 ** 20), /the grammar is more than the 1048576 bytes allowed/], // the package's, before the copy
  ]) {
    const big = await rejectsWith((async () => drain(llm.generate(prompt, { grammar: { type: 'regex', pattern } })))(), 'E_GRAMMAR');
    assert.match(big.message, message);
  }
  const cyclic = { type: 'object', properties: {} };
  cyclic.properties.self = cyclic;
  const cycle = await rejectsWith((async () => drain(llm.generate(prompt, { grammar: { type: 'json_schema', schema: cyclic } })))(), 'E_INVALID_ARGUMENT');
  assert.match(cycle.message, /cannot be written as JSON/);
  // A text response_format is no grammar, so it goes with `grammar`.
  const both = await llm.chat.completions.create({ ...NORMAL, grammar: 'root ::= "a" | "b"', response_format: { type: 'text' } });
  assert.match(both.choices[0].message.content, /^[ab]$/);

  const afterwards = await llm.chat.completions.create(NORMAL);
  assert.equal(afterwards.choices[0].message.content, before.choices[0].message.content);
  assert.equal(afterwards.choices[0].finish_reason, before.choices[0].finish_reason);
});
