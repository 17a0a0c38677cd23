// Keeps an engine's prefix cache in a store: before a prompt, the stored pages it could start from are read back
// (lazily: only those, only then); after a generation, the pages it added are written, one write at a time in the
// background. The store stays within its own byte budget, oldest records first. A store that fails or fills up
// (after making room and retrying once) is given up: the cache goes on in memory and `status()` says why. A
// generation never fails because of the store. Records are checked by size before they are read (from `list()`),
// and by the engine (format, checksum, model, finite values) before they are used.
import type { Engine } from '../builds.js';
import { RuvllmError } from '../errors.js';
import { isFull, RefusedRecords, type Store, type StoredRecord } from './store.js';

export interface StoreError {
  code: 'E_STORE_FULL' | 'E_STORE';
  message: string;
}

/** What one read from the store before a prompt did (`info().prefixCache.lastLoad`). */
export interface StoreLoad {
  /** Records read, and their bytes. */
  records: number;
  bytes: number;
  /** Leading tokens of the prompt the prefix cache held in memory after it. */
  tokens: number;
  /** Milliseconds reading the store (its index too, on the first read). */
  readMs: number;
  /** Milliseconds the engine took to check the records and take them into memory. */
  loadMs: number;
}

const now = () => performance.now();
/** Tokens per page of the engine's prefix cache (crate/src/memory/prefix_cache.rs `PAGE_TOKENS`). */
const PAGE_TOKENS = 16;
/** Records read from the store at a time. */
const READ_CHUNK = 16;

/** Calls the engine as the LLM does: its errors become RuvllmErrors, and a trap retires the model. */
export type EngineCall = <T>(fn: (engine: Engine) => T) => T;

export class Persistence {
  readonly #call: EngineCall;
  readonly #store: Store;
  readonly #budget: number;
  /** key -> bytes and last use, from `list()` on first need. */
  #index: Map<string, { bytes: number; used: number }> | null = null;
  #writing: Promise<void> = Promise.resolve();
  #error: StoreError | null = null;
  #lastLoad: StoreLoad | null = null;
  #lastWrite = 0;

  constructor(call: EngineCall, store: Store, budgetBytes: number) {
    this.#call = call;
    this.#store = store;
    this.#budget = budgetBytes;
    call((e) => e.prefixCachePersist(true));
  }

