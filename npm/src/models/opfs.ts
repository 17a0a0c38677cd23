// Model files in the origin private file system (OPFS, browsers): a directory `ruvllm-models` with one directory per
// entry, `<key>/entry.json` and its parts `<key>/<index>.part`. A file written through `createWritable()` takes its
// new bytes only when the writer closes (Chromium writes a swap file and moves it into place), so an entry record or a
// part is replaced whole or not at all, and a part cut short by an error is closed with what came, while one whose
// page closed mid-write is lost (the entry never named it).
import { streamChunks } from '../source.js';
import { webLock } from '../store/store.js';
import { entryBytes, estimateSpace, MAX_ENTRY_BYTES, modelStoreError, parseEntry, type ModelEntry, type ModelStore, type PartWriter, type StoreSpace } from './store.js';

const ROOT = 'ruvllm-models';
const ENTRY = 'entry.json';

const missing = (e: unknown) => (e as { name?: string } | null)?.name === 'NotFoundError';

/** Whether this runtime has OPFS (a secure context; some private windows refuse it). */
export async function hasOpfs(): Promise<boolean> {
  try {
    await navigator.storage.getDirectory();
    return true;
  } catch {
    return false;
  }
}

export class OpfsModelStore implements ModelStore {
  readonly kind = 'opfs' as const;
  readonly where = 'OPFS (the origin private file system)';

  async #root(): Promise<FileSystemDirectoryHandle> {
    return (await navigator.storage.getDirectory()).getDirectoryHandle(ROOT, { create: true });
  }

  async #dir(key: string, create: boolean): Promise<FileSystemDirectoryHandle | undefined> {
    try {
      return await (await this.#root()).getDirectoryHandle(key, { create });
    } catch (e) {
      if (!create && (missing(e) || (e as { name?: string }).name === 'TypeMismatchError')) return undefined;
      throw e;
    }
  }

  async #do<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not ${what}`);
    }
  }

  entries(): Promise<ModelEntry[]> {
    return this.#do('list its entries', async () => {
      const out: ModelEntry[] = [];
      for await (const key of (await this.#root()).keys()) {
        const entry = await this.entry(key);
        if (entry) out.push(entry);
      }
      return out;
    });
  }

  entry(key: string): Promise<ModelEntry | undefined> {
    return this.#do('read an entry', async () => {
      const dir = await this.#dir(key, false);
      if (!dir) return undefined;
      let file: File;
      try {
        file = await (await dir.getFileHandle(ENTRY)).getFile();
      } catch (e) {
        if (missing(e) || (e as { name?: string }).name === 'TypeMismatchError') return undefined;
        throw e;
      }
      if (file.size > MAX_ENTRY_BYTES) return undefined;
      return parseEntry(new Uint8Array(await file.arrayBuffer()));
    });
  }

  setEntry(key: string, entry: ModelEntry): Promise<void> {
    return this.#do('write an entry', async () => {
      const writable = await (await (await this.#dir(key, true))!.getFileHandle(ENTRY, { create: true })).createWritable();
      try {
        await writable.write(entryBytes(entry) as Uint8Array<ArrayBuffer>);
        await writable.close();
      } catch (e) {
        await writable.abort().catch(() => {});
        throw e;
      }
    });
  }

  async *readPart(key: string, index: number): AsyncIterable<Uint8Array> {
    const file = await this.#do(`open part ${index} of a model`, async () => {
      const dir = await this.#dir(key, false);
      if (!dir) throw new Error(`there is no entry ${key}`);
      return (await dir.getFileHandle(`${index}.part`)).getFile();
    });
    try {
      yield* streamChunks(file.stream() as ReadableStream<Uint8Array>);
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not read part ${index} of a model`);
    }
  }

  writePart(key: string, index: number): Promise<PartWriter> {
    return this.#do(`write part ${index} of a model`, async () => {
      const handle = await (await this.#dir(key, true))!.getFileHandle(`${index}.part`, { create: true });
      const writable = await handle.createWritable();
      const what = `the model store in ${this.where} could not write part ${index} of a model`;
      return {
        write: async (chunk) => {
          try {
            await writable.write(chunk as Uint8Array<ArrayBuffer>);
          } catch (e) {
            await writable.abort().catch(() => {});
            throw modelStoreError(e, what);
          }
        },
        close: async () => {
          try {
            await writable.close();
          } catch (e) {
            throw modelStoreError(e, what);
          }
        },
      };
    });
  }

  delete(key: string): Promise<void> {
    return this.#do('delete an entry', async () => {
      try {
        await (await this.#root()).removeEntry(key, { recursive: true });
      } catch (e) {
        if (!missing(e)) throw e;
      }
    });
  }

  clear(): Promise<void> {
    return this.#do('clear', async () => {
      try {
        await (await navigator.storage.getDirectory()).removeEntry(ROOT, { recursive: true });
      } catch (e) {
        if (!missing(e)) throw e;
      }
    });
  }

  space(): Promise<StoreSpace | undefined> {
    return estimateSpace();
  }

  lock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return webLock(`ruvllm-model:${key}`, fn);
  }
}
