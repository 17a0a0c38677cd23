// A store in Node: a directory with one regular file per record, `<key>.rec`. Invariants and why:
// - Only regular files are records. Anything else named like one (a directory, FIFO, device, symbolic link) is not
//   listed, and `get` refuses it: it opens without following a link and without blocking, checks the handle it opened
//   (fstat) and the size before reading a byte, and reads at most that size. So no name in the directory can hang a
//   read or make it allocate without bound.
// - A record is written whole or not at all: into a temporary file of its own (`<key>.rec.<pid>.<random>.tmp`,
//   created exclusively, so two writers never share one), synced, renamed over the record, and the directory synced,
//   so that a `put` that resolved survives a crash or a power loss. Temporary files whose writer is gone (its process
//   is dead, or the file is old) are removed when a store opens and by `clear()`; a writing writer's never are.
// - Every failure is a `RuvllmError` (`E_STORE`, `E_STORE_FULL`, `RefusedRecords`). The directory is created when the
//   store is made; if that fails, every call rejects with the reason.
// - `lock` is a directory `lock` renamed into place already holding its owner's mark (`<pid>.<random>`): a rename
//   onto a directory that is not empty fails, so only one process holds it; a mark whose process is dead is removed
//   by name (only that holder's), which frees the lock without any risk of removing a newer holder's.
import { randomBytes } from 'node:crypto';
import { constants, type Stats } from 'node:fs';
import { lstat, lutimes, mkdir, open, readdir, rename, rm, rmdir, stat, unlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { RuvllmError } from '../errors.js';
import { KEY, readLimit, RefusedRecords, storeError, type Store, type StoredRecord } from './store.js';

const SUFFIX = '.rec';
/** A writer's temporary file: the record's name, the writer's pid (and a random part; files of earlier versions
 * have none). */
const TEMP = /^[0-9a-z]{1,64}\.rec\.(\d+)(?:\.[0-9a-f]+)?\.tmp$/;
const LOCK = 'lock';
/** A lock holder's mark (inside `lock`), and the directory a locker prepares before renaming it to `lock`. */
const MARK = /^(\d+)\.[0-9a-f]+$/;
const STAGED = /^lock\.(\d+)\.[0-9a-f]+$/;
/** A temporary file older than this is a dead writer's even if its pid runs (a reused pid): no writer takes this
 * long from its last byte to its rename. */
const STALE_MS = 10 * 60_000;
/** Opens a record for reading: never through a symbolic link, never waiting (a FIFO would block an open). */
const READ = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);

const unique = () => `${process.pid}.${randomBytes(6).toString('hex')}`;
const code = (e: unknown) => (e as { code?: string } | null)?.code;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether process `pid` runs on this host (EPERM: it runs as another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return code(e) === 'EPERM';
  }
}

