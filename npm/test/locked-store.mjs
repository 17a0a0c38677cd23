// A directory store with `lock()`, for the tests of index writers in several processes: records are files as the
// package's FileStore writes them (`<key>.rec`, written to a temporary name and renamed), and the lock is a directory
// that `mkdir` makes atomically. (The package's own stores take `lock()` from the store layer, issue 36.)
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function lockedStore(dir) {
  const path = (key) => join(dir, `${key}.rec`);
  const ready = mkdir(dir, { recursive: true });
  return {
    async list() {
      await ready;
      const out = [];
      for (const name of await readdir(dir)) {
        if (!name.endsWith('.rec')) continue;
        const s = await stat(join(dir, name)).catch(() => undefined);
        if (s) out.push({ key: name.slice(0, -4), bytes: s.size, used: s.mtimeMs });
      }
      return out;
    },
    async get(key) {
      try {
        return new Uint8Array(await readFile(path(key)));
      } catch (e) {
        if (e.code === 'ENOENT') return undefined;
        throw e;
      }
    },
    async put(records) {
      await ready;
      for (const { key, bytes } of records) {
        const tmp = `${path(key)}.${process.pid}.tmp`;
        await writeFile(tmp, bytes);
        await rename(tmp, path(key));
      }
    },
    async delete(keys) {
      await Promise.all(keys.map((key) => rm(path(key), { force: true })));
    },
    async clear() {
      await rm(dir, { recursive: true, force: true });
    },
    async lock(fn) {
      await ready;
      const lock = join(dir, 'lock');
      for (let tries = 0; ; tries++) {
        try {
          await mkdir(lock);
          break;
        } catch (e) {
          if (e.code !== 'EEXIST' || tries > 30000) throw e;
          await sleep(1);
        }
      }
      try {
        return await fn();
      } finally {
        await rm(lock, { recursive: true, force: true });
      }
    },
  };
}
