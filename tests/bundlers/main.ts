// The page every bundler test app builds: what a user of the package writes. It loads the model the server
// gives at /model.gguf, streams a chat answer at temperature 0 and leaves the outcome on window.outcome. The engine
// runs in a worker (the default), so the engine worker's script must be bundled too; `?engine=page` in its URL loads
// with `worker: false`, `?engine=shared` with `shared: true` (the SharedWorker of the same script), and `?keep=1` keeps
// the model loaded after the answer (a second page can then share it).
import { LLM, RuvllmError, type ModelInfo } from '@ruvector/ruvllm';

interface Outcome {
  answer?: string;
  info?: ModelInfo;
  /** The last onProgress call: bytes loaded and the total, when the server said it. */
  progress: { calls: number; loaded: number; total: number | undefined };
  error?: { code: string; message: string };
}

const status = document.querySelector('#status')!;
const answer = document.querySelector('#answer')!;

async function run(): Promise<Outcome> {
  const progress: Outcome['progress'] = { calls: 0, loaded: 0, total: undefined };
  try {
    const params = new URLSearchParams(location.search);
    const engine = params.get('engine');
    const llm = await LLM.load('/model.gguf', {
      ...(engine === 'page' ? { worker: false } : engine === 'shared' ? { shared: true } : {}),
      onProgress: ({ loaded, total }) => {
        Object.assign(progress, { calls: progress.calls + 1, loaded, total });
        status.textContent = total ? `${Math.round((100 * loaded) / total)}%` : `${(loaded / 1e6).toFixed(1)} MB`;
      },
    });
    const stream = await llm.chat.completions.create({
      messages: [{ role: 'user', content: 'Name the capital of France.' }],
      temperature: 0,
      max_tokens: 32,
      stream: true,
    });
    for await (const chunk of stream) answer.textContent += chunk.choices[0]?.delta.content ?? '';
    const info = llm.info();
    if (params.get('keep') !== '1') llm.dispose();
    status.textContent = 'done';
    return { answer: answer.textContent ?? '', info, progress };
  } catch (e) {
    status.textContent = 'failed';
    const code = e instanceof RuvllmError ? e.code : 'not a RuvllmError';
    return { error: { code, message: String((e as Error)?.message ?? e) }, progress };
  }
}

declare global {
  interface Window {
    outcome: Promise<Outcome>;
  }
}
window.outcome = run();