/** What a file is, for a refusal. */
function kind(s: Stats): string {
  if (s.isDirectory()) return 'a directory';
  if (s.isFIFO()) return 'a FIFO';
  if (s.isSymbolicLink()) return 'a symbolic link';
  if (s.isSocket()) return 'a socket';
  if (s.isCharacterDevice() || s.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** `mkdir -p`, one level at a time (Node's `recursive` loops forever where a parent exists but refuses children
 * with ENOENT, as under /proc). */
async function makeDir(dir: string): Promise<void> {
  try {
    await mkdir(dir);
  } catch (e) {
    if (code(e) === 'ENOENT' && dirname(dir) !== dir) {
      await makeDir(dirname(dir));
      await mkdir(dir).catch((again) => {
        if (code(again) !== 'EEXIST') throw again;
      });
    } else if (code(e) !== 'EEXIST') {
      throw e;
    }
  }
  if (!(await stat(dir)).isDirectory()) throw Object.assign(new Error(`ENOTDIR: ${dir} is not a directory`), { code: 'ENOTDIR' });
}

/** Sync a directory, so that the renames in it are on disk (best effort: not every platform can). */
async function syncDir(dir: string): Promise<void> {
  try {
    const handle = await open(dir, constants.O_RDONLY);
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // a platform that cannot open or sync a directory: the rename is still atomic
  }
}

export class FileStore implements Store {
  readonly #dir: string;
  readonly #ready: Promise<void>;

  /** The store in `dir`, created if missing (with its parents). A failure to make it rejects every later call. */
  constructor(dir: string) {
    this.#dir = dir;
    this.#ready = makeDir(dir).then(
      () => this.#removeStale(),
      (e) => {
        throw storeError(e, `the store ${dir} could not be opened`);
      },
    );
    this.#ready.catch(() => {}); // reported by each call, never as an unhandled rejection
  }

  #path(key: string): string {
    if (!KEY.test(key)) throw new RuvllmError('E_INVALID_ARGUMENT', `not a record key: ${key}`);
    return join(this.#dir, key + SUFFIX);
  }

  /** Run `fn` once the directory is there; its fs errors become `E_STORE` (or `E_STORE_FULL`) saying `what` failed. */
  async #do<T>(what: string, fn: () => Promise<T>): Promise<T> {
    await this.#ready;
    try {
      return await fn();
    } catch (e) {
      throw e instanceof RuvllmError ? e : storeError(e, `the store ${this.#dir} could not ${what}`);
    }
  }

  /** Remove temporary files whose writer is gone (its pid is not running, or the file is old) and prepared locks
   * whose locker is gone (its pid is not running: a locker may wait for any time). */
  async #removeStale(): Promise<void> {
    for (const name of await readdir(this.#dir).catch(() => [])) {
      const temp = TEMP.exec(name)?.[1];
      const staged = STAGED.exec(name)?.[1];
      const path = join(this.#dir, name);
      if (temp !== undefined) {
        const s = await lstat(path).catch(() => undefined);
        if (s && (!alive(Number(temp)) || Date.now() - s.mtimeMs > STALE_MS)) await rm(path, { force: true }).catch(() => {});
      } else if (staged !== undefined && !alive(Number(staged))) {
        // A directory holding one mark; only a locker makes a name like this.
        await rm(path, { recursive: true, force: true }).catch(() => {});
      }
    }
  }

  async list(): Promise<StoredRecord[]> {
    return this.#do('list its records', async () => {
      const out: StoredRecord[] = [];
      for (const name of await readdir(this.#dir)) {
        const key = name.slice(0, -SUFFIX.length);
        if (!name.endsWith(SUFFIX) || !KEY.test(key)) continue;
        // lstat opens nothing: a FIFO or device cannot block it, and a link is not followed.
        const s = await lstat(join(this.#dir, name)).catch(() => undefined);
        if (s?.isFile()) out.push({ key, bytes: s.size, used: s.mtimeMs });
      }
      return out;
    });
  }

  async get(key: string, maxBytes?: number): Promise<Uint8Array | undefined> {
    return (await this.getMany([key], maxBytes))[0];
  }

  async getMany(keys: string[], maxBytes?: number): Promise<Array<Uint8Array | undefined>> {
    const limit = readLimit(maxBytes);
    const paths = keys.map((key) => this.#path(key));
    return this.#do('read its records', async () => {
      const got = await Promise.all(paths.map((path) => read(path, limit)));
      const refused = got.flatMap((r, i) => (typeof r === 'string' ? [{ key: keys[i], why: r }] : []));
      if (refused.length > 0) throw new RefusedRecords(refused, `the store ${this.#dir}`);
      return got as Array<Uint8Array | undefined>;
    });
  }

  async touch(records: StoredRecord[]): Promise<void> {
    await this.#ready;
    // In seconds as a float: a Date would cut `used` to whole milliseconds (mtimes keep nanoseconds). lutimes: never
    // a link's target.
    await Promise.all(records.map(({ key, used }) => lutimes(this.#path(key), used / 1000, used / 1000).catch(() => {})));
  }

  async put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void> {
    const paths = records.map((r) => this.#path(r.key));
    await this.#do('write its records', async () => {
      for (let i = 0; i < records.length; i++) {
        const tmp = `${paths[i]}.${unique()}.tmp`;
        try {
          const handle = await open(tmp, 'wx');
          try {
            await handle.writeFile(records[i].bytes);
            await handle.sync();
          } finally {
            await handle.close();
          }
          await rename(tmp, paths[i]);
        } catch (e) {
          await rm(tmp, { force: true }).catch(() => {});
          throw storeError(e, `the store ${this.#dir} could not write record ${records[i].key}`);
        }
      }
      if (records.length > 0) await syncDir(this.#dir);
    });
  }

  /** Delete records; a directory named like one is not a record and is left as it is. */
  async delete(keys: string[]): Promise<void> {
    const paths = keys.map((key) => this.#path(key));
    await this.#do('delete records', async () => {
      await Promise.all(paths.map((path) => removeFile(path)));
    });
  }

  /** Delete every record and every temporary file whose writer is gone; a directory named like a record is not one
   * and is left as it is. */
  async clear(): Promise<void> {
    await this.#do('clear its records', async () => {
      const names = (await readdir(this.#dir)).filter((n) => n.endsWith(SUFFIX) && KEY.test(n.slice(0, -SUFFIX.length)));
      await Promise.all(names.map((n) => removeFile(join(this.#dir, n))));
      await this.#removeStale();
    });
  }

  async lock<T>(fn: () => Promise<T>): Promise<T> {
    const mark = await this.#do('take its lock', () => this.#acquire());
    try {
      return await fn();
    } finally {
      await this.#do('release its lock', () => release(join(this.#dir, LOCK), mark));
    }
  }

  /** Take the lock (waiting while a live process holds it); the mark it holds. */
  async #acquire(): Promise<string> {
    const lock = join(this.#dir, LOCK);
    const mark = unique();
    const staged = join(this.#dir, `${LOCK}.${mark}`);
    await mkdir(staged);
    try {
      await writeFile(join(staged, mark), '', { flag: 'wx' });
      for (let wait = 2; ; wait = Math.min(wait * 2, 100)) {
        try {
          await rename(staged, lock); // fails while `lock` holds a mark
          return mark;
        } catch (e) {
          if (code(e) !== 'ENOTEMPTY' && code(e) !== 'EEXIST') throw e;
        }
        if (await breakDeadLock(lock)) continue;
        await sleep(wait * (0.5 + Math.random()));
      }
    } finally {
      await rm(staged, { recursive: true, force: true }).catch(() => {});
    }
  }
}

/** The record at `path`: its bytes, `undefined` if there is none, or why it is refused (a string). Refused unread:
 * anything but a regular file, one larger than `limit`. Marks it used. */
async function read(path: string, limit: number): Promise<Uint8Array | undefined | string> {
  let handle;
  try {
    handle = await open(path, READ);
  } catch (e) {
    if (code(e) === 'ENOENT') return undefined;
    if (code(e) === 'ELOOP') return 'a symbolic link, not a regular file';
    throw e;
  }
  try {
    const s = await handle.stat();
    if (!s.isFile()) return `${kind(s)}, not a regular file`;
    if (s.size > limit) return `${s.size} bytes, more than the ${limit} it may have`;
    const bytes = new Uint8Array(s.size);
    let at = 0;
    while (at < bytes.length) {
      const { bytesRead } = await handle.read(bytes, at, bytes.length - at, at);
      if (bytesRead === 0) break; // cut since the fstat: the reader's checks refuse what is left
      at += bytesRead;
    }
    const now = Date.now() / 1000;
    await handle.utimes(now, now).catch(() => {});
    return at === bytes.length ? bytes : bytes.subarray(0, at);
  } finally {
    await handle.close().catch(() => {});
  }
}

/** Remove a file (or what a link or FIFO names), unless it is a directory. */
async function removeFile(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (e) {
    if (code(e) === 'ENOENT') return;
    if ((code(e) === 'EISDIR' || code(e) === 'EPERM') && (await lstat(path).catch(() => undefined))?.isDirectory()) return;
    throw e;
  }
}

/** Free `lock` if its holder's process is dead: remove that holder's mark (by its name, so never a newer holder's),
 * then the directory if it is empty. Whether the lock may be free now (try again at once). */
async function breakDeadLock(lock: string): Promise<boolean> {
  let names: string[];
  try {
    names = await readdir(lock);
  } catch (e) {
    if (code(e) === 'ENOENT') return true; // released since
    throw e;
  }
  const marks = names.map((n) => MARK.exec(n));
  const other = names.find((_, i) => !marks[i]);
  if (other !== undefined) throw new Error(`${lock} holds ${other}, which is not a lock holder's mark`);
  if (marks.some((m) => alive(Number(m![1])))) return false;
  await release(lock, ...names);
  return true;
}

/** Remove `marks` from `lock`, then `lock` if that left it empty (a rename of a newer holder's lock onto an empty one
 * may come first: then it stays). */
async function release(lock: string, ...marks: string[]): Promise<void> {
  for (const mark of marks) {
    await unlink(join(lock, mark)).catch((e) => {
      if (code(e) !== 'ENOENT') throw e;
    });
  }
  await rmdir(lock).catch((e) => {
    if (code(e) !== 'ENOENT' && code(e) !== 'ENOTEMPTY' && code(e) !== 'EEXIST') throw e;
  });
}
