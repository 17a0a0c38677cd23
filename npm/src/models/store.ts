// Where the package keeps model files (`LLM.load`'s `cache` option, `LLM.models`): one small interface with OPFS and
// the Cache API (browsers) and a directory (Node) behind it. Model files are not the records of `npm/src/store/` (the
// prefix cache, indexes, MicroLoRAs): they are large, arrive over minutes, and must survive a cut download, so they
// live apart, in stores of their own. Invariants and why:
// - One entry per URL, named by a hash of the URL (`modelKey`): an entry record (`ModelEntry`: the URL, what the
//   server said of the file, how many bytes are kept) and the file's bytes in parts of at most `PART_BYTES`, in order.
//   A part is written whole before the entry names it, so an entry never names bytes that are not kept: a page closed
//   or a process killed mid-download loses at most the part being written.
// - An entry is `complete` once every byte of the file is kept and its SHA-256 computed (and checked against the one
//   the caller gave); else it is a partial download, kept only with the server's validator (a strong ETag or
//   Last-Modified) that a resumed download sends as `If-Range`, so that the rest never comes from another version.
// - Entries are outside bytes when read back: one that is not a well-formed entry of its URL counts as absent.
// - Writers of an entry take its lock (`lock`): across tabs (Web Locks) or processes (a lock directory).
import { RuvllmError } from '../errors.js';
import { storeError } from '../store/store.js';

/** Which kind of store holds the model files. */
export type ModelStoreKind = 'opfs' | 'cache-api' | 'files';

/** What a store keeps of one URL. */
export interface ModelEntry {
  url: string;
  /** Each kept part's length, in order: the file's first `sum(parts)` bytes are kept. */
  parts: number[];
  /** The file's size, where the server said it (always, once complete). */
  total: number | null;
  complete: boolean;
  /** The SHA-256 of the whole file (hex), computed while it was downloaded: set once complete. */
  sha256: string | null;
  /** The server's validators of the file, for `If-Range` when a partial download resumes. */
  etag: string | null;
  lastModified: string | null;
  /** When a part was last written (ms since the epoch). */
  saved: number;
}

/** A part being written: its chunks in order, then `close` (which makes it durable) before the entry names it. */
export interface PartWriter {
  write(chunk: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/** What a store can still take, where the platform says: free bytes, and the quota and usage they come from. */
export interface StoreSpace {
  free: number;
  quota?: number;
  usage?: number;
}

/** Where model files are kept. Every failure is a `RuvllmError` (`E_STORE`, `E_STORE_FULL`). */
export interface ModelStore {
  readonly kind: ModelStoreKind;
  /** Where, in words, for messages. */
  readonly where: string;
  /** Every well-formed entry. */
  entries(): Promise<ModelEntry[]>;
  /** The entry under `key`, if it is there and well formed. */
  entry(key: string): Promise<ModelEntry | undefined>;
  setEntry(key: string, entry: ModelEntry): Promise<void>;
  /** Part `index` of `key`'s file, in chunks (each may be a view of a buffer read into again for the next). */
  readPart(key: string, index: number): AsyncIterable<Uint8Array>;
  /** A writer of part `index` of `key`'s file (what was there before is replaced). */
  writePart(key: string, index: number): Promise<PartWriter>;
  /** Remove `key`'s entry and parts. */
  delete(key: string): Promise<void>;
  /** Remove every entry and part. */
  clear(): Promise<void>;
  space(): Promise<StoreSpace | undefined>;
  /** `fn` holding `key`'s exclusive lock (across tabs or processes); released when `fn` settles. */
  lock<T>(key: string, fn: () => Promise<T>): Promise<T>;
}

/** A part's largest size: what a cut download may lose, and what the Cache API store holds in memory at once. */
export const PART_BYTES = 16 << 20;

/** The largest entry record read back (a URL of a few KB and a part list of a 4 GiB file take far less). */
export const MAX_ENTRY_BYTES = 1 << 20;

/** The name of `url`'s entry: the first 40 hex digits of its SHA-256 (WebCrypto's one-shot digest). */
export async function modelKey(url: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url)));
  return Array.from(digest.subarray(0, 20), (b) => b.toString(16).padStart(2, '0')).join('');
}

const nat = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0;
const strOrNull = (s: unknown): s is string | null => s === null || typeof s === 'string';

/** `bytes` as an entry record, or undefined when they are not one (damaged, cut, of another version). */
export function parseEntry(bytes: Uint8Array): ModelEntry | undefined {
  let e: Partial<Record<keyof ModelEntry, unknown>>;
  try {
    e = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    return undefined;
  }
  if (typeof e !== 'object' || e === null || typeof e.url !== 'string') return undefined;
  if (!Array.isArray(e.parts) || !e.parts.every(nat) || !(e.total === null || nat(e.total))) return undefined;
  if (typeof e.complete !== 'boolean' || !(e.sha256 === null || (typeof e.sha256 === 'string' && /^[0-9a-f]{64}$/.test(e.sha256)))) return undefined;
  if (!strOrNull(e.etag) || !strOrNull(e.lastModified) || !nat(e.saved)) return undefined;
  const kept = (e.parts as number[]).reduce((a, b) => a + b, 0);
  if (e.complete && (e.sha256 === null || e.total !== kept)) return undefined;
  if (e.total !== null && kept > (e.total as number)) return undefined;
  return e as ModelEntry;
}

export function entryBytes(entry: ModelEntry): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(entry));
}

/** Bytes of the file an entry keeps. */
export function keptBytes(entry: ModelEntry): number {
  return entry.parts.reduce((a, b) => a + b, 0);
}

/** A store without room for a model file (`E_STORE_FULL`): the bytes it needs and what the store has. */
export class StoreFullError extends RuvllmError {
  /** Bytes still to be stored. */
  readonly needed: number;
  /** Bytes the store can take, and the quota and usage that figure comes from (browsers). */
  readonly free: number;
  readonly quota: number | undefined;
  readonly usage: number | undefined;

  /** `refused`: the store refused a write for want of room, though it said it had `space` (a browser's estimate can be
   * above what it enforces). */
  constructor(what: string, needed: number, space: StoreSpace, where: string, refused = false) {
    const detail = space.quota !== undefined ? ` (quota ${space.quota} bytes, ${space.usage} used)` : '';
    const room = refused ? `refused a write for want of room (it says it has ${space.free} bytes free${detail})` : `has ${space.free} bytes free${detail}`;
    super('E_STORE_FULL', `${what} needs ${needed} bytes in ${where}, which ${room}: delete stored models (LLM.models) or load it without cache`);
    this.name = 'StoreFullError';
    this.needed = needed;
    this.free = space.free;
    this.quota = space.quota;
    this.usage = space.usage;
  }
}

/** A model store's failure as what the package says: `E_STORE_FULL` for a full quota or disk, else `E_STORE` (a
 * `RuvllmError` stays as it is). */
export function modelStoreError(e: unknown, what: string): RuvllmError {
  return e instanceof RuvllmError ? e : storeError(e, what);
}

/** The browser's free space for the origin: its quota less its usage (`navigator.storage.estimate()`). */
export async function estimateSpace(): Promise<StoreSpace | undefined> {
  try {
    const { quota, usage } = await navigator.storage.estimate();
    if (quota === undefined || usage === undefined) return undefined;
    return { free: Math.max(0, quota - usage), quota, usage };
  } catch {
    return undefined;
  }
}
