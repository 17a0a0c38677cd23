// The status line, in plain words: the page's state, the model and where it runs, then the last answer's speed and
// how much of the context the conversation uses. Each part is { long, short, detail }: the long form at desktop width,
// the short one at phone width (style.css shows one of them), the technical detail (the engine's build) as a tooltip.
import { rate } from './format.js';

/** The model's name for people, from its file name: "SmolLM2-135M-Instruct.Q4_1.gguf" is "SmolLM2 135M Instruct",
 * "qwen2.5-0.5b-instruct-q4_0.gguf" "Qwen2.5 0.5B Instruct" (the quantization and the shard number go). */
export function modelTitle(fileName) {
  const words = String(fileName)
    .replace(/\.gguf$/i, '')
    .replace(/-\d{5}-of-\d{5}$/, '')
    .replace(/[-_.](?:I?Q\d\w*|[BF]F?16|F32)$/i, '')
    .split(/[-_ ]+/)
    .filter(Boolean);
  return words.map((w) => w[0].toUpperCase() + w.slice(1).replace(/^(\d+(?:\.\d+)?)([bmk])$/, (_, n, u) => n + u.toUpperCase())).join(' ') || String(fileName);
}

/** The model's name without the words that say what it was tuned for: "SmolLM2 135M Instruct" is "SmolLM2 135M". */
const shortTitle = (title) => title.split(' ').filter((w) => !/^(?:instruct|chat|it)$/i.test(w)).join(' ') || title;

const STATES = { idle: 'No model loaded', loading: 'Loading a model', ready: 'Ready', generating: 'Answering' };
const threads = (n) => `${n} thread${n === 1 ? '' : 's'}`;

/** Why the model runs on the CPU, in a few words (none when it is the only engine there could be). */
function whyCpu(info) {
  if (info.fallback) return ` (WebGPU not used: ${info.fallback.message})`;
  if (info.requestedBackend === 'cpu') return ' (chosen in Settings)';
  if (!('gpu' in navigator)) return ' (this browser has no WebGPU)';
  if (info.gpuAdapter) return ` (the GPU ${info.gpuAdapter} is a software one, slower than the CPU)`;
  return ' (no usable GPU)';
}

/**
 * The page's state (idle, loading, ready, generating) with the model loaded, if any (`model`: { info: LLM.info(),
 * file: its file name }): "Ready · SmolLM2 135M Instruct · on the CPU (…) · 2 threads", short "Ready · SmolLM2 135M ·
 * 2 threads".
 */
export function describeStatus(state, model) {
  const said = STATES[state] ?? state;
  if (!model || state === 'idle' || state === 'loading') return { long: said, short: said };
  const { info, file } = model;
  const title = modelTitle(file);
  if (info.backend === 'webgpu') {
    return { long: `${said} · ${title} · on the GPU`, short: `${said} · ${shortTitle(title)} · GPU`, detail: `WebGPU: ${info.gpuAdapter ?? 'adapter'}` };
  }
  const oneThread = info.threadFallback ? ` (one thread because ${info.threadFallback.message})` : '';
  return {
    long: `${said} · ${title} · on the CPU${whyCpu(info)} · ${threads(info.threads)}${oneThread}`,
    short: `${said} · ${shortTitle(title)} · ${threads(info.threads)}`,
    detail: `WebAssembly${info.relaxedSimd ? ' relaxed SIMD' : info.simd128 ? ' SIMD128' : ''}, the ${info.build} build`,
  };
}

/** How fast the last answer went: the prompt read, the answer written. */
export function describeSpeed(meta) {
  if (!meta?.timings) return null;
  const { prefillTokensPerSecond: read, decodeTokensPerSecond: written } = meta.timings;
  return { long: `prompt read at ${rate(read)} · answer at ${rate(written)}`, short: rate(written) };
}

/** How much of the context window the conversation uses. */
export function describeContext(used, size) {
  return size ? { long: `context: ${used} of ${size} tokens`, short: `${used}/${size}` } : null;
}

/** How much of an opened conversation the model took from its prefix cache (memory) rather than reading it again. */
export function describeMemory(cached, total) {
  return { long: `${cached} of ${total} tokens from memory`, short: '' };
}

/** Show `part` (one of the above, or null: `el` is hidden) in the status line's element `el`. */
export function showStatus(el, part) {
  el.hidden = !part;
  const long = document.createElement('span');
  long.className = 'long';
  long.textContent = part?.long ?? '';
  const short = document.createElement('span');
  short.className = 'short';
  short.textContent = part?.short ?? '';
  el.replaceChildren(long, short);
  el.title = part?.detail ?? '';
}
