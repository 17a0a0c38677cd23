// The page's long tasks while the default model answers (issue 39): in headless Chromium on a page that is not
// cross-origin isolated (so the one-thread build), a 2,048-token prompt and 128 decoded tokens, with the engine in the
// page and then in a worker (`worker: true`). A PerformanceObserver counts the page's 'longtask' entries (tasks over
// 50 ms on its main thread) during each generation: their count, total and longest. Prints one JSON line per mode.
// Usage: node benches/long_tasks.mjs [--model M] [--prompt-tokens 2048] [--gen-tokens 128]
// (after `npm run build` in npm/ and scripts/build-wasm.sh; the model defaults to $RUVLLM_MODEL or scripts/fetch-model.sh's)
import { MODEL_PATH, PACKAGE_DIR } from '../npm/test/helpers.mjs';
import { serve } from '../npm/test/server.mjs';
import { launchChromium } from '../tests/browser/chromium.mjs';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1];
};
const model = arg('model', MODEL_PATH);
const promptTokens = Number(arg('prompt-tokens', 2048));
const genTokens = Number(arg('gen-tokens', 128));

const server = await serve({ root: PACKAGE_DIR, files: { '/model.gguf': model } });
const browser = await launchChromium();
try {
  const page = browser.context.pages()[0] ?? (await browser.context.newPage());
  await page.goto(`${server.origin}/examples/browser/index.html`);
  for (const worker of [false, true]) {
    const r = await page.evaluate(
      async ({ worker, promptTokens, genTokens }) => {
        const { LLM } = await import('@ruvector/ruvllm');
        const llm = await LLM.load('/model.gguf', { worker, threads: 1 });
        const text = 'The history of the city goes back many centuries, and its people have told it in many ways. ';
        let ids = llm.tokenize(text.repeat(Math.ceil(promptTokens / 10)));
        ids = ids.slice(0, promptTokens);
        const tasks = [];
        const observer = new PerformanceObserver((list) => tasks.push(...list.getEntries()));
        observer.observe({ type: 'longtask' });
        const start = performance.now();
        const result = await llm.complete(ids, { temperature: 0, maxTokens: genTokens, ignoreEos: true });
        const wallMs = performance.now() - start;
        await new Promise((resolve) => setTimeout(resolve, 100)); // the observer's last entries are delivered
        observer.disconnect();
        const info = llm.info();
        llm.dispose();
        const durations = tasks.map((t) => t.duration);
        return {
          engine: info.engine,
          build: info.build,
          threads: info.threads,
          crossOriginIsolated,
          promptTokens: result.usage.promptTokens,
          generatedTokens: result.usage.completionTokens,
          wallMs: Math.round(wallMs),
          longTasks: durations.length,
          longTasksTotalMs: Math.round(durations.reduce((a, b) => a + b, 0)),
          longestTaskMs: Math.round(Math.max(0, ...durations)),
        };
      },
      { worker, promptTokens, genTokens },
    );
    console.log(JSON.stringify({ bench: 'long_tasks', model, ...r }));
  }
} finally {
  await browser.close();
  await server.close();
}
