// Node entry: the wasm files are read from the package directory, model sources may be file paths, and stores
// (records, model files) are directories.
import { open, readFile, stat, type FileHandle } from 'node:fs/promises';
import { availableParallelism, homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RuvllmError } from './errors.js';
import { FileModelStore, handleChunks } from './models/files.js';
import { setPlatform } from './platform.js';
import { withWebWorkers } from './node-workers.js';
import { prefixReader, type ModelSource, type OpenedSource, type PrefixReader } from './source.js';
import { FileStore } from './store/files.js';

const REMOTE = /^(https?|data|blob):/i;

/** The size of the regular file at `path` (anything else, a FIFO whose open would wait for a writer say, is `E_IO`). */
async function fileSize(path: string): Promise<number> {
  try {
    const s = await stat(path);
    if (!s.isFile()) throw new Error('not a regular file');
    return s.size;
  } catch (e) {
    throw new RuvllmError('E_IO', `${path}: ${(e as Error).message}`, { cause: e });
  }
}

async function openFile(path: string, signal?: AbortSignal): Promise<OpenedSource> {
  return { total: await fileSize(path), chunks: fileChunks(path, signal) };
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

/** The first bytes of the file at `path`, read at their offsets as far as asked (opened at the first read). */
function filePrefix(path: string, signal?: AbortSignal): PrefixReader {
  let file: FileHandle | undefined;
  return prefixReader(
    async (start, end) => {
      signal?.throwIfAborted();
      if (!file) await fileSize(path);
      try {
        file ??= await open(path, 'r');
        const { bytesRead, buffer } = await file.read(new Uint8Array(end - start), 0, end - start, start);
        return buffer.subarray(0, bytesRead);
      } catch (e) {
        throw new RuvllmError('E_IO', `${path}: ${(e as Error).message}`, { cause: e });
      }
    },
    async () => {
      await file?.close();
    },
  );
}

/** The file path `source` names, if it names one: a path, or a `file:` URL. */
function filePath(source: ModelSource): string | undefined {
  if (source instanceof URL && source.protocol === 'file:') return fileURLToPath(source);
  if (typeof source === 'string' && source.startsWith('file:')) return fileURLToPath(source);
  if (typeof source === 'string' && !REMOTE.test(source)) return source;
  return undefined;
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
  modelStore: (dir?: string) => new FileModelStore(dir ?? modelDir()),
  open: (source: ModelSource, signal?: AbortSignal) => {
    const path = filePath(source);
    return path === undefined ? undefined : openFile(path, signal);
  },
  openPrefix: (source: ModelSource, signal?: AbortSignal) => {
    const path = filePath(source);
    return path === undefined ? undefined : filePrefix(path, signal);
  },
});

export * from './index.js';
export { FileStore } from './store/files.js';
