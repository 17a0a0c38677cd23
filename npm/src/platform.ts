// The platform: what differs between Node and browsers (registered by the entry points, node.ts and browser.ts),
// starting a wasm build for a load (the backend and thread count chosen), opening model sources and stores.
import { chooseBackend, type Backend, type BackendFallback } from './backend.js';
import { chooseBuild, startBuild, type Host, type SimdOption, type ThreadFallback, type Wasm } from './builds.js';
import { invalid, type RuvllmError } from './errors.js';
import { CacheApiModelStore } from './models/cache-api.js';
import type { ModelCacheOption } from './models/cache.js';
import { checkSpace, openStored, storedSize, headSize, verified, type Hasher } from './models/download.js';
import { hasOpfs, OpfsModelStore } from './models/opfs.js';
import type { ModelStore } from './models/store.js';
import { checkModelSize, openPrefix, openSource, shardNames, type ModelFiles, type ModelSource, type OpenedSource, type PrefixReader } from './source.js';
import { IndexedDbStore } from './store/indexeddb.js';
import type { Store } from './store/store.js';

/** What differs between Node and browsers: how the wasm builds are started, and extra sources. */
export interface Platform extends Host {
  /** Opens the sources only this platform understands (Node: file paths), else returns undefined. */
  open(source: ModelSource, signal?: AbortSignal): Promise<OpenedSource> | undefined;
  /** `open` for reading a source's first bytes only (Node: a file path, read at offsets), else undefined. */
  openPrefix(source: ModelSource, signal?: AbortSignal): PrefixReader | undefined;
  /** A store in the directory `dir` (Node), or undefined where there are no files (browsers). */
  fileStore(dir: string): Store | undefined;
  /** A model store in the directory `dir` (Node; without one, the default directory), or undefined (browsers). */
  modelStore(dir?: string): ModelStore | undefined;
}

let platform: Platform | undefined;

export function setPlatform(p: Platform): void {
  platform = p;
}

/** The platform an entry point registered. */
export function getPlatform(): Platform {
  if (!platform) throw new Error('import @ruvector/ruvllm (its node or browser entry), not an internal module');
  return platform;
}

/** A started wasm build for a load, and why it is not the one asked for. */
export interface StartedWasm {
  host: Platform;
  wasm: Wasm;
  /** Why the CPU build runs although the GPU was asked for. */
  fallback: BackendFallback | null;
  /** Why one thread runs where more were wanted. */
  threadFallback: ThreadFallback | null;
}

/**
 * The platform and the started wasm build for a load: the WebGPU build when `backend` chooses the GPU
 * (backend.ts), else a CPU build for `threads` in the instruction set `simd` chooses (builds.ts); with the reasons the
 * CPU runs where the GPU was asked for, and one thread where more were wanted (a threaded build that cannot start falls
 * back to one thread).
 */
export async function initWasm(backend: Backend, allowSoftware: boolean, threads: number | undefined, simd: SimdOption): Promise<StartedWasm> {
  const host = getPlatform();
  const choice = await chooseBackend(backend, allowSoftware);
  let fallback = choice.build === 'cpu' ? choice.fallback : null;
  if (choice.build === 'gpu') {
    try {
      return { host, wasm: await startBuild(host, 'wasm-gpu', 1), fallback, threadFallback: null };
    } catch (e) {
      if (backend === 'webgpu') throw e;
      fallback = { code: (e as RuvllmError).code, message: (e as Error).message };
    }
  }
  const { build, threads: n, fallback: threadFallback } = chooseBuild(host, threads);
  if (build === 'wasm-mt') {
    try {
      return { host, wasm: await startBuild(host, build, n, simd), fallback, threadFallback };
    } catch (e) {
      const code = (e as RuvllmError).code;
      if (code !== 'E_THREADS' && code !== 'E_FETCH') throw e;
      const why = { code: 'E_THREADS' as const, message: `one thread runs: ${(e as Error).message}` };
      return { host, wasm: await startBuild(host, 'wasm', 1, simd), fallback, threadFallback: why };
    }
  }
  return { host, wasm: await startBuild(host, build, n, simd), fallback, threadFallback };
}

/** The one-thread build, which the vector indexes and tokenizers run in (started once, shared with models that use
 * it). */
export function oneThreadBuild(): Promise<Wasm> {
  return startBuild(getPlatform(), 'wasm', 1);
}

/** `source` opened by `host` (Node: file paths), else as every platform opens it (URLs, Blobs, bytes). */
export function openModelSource(host: Platform, source: ModelSource, signal: AbortSignal | undefined): Promise<OpenedSource> {
  return host.open(source, signal) ?? openSource(source, signal);
}

/** How a load opens its model: through a model store or not, each file's SHA-256 (one per shard), hashed by `hasher`. */
export interface ModelFilesOptions {
  store: ModelStore | null;
  sha256: readonly string[] | undefined;
  signal: AbortSignal | undefined;
  hasher: () => Hasher;
}

