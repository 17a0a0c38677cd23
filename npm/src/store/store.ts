// Where the prefix cache's pages, a vector index's records (VectorIndex, Router, Memory) and MicroLoRAs persist: one
// small interface, with IndexedDB (browsers) and files in a directory (Node) behind it, or any object a caller brings.
// Records are opaque bytes under short keys (lowercase letters and digits); the engine checks each one it reads back
// (format, checksum, identity), so a store needs no knowledge of what it holds. One store holds one thing: a prefix
// cache, one index, or MicroLoRAs (one record each).

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
  /** A record's bytes, or `undefined` if there is none; marks it used. `maxBytes`: the largest record the caller
   * can use (a store may refuse a larger one unread; the caller checks what it gets either way). */
  get(key: string, maxBytes?: number): Promise<Uint8Array | undefined>;
  /** Optional: `get` of several records at once (in one transaction, reads in parallel), in the order of `keys`. */
  getMany?(keys: string[], maxBytes?: number): Promise<Array<Uint8Array | undefined>>;
  /** Optional: set records' last use to the given `used` times (without it, a store's order holds for this process only). */
  touch?(records: StoredRecord[]): Promise<void>;
  /** Write records (a full store throws, e.g. a `QuotaExceededError` or `ENOSPC`). */
  put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void>;
  delete(keys: string[]): Promise<void>;
  clear(): Promise<void>;
  /** Optional: run `fn` holding the store's lock, exclusive across every process or page that shares the store
   * (files: a lock file; IndexedDB: Web Locks). A vector index commits under it; without it, only writers in one
   * process are kept apart. */
  lock?<T>(fn: () => Promise<T>): Promise<T>;
}

/** The prefix cache's store (the name it had before indexes shared it). */
export type PrefixStore = Store;

/** A record key: what `FileStore` can name a file by. */
export const KEY = /^[0-9a-z]{1,64}$/;

/** A store's failure as what the package says: `E_STORE_FULL` when it is full, else `E_STORE`, after `what`. */
export function storeError(e: unknown, what: string): RuvllmError {
  const code: ErrorCode = isFull(e) ? 'E_STORE_FULL' : 'E_STORE';
  return new RuvllmError(code, `${what}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
}

/** Whether `e` says the store is full (the browser's quota, a full disk). */
export function isFull(e: unknown): boolean {
  const err = e as { name?: string; code?: string } | null;
  return err?.name === 'QuotaExceededError' || err?.code === 'ENOSPC' || err?.code === 'EDQUOT';
}
