// VectorIndex: HNSW over the caller's vectors, each with a text and a label, persisted in a store.
import { invalid } from '../errors.js';
import { openStore } from '../platform.js';
import type { Store } from '../store/store.js';
import { checkEntry, StoredCollection, toVector, type GraphOptions, type Metric } from './stored.js';

/** Where an index persists: `'indexeddb'` (browsers), a directory (Node), or any `Store`; none: memory only. */
export type StoreSpec = 'indexeddb' | string | Store;

export interface VectorIndexOptions extends GraphOptions {
  /** The vectors' length. An index read back from `store` keeps its own graph options. */
  dims: number;
  store?: StoreSpec;
  /** The IndexedDB database with `store: 'indexeddb'` (default `ruvllm-index`): one per index. */
  database?: string;
}

/** What a vector stands for. `used`: when it was added or last recalled (ms since the epoch). */
export interface IndexEntry {
  id: number;
  text: string;
  label: string;
  used: number;
}

/** A search result; `score` is a similarity, larger is closer (the cosine under `cosine`, `1 - a·b` under `dot`'s
 * distance, the negated squared distance under `l2`). */
export interface IndexHit extends IndexEntry {
  score: number;
}

export interface SearchOptions {
  /** Results (default 10). */
  k?: number;
  /** Candidates searched (default 64; at least `k`): more finds more of the true nearest, slower. */
  ef?: number;
  /** Only entries of this label. */
  label?: string;
  /** Entries of any label but this one. */
  exceptLabel?: string;
}

export interface IndexInfo {
  metric: Metric;
  dims: number;
  m: number;
  efConstruction: number;
  entries: number;
  /** The entries' bytes (texts, labels, vectors, links), what a store holds of them about. */
  bytes: number;
  budget: number | null;
  /** The threshold of labels without their own (a router's routes). */
  threshold: number | null;
  /** Entries and threshold per label. */
  labels: Record<string, { entries: number; threshold: number | null }>;
  /** Why the store is behind the index (a write failed), if it is. */
  storeError: { code: string; message: string } | null;
}

/** Check a count option: an integer of at least `min`. */
export function count(value: number | undefined, fallback: number, name: string, min = 1): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min) throw invalid(`${name} must be an integer >= ${min}, got ${value}`);
  return v;
}

/** Check search options: `k`, `ef` and the label filter. */
export function searchArgs(o: SearchOptions): [number, number, string | undefined, string | undefined] {
  const k = count(o.k, 10, 'k');
  const ef = count(o.ef, 64, 'ef');
  for (const [name, v] of [['label', o.label], ['exceptLabel', o.exceptLabel]] as const) {
    if (v !== undefined && typeof v !== 'string') throw invalid(`${name} must be a string`);
  }
  return [k, ef, o.label, o.exceptLabel];
}

export class VectorIndex {
  readonly #c: StoredCollection;
  readonly dims: number;

  private constructor(c: StoredCollection) {
    this.#c = c;
    this.dims = (JSON.parse(c.run((w) => w.info())) as IndexInfo).dims;
  }

  /** The index `store` holds, or a new one. Records that are not one index are `E_INDEX` (the store is left as it
   * is: `clear()` it to start over). */
  static async open(options: VectorIndexOptions): Promise<VectorIndex> {
    const dims = count(options?.dims, 0, 'dims');
    const store = options.store === undefined ? null : openStore(options.store, 'store', options.database ?? 'ruvllm-index');
    const c = await StoredCollection.open(store, dims, options, (c) => {
      const stored = (JSON.parse(c.run((w) => w.info())) as IndexInfo).dims;
      if (stored !== dims) throw invalid(`the stored index has ${stored} dimensions, not ${dims}`);
    });
    return new VectorIndex(c);
  }

  /** Add `vector` standing for `text` under `label`; its id. */
  add(vector: ArrayLike<number>, entry: { text?: string; label?: string } = {}): number {
    const { text = '', label = '' } = entry;
    checkEntry(text, label);
    const v = toVector(vector, this.dims);
    const { id } = JSON.parse(this.#c.run((w) => w.add(v, text, label, Date.now())));
    this.#c.changed();
    return id;
  }

  /** Remove entry `id`; whether it was there. */
  remove(id: number): boolean {
    const removed = this.#c.run((w) => w.remove(id));
    if (removed) this.#c.changed();
    return removed;
  }

  get(id: number): IndexEntry | undefined {
    const json = this.#c.run((w) => w.entry(id));
    return json === undefined ? undefined : entryOf(JSON.parse(json));
  }

  /** Every entry (of `label` only, if given), by id. */
  entries(options: { label?: string } = {}): IndexEntry[] {
    return (JSON.parse(this.#c.run((w) => w.entries(options.label))) as IndexHit[]).map(entryOf);
  }

  /** The `k` entries nearest `vector`, best first. */
  search(vector: ArrayLike<number>, options: SearchOptions = {}): IndexHit[] {
    const v = toVector(vector, this.dims);
    const [k, ef, label, except] = searchArgs(options);
    return JSON.parse(this.#c.run((w) => w.search(v, k, ef, label, except)));
  }

  info(): IndexInfo {
    const e = this.#c.storeError();
    return { ...JSON.parse(this.#c.run((w) => w.info())), storeError: e && { code: e.code, message: e.message } };
  }

  /** Wait until the store holds every change (throws `E_STORE_FULL` or `E_STORE` if it cannot). */
  flush(): Promise<void> {
    return this.#c.flush();
  }

  /** Wait for the store, then free the index's memory. */
  close(): Promise<void> {
    return this.#c.close();
  }
}

function entryOf({ id, text, label, used }: IndexEntry): IndexEntry {
  return { id, text, label, used };
}
