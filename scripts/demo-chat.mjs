// Chat once with a GGUF model through the wasm engine in Node, streaming the reply.
// Usage: node scripts/demo-chat.mjs MODEL.gguf "question"
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const [modelPath, question] = process.argv.slice(2);
const { Engine } = createRequire(import.meta.url)('../target/wasm-node/ruvllm.js');

const t0 = performance.now();
const engine = new Engine(readFileSync(modelPath), 0);
console.error(`loaded ${modelPath} in ${(performance.now() - t0).toFixed(0)} ms`);

const prompt = engine.applyChatTemplate(JSON.stringify([{ role: 'user', content: question }]), true);
engine.start(engine.tokenizePrompt(prompt), JSON.stringify({ maxTokens: 256, temperature: 0 }));
process.stdout.write(`> ${question}\n`);
for (let step; (step = engine.nextStep()) !== undefined; ) process.stdout.write(step.text);
const out = JSON.parse(engine.finish(false));
console.log(
  `\n[${out.prompt_tokens} prompt tokens, ${out.generated_tokens} generated; ` +
    `prefill ${out.prefill_tok_s.toFixed(1)} tok/s, decode ${out.decode_tok_s.toFixed(1)} tok/s]`,
);
