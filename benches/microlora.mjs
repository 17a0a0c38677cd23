// MicroLoRA in wasm32 (Node, the package): one update on a ~64-token chat example (rank 2 on q and v of the last 4
// layers, the package's defaults), split by phase: the first update (the frozen layers run) and the median of the next
// `--reps` (their output kept); then an update on an answer the model has just generated (the session kept the frozen
// layers' output: only the end-of-turn token is evaluated). The same example as benches/microlora.rs's update; its learning figures are the native
// bench's (the same training code).
//   node benches/microlora.mjs [--model M] [--threads 1] [--reps 5]
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const model = opt('--model', process.env.RUVLLM_MODEL);
if (!model) throw new Error('--model M is required (or set RUVLLM_MODEL)');
const threads = Number(opt('--threads', 1));
const reps = Number(opt('--reps', 5));
const { LLM } = await import(pathToFileURL(`${root}/npm/dist/node.js`).href);

const llm = await LLM.load(model, { threads });
const lora = await llm.microLora();
const messages = [{ role: 'user', content: 'Tell me about the lighthouse keeper of Port Alder and what she keeps in the lamp room.' }];
const response = 'Mara Quell has kept the Port Alder light for thirty years.';
const total = (r) => r.timings.frozenMs + r.timings.forwardMs + r.timings.backwardMs + r.timings.updateMs;
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const first = await lora.feedback({ messages, response, accepted: true });
const warm = [];
for (let i = 0; i < reps; i++) warm.push(await lora.feedback({ messages, response, accepted: true }));
// The usual case: feedback on an answer the model just generated, whose frozen layers' output the session kept.
const asked = [{ role: 'user', content: 'Tell me about the harbour of Port Alder in one sentence.' }];
const generated = await llm.complete(llm.applyChatTemplate(asked), { temperature: 0, maxTokens: 16 });
const afterGeneration = await lora.feedback({ messages: asked, response: generated.text, accepted: true });
const info = lora.info();
const promptTokens = llm.tokenize(llm.applyChatTemplate(messages), { prompt: true }).length;
console.log(JSON.stringify({
  bench: 'microlora_update', runtime: llm.info().build, threads: llm.info().threads, tokens: promptTokens + first.tokens,
  response_tokens: first.tokens, rank: info.rank, layers: info.layers, projections: info.projections.join(','), params: info.params,
  first_update_ms: total(first), first_frozen_ms: first.timings.frozenMs, update_ms: median(warm.map(total)),
  forward_ms: median(warm.map((r) => r.timings.forwardMs)), backward_ms: median(warm.map((r) => r.timings.backwardMs)),
  optimizer_ms: median(warm.map((r) => r.timings.updateMs)),
  after_generation_ms: total(afterGeneration), after_generation_frozen_ms: afterGeneration.timings.frozenMs,
  after_generation_tokens: afterGeneration.tokens,
}));
llm.dispose();