  status(): { storedBytes: number | null; error: StoreError | null; lastLoad: StoreLoad | null } {
    const stored = this.#index ? [...this.#index.values()].reduce((n, r) => n + r.bytes, 0) : null;
    return { storedBytes: stored, error: this.#error, lastLoad: this.#lastLoad };
  }

  /** The store's records by key, from `list()` on first need, or again with `relist`. */
  async #indexed(relist = false): Promise<Map<string, { bytes: number; used: number }>> {
    if (!this.#index || relist) this.#index = new Map((await this.#store.list()).map((r) => [r.key, { bytes: r.bytes, used: r.used }]));
    return this.#index;
  }

  /**
   * Read the stored pages that extend what memory holds of `ids` (the prompt but its last token) into the cache: in
   * order, up to the first the store lacks, in chunks; the next chunk is read while the engine checks and takes one.
   */
  async load(ids: Uint32Array): Promise<void> {
    if (this.#error) return;
    try {
      await this.#writing;
      const keys = this.#call((e) => e.prefixCacheMissing(ids));
      const recordBytes = this.#call((e) => e.prefixCacheRecordBytes());
      let t = now();
      let index = await this.#indexed();
      const usable = () => {
        let n = 0;
        while (n < keys.length && index.get(keys[n])?.bytes === recordBytes) n++;
        return n;
      };
      let n = usable();
      // Another process or tab on the store may have written the next page since it was listed: one read tells.
      if (n < keys.length && !index.has(keys[n]) && (await this.#read([keys[n]], recordBytes).catch(() => []))[0]) {
        index = await this.#indexed(true);
        n = usable();
      }
      // A record of another size is not one of this cache's (damaged, or not a record): dropped unread.
      if (n < keys.length && index.has(keys[n])) await this.#delete([keys[n]]);
      if (n === 0) return;
      // Tokens memory holds before: the prompt's whole pages that `missing` did not name.
      let held = (Math.floor(ids.length / PAGE_TOKENS) - keys.length) * PAGE_TOKENS;
      const stats: StoreLoad = { records: 0, bytes: 0, tokens: held, readMs: 0, loadMs: 0 };
      const read = (from: number, to: number) => this.#read(keys.slice(from, to), recordBytes);
      let next: Promise<Array<Uint8Array | undefined>> | null = read(0, Math.min(n, READ_CHUNK));
      for (let at = 0; next; at += READ_CHUNK) {
        let got: Array<Uint8Array | undefined>;
        try {
          got = await next;
        } catch (e) {
          // Records the store would not read (not a file, too long): dropped; the chain ends before them.
          if (!(e instanceof RefusedRecords)) throw e;
          await this.#delete(e.keys);
          break;
        }
        next = null;
        let records = got.findIndex((r) => r === undefined);
        if (records < 0) records = got.length;
        const more = records === got.length && at + records < n;
        if (more) next = read(at + records, Math.min(n, at + records + READ_CHUNK));
        stats.readMs += now() - t;
        if (records === 0) break;
        t = now();
        const chunk = got.slice(0, records) as Uint8Array[];
        const used = Date.now();
        for (let i = 0; i < records; i++) index.set(keys[at + i], { bytes: chunk[i].byteLength, used });
        const loaded = JSON.parse(this.#call((e) => e.prefixCacheLoad(ids, chunk))) as { tokens: number; refused: Array<{ index: number }> };
        stats.loadMs += now() - t;
        t = now();
        stats.records += records;
        stats.bytes += chunk.reduce((sum, r) => sum + r.byteLength, 0);
        stats.tokens = loaded.tokens;
        this.#lastLoad = stats;
        // Damaged, foreign or mislabeled records are never used again.
        await this.#delete(loaded.refused.map((r) => keys[at + r.index]));
        held += records * PAGE_TOKENS;
        // A refusal ends the chain; so does a full cache (the engine took fewer pages than it was given).
        if (loaded.refused.length > 0 || loaded.tokens < held) {
          await next?.catch(() => {});
          break;
        }
      }
    } catch (e) {
      // The engine's trap is the model's end, not the store's: the caller must see it.
      if (e instanceof RuvllmError && e.code === 'E_ENGINE_CRASHED') throw e;
      this.#fail('E_STORE', e);
    }
  }

  /** Records of `keys` from the store, in order (`undefined` for any it lacks), none longer than `maxBytes`. */
  #read(keys: string[], maxBytes: number): Promise<Array<Uint8Array | undefined>> {
    const store = this.#store;
    if (store.getMany) return store.getMany(keys, maxBytes);
    return (async () => {
      const out: Array<Uint8Array | undefined> = [];
      for (const key of keys) {
        const bytes = await store.get(key, maxBytes);
        out.push(bytes);
        if (!bytes) break;
      }
      return out;
    })();
  }

  /**
   * Write the pages the last generation added, and mark the stored pages of its whole `conversation` (prompt and
   * answer) used (in the background).
   */
  save(conversation: Uint32Array): void {
    if (this.#error) return;
    let pairs: Array<[string, Uint8Array]>;
    let path: string[];
    try {
      pairs = this.#call((e) => e.prefixCacheTakeUnsaved()) as Array<[string, Uint8Array]>;
      path = this.#call((e) => e.prefixCacheKeys(conversation));
    } catch {
      return; // a disposed or retired model has nothing more to save (the caller knows why)
    }
    const records = pairs.map(([key, bytes]) => ({ key, bytes }));
    if (records.length === 0 && path.length === 0) return;
    this.#writing = this.#writing.then(() => this.#write(records, path));
  }

  /** Wait for the writes in progress. */
  flush(): Promise<void> {
    return this.#writing;
  }

  async clear(): Promise<void> {
    await this.#writing;
    await this.#store.clear();
    this.#index = new Map();
  }

  /**
   * Put `records`, mark the stored pages of `path` (a conversation's page keys, from the first) used, and hold the
   * budget, least recently used first. Along a path, each page counts as used a little later than the page after it:
   * a page is dropped only after every stored page that follows it (those are never read without it), so a system
   * prompt many conversations share stays as long as any of them.
   */
  async #write(records: Array<{ key: string; bytes: Uint8Array }>, path: string[]): Promise<void> {
    if (this.#error) return;
    try {
      const index = await this.#indexed();
      const oldestFirst = () => [...index.entries()].sort((a, b) => a[1].used - b[1].used);
      if (records.length > 0) {
        try {
          await this.#store.put(records);
        } catch (e) {
          if (!isFull(e)) throw e;
          // Full: give up the older half of what is stored and try once more.
          await this.#delete(oldestFirst().slice(0, Math.ceil(index.size / 2)).map(([key]) => key));
          try {
            await this.#store.put(records);
          } catch (again) {
            if (isFull(again)) return this.#fail('E_STORE_FULL', again);
            throw again;
          }
        }
      }
      // Strictly later than the last write, so that the order within one millisecond (below) stays apart from it.
      const now = (this.#lastWrite = Math.max(Date.now(), this.#lastWrite + 1));
      for (const r of records) index.set(r.key, { bytes: r.bytes.byteLength, used: now });
      const touched: StoredRecord[] = [];
      path.forEach((key, i) => {
        const r = index.get(key);
        if (!r) return;
        r.used = now + (path.length - i) / (path.length + 1); // the first page latest, within the millisecond
        touched.push({ key, bytes: r.bytes, used: r.used });
      });
      if (touched.length > 0) await this.#store.touch?.(touched);
      // Within the budget, least recently used first.
      let total = [...index.values()].reduce((n, r) => n + r.bytes, 0);
      if (total > this.#budget) {
        const drop: string[] = [];
        for (const [key, r] of oldestFirst()) {
          if (total <= this.#budget) break;
          drop.push(key);
          total -= r.bytes;
        }
        await this.#delete(drop);
      }
    } catch (e) {
      this.#fail('E_STORE', e);
    }
  }

  async #delete(keys: string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.#store.delete(keys);
    for (const key of keys) this.#index?.delete(key);
  }

  #fail(code: StoreError['code'], e: unknown): void {
    const why = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    this.#error = {
      code,
      message:
        code === 'E_STORE_FULL'
          ? `the prefix cache's store is full even after freeing space (${why}): the cache goes on in memory only`
          : `the prefix cache's store failed (${why}): the cache goes on in memory only`,
    };
    try {
      this.#call((e) => e.prefixCachePersist(false));
    } catch {
      // a disposed engine: nothing left to persist
    }
  }
}
