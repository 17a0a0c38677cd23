// Whether the chat demo's long-term memory helps or stays out of the way (issue 40), in Node with the package: the
// demo's own recall settings and prompt form (www/src/recall.js) on its embedding model (all-MiniLM-L6-v2 Q8_0) and
// the default chat model, greedy.
// - 20 scripts of two unrelated requests, each in a conversation of its own: the first is answered and remembered,
//   then the second is answered with memory off and with memory on (the first conversation's turns recalled when
//   they clear the threshold). Each second answer is judged by an exact check ("contains a fenced code block",
//   "names Jupiter"). Memory on must never do worse than off.
// - 5 scripts where the second request needs the first conversation (a fact told there): what memory adds.
// - The scores: the best cosine of each second request against the first conversation's turns, for both sets (what
//   the threshold is calibrated on), and the time recall adds before the first token when it runs in series (the
//   demo runs it while the user types, so a message sent finds it done).
// - The router: 10 messages and the route each should take under the demo's default routes (none for 4).
// Prints one JSON line per set.
// Usage: node benches/memory_quality.mjs [--model M] [--embedder E|chat] [--max-tokens 160] [--min-score S]
// (after `npm run build` in npm/ and scripts/build-wasm.sh; E defaults to the Q8_0 file beside
// scripts/fetch-embed-model.sh's F16 one)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MODEL_PATH, REPO_DIR } from '../npm/test/helpers.mjs';

const { LLM, Memory, Router } = await import(pathToFileURL(path.join(REPO_DIR, 'npm/dist/node.js')).href);
const recall = await import(pathToFileURL(path.join(REPO_DIR, 'www/src/recall.js')).href);

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1];
};
const embedPath = process.env.RUVLLM_EMBED_MODEL?.replace(/\.F16\.gguf$/, '.Q8_0.gguf');
const embedderPath = arg('embedder', embedPath && existsSync(embedPath) ? embedPath : path.join(process.env.HOME, '.cache/ruvllm/all-MiniLM-L6-v2.Q8_0.gguf'));
const maxTokens = Number(arg('max-tokens', 160));
const minScore = Number(arg('min-score', recall.RECALL_MIN_SCORE));

