// The example page: load a model with progress, stream a generation into the page, stop it.
import { LLM } from '@ruvector/ruvllm';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
if (params.has('model')) $('model-url').value = params.get('model');
$('prompt').value = '<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n';

/** State the tests read: the loaded model, and the last generation's token ids and result. */
const demo = (window.demo = { llm: null, ids: [], result: null, error: null });
const setState = (state) => (document.body.dataset.state = state);

function fail(e) {
  demo.error = { code: e.code, message: e.message };
  $('status').textContent = `${e.code ?? 'error'}: ${e.message}`;
  setState('error');
}

$('load').onclick = async () => {
  demo.llm?.dispose();
  demo.llm = null;
  $('generate').disabled = true;
  setState('loading');
  const source = $('model-file').files[0] ?? $('model-url').value;
  try {
    const t0 = performance.now();
    demo.llm = await LLM.load(source, {
      onProgress: ({ loaded, total }) => {
        $('progress').value = total ? loaded / total : 0;
        $('status').textContent = `loading ${(loaded / 1e6).toFixed(1)}${total ? ` / ${(total / 1e6).toFixed(1)}` : ''} MB`;
      },
    });
    const info = demo.llm.info();
    $('status').textContent = `${info.name ?? info.architecture}: ${info.layers} layers, ${(info.fileBytes / 1e6).toFixed(0)} MB, loaded in ${(performance.now() - t0).toFixed(0)} ms`;
    $('generate').disabled = false;
    setState('ready');
  } catch (e) {
    fail(e);
  }
};

let controller = null;
$('stop').onclick = () => controller?.abort();

$('generate').onclick = async () => {
  const llm = demo.llm;
  const text = $('prompt').value;
  const prompt = $('chat').checked ? llm.applyChatTemplate([{ role: 'user', content: text }]) : text;
  const options = { temperature: Number($('temperature').value), maxTokens: Number($('max-tokens').value) };
  controller = new AbortController();
  $('output').textContent = '';
  $('stats').textContent = '';
  $('generate').disabled = true;
  $('stop').disabled = false;
  demo.ids = [];
  demo.result = null;
  setState('generating');
  try {
    const it = llm.generate(prompt, { ...options, signal: controller.signal });
    for (let r = await it.next(); ; r = await it.next()) {
      if (r.done) {
        demo.result = r.value;
        break;
      }
      demo.ids.push(r.value.id);
      $('output').textContent += r.value.text;
    }
    const { usage, timings } = demo.result;
    $('stats').textContent = `${usage.promptTokens} prompt + ${usage.completionTokens} generated tokens; ` +
      `prefill ${timings.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${timings.decodeTokensPerSecond.toFixed(1)} tok/s`;
    setState('done');
  } catch (e) {
    if (e.code === 'E_ABORTED') {
      $('stats').textContent = 'stopped';
      setState('stopped');
    } else fail(e);
  } finally {
    $('generate').disabled = false;
    $('stop').disabled = true;
  }
};
