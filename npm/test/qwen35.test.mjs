// A Qwen3.5 model (tiny-qwen35 of tests/fixtures/make_tiny_models.py: delta-net layers with a recurrent state beside
// gated attention) through the package in Node: a conversation's second turn keeps the positions it shares with the
// first (its recurrent state taken back to where they part) and samples what a fresh model samples; a saved
// conversation carries the recurrent state; and under Qwen 3.5's own template its XML tool calls are held to the
// grammar and read back with their values typed by the tools' schemas.
// Run: node --test test/qwen35.test.mjs   (RUVLLM_FIXTURES: the tiny models of tests/fixtures/make_tiny_models.py)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { LLM } from '@ruvector/ruvllm';
import { REPO_DIR } from './helpers.mjs';

const FIXTURES = process.env.RUVLLM_FIXTURES ?? join(REPO_DIR, 'target', 'fixtures');
const TINY = join(FIXTURES, 'tiny-qwen35.gguf');
const chatTemplate = readFileSync(join(REPO_DIR, 'tests', 'fixtures', 'templates', 'Qwen3.5-4B.jinja'), 'utf8');
const llm = await LLM.load(TINY, { threads: 1, chatTemplate });
after(() => llm.dispose());

const FIRST = [{ role: 'user', content: 'Tell me about the old fisherman.' }];
// Sampled at temperature 1 from a seed: any difference in the logits shows in the tokens.
const sample = { temperature: 1, seed: 7, max_tokens: 12 };

/** The second turn's messages after `answer`, and what a freshly loaded model samples for them. */
async function secondTurn(answer) {
  const messages = [...FIRST, { role: 'assistant', content: answer }, { role: 'user', content: 'And then?' }];
  const fresh = await LLM.load(TINY, { threads: 1, chatTemplate });
  try {
    return { messages, want: (await fresh.chat.completions.create({ messages, ...sample })).choices[0].message.content };
  } finally {
    fresh.dispose();
  }
}

test('a second turn keeps the shared positions and samples what a fresh model samples', async () => {
  const first = await llm.chat.completions.create({ messages: FIRST, ...sample });
  // The template renders the earlier answer without its think block: the prompts part inside the first answer.
  const { messages, want } = await secondTurn(first.choices[0].message.content);
  const got = await llm.chat.completions.create({ messages, ...sample });
  assert.equal(got.choices[0].message.content, want);
  const cached = got.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached < got.usage.prompt_tokens, `${cached} of ${got.usage.prompt_tokens} prompt tokens cached`);
});

test('a saved conversation restores with its recurrent state', async () => {
  await llm.chat.completions.create({ messages: FIRST, ...sample });
  const state = await llm.saveState();
  const { messages } = await secondTurn('He rowed out.');
  const want = (await llm.chat.completions.create({ messages, ...sample })).choices[0].message.content;
  await llm.restoreState(state);
  const again = await llm.chat.completions.create({ messages, ...sample });
  assert.equal(again.choices[0].message.content, want);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0);
});

test("Qwen 3.5's XML tool calls are held to the format and read back typed by the schema", async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'forecast',
      parameters: {
        type: 'object',
        // A string whose values read as numbers: it must come back a string.
        properties: { zip: { type: 'string', enum: ['75001', '10115'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
        required: ['zip', 'days'],
      },
    },
  }];
  const prompt = llm.chatPrompt(FIRST, { tools, toolChoice: 'required' });
  assert.equal(prompt.toolFormat, 'qwen_xml');
  for (const seed of [1, 2, 3]) {
    const r = await llm.chat.completions.create({ messages: FIRST, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed, max_tokens: 200 });
    const [choice] = r.choices;
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    const [call] = choice.message.tool_calls;
    assert.equal(call.function.name, 'forecast');
    const args = JSON.parse(call.function.arguments);
    assert.ok(['75001', '10115'].includes(args.zip), call.function.arguments);
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, call.function.arguments);
  }
});
