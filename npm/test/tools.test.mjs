// Tool calls through the chat API: the real default model calls the tool it must (behind a custom system prompt),
// then answers from the tool's result; a streamed answer's tool-call deltas assemble to the non-streamed answer; a
// template of another family (given at load, on a tiny fixture model) holds the answer to its calls; bad tools, tool
// choices and messages are E_INVALID_ARGUMENT before any token.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { MODEL_PATH, REPO_DIR, rejectsWith } from './helpers.mjs';

const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const llm = await LLM.load(MODEL_PATH, { threads: 1 });
after(() => llm.dispose());

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { enum: ['Paris', 'Rome', 'Oslo'] }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city'],
        additionalProperties: false,
      },
    },
  },
  { type: 'function', function: { name: 'get_time', description: 'The time now', parameters: { type: 'object', properties: {}, additionalProperties: false } } },
];

const ASK = [
  { role: 'system', content: 'You are a weather assistant. Keep answers short.' },
  { role: 'user', content: 'What is the weather like in Rome today?' },
];

/** The answer a client assembles from a stream's chunks, as the official `openai` client's stream helper does. */
async function assemble(stream) {
  const message = { role: undefined, content: '', tool_calls: [] };
  let finish = null;
  let usage;
  for await (const chunk of stream) {
    const [{ delta, finish_reason }] = chunk.choices;
    if (delta.role) message.role = delta.role;
    if (delta.content) message.content += delta.content;
    for (const d of delta.tool_calls ?? []) {
      if (d.id !== undefined) {
        assert.equal(d.index, message.tool_calls.length, 'calls start in order');
        message.tool_calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } });
      }
      message.tool_calls[d.index].function.arguments += d.function.arguments;
    }
    if (finish_reason) {
      finish = finish_reason;
      usage = chunk.usage;
    }
  }
  return { message, finish, usage };
}

test('the default model calls the required tool behind a custom system prompt, then answers from its result', async () => {
  const body = { messages: ASK, tools: TOOLS, tool_choice: 'required', temperature: 0, max_tokens: 80 };
  const first = await llm.chat.completions.create(body);
  const [choice] = first.choices;
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1, JSON.stringify(choice.message));
  const [call] = choice.message.tool_calls;
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.equal(JSON.parse(call.function.arguments).city, 'Rome');
  assert.ok(first.usage.completion_tokens > 0);

  // The streamed answer carries the same call (ids aside), in OpenAI's deltas.
  const streamed = await assemble(await llm.chat.completions.create({ ...body, stream: true }));
  assert.equal(streamed.finish, 'tool_calls');
  assert.equal(streamed.message.role, 'assistant');
  assert.equal(streamed.message.content, '');
  assert.deepEqual(
    streamed.message.tool_calls.map((c) => ({ ...c, id: undefined })),
    choice.message.tool_calls.map((c) => ({ ...c, id: undefined })),
  );
  assert.equal(streamed.usage.completion_tokens, first.usage.completion_tokens);

  // The call and the tool's result go back as the history; the tools are still offered (`auto`).
  const history = [...ASK, choice.message, { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 24, sky: 'sunny' }) }];
  const second = await llm.chat.completions.create({ messages: history, tools: TOOLS, temperature: 0, max_tokens: 80 });
  const answer = second.choices[0];
  assert.equal(answer.finish_reason, 'stop', JSON.stringify(answer));
  assert.equal(answer.message.tool_calls, undefined);
  assert.match(answer.message.content, /24/);
  assert.match(answer.message.content, /Rome/);
  // Streamed, the same text.
  const again = await assemble(await llm.chat.completions.create({ messages: history, tools: TOOLS, temperature: 0, max_tokens: 80, stream: true }));
  assert.equal(again.message.content, answer.message.content);
  assert.deepEqual(again.message.tool_calls, []);
});

