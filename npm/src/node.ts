// Node entry: the wasm files are read from the package directory, model sources may be file paths, and stores
// (records, model files) are directories.
import { open, readFile, stat } from 'node:fs/promises';
import { availableParallelism, homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RuvllmError } from './errors.js';
import { FileModelStore, handleChunks } from './models/files.js';
import { setPlatform } from './platform.js';
import { withWebWorkers } from './node-workers.js';
import type { ModelSource, OpenedSource } from './source.js';
import { FileStore } from './store/files.js';

const REMOTE = /^(https?|data|blob):/i;

async function openFile(path: string, signal?: AbortSignal): Promise<OpenedSource> {
  let total: number;
  try {
    const s = await stat(path);
    if (!s.isFile()) throw new Error('not a regular file');
    total = s.size;
  } catch (e) {
    throw new RuvllmError('E_IO', `${path}: ${(e as Error).message}`, { cause: e });
  }
  return { total, chunks: fileChunks(path, signal) };
}

/** The file in chunks read into one buffer (`handleChunks`). */
async function* fileChunks(path: string, signal?: AbortSignal): AsyncIterable<Uint8Array> {
  let file;
  try {
    file = await open(path, 'r');
  } catch (e) {
    throw new RuvllmError('E_IO', `${path}: ${(e as Error).message}`, { cause: e });
  }
  yield* handleChunks(file, signal);
}

/** Where `cache: true` keeps model files: $XDG_CACHE_HOME/ruvllm/models, else ~/.cache/ruvllm/models. */
const modelDir = () => join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'ruvllm', 'models');

setPlatform({
  wasmSource: (url) => readFile(url),
  whyNoThreads: () => null,
  defaultThreads: () => Math.min(availableParallelism(), 8),
  startThreaded: (start) => withWebWorkers(start),
  keepAlive: async (promise) => {
    const timer = setInterval(() => {}, 1 << 30);
    try {
      return await promise;
    } finally {
      clearInterval(timer);
    }
  },
  fileStore: (dir: string) => new FileStore(dir),
  modelStore: (dir?: string) => new FileModelStore(dir ?? modelDir()),
  open: (source: ModelSource, signal?: AbortSignal) => {
    if (source instanceof URL && source.protocol === 'file:') return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && source.startsWith('file:')) return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && !REMOTE.test(source)) return openFile(source, signal);
    return undefined;
  },
});

export * from './index.js';
export { FileStore } from './store/files.js';