const has = (re) => (text) => re.test(text);
const fenced = has(/```/);
/** [first request, second request, check of the second answer]: unrelated pairs. */
const UNRELATED = [
  ['Write a 500-word story about a lighthouse.', 'Reply with a Python code block that prints hello.', fenced],
  ['What is the capital of France?', 'Name the largest planet in the solar system.', has(/jupiter/i)],
  ['Give me three tips for sleeping better.', 'What is 12 times 12?', has(/144/)],
  ['Write a haiku about autumn leaves.', 'What is the chemical symbol for water?', has(/H2O|H₂O/i)],
  ['Explain how a bicycle gear works.', 'Which planet is known as the Red Planet?', has(/mars/i)],
  ['Suggest a name for a pet goldfish.', 'Write a JavaScript function that adds two numbers, in a code block.', fenced],
  ['What are the benefits of drinking water?', 'How many days are there in a week?', has(/seven|7/i)],
  ['Describe the taste of a lemon.', 'What is the boiling point of water in Celsius?', has(/100/)],
  ['Write a short poem about the sea.', 'Who wrote Romeo and Juliet?', has(/shakespeare/i)],
  ['How do I make a cup of tea?', 'What is the square root of 81?', has(/\b9\b|nine/i)],
  ['Tell me a fun fact about octopuses.', 'Show a SQL query that selects all rows from a table named users, in a code block.', fenced],
  ['What should I pack for a beach holiday?', 'What is the capital of Japan?', has(/tokyo/i)],
  ['Explain what a rainbow is.', 'How many legs does a spider have?', has(/eight|8/i)],
  ['Write a limerick about a cat.', 'What colour do you get when you mix blue and yellow?', has(/green/i)],
  ['Give me a recipe for pancakes.', 'What is the freezing point of water in Fahrenheit?', has(/32/)],
  ['Why do leaves change colour in autumn?', 'Write a bash command that lists files, in a code block.', fenced],
  ['Describe a sunset over the mountains.', 'What is the largest ocean on Earth?', has(/pacific/i)],
  ['What are some good habits for studying?', 'How many continents are there?', has(/seven|7/i)],
  ['Tell me about the history of chess.', 'What gas do plants absorb from the air?', has(/carbon dioxide|CO2|CO₂/i)],
  ['Write a motivational quote.', 'What is 15 plus 27?', has(/42/)],
];
/** Pairs where the second request needs the first conversation. */
const RELATED = [
  ['My favourite colour is teal. Remember that.', 'What is my favourite colour?', has(/teal/i)],
  ['My dog is called Biscuit.', 'What is the name of my dog?', has(/biscuit/i)],
  ['I live in the city of Porto.', 'Which city do I live in?', has(/porto/i)],
  ['My sister Ana is a violinist.', 'What instrument does my sister play?', has(/violin/i)],
  ['The project code name is BLUEFIN.', 'What is the project code name?', has(/bluefin/i)],
];

const chat = await LLM.load(arg('model', MODEL_PATH), {});
// `--embedder chat`: the chat model's own pooled states, as the demo had them before (with --min-score 0.85).
const embedder = arg('embedder', '') === 'chat' ? chat : await LLM.load(embedderPath, {});

/** A greedy answer to a conversation's messages (the user messages as the demo gives them to the model). */
async function answer(messages) {
  const r = await chat.complete(chat.tokenizeChat(messages.map((m) => ({ role: m.role, content: recall.modelContent(m) }))), { temperature: 0, maxTokens });
  return r.text;
}

async function run(name, scripts) {
  const memory = await Memory.open({ embedder, k: recall.RECALL_K, minScore });
  const rows = [];
  for (const [i, [first, second, check]] of scripts.entries()) {
    const firstAnswer = await answer([{ role: 'user', content: first }]);
    await memory.remember(`first-${i}`, [
      { role: 'user', content: first },
      { role: 'assistant', content: firstAnswer },
    ]);
    const off = await answer([{ role: 'user', content: second }]);
    const t0 = performance.now();
    const turns = await memory.recall(second, { exceptConversation: `second-${i}` });
    const recallMs = performance.now() - t0;
    const best = (await memory.recall(second, { minScore: -1, k: 2, exceptConversation: `second-${i}` }))[0]?.score ?? null;
    const recalled = turns.map((t) => ({ role: t.role, content: recall.clip(t.content), score: t.score }));
    const on = recalled.length ? await answer([{ role: 'user', content: second, recalled }]) : off;
    rows.push({ second, best, recalled: recalled.length, recallMs, off: check(off), on: check(on) });
    memory.forget(`first-${i}`);
  }
  await memory.close();
  const count = (key) => rows.filter((r) => r[key]).length;
  const worse = rows.filter((r) => r.off && !r.on).map((r) => r.second);
  const ms = rows.map((r) => r.recallMs).sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      bench: 'memory_quality',
      set: name,
      scripts: rows.length,
      minScore,
      passOff: count('off'),
      passOn: count('on'),
      worseWithMemory: worse,
      recalledFor: rows.filter((r) => r.recalled).length,
      bestScores: rows.map((r) => +r.best.toFixed(3)),
      recallMsMedian: +ms[ms.length >> 1].toFixed(1),
      recallMsMax: +ms.at(-1).toFixed(1),
    }),
  );
}

/** Messages and the route each should take (null: none) under the demo's default routes. */
const ROUTED = [
  ['Write a Python function that reverses a list.', 'code'],
  ['Why does my JavaScript say undefined is not a function?', 'code'],
  ['What is 45 divided by 9?', 'math'],
  ['Solve 3x - 4 = 11 for x.', 'math'],
  ['Hi there, how is your day going?', 'chit-chat'],
  ['Tell me something funny.', 'chit-chat'],
  ['Write a 500-word story about a lighthouse.', null],
  ['What is the capital of France?', null],
  ['Give me three tips for sleeping better.', null],
  ['Describe a sunset over the mountains.', null],
];

async function routes() {
  const router = await Router.open({ embedder, routes: recall.DEFAULT_ROUTES, threshold: recall.ROUTE_THRESHOLD });
  const rows = [];
  for (const [text, want] of ROUTED) {
    const { route, score, candidates } = await router.route(text);
    rows.push({ text, want, got: route, score: +(score ?? candidates[0]?.score ?? 0).toFixed(3) });
  }
  await router.close();
  console.log(JSON.stringify({ bench: 'memory_quality', set: 'routes', threshold: recall.ROUTE_THRESHOLD, right: rows.filter((r) => r.got === r.want).length, of: rows.length, rows }));
}

await run('unrelated', UNRELATED);
await run('related', RELATED);
await routes();
chat.dispose();
if (embedder !== chat) embedder.dispose();