test('a named function is called, once; parallel_tool_calls: false allows one call; none offers no tools', async () => {
  const named = await llm.chat.completions.create({
    messages: ASK,
    tools: TOOLS,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
    max_tokens: 40,
  });
  assert.deepEqual(
    named.choices[0].message.tool_calls.map((c) => c.function),
    [{ name: 'get_time', arguments: '{}' }],
  );
  const one = await llm.chat.completions.create({ messages: ASK, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 80 });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  // `none`: the prompt is the one without tools, and the answer is text.
  assert.deepEqual(llm.chatPrompt(ASK, { tools: TOOLS, toolChoice: 'none' }), { ids: llm.tokenizeChat(ASK), grammar: null, toolFormat: null });
  const text = await llm.chat.completions.create({ messages: ASK, tools: TOOLS, tool_choice: 'none', max_tokens: 16 });
  assert.equal(text.choices[0].message.tool_calls, undefined);
  assert.equal(typeof text.choices[0].message.content, 'string');
  // The prompt with tools: the system prompt first, then the tools in the generic form.
  const rendered = llm.applyChatTemplate(ASK, { tools: TOOLS });
  assert.ok(rendered.startsWith('<|im_start|>system\nYou are a weather assistant. Keep answers short.\n\nYou can call the following tools.'), rendered);
  assert.match(rendered, /"name":"get_weather"/);
});

test('a template given at load (Llama 3.2) holds a tiny model to its call format', async () => {
  const chatTemplate = readFileSync(join(REPO_DIR, 'tests', 'fixtures', 'templates', 'meta-llama-Llama-3.2-3B-Instruct.jinja'), 'utf8');
  const tiny = await LLM.load(join(FIXTURES, 'tiny-qwen2.gguf'), { threads: 1, chatTemplate });
  try {
    const prompt = tiny.chatPrompt(ASK, { tools: TOOLS, toolChoice: 'required' });
    assert.equal(prompt.toolFormat, 'llama3');
    assert.match(tiny.applyChatTemplate(ASK, { tools: TOOLS }), /<\|start_header_id\|>system<\|end_header_id\|>\n\nEnvironment: ipython/);
    for (const seed of [1, 2, 3]) {
      const r = await tiny.chat.completions.create({ messages: ASK, tools: TOOLS, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed, max_tokens: 120 });
      const [choice] = r.choices;
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      const [call] = choice.message.tool_calls;
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'get_weather') assert.ok(['Paris', 'Rome', 'Oslo'].includes(args.city), call.function.arguments);
      else assert.deepEqual([call.function.name, args], ['get_time', {}]);
    }
  } finally {
    tiny.dispose();
  }
  await rejectsWith(LLM.load(join(FIXTURES, 'tiny-qwen2.gguf'), { threads: 1, chatTemplate: '{% for m in messages %}' }), 'E_CHAT_TEMPLATE');
  // A template past the bound (1 MiB) is refused before it is parsed.
  await rejectsWith(LLM.load(join(FIXTURES, 'tiny-qwen2.gguf'), { threads: 1, chatTemplate: 'x'.repeat((1 << 20) + 1) }), 'E_CHAT_TEMPLATE');
});

test('bad tools, tool choices and messages are E_INVALID_ARGUMENT before any token', async () => {
  const create = (extra) => llm.chat.completions.create({ messages: ASK, max_tokens: 4, ...extra });
  const cases = [
    { tools: [{ type: 'function', function: { name: 'has space' } }] },
    { tools: [{ type: 'retrieval' }] },
    { tools: [TOOLS[0], TOOLS[0]] },
    { tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } },
    { tools: TOOLS, tool_choice: 'sometimes' },
    { tool_choice: 'required' },
    { tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } },
    { tools: TOOLS, parallel_tool_calls: 'yes' },
    { tools: TOOLS, chat_template_kwargs: { messages: [] } },
    { messages: [...ASK, { role: 'tool', content: '{}' }] },
    { messages: [...ASK, { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'get_time', arguments: {} } }] }] },
    { messages: [{ role: 'user', content: 'hi', function_call: null }] },
    { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
  ];
  for (const extra of cases) {
    await rejectsWith(create(extra), 'E_INVALID_ARGUMENT');
  }
  // Text parts are read as their text.
  assert.deepEqual(llm.tokenizeChat([{ role: 'user', content: [{ type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }] }]), llm.tokenizeChat([{ role: 'user', content: 'Hello' }]));
});
