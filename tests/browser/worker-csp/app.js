// Load the default model with `worker: true` and answer the France prompt greedily; the result (or the error's code)
// goes on `window.result` for the test.
import { LLM } from '/dist/browser.js';

const prompt = new URLSearchParams(location.search).get('prompt');
window.result = (async () => {
  try {
    const llm = await LLM.load('/model.gguf', { worker: true });
    const r = await llm.complete(prompt, { temperature: 0, maxTokens: 16 });
    const engine = llm.info().engine;
    llm.dispose();
    return { ids: r.ids, engine };
  } catch (e) {
    return { error: { code: e.code, message: e.message } };
  }
})();
