// Where the prefix cache's pages, a vector index's records (VectorIndex, Router, Memory) and MicroLoRAs persist: one
// small interface, with IndexedDB (browsers) and files in a directory (Node) behind it, or any object a caller brings.
// Records are opaque bytes under short keys (lowercase letters and digits); the engine checks each one it reads back
// (format, checksum, identity), so a store needs no knowledge of what it holds. One store holds one thing: a prefix
// cache, one index, or MicroLoRAs (one record each).
//
// Failures: the package's stores reject with a `RuvllmError`: `E_STORE_FULL` when full, else `E_STORE`. A record a
// store will not read for what it is (not a regular file, larger than `maxBytes` or than `MAX_RECORD_BYTES`) is a
// `RefusedRecords` (`E_STORE`, with `keys`), never `undefined`: `undefined` means only that there is no record.
// A refusal changes nothing in the store and names every refused key of the call, so a caller can delete or skip
// those and read the others again. A caller's own store may ignore `maxBytes`: callers still check what they get.

import { RuvllmError, type ErrorCode } from '../errors.js';

/** One stored record, as `list()` reports it. */
export interface StoredRecord {
  key: string;
  bytes: number;
  /** When it was last written or read (ms since the epoch): the oldest go first when over the budget. */
  used: number;
}

/** A place records live across reloads and restarts. */
export interface Store {
  /** Every record's key, size and last use. */
  list(): Promise<StoredRecord[]>;
  /** A record's bytes, or `undefined` if there is none; marks it used. With `maxBytes`, a larger record is refused
   * unread (`RefusedRecords`). */
  get(key: string, maxBytes?: number): Promise<Uint8Array | undefined>;
  /** Optional: `get` of several records at once (in one transaction, reads in parallel), in the order of `keys`. Any
   * refused record fails the call with a `RefusedRecords` naming every refused key. */
  getMany?(keys: string[], maxBytes?: number): Promise<Array<Uint8Array | undefined>>;
  /** Optional: set records' last use to the given `used` times (without it, a store's order holds for this process only). */
  touch?(records: StoredRecord[]): Promise<void>;
  /** Write records (a full store throws, e.g. a `QuotaExceededError` or `ENOSPC`). */
  put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void>;
  delete(keys: string[]): Promise<void>;
  clear(): Promise<void>;
  /**
   * Optional: run `fn` holding the store's exclusive write lock, across processes (Node, one host) and tabs (browser),
   * and release it when `fn` settles, whether it resolves or rejects; its result is the call's. Waits while another
   * holds it; a holder that died without releasing it (a killed process, a closed tab) no longer holds it. Not
   * reentrant: `fn` must not call `lock` on the same store. Readers and unlocked writers are not held back.
   */
  lock?<T>(fn: () => Promise<T>): Promise<T>;
}

/** The prefix cache's store (the name it had before indexes shared it). */
export type PrefixStore = Store;

/** A record key: what `FileStore` can name a file by. */
export const KEY = /^[0-9a-z]{1,64}$/;

/** The largest record the package's stores read when the caller gives no `maxBytes` (1 GiB): far above any record
 * the package writes, and a bound on what one read can allocate. */
export const MAX_RECORD_BYTES = 1 << 30;

/** Records a store refused to read (`E_STORE`): `keys` are every refused key of the call, and the message says why. */
export class RefusedRecords extends RuvllmError {
  readonly keys: string[];

  constructor(refusals: Array<{ key: string; why: string }>, where: string) {
    const list = refusals.map((r) => `${r.key} (${r.why})`).join(', ');
    super('E_STORE', `${where} refused ${refusals.length === 1 ? 'record' : 'records'} ${list}`);
    this.keys = refusals.map((r) => r.key);
  }
}

/** The byte limit of a read: `maxBytes` if given (a non-negative integer), else `MAX_RECORD_BYTES`. */
export function readLimit(maxBytes: number | undefined): number {
  if (maxBytes === undefined) return MAX_RECORD_BYTES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) {
    throw new RuvllmError('E_INVALID_ARGUMENT', `maxBytes must be a non-negative integer, not ${maxBytes}`);
  }
  return maxBytes;
}

/** A store's failure as what the package says: `E_STORE_FULL` when it is full, else `E_STORE`, after `what`. */
export function storeError(e: unknown, what: string): RuvllmError {
  const code: ErrorCode = isFull(e) ? 'E_STORE_FULL' : 'E_STORE';
  return new RuvllmError(code, `${what}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
}

/** Whether `e` says the store is full (the browser's quota, a full disk, or a store's `E_STORE_FULL`). */
export function isFull(e: unknown): boolean {
  const err = e as { name?: string; code?: string } | null;
  return err?.name === 'QuotaExceededError' || err?.code === 'ENOSPC' || err?.code === 'EDQUOT' || err?.code === 'E_STORE_FULL';
}

/** The in-page lock of each name, where `navigator.locks` is missing: the end of the last waiter's turn (never
 * rejects). */
const pageLocks = new Map<string, Promise<unknown>>();

/** `fn` under the Web Lock `name` (every tab and worker of the origin; the browser frees it when its holder's page
 * closes), or an in-page lock where `navigator.locks` is missing (this page only, as on insecure origins). */
export async function webLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const locks = typeof navigator === 'undefined' ? undefined : navigator.locks;
  if (locks) return locks.request(name, { mode: 'exclusive' }, () => fn()) as Promise<T>;
  const mine = (pageLocks.get(name) ?? Promise.resolve()).then(() => fn());
  const turn = mine.catch(() => {});
  pageLocks.set(name, turn);
  try {
    return await mine;
  } finally {
    if (pageLocks.get(name) === turn) pageLocks.delete(name);
  }
}
