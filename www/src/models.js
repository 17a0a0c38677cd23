// Model files: the list of known models, what the package's model store keeps (`LLM.load(url, { cache: true })`:
// OPFS, else the Cache API; a download cut short resumes where it stopped), and download progress in words.
import { LLM } from '@ruvector/ruvllm';
import { bytes, seconds } from './format.js';

export const DEFAULT_MODEL = '/models/SmolLM2-135M-Instruct.Q4_1.gguf';

/** Models offered in the list. The first is served by the demo's own servers from the local model cache. */
export const KNOWN_MODELS = [
  { url: DEFAULT_MODEL, label: 'SmolLM2 135M Instruct Q4_1 (98 MB, served locally)' },
  {
    url: 'https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_0.gguf',
    label: 'Qwen2.5 0.5B Instruct Q4_0 (a download from Hugging Face)',
  },
];

/** Other .gguf files the dev or preview server finds in the local model cache (none on a static host). */
export async function localModels() {
  try {
    const res = await fetch('/models/index.json', { cache: 'no-store' });
    if (!res.ok || !res.headers.get('content-type')?.includes('json')) return [];
    return (await res.json()).map((m) => ({ url: `/models/${m.name}`, label: `${m.name} (${bytes(m.bytes)}, served locally)` }));
  } catch {
    return [];
  }
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