/** `source` as an http(s) URL a model store can keep (a page's relative URL resolved), else undefined. */
function storableUrl(source: ModelSource): string | undefined {
  if (typeof source !== 'string' && !(source instanceof URL)) return undefined;
  // Where there is no page (Node), only an absolute URL parses: a path never does.
  try {
    const url = new URL(String(source), globalThis.location?.href);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The files of the model `source` names, each opened when the engine comes to it: one file, or, for the first shard
 * of a split model (`NAME-00001-of-0000N.gguf`, a URL or a path), every shard in order, their sizes asked first (a
 * store's entries, HEAD requests, file sizes) so that the load has one total and a store's space is checked for all
 * of them before any is downloaded. URLs go through `store` when there is one; each file is checked against its
 * `sha256` when given.
 */
export async function openModelFiles(host: Platform, source: ModelSource, options: ModelFilesOptions): Promise<ModelFiles> {
  const { store, sha256, signal, hasher } = options;
  const names = typeof source === 'string' || source instanceof URL ? shardNames(String(source)) : [source];
  if (sha256 !== undefined && sha256.length !== names.length) {
    throw invalid(`sha256 has ${sha256.length} hash${sha256.length === 1 ? '' : 'es'} but the model is ${names.length} file${names.length === 1 ? '' : 's'}${names.length > 1 ? ' (a split GGUF: one hash per shard, in order)' : ''}`);
  }
  const one = (name: ModelSource, i: number) => async (): Promise<OpenedSource> => {
    const url = store ? storableUrl(name) : undefined;
    const expected = sha256?.[i];
    if (store && url) return openStored(url, store, { sha256: expected, signal, hasher });
    const opened = await openModelSource(host, name, signal);
    return expected === undefined ? opened : verified(opened, expected, hasher, String(name instanceof Blob ? 'the model' : name));
  };
  if (names.length === 1) return { total: undefined, open: [one(source, 0)] };
  let total: number | undefined = 0;
  let need = 0;
  for (const name of names as string[]) {
    const url = storableUrl(name);
    let size: number | undefined;
    if (store && url) {
      const s = await storedSize(url, store, signal);
      size = s.total;
      need += (s.total ?? 0) - s.kept;
    } else if (url) {
      size = await headSize(url, signal);
    } else {
      size = (await openModelSource(host, name, signal)).total; // a path: its size (the file is opened when read)
    }
    total = size === undefined || total === undefined ? undefined : total + size;
  }
  if (store && need > 0) await checkSpace(store, need, String(source));
  if (total !== undefined) checkModelSize(total);
  return { total, open: names.map((name, i) => one(name, i)) };
}

/** The model store `spec` names (the option `cache`): the platform's (`true`: Node's directory, else OPFS, else the
 * Cache API), `'opfs'`, `'cache-api'`, or a directory (Node). */
export async function openModelStore(spec: ModelCacheOption): Promise<ModelStore> {
  const host = getPlatform();
  if (spec === true) {
    const store = host.modelStore() ?? ((await hasOpfs()) ? new OpfsModelStore() : typeof caches !== 'undefined' ? new CacheApiModelStore() : undefined);
    if (!store) throw invalid('cache: this runtime has neither OPFS nor the Cache API to keep models in (a page that is not a secure context?)');
    return store;
  }
  if (spec === 'opfs') {
    if (!(await hasOpfs())) throw invalid("cache 'opfs': this runtime has no OPFS (navigator.storage.getDirectory)");
    return new OpfsModelStore();
  }
  if (spec === 'cache-api') {
    if (typeof caches === 'undefined') throw invalid("cache 'cache-api': this runtime has no Cache API");
    return new CacheApiModelStore();
  }
  if (typeof spec === 'string' && spec !== '') {
    const store = host.modelStore(spec);
    if (!store) throw invalid(`cache '${spec}': only Node keeps models in a directory; in a browser use true, 'opfs' or 'cache-api'`);
    return store;
  }
  throw invalid(`cache must be true, 'opfs', 'cache-api' or a directory path (Node), not ${JSON.stringify(spec)}`);
}

/** `source` opened by `host` (Node: file paths) for reading from its start as far as asked, else as every platform
 * opens it (URLs with HTTP Range requests, Blobs, bytes). */
export function openModelPrefix(source: ModelSource, signal: AbortSignal | undefined): PrefixReader {
  return getPlatform().openPrefix(source, signal) ?? openPrefix(source, signal);
}

/** The store `spec` names (the option `option`): `'indexeddb'` (the IndexedDB database `database`, whose writes are
 * flushed to disk before they count unless `durability` is 'relaxed': for a cache), a directory (Node), or the
 * caller's own. */
export function openStore(spec: 'indexeddb' | string | Store, option: string, database: string, durability: 'strict' | 'relaxed' = 'strict'): Store {
  if (typeof spec === 'object' && spec !== null) {
    for (const m of ['list', 'get', 'put', 'delete', 'clear'] as const) {
      if (typeof spec[m] !== 'function') throw invalid(`${option} has no ${m}() method`);
    }
    return spec;
  }
  if (spec === 'indexeddb') {
    if (typeof indexedDB === 'undefined') throw invalid(`${option} 'indexeddb': this runtime has no IndexedDB`);
    return new IndexedDbStore(database, { durability });
  }
  if (typeof spec === 'string' && spec !== '') {
    const store = getPlatform().fileStore(spec);
    if (!store) throw invalid(`${option} '${spec}': only Node keeps a store in a directory; in a browser use 'indexeddb'`);
    return store;
  }
  throw invalid(`${option} must be 'indexeddb', a directory path (Node) or a Store`);
}
