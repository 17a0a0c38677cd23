// Tokenizer.load: a model's text side from its GGUF header alone, from a path, bytes, a Blob and a URL on a real HTTP
// server (Range requests: the default model's 98 MB are counted with the header and little more sent; a server that
// ignores Range is read only as far as the header). Its answers are a loaded LLM's: ids (llama.cpp's reference cases
// too), text, chat templates and chat prompts with tools. Bad input is E_GGUF (not a GGUF, a file that ends inside its
// header), a failed fetch E_FETCH.
import assert from 'node:assert/strict';
import { createReadStream, readFileSync, writeFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { LLM, Tokenizer } from '@ruvector/ruvllm';
import { FRANCE, MODEL_PATH, REPO_DIR, rejectsWith } from './helpers.mjs';

const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const REFERENCE_DIR = process.env.RUVLLM_REFERENCE_DIR ?? join(REPO_DIR, '..', 'shared', 'reference');
const QWEN3_TEMPLATE = readFileSync(join(REPO_DIR, 'tests', 'fixtures', 'templates', 'Qwen-Qwen3-0.6B.jinja'), 'utf8');
const SIZE = statSync(MODEL_PATH).size;

const TEXTS = [
  'Hello, world! The quick brown fox.',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n',
  '東京は日本の首都です。 Ελληνικά 🦀🎉',
  '',
];
const TOOLS = [
  {
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  },
];
const CHAT = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'What is the weather in Paris? <|im_end|>' },
];

const llm = await LLM.load(MODEL_PATH, { threads: 1 });
const fromPath = await Tokenizer.load(MODEL_PATH);
after(() => {
  llm.dispose();
  fromPath.dispose();
});

/** `tokenizer` answers as `model` (an LLM) does. */
function sameAnswers(tokenizer, model) {
  for (const text of TEXTS) {
    for (const options of [{}, { special: true }, { prompt: true }]) {
      const ids = model.tokenize(text, options);
      assert.deepEqual(tokenizer.tokenize(text, options), ids, `${JSON.stringify(text)} ${JSON.stringify(options)}`);
      assert.equal(tokenizer.detokenize(ids), model.detokenize(ids));
    }
  }
  assert.equal(tokenizer.applyChatTemplate(CHAT), model.applyChatTemplate(CHAT));
  assert.deepEqual(tokenizer.tokenizeChat(CHAT), model.tokenizeChat(CHAT));
  assert.deepEqual(tokenizer.tokenizeChat(CHAT, { parseSpecialTokens: true }), model.tokenizeChat(CHAT, { parseSpecialTokens: true }));
  for (const toolChoice of ['auto', 'required', 'none']) {
    const options = { tools: TOOLS, toolChoice, parallelToolCalls: false };
    assert.equal(tokenizer.applyChatTemplate(CHAT, options), model.applyChatTemplate(CHAT, options));
    assert.deepEqual(tokenizer.chatPrompt(CHAT, options), model.chatPrompt(CHAT, options), toolChoice);
  }
}

test('a tokenizer read from a path answers as the loaded model, and as llama.cpp on the reference cases', () => {
  sameAnswers(fromPath, llm);
  const info = fromPath.info();
  const model = llm.info();
  assert.deepEqual(
    { name: info.name, architecture: info.architecture, vocabSize: info.vocabSize, hasChatTemplate: info.hasChatTemplate, contextLength: info.contextLength, parameters: info.parameters, quantization: info.quantization },
    { name: model.name, architecture: model.architecture, vocabSize: model.vocabSize, hasChatTemplate: model.hasChatTemplate, contextLength: model.trainedContextLength, parameters: model.parameters, quantization: model.quantization },
  );
  // What a catalogue shows before the download: the file's weights are Q4_1, trained at 8,192 positions.
  assert.deepEqual([info.quantization, info.contextLength], ['Q4_1', 8192]);
  assert.deepEqual([info.bos, info.eos], [1, 2]);
  assert.ok(info.headerBytes > 0 && info.headerBytes < SIZE / 50, `header ${info.headerBytes} of ${SIZE}`);
  for (const c of JSON.parse(readFileSync(join(REFERENCE_DIR, 'tokenizer.json'), 'utf8'))) {
    assert.deepEqual(fromPath.tokenize(c.text, { special: c.parse_special }), c.ids, c.name);
    assert.equal(fromPath.detokenize(c.ids), c.text, c.name);
  }
  for (const p of JSON.parse(readFileSync(join(REFERENCE_DIR, 'logits.json'), 'utf8')).prompts) {
    assert.deepEqual(fromPath.tokenize(p.prompt, { special: true }), p.prompt_ids, p.name);
  }
  assert.deepEqual(fromPath.tokenize(FRANCE.prompt, { prompt: true }), llm.tokenize(FRANCE.prompt, { prompt: true }));
  // The reader of an answer's tool calls, in the generic format the default model's template gets.
  const reader = fromPath.toolCallReader('generic');
  const deltas = [...reader.push('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}'), ...reader.finish()];
  assert.deepEqual(deltas.filter((d) => 'name' in d), [{ index: 0, name: 'get_weather' }]);
});

