// Model files in a directory (Node; `cache: true` is `$XDG_CACHE_HOME/ruvllm/models`, else `~/.cache/ruvllm/models`):
//   <dir>/<key>.rec             the entry records, in a `FileStore` (written to a temporary file, synced, renamed)
//   <dir>/parts/<key>/<i>.part  the parts, each synced before the entry names it
//   <dir>/locks/<key>/          each entry's lock, a `FileStore`'s (a directory renamed into place; a dead holder's
//                               is taken over), apart from the parts so that deleting an entry never takes its lock
// Parts are opened for reading without following a link or blocking and checked to be regular files (fstat) before a
// byte is read, as `FileStore` reads its records.
import { constants } from 'node:fs';
import { mkdir, open, rm, statfs, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { FileStore } from '../store/files.js';
import { entryBytes, MAX_ENTRY_BYTES, modelStoreError, parseEntry, type ModelEntry, type ModelStore, type PartWriter, type StoreSpace } from './store.js';

/** Opens a part for reading: never through a symbolic link, never waiting (a FIFO would block an open). */
const READ = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);

/** A file's bytes in chunks of up to 4 MiB, each read into the same buffer: no chunk is left for the garbage collector
 * (a stream's chunks are new buffers, which raised the peak while a model was read). Closes the handle at the end. */
export async function* handleChunks(file: FileHandle, signal?: AbortSignal): AsyncIterable<Uint8Array> {
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

export class FileModelStore implements ModelStore {
  readonly kind = 'files' as const;
  readonly where: string;
  readonly #dir: string;
  readonly #entries: FileStore;
  readonly #locks = new Map<string, FileStore>();

  constructor(dir: string) {
    this.#dir = dir;
    this.where = `the directory ${dir}`;
    this.#entries = new FileStore(dir);
  }

  #parts(key: string): string {
    return join(this.#dir, 'parts', key);
  }

  async #do<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not ${what}`);
    }
  }

  async entries(): Promise<ModelEntry[]> {
    const out: ModelEntry[] = [];
    for (const { key } of await this.#entries.list()) {
      const entry = await this.entry(key);
      if (entry) out.push(entry);
    }
    return out;
  }

  async entry(key: string): Promise<ModelEntry | undefined> {
    let bytes: Uint8Array | undefined;
    try {
      bytes = await this.#entries.get(key, MAX_ENTRY_BYTES);
    } catch (e) {
      if ((e as { keys?: unknown }).keys) return undefined; // refused: not a record of ours
      throw e;
    }
    return bytes && parseEntry(bytes);
  }

  setEntry(key: string, entry: ModelEntry): Promise<void> {
    return this.#entries.put([{ key, bytes: entryBytes(entry) }]);
  }

  async *readPart(key: string, index: number): AsyncIterable<Uint8Array> {
    const path = join(this.#parts(key), `${index}.part`);
    const file = await this.#do(`open part ${index} of a model`, async () => {
      const handle = await open(path, READ);
      const s = await handle.stat();
      if (!s.isFile()) {
        await handle.close();
        throw new Error(`${path} is not a regular file`);
      }
      return handle;
    });
    try {
      yield* handleChunks(file);
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not read ${path}`);
    }
  }

  writePart(key: string, index: number): Promise<PartWriter> {
    const dir = this.#parts(key);
    const what = `write part ${index} of a model`;
    return this.#do(what, async () => {
      await mkdir(dir, { recursive: true });
      const file = await open(join(dir, `${index}.part`), 'w');
      return {
        write: (chunk) => this.#do(what, async () => void (await file.write(chunk))),
        close: () =>
          this.#do(what, async () => {
            try {
              await file.datasync();
            } finally {
              await file.close();
            }
          }),
      };
    });
  }

  async delete(key: string): Promise<void> {
    // The entry first: from then on no reader takes the parts for a file.
    await this.#entries.delete([key]);
    await this.#do('delete a model', () => rm(this.#parts(key), { recursive: true, force: true }));
  }

  async clear(): Promise<void> {
    await this.#entries.clear();
    await this.#do('clear', () => rm(join(this.#dir, 'parts'), { recursive: true, force: true }));
  }

  space(): Promise<StoreSpace | undefined> {
    return this.#do('measure its disk', async () => {
      await mkdir(this.#dir, { recursive: true });
      const s = await statfs(this.#dir);
      return { free: s.bavail * s.bsize };
    });
  }

  lock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    let store = this.#locks.get(key);
    if (!store) this.#locks.set(key, (store = new FileStore(join(this.#dir, 'locks', key))));
    return store.lock(fn);
  }
}
