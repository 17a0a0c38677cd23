// A store in a browser: one IndexedDB database with two object stores, `pages` (`{ key, bytes }`,
// the records) and `meta` (`{ key, bytes, used }`: each record's size and last use). They are apart so that listing
// the store and marking records used never read or rewrite the records themselves (hundreds of KB each).
import type { Store, StoredRecord } from './store.js';

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

export class IndexedDbStore implements Store {
  readonly #name: string;
  #db: Promise<IDBDatabase> | null = null;

  /** The database `name` (default `ruvllm-prefix-cache`), created on first use. */
  constructor(name = 'ruvllm-prefix-cache') {
    this.#name = name;
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
    // 'relaxed': a cache needs no flush to disk before the write counts as done.
    return (await this.#open()).transaction(stores, mode, { durability: 'relaxed' });
  }

  async list(): Promise<StoredRecord[]> {
    const tx = await this.#tx([META], 'readonly');
    return (await request(tx.objectStore(META).getAll())) as Meta[];
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    return (await this.getMany([key]))[0];
  }

  /** Every record of `keys` in one transaction, the requests issued at once; marks them used in the background (the
   * caller need not wait for that write). */
  async getMany(keys: string[]): Promise<Array<Uint8Array | undefined>> {
    const tx = await this.#tx([PAGES], 'readonly');
    const pages = tx.objectStore(PAGES);
    const rows = await Promise.all(keys.map((key) => request(pages.get(key)) as Promise<Page | undefined>));
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
    const tx = await this.#tx([META], 'readwrite');
    for (const { key, bytes, used } of records) tx.objectStore(META).put({ key, bytes, used } satisfies Meta);
    await done(tx);
  }

  async put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void> {
    const tx = await this.#tx([PAGES, META], 'readwrite');
    const pages = tx.objectStore(PAGES);
    const meta = tx.objectStore(META);
    const used = Date.now();
    for (const { key, bytes } of records) {
      pages.put({ key, bytes } satisfies Page);
      meta.put({ key, bytes: bytes.byteLength, used } satisfies Meta);
    }
    await done(tx);
  }

  async delete(keys: string[]): Promise<void> {
    const tx = await this.#tx([PAGES, META], 'readwrite');
    for (const key of keys) {
      tx.objectStore(PAGES).delete(key);
      tx.objectStore(META).delete(key);
    }
    await done(tx);
  }

  async clear(): Promise<void> {
    const tx = await this.#tx([PAGES, META], 'readwrite');
    tx.objectStore(PAGES).clear();
    tx.objectStore(META).clear();
    await done(tx);
  }
}
