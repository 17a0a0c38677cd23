// Model files: the list of chat models (known ones, and those the local server has, described from their headers),
// what the package's model store keeps (`LLM.load(url, { cache: true })`:
// OPFS, else the Cache API; a download cut short resumes where it stopped), and download progress in words.
import { LLM, Tokenizer } from '@ruvector/ruvllm';
import { bytes, seconds } from './format.js';

export const DEFAULT_MODEL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';

/** Models offered in the list, chat models all. The first is served by the demo's own servers from the local model
 * cache. */
export const KNOWN_MODELS = [
  { url: DEFAULT_MODEL, label: 'SmolLM2 135M Instruct · Q4_1 · 8k context · 98 MB' },
  {
    url: 'https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_0.gguf',
    label: 'Qwen2.5 0.5B Instruct · Q4_0 · 32k context · from Hugging Face',
  },
];

/** Whether a model file (its header's `Tokenizer.info()`) is one to chat with: a decoder with a chat template, and not
 * a benchmark's random weights (benches/random_model.rs names its files so). Embedding models (`bert`) are not. */
export function isChatModel(info) {
  return info.hasChatTemplate && info.architecture !== 'bert' && !/random weights/i.test(info.name ?? '');
}

const params = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(1)}B` : `${Math.round(n / 1e6)}M`);
const context = (n) => (n >= 1024 ? `${Math.round(n / 1024)}k context` : `${n} context`);

/** A list entry's text: the file's name, its parameters, quantization, trained context, chat template and size. */
export function describeModel(name, info, size) {
  const facts = [params(info.parameters), info.quantization, info.contextLength && context(info.contextLength), 'chat template', bytes(size)];
  return `${name.replace(/\.gguf$/, '')} · ${facts.filter(Boolean).join(' · ')}`;
}

const DESCRIBED = 'ruvllm-chat-described';

/** `url`'s header facts, read with HTTP Range requests (no download) once, then kept in localStorage by URL and
 * size (a file replaced under the same name is read again). */
async function headerFacts(url, size) {
  const kept = JSON.parse(localStorage.getItem(DESCRIBED) ?? '{}');
  const key = `${url} ${size}`;
  if (kept[key]) return kept[key];
  const tokenizer = await Tokenizer.load(url);
  try {
    const { name, architecture, hasChatTemplate, parameters, quantization, contextLength } = tokenizer.info();
    kept[key] = { name, architecture, hasChatTemplate, parameters, quantization, contextLength };
  } finally {
    tokenizer.dispose();
  }
  localStorage.setItem(DESCRIBED, JSON.stringify(kept));
  return kept[key];
}

/** The chat models the dev or preview server finds in the local model cache (none on a static host), described from
 * their headers; embedding models and random-weight benchmark files are left out. */
export async function localModels() {
  let files;
  try {
    const res = await fetch('/models/index.json', { cache: 'no-store' });
    if (!res.ok || !res.headers.get('content-type')?.includes('json')) return [];
    files = await res.json();
  } catch {
    return [];
  }
  const models = [];
  for (const f of files) {
    const url = `/models/${f.name}`;
    try {
      const info = await headerFacts(url, f.bytes);
      if (isChatModel(info)) models.push({ url, label: `${describeModel(f.name, info, f.bytes)} (served locally)` });
    } catch {
      // A file that is no GGUF, or is damaged: not offered.
    }
  }
  return models;
}

const absolute = (url) => new URL(url, location.href).href;

/** [{ url, name, bytes, total, complete }] of the model files the package's store keeps (whole or cut short). */
export async function cachedModels() {
  try {
    return (await LLM.models.list()).map((m) => ({ ...m, name: decodeURIComponent(new URL(m.url).pathname.split('/').pop()) }));
  } catch {
    return []; // a browser that gives the page no storage (a private window, or not a secure context)
  }
}

/** Whether the store keeps the whole of `url`'s file (then a load makes no request for it). */
export async function isCached(url) {
  return (await cachedModels()).some((m) => m.url === absolute(url) && m.complete);
}

export function deleteCached(url) {
  return LLM.models.delete(url);
}

/** { usage, quota } of this site's storage, when the browser says. */
export async function storageEstimate() {
  try {
    return await navigator.storage.estimate();
  } catch {
    return {};
  }
}

/**
 * A load's `onProgress` that says in words what it does: reading the store's copy, then downloading the rest with its
 * speed and the time left (over the bytes from the network only), or loading a file. `show(text, fraction)`.
 */
export function progressReporter(show, { download }) {
  const start = performance.now();
  let last = 0;
  return ({ loaded, total, fromCache, file, files }) => {
    const now = performance.now();
    if (now - last < 100 && loaded !== total) return;
    last = now;
    const fraction = total ? loaded / total : undefined;
    const shard = files > 1 ? ` (file ${file} of ${files})` : '';
    if (!download) return show(`Loading into the engine: ${bytes(loaded)}${total ? ` of ${bytes(total)}` : ''}`, fraction);
    if (loaded === fromCache) return show(`Reading the model from this browser's storage: ${bytes(loaded)}${total ? ` of ${bytes(total)}` : ''}${shard}`, fraction);
    const bytesPerSecond = (loaded - fromCache) / Math.max(0.001, (now - start) / 1000);
    const left = total ? ` · ${seconds((total - loaded) / bytesPerSecond)} left` : '';
    const resumed = fromCache > 0 ? ` (resumed at ${bytes(fromCache)})` : '';
    show(`Downloading ${bytes(loaded)}${total ? ` of ${bytes(total)}` : ''} · ${bytes(bytesPerSecond)}/s${left}${resumed}${shard}`, fraction);
  };
}