test('bytes, a Blob, and the header alone (no tensor data: no model) give the same tokenizer', async () => {
  const bytes = new Uint8Array(readFileSync(MODEL_PATH));
  const header = bytes.subarray(0, fromPath.info().headerBytes);
  for (const source of [bytes, bytes.buffer, new Blob([bytes]), header]) {
    const t = await Tokenizer.load(source);
    try {
      assert.deepEqual(t.info(), fromPath.info());
      sameAnswers(t, llm);
    } finally {
      t.dispose();
    }
  }
  await rejectsWith(LLM.load(header.slice(), { threads: 1 }), 'E_GGUF');
});

test('a chat template given at load replaces the file\'s, as LLM.load\'s does', async () => {
  const path = join(FIXTURES, 'tiny-qwen2.gguf');
  const [model, tokenizer] = await Promise.all([LLM.load(path, { threads: 1, chatTemplate: QWEN3_TEMPLATE }), Tokenizer.load(path, { chatTemplate: QWEN3_TEMPLATE })]);
  try {
    const prompt = tokenizer.chatPrompt(CHAT, { tools: TOOLS });
    assert.equal(prompt.toolFormat, 'hermes');
    assert.deepEqual(prompt, model.chatPrompt(CHAT, { tools: TOOLS }));
    assert.equal(tokenizer.applyChatTemplate(CHAT, { tools: TOOLS, chatTemplateKwargs: { enable_thinking: false } }), model.applyChatTemplate(CHAT, { tools: TOOLS, chatTemplateKwargs: { enable_thinking: false } }));
  } finally {
    model.dispose();
    tokenizer.dispose();
  }
  await rejectsWith(Tokenizer.load(path, { chatTemplate: '{% for %}' }), 'E_CHAT_TEMPLATE');
});

/** A server of the default model that counts the bytes it sends; `ranges`: whether it honours Range requests
 * (`'drop'`: it closes the connection of any request with a Range header, as a network failure). */
function modelServer(ranges) {
  const served = { bytes: 0, requests: [] };
  const server = createServer((req, res) => {
    const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    served.requests.push(req.headers.range ?? null);
    if (ranges === 'drop' && req.headers.range !== undefined) {
      req.socket.destroy();
      return;
    }
    if (req.url !== '/model.gguf') {
      res.writeHead(404).end();
      return;
    }
    let start = 0;
    let end = SIZE - 1;
    if (ranges && range) {
      start = Number(range[1]);
      end = Math.min(Number(range[2]), SIZE - 1);
      if (start >= SIZE) {
        res.writeHead(416, { 'Content-Range': `bytes */${SIZE}` }).end();
        return;
      }
      res.writeHead(206, { 'Content-Range': `bytes ${start}-${end}/${SIZE}`, 'Content-Length': end - start + 1 });
    } else {
      res.writeHead(200, { 'Content-Length': SIZE });
    }
    const file = createReadStream(MODEL_PATH, { start, end });
    file.on('data', (chunk) => (served.bytes += chunk.length));
    file.pipe(res);
    res.on('close', () => file.destroy());
  });
  return { server, served };
}

