// The prefix cache's store in a browser: one IndexedDB database, one object store of `{ key, bytes, used }`.
import type { PrefixStore, StoredRecord } from './store.js';

const STORE = 'pages';

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

interface Row {
  key: string;
  bytes: Uint8Array;
  used: number;
}

export class IndexedDbStore implements PrefixStore {
  readonly #db: Promise<IDBDatabase>;

  /** The database `name` (default `ruvllm-prefix-cache`), created on first use. */
  constructor(name = 'ruvllm-prefix-cache') {
    const open = indexedDB.open(name, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(STORE, { keyPath: 'key' });
    this.#db = request(open);
  }

  async #tx(mode: IDBTransactionMode): Promise<{ tx: IDBTransaction; pages: IDBObjectStore }> {
    const tx = (await this.#db).transaction(STORE, mode);
    return { tx, pages: tx.objectStore(STORE) };
  }

  async list(): Promise<StoredRecord[]> {
    const { pages } = await this.#tx('readonly');
    const out: StoredRecord[] = [];
    await new Promise<void>((resolve, reject) => {
      const cursor = pages.openCursor();
      cursor.onerror = () => reject(cursor.error);
      cursor.onsuccess = () => {
        const c = cursor.result;
        if (!c) return resolve();
        const row = c.value as Row;
        out.push({ key: row.key, bytes: row.bytes.byteLength, used: row.used });
        c.continue();
      };
    });
    return out;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const { tx, pages } = await this.#tx('readwrite');
    const row = (await request(pages.get(key))) as Row | undefined;
    if (row) pages.put({ ...row, used: Date.now() });
    await done(tx);
    return row?.bytes;
  }

  async put(records: Array<{ key: string; bytes: Uint8Array }>): Promise<void> {
    const { tx, pages } = await this.#tx('readwrite');
    const used = Date.now();
    for (const { key, bytes } of records) pages.put({ key, bytes, used } satisfies Row);
    await done(tx);
  }

  async delete(keys: string[]): Promise<void> {
    const { tx, pages } = await this.#tx('readwrite');
    for (const key of keys) pages.delete(key);
    await done(tx);
  }

  async clear(): Promise<void> {
    const { tx, pages } = await this.#tx('readwrite');
    pages.clear();
    await done(tx);
  }
}
