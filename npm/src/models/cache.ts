// `LLM.models`: the model files a store keeps, for callers: list them, delete one (a split model's shards with its
// first), clear them all. Each acts on the store a load's `cache` option names (the platform's default without one).
import { invalid } from '../errors.js';
import { shardNames } from '../source.js';
import { keptBytes, modelKey, type ModelStore, type ModelStoreKind } from './store.js';

/** Which model store: `true` (the platform's: OPFS, else the Cache API in browsers; `~/.cache/ruvllm/models` in
 * Node), `'opfs'`, `'cache-api'`, or a directory path (Node). */
export type ModelCacheOption = true | 'opfs' | 'cache-api' | string;

/** One file a model store keeps (`LLM.models.list()`). */
export interface StoredModel {
  url: string;
  /** Bytes kept: the whole file once `complete`, else what a cut download kept (the next load resumes from there). */
  bytes: number;
  /** The file's size, where known. */
  total: number | null;
  complete: boolean;
  /** The SHA-256 computed over the whole file as it was downloaded (hex); null until complete. */
  sha256: string | null;
  /** When its bytes were last written (ms since the epoch). */
  saved: number;
}

export interface ModelCache {
  /** Every file the store keeps, whole or partial. */
  list(options?: { cache?: ModelCacheOption }): Promise<StoredModel[]>;
  /** Forget `url`'s file (and, for a split model's first shard, every shard); whether the store held any. */
  delete(url: string | URL, options?: { cache?: ModelCacheOption }): Promise<boolean>;
  /** Forget every file. */
  clear(options?: { cache?: ModelCacheOption }): Promise<void>;
  /** Which store a `cache` option names here (`'opfs'`, `'cache-api'` or `'files'`). */
  kind(options?: { cache?: ModelCacheOption }): Promise<ModelStoreKind>;
}

/** `url` as the store names it: absolute (a page's relative URL resolved against it). */
export function absoluteUrl(url: string | URL): string {
  try {
    return new URL(String(url), globalThis.location?.href).href;
  } catch {
    throw invalid(`not a URL: ${String(url)}`);
  }
}

/** `LLM.models` over the stores `open` gives. */
export function modelCache(open: (spec: ModelCacheOption) => Promise<ModelStore>): ModelCache {
  const store = (options?: { cache?: ModelCacheOption }) => open(options?.cache ?? true);
  return {
    async list(options) {
      const entries = await (await store(options)).entries();
      return entries
        .map((e) => ({ url: e.url, bytes: keptBytes(e), total: e.total, complete: e.complete, sha256: e.sha256, saved: e.saved }))
        .sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
    },
    async delete(url, options) {
      const s = await store(options);
      let any = false;
      for (const name of shardNames(absoluteUrl(url))) {
        const key = await modelKey(name);
        any = (await s.lock(key, async () => {
          const held = (await s.entry(key)) !== undefined;
          await s.delete(key);
          return held;
        })) || any;
      }
      return any;
    },
    async clear(options) {
      await (await store(options)).clear();
    },
    async kind(options) {
      return (await store(options)).kind;
    },
  };
}
