// OpenAI-shaped chat completions, streamed, with load progress and a time limit.
// Usage: node chat.mjs [model.gguf] ["your question"]  (default model: $RUVLLM_MODEL)
import { LLM, RuvllmError } from '@ruvector/ruvllm';

const [model = process.env.RUVLLM_MODEL, question = 'Give me three tips for learning to cook.'] = process.argv.slice(2);
const llm = await LLM.load(model, {
  onProgress: ({ loaded, total }) => process.stderr.write(`\rloading ${(loaded / 1e6).toFixed(0)} / ${((total ?? 0) / 1e6).toFixed(0)} MB`),
});
process.stderr.write('\n');

try {
  const stream = await llm.chat.completions.create(
    { messages: [{ role: 'user', content: question }], stream: true, max_tokens: 200, temperature: 0.7, seed: 42 },
    { signal: AbortSignal.timeout(60_000) },
  );
  for await (const chunk of stream) {
    process.stdout.write(chunk.choices[0].delta.content ?? '');
    if (chunk.usage) process.stderr.write(`\n[${chunk.usage.prompt_tokens} prompt + ${chunk.usage.completion_tokens} completion tokens]\n`);
  }
} catch (e) {
  if (e instanceof RuvllmError && e.code === 'E_ABORTED') console.error('\n(stopped after 60 s)');
  else throw e;
} finally {
  llm.dispose();
}