async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${server.address().port}`;
}

let rangeServer;
let plainServer;
let dropServer;
before(() => {
  rangeServer = modelServer(true);
  plainServer = modelServer(false);
  dropServer = modelServer('drop');
});
after(() => {
  for (const { server } of [rangeServer, plainServer, dropServer]) {
    server.close();
    server.closeAllConnections();
  }
});

test('a URL is read with Range requests: the header and little more are sent of a 98 MB model', async () => {
  const base = await listen(rangeServer.server);
  const t = await Tokenizer.load(`${base}/model.gguf`);
  try {
    sameAnswers(t, llm);
    const { headerBytes } = t.info();
    assert.equal(headerBytes, fromPath.info().headerBytes);
    const { bytes, requests } = rangeServer.served;
    // Each read at least doubles the last, so at most twice the header is asked for, in a few requests.
    assert.ok(bytes >= headerBytes && bytes <= 2 * headerBytes, `${bytes} bytes sent for a ${headerBytes}-byte header of ${SIZE}`);
    assert.ok(requests.length <= 6 && requests.every((r) => r !== null), `requests: ${requests}`);
  } finally {
    t.dispose();
  }
  await rejectsWith(Tokenizer.load(`${base}/absent.gguf`), 'E_FETCH');
  await rejectsWith(Tokenizer.load(`${base}/model.gguf`, { signal: AbortSignal.abort() }), 'E_ABORTED');
});

test('a server that ignores Range is read only as far as the header, then let go', async () => {
  const base = await listen(plainServer.server);
  const t = await Tokenizer.load(new URL(`${base}/model.gguf`));
  try {
    assert.deepEqual(t.info(), fromPath.info());
    assert.deepEqual(t.tokenize(FRANCE.prompt, { prompt: true }), llm.tokenize(FRANCE.prompt, { prompt: true }));
  } finally {
    t.dispose();
  }
  // The stream is cancelled once the header is in: the server stops long before the end of the file.
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(plainServer.served.requests.length, 1);
  assert.ok(plainServer.served.bytes < SIZE / 2, `${plainServer.served.bytes} of ${SIZE} bytes sent`);
});

test('a ranged request that fails as a network error is asked again without Range and read as far as the header', async () => {
  const base = await listen(dropServer.server);
  const t = await Tokenizer.load(`${base}/model.gguf`);
  try {
    assert.deepEqual(t.info(), fromPath.info());
    assert.deepEqual(t.tokenize(FRANCE.prompt, { prompt: true }), llm.tokenize(FRANCE.prompt, { prompt: true }));
  } finally {
    t.dispose();
  }
  const { requests } = dropServer.served;
  assert.ok(requests.length === 2 && requests[0] !== null && requests[1] === null, `requests: ${requests}`);
});

test('not a GGUF, or a file that ends inside its header, is E_GGUF; a disposed tokenizer E_DISPOSED', async () => {
  const bytes = new Uint8Array(readFileSync(MODEL_PATH).subarray(0, 1 << 20));
  await rejectsWith(Tokenizer.load(new TextEncoder().encode('PK\x03\x04 this is a zip, not a model')), 'E_GGUF');
  await rejectsWith(Tokenizer.load(new Uint8Array(0)), 'E_GGUF');
  const truncated = await rejectsWith(Tokenizer.load(bytes.subarray(0, 300_000)), 'E_GGUF');
  assert.match(truncated.message, /truncated/);
  const dir = mkdtempSync(join(tmpdir(), 'ruvllm-tokenizer-'));
  try {
    writeFileSync(join(dir, 'short.gguf'), bytes);
    await rejectsWith(Tokenizer.load(join(dir, 'short.gguf')), 'E_GGUF');
    await rejectsWith(Tokenizer.load(join(dir, 'absent.gguf')), 'E_IO');
    await rejectsWith(Tokenizer.load(dir), 'E_IO'); // not a regular file
  } finally {
    rmSync(dir, { recursive: true });
  }
  await rejectsWith(Tokenizer.load(MODEL_PATH, { chatTemplate: 7 }), 'E_INVALID_ARGUMENT');
  const t = await Tokenizer.load(MODEL_PATH);
  t.dispose();
  assert.throws(() => t.tokenize('hi'), (e) => e.code === 'E_DISPOSED');
});
