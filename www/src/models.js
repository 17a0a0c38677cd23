// Model files: the list of known models, downloads with progress and cancel, and the copies kept in the browser's
// Cache API. A download is written to the cache in one step only once it is complete, its length checked and the
// engine has loaded it (write, then commit): an interrupted or failed download never leaves an entry behind.
import { MAX_MODEL_BYTES, RuvllmError } from '@ruvector/ruvllm';
import { bytes } from './format.js';

const CACHE = 'ruvllm-models-v1';
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

async function openCache() {
  if (!('caches' in globalThis)) return null;
  try {
    return await caches.open(CACHE);
  } catch {
    return null;
  }
}

const absolute = (url) => new URL(url, location.href).href;

/** The cached copy of `url` as a Response, or null. */
export async function cachedResponse(url) {
  const cache = await openCache();
  return (await cache?.match(absolute(url))) ?? null;
}

/** [{ url, name, bytes, savedAt }] of the models in the cache. */
export async function cachedModels() {
  const cache = await openCache();
  if (!cache) return [];
  const out = [];
  for (const req of await cache.keys()) {
    const res = await cache.match(req);
    out.push({
      url: req.url,
      name: decodeURIComponent(new URL(req.url).pathname.split('/').pop()),
      bytes: Number(res?.headers.get('x-ruvllm-bytes') ?? res?.headers.get('content-length') ?? NaN),
      savedAt: res?.headers.get('x-ruvllm-saved') ?? '',
    });
  }
  return out;
}

export async function deleteCached(url) {
  await (await openCache())?.delete(url);
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
 * Download `url` into a Blob, reporting `{ loaded, total, bytesPerSecond, secondsLeft }`. `signal` cancels it.
 * A body shorter than its Content-Length is an error (a dropped connection), so it is never cached.
 */
export async function download(url, { signal, onProgress }) {
  let res;
  try {
    res = await fetch(url, { signal, cache: 'no-store' });
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new RuvllmError('E_FETCH', `${url}: ${e.message} (is the host up, and does it send CORS headers?)`);
  }
  if (!res.ok) throw new RuvllmError('E_FETCH', `${url}: HTTP ${res.status} ${res.statusText}`);
  const total = Number(res.headers.get('content-length')) || undefined;
  // Refused before the download, as LLM.load refuses it: the engine's memory is wasm32's, 4 GiB at most.
  const tooLarge = (n) =>
    new RuvllmError('E_MODEL_TOO_LARGE', `${url} is ${n === total ? '' : 'over '}${bytes(n)}; the engine loads files up to ${bytes(MAX_MODEL_BYTES)}`);
  if (total > MAX_MODEL_BYTES) {
    res.body?.cancel();
    throw tooLarge(total);
  }
  const reader = res.body.getReader();
  const parts = [];
  let loaded = 0;
  const start = performance.now();
  let last = 0;
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new RuvllmError('E_FETCH', `${url}: the download broke off at ${bytes(loaded)}${total ? ` of ${bytes(total)}` : ''} (${e.message})`);
    }
    const { done, value } = chunk;
    if (done) break;
    parts.push(value);
    loaded += value.byteLength;
    if (loaded > MAX_MODEL_BYTES) {
      reader.cancel();
      throw tooLarge(loaded);
    }
    const now = performance.now();
    if (now - last > 100) {
      last = now;
      const bytesPerSecond = loaded / Math.max(0.001, (now - start) / 1000);
      onProgress?.({ loaded, total, bytesPerSecond, secondsLeft: total ? (total - loaded) / bytesPerSecond : undefined });
    }
  }
  if (total !== undefined && loaded !== total) {
    throw new RuvllmError('E_FETCH', `${url}: the download stopped at ${bytes(loaded)} of ${bytes(total)}`);
  }
  onProgress?.({ loaded, total: loaded, bytesPerSecond: loaded / Math.max(0.001, (performance.now() - start) / 1000), secondsLeft: 0 });
  return new Blob(parts, { type: 'application/octet-stream' });
}

/**
 * Commit a complete, loaded model file to the cache, in one put. Rejects with a QuotaExceededError (`code: 'QUOTA'`
 * when the estimate already says it cannot fit) when storage is full; the caller says so and runs the model anyway.
 */
export async function saveToCache(url, blob) {
  const cache = await openCache();
  if (!cache) throw new Error('this browser gives the page no Cache API (a private window, or not a secure context)');
  const { usage, quota } = await storageEstimate();
  if (quota !== undefined && usage !== undefined && quota - usage < blob.size) {
    throw Object.assign(new Error(`${bytes(quota - usage)} free, ${bytes(blob.size)} needed`), { name: 'QuotaExceededError', code: 'QUOTA' });
  }
  const headers = {
    'content-type': 'application/octet-stream',
    'content-length': String(blob.size),
    'x-ruvllm-bytes': String(blob.size),
    'x-ruvllm-saved': new Date().toISOString(),
  };
  await cache.put(absolute(url), new Response(blob, { headers }));
}
