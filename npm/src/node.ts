// Node entry: the wasm files are read from the package directory, and model sources may be file paths.
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { RuvllmError } from './errors.js';
import { setPlatform } from './llm.js';
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
  return { total, chunks: createReadStream(path, { highWaterMark: 4 << 20, signal }) };
}

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
  open: (source: ModelSource, signal?: AbortSignal) => {
    if (source instanceof URL && source.protocol === 'file:') return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && source.startsWith('file:')) return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && !REMOTE.test(source)) return openFile(source, signal);
    return undefined;
  },
});

export * from './index.js';
export { FileStore } from './store/files.js';
