// Stream an answer token by token. Usage: node stream.mjs [model.gguf]  (default: $RUVLLM_MODEL)
import { LLM } from '@ruvector/ruvllm';

const llm = await LLM.load(process.argv[2] ?? process.env.RUVLLM_MODEL);
const prompt = '<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n';
for await (const chunk of llm.generate(prompt, { temperature: 0 })) process.stdout.write(chunk.text);
process.stdout.write('\n');
llm.dispose();
