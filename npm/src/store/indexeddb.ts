// A store in a browser: one IndexedDB database with two object stores, `pages` (`{ key, bytes }`,
// the records) and `meta` (`{ key, bytes, used }`: each record's size and last use). They are apart so that listing
// the store, marking records used and refusing one over `maxBytes` never read or rewrite the records themselves
// (hundreds of KB each). Each `put` is one transaction: its records are all written or none. Every failure is a
// `RuvllmError` (`E_STORE`, `E_STORE_FULL` for the quota, `RefusedRecords`).
import { RuvllmError } from '../errors.js';
import { readLimit, RefusedRecords, storeError, webLock, type Store, type StoredRecord } from './store.js';

const PAGES = 'pages';
const META = 'meta';
/** Version 1 kept `used` in the page rows; version 2 moves it to `meta`. */
const VERSION = 2;

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new DOMException('the transaction was aborted', 'AbortError'));
  });
}

interface Page {
  key: string;
  bytes: Uint8Array;
}

type Meta = StoredRecord;

/** Create the object stores, or move a version-1 database's `used` times into `meta`. */
function upgrade(open: IDBOpenDBRequest, oldVersion: number): void {
  const db = open.result;
  if (oldVersion < 1) db.createObjectStore(PAGES, { keyPath: 'key' });
  const meta = db.createObjectStore(META, { keyPath: 'key' });
  if (oldVersion === 1) {
    const cursor = open.transaction!.objectStore(PAGES).openCursor();
    cursor.onsuccess = () => {
      const c = cursor.result;
      if (!c) return;
      const row = c.value as Page & { used?: number };
      meta.put({ key: row.key, bytes: row.bytes.byteLength, used: row.used ?? 0 } satisfies Meta);
      c.continue();
    };
  }
}

export interface IndexedDbStoreOptions {
  /**
   * When a write counts as done: `'strict'` (the default) once the browser has flushed it to disk, so that a power
   * loss cannot take it back; `'relaxed'` once the operating system has it (faster; a power loss or an OS crash may
   * lose the last writes, never part of one). Relaxed suits a cache, whose lost records are only made again.
   */
  durability?: 'strict' | 'relaxed';
}

export class IndexedDbStore implements Store {
  readonly #name: string;
  readonly #durability: 'strict' | 'relaxed';
  #db: Promise<IDBDatabase> | null = null;

  /** The database `name` (default `ruvllm-prefix-cache`), created on first use. */
  constructor(name = 'ruvllm-prefix-cache', options: IndexedDbStoreOptions = {}) {
    this.#name = name;
    this.#durability = options.durability ?? 'strict';
  }

  /** The open database. Another page's upgrade or `indexedDB.deleteDatabase` closes it (they would wait for it);
   * the next call opens it again. */
  #open(): Promise<IDBDatabase> {
    if (!this.#db) {
      const open = indexedDB.open(this.#name, VERSION);
      open.onupgradeneeded = (e) => upgrade(open, e.oldVersion);
      const db = request(open).then((db) => {
        db.onversionchange = () => this.close();
        return db;
      });
      db.catch(() => {
        if (this.#db === db) this.#db = null;
      });
      this.#db = db;
    }
    return this.#db;
  }

  /** Close the connection (the next call opens it again). */
  close(): void {
    const db = this.#db;
    this.#db = null;
    db?.then((d) => d.close(), () => {});
  }

  async #tx(stores: string[], mode: IDBTransactionMode): Promise<IDBTransaction> {
    return (await this.#open()).transaction(stores, mode, { durability: this.#durability });
  }

  /** Run `fn`; a failure that is not already a `RuvllmError` becomes `E_STORE` (`E_STORE_FULL`) saying `what` failed. */
  async #do<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw e instanceof RuvllmError ? e : storeError(e, `the IndexedDB store ${this.#name} could not ${what}`);
    }
  }

  async list(): Promise<StoredRecord[]> {
    return this.#do('list its records', async () => {
      const tx = await this.#tx([META], 'readonly');
      return (await request(tx.objectStore(META).getAll())) as Meta[];
    });
  }

  async get(key: string, maxBytes?: number): Promise<Uint8Array | undefined> {
    return (await this.getMany([key], maxBytes))[0];
  }

  /** Every record of `keys` in one transaction, the requests issued at once; marks them used in the background (the
   * caller need not wait for that write). A record whose size in `meta` is over the limit is refused unread. */
  async getMany(keys: string[], maxBytes?: number): Promise<Array<Uint8Array | undefined>> {
    const limit = readLimit(maxBytes);
    const refused: Array<{ key: string; why: string }> = [];
    const too = (key: string, bytes: number) => refused.push({ key, why: `${bytes} bytes, more than the ${limit} it may have` });
    const rows = await this.#do('read its records', async () => {
      const tx = await this.#tx([PAGES, META], 'readonly');
      const pages = tx.objectStore(PAGES);
      const meta = tx.objectStore(META);
      // Each page is asked for in its meta row's success event, while the transaction is still active.
      return Promise.all(
        keys.map(async (key) => {
          const m = (await request(meta.get(key))) as Meta | undefined;
          if (m && m.bytes > limit) return void too(key, m.bytes);
          const page = (await request(pages.get(key))) as Page | undefined;
          if (page && page.bytes.byteLength > limit) return void too(key, page.bytes.byteLength); // a meta row that lied
          return page;
        }),
      );
    });
    if (refused.length > 0) throw new RefusedRecords(refused, `the IndexedDB store ${this.#name}`);
    const found = rows.filter((r): r is Page => r !== undefined);
    if (found.length > 0) {
      const used = Date.now();
      this.touch(found.map((r) => ({ key: r.key, bytes: r.bytes.byteLength, used }))).catch(() => {
        // only the order in which records are dropped suffers
      });
    }
    return rows.map((r) => r?.bytes);
  }

  async touch(records: StoredRecord[]): Promise<void> {
    await this.#do('mark records used', async () => {
      const tx = await this.#tx([META], 'readwrite');
      for (const { key, bytes, used } of records) tx.objectStore(META).put({ key, bytes, used } satisfies Meta);
      await done(tx);
    });
  }

  async put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void> {
    await this.#do('write its records', async () => {
      const tx = await this.#tx([PAGES, META], 'readwrite');
      const pages = tx.objectStore(PAGES);
      const meta = tx.objectStore(META);
      const used = Date.now();
      for (const { key, bytes } of records) {
        pages.put({ key, bytes } satisfies Page);
        meta.put({ key, bytes: bytes.byteLength, used } satisfies Meta);
      }
      await done(tx);
    });
  }

  async delete(keys: string[]): Promise<void> {
    await this.#do('delete records', async () => {
      const tx = await this.#tx([PAGES, META], 'readwrite');
      for (const key of keys) {
        tx.objectStore(PAGES).delete(key);
        tx.objectStore(META).delete(key);
      }
      await done(tx);
    });
  }

  async clear(): Promise<void> {
    await this.#do('clear its records', async () => {
      const tx = await this.#tx([PAGES, META], 'readwrite');
      tx.objectStore(PAGES).clear();
      tx.objectStore(META).clear();
      await done(tx);
    });
  }

  /** `fn` under the Web Lock `ruvllm-store:<database>` (every tab and worker of the origin; the browser frees it when
   * its holder's page closes), or an in-page lock where `navigator.locks` is missing (this page only). */
  lock<T>(fn: () => Promise<T>): Promise<T> {
    return webLock(`ruvllm-store:${this.#name}`, fn);
  }
}
