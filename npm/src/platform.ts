// The platform: what differs between Node and browsers (registered by the entry points, node.ts and browser.ts),
// starting a wasm build for a load (the backend and thread count chosen), opening model sources and stores.
import { chooseBackend, type Backend, type BackendFallback } from './backend.js';
import { chooseBuild, startBuild, type Host, type ThreadFallback, type Wasm } from './builds.js';
import { invalid, type RuvllmError } from './errors.js';
import { openPrefix, openSource, type ModelSource, type OpenedSource, type PrefixReader } from './source.js';
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
 * (backend.ts), else a CPU build for `threads` (builds.ts); with the reasons the CPU runs where the GPU was
 * asked for, and one thread where more were wanted (a threaded build that cannot start falls back to one thread).
 */
export async function initWasm(backend: Backend, allowSoftware: boolean, threads: number | undefined): Promise<StartedWasm> {
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
      return { host, wasm: await startBuild(host, build, n), fallback, threadFallback };
    } catch (e) {
      const code = (e as RuvllmError).code;
      if (code !== 'E_THREADS' && code !== 'E_FETCH') throw e;
      const why = { code: 'E_THREADS' as const, message: `one thread runs: ${(e as Error).message}` };
      return { host, wasm: await startBuild(host, 'wasm', 1), fallback, threadFallback: why };
    }
  }
  return { host, wasm: await startBuild(host, build, n), fallback, threadFallback };
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
