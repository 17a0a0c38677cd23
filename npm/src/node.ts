// Node entry: the wasm files are read from the package directory, and model sources may be file paths.
import { open, readFile, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { RuvllmError } from './errors.js';
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

/** The file in chunks of up to 4 MiB, each read into the same buffer: no chunk is left for the garbage collector
 * (a stream's chunks are new buffers, which raised the peak while a model was read). */
async function* fileChunks(path: string, signal?: AbortSignal): AsyncIterable<Uint8Array> {
  let file;
  try {
    file = await open(path, 'r');
  } catch (e) {
    throw new RuvllmError('E_IO', `${path}: ${(e as Error).message}`, { cause: e });
  }
  try {
    const buffer = new Uint8Array(4 << 20);
    for (;;) {
      signal?.throwIfAborted();
      const { bytesRead } = await file.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) return;
      yield buffer.subarray(0, bytesRead);
    }
  } finally {
    await file.close();
  }
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
