// Node entry: the wasm file is read from the package directory, and model sources may be file paths.
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import init from '../wasm/ruvllm.js';
import { RuvllmError } from './errors.js';
import { setPlatform } from './llm.js';
import type { ModelSource, OpenedSource } from './source.js';

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
  init: async () => {
    await init({ module_or_path: await readFile(new URL('../wasm/ruvllm_bg.wasm', import.meta.url)) });
  },
  initGpu: async () => {
    const gpu = await import('../wasm-gpu/ruvllm.js');
    await gpu.default({ module_or_path: await readFile(new URL('../wasm-gpu/ruvllm_bg.wasm', import.meta.url)) });
    return gpu;
  },
  open: (source: ModelSource, signal?: AbortSignal) => {
    if (source instanceof URL && source.protocol === 'file:') return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && source.startsWith('file:')) return openFile(fileURLToPath(source), signal);
    if (typeof source === 'string' && !REMOTE.test(source)) return openFile(source, signal);
    return undefined;
  },
});

export * from './index.js';
