// A store in Node: a directory with one file per record. A record is written to a temporary name
// and renamed, so a crash leaves either the whole record or none (a cut one would be refused anyway: checksums).
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KEY, type Store, type StoredRecord } from './store.js';

const SUFFIX = '.rec';

export class FileStore implements Store {
  readonly #dir: string;
  readonly #ready: Promise<unknown>;

  constructor(dir: string) {
    this.#dir = dir;
    this.#ready = mkdir(dir, { recursive: true });
  }

  #path(key: string): string {
    if (!KEY.test(key)) throw new Error(`not a record key: ${key}`);
    return join(this.#dir, key + SUFFIX);
  }

  async list(): Promise<StoredRecord[]> {
    await this.#ready;
    const out: StoredRecord[] = [];
    for (const name of await readdir(this.#dir)) {
      const key = name.slice(0, -SUFFIX.length);
      if (!name.endsWith(SUFFIX) || !KEY.test(key)) continue;
      const s = await stat(join(this.#dir, name)).catch(() => undefined);
      if (s) out.push({ key, bytes: s.size, used: s.mtimeMs });
    }
    return out;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    await this.#ready;
    const path = this.#path(key);
    try {
      const bytes = await readFile(path);
      const now = new Date();
      await utimes(path, now, now).catch(() => {});
      return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    } catch (e) {
      if ((e as { code?: string }).code === 'ENOENT') return undefined;
      throw e;
    }
  }

  async getMany(keys: string[]): Promise<Array<Uint8Array | undefined>> {
    return Promise.all(keys.map((key) => this.get(key)));
  }

  async touch(records: StoredRecord[]): Promise<void> {
    await this.#ready;
    // In seconds as a float: a Date would cut `used` to whole milliseconds (mtimes keep nanoseconds).
    await Promise.all(records.map(({ key, used }) => utimes(this.#path(key), used / 1000, used / 1000).catch(() => {})));
  }

  async put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void> {
    await this.#ready;
    for (const { key, bytes } of records) {
      const path = this.#path(key);
      const tmp = `${path}.${process.pid}.tmp`;
      try {
        await writeFile(tmp, bytes);
        await rename(tmp, path);
      } catch (e) {
        await rm(tmp, { force: true });
        throw e;
      }
    }
  }

  async delete(keys: string[]): Promise<void> {
    await this.#ready;
    await Promise.all(keys.map((key) => rm(this.#path(key), { force: true })));
  }

  async clear(): Promise<void> {
    await this.#ready;
    const names = (await readdir(this.#dir)).filter((n) => (n.endsWith(SUFFIX) && KEY.test(n.slice(0, -SUFFIX.length))) || n.endsWith('.tmp'));
    await Promise.all(names.map((n) => rm(join(this.#dir, n), { force: true })));
  }
}
