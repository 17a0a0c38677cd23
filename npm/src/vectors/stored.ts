// A collection (crate/src/index/collection.rs: an HNSW index whose vectors stand for entries) kept in a store, by any
// number of writers at once (tabs, processes). It is read whole when opened, then each change is committed in the
// background, one commit at a time, each under the store's lock (`Store.lock`; a store without one is locked within
// this process only):
// - the writer reads the store's meta record (the commit point: written last, the one record a commit rewrites that
//   the state before needs). If it is not the one this writer last read or wrote, another writer committed since:
//   the store is read again and this writer's own changes since its last commit are replayed on it (`rebase`: adds
//   keep their ids, which come from a lease no other writer takes; removes, last uses and settings follow; where
//   both changed the same entry or setting, the later commit wins, and a removed entry stays removed);
// - then it writes the commit in one `put` (index segments under keys of their generation and entries, then meta),
//   and deletes what the state before needed and this one does not. A write cut short at any record leaves the state
//   before it whole; what it wrote is garbage the next reader finds and the next commit deletes.
// A `put` that fails leaves the store's state as it was: the next write is whole (every record, the rest deleted),
// or a rebase if another writer committed meanwhile. Opening commits once (a lease of ids, garbage deleted).
// Records are checked against the largest valid record before they are read into wasm: `list()`'s sizes first, the
// bytes a store returns after; a record too large is `E_INDEX` and the store is left as it is.
import type { Glue, WasmCollection } from '../builds.js';
import { engineError } from '../engine.js';
import { RuvllmError } from '../errors.js';
import { oneThreadBuild } from '../platform.js';
import { storeError, type Store } from '../store/store.js';
import type { ModelInfo } from '../types.js';

type Changes = { put: Array<[string, Uint8Array]>; delete: string[] };

/** The collection's metric: cosine (vectors normalized when stored), inner product, or squared L2. */
export type Metric = 'cosine' | 'dot' | 'l2';

/** How the HNSW graph is built: hnswlib's defaults are M 16, efConstruction 200. */
export interface GraphOptions {
  metric?: Metric;
  m?: number;
  efConstruction?: number;
  seed?: number;
}

const META = 'meta';
/** wasm32's whole memory: a store whose records add up to more can never be read. */
const MOST_BYTES = 2 ** 32;

export class StoredCollection {
  readonly #glue: Glue;
  #wasm: WasmCollection | null;
  readonly #store: Store | null;
  #writing: Promise<void> = Promise.resolve();
  /** A commit waits in `#writing` that has not started. */
  #queued = false;
  #error: RuvllmError | null = null;
  /** The store lost track (a write failed): the next write is whole. */
  #whole = false;
  /** The meta record this writer last read or wrote (undefined: the store held none). */
  #meta: Uint8Array | undefined;

  private constructor(glue: Glue, wasm: WasmCollection, store: Store | null) {
    this.#glue = glue;
    this.#wasm = wasm;
    this.#store = store;
  }

  /** The collection `store` holds, or a new one of `dims` and `graph` if it holds none (or there is no store).
   * `check` sees it before anything is written. A store whose records are not one collection is `E_INDEX`, and is
   * left as it is. */
  static async open(store: Store | null, dims: number, graph: GraphOptions, check?: (c: StoredCollection) => void): Promise<StoredCollection> {
    const { glue } = await oneThreadBuild();
    const create = () => {
      const options = JSON.stringify({ dims, metric: graph.metric ?? 'cosine', m: graph.m, efConstruction: graph.efConstruction, seed: graph.seed });
      return call(glue, () => new glue.Collection(options));
    };
    const read = store ? await locked(store, () => readStore(glue, store)) : null;
    const c = new StoredCollection(glue, read?.wasm ?? create(), store);
    c.#meta = read?.meta;
    try {
      if (read?.garbage) c.run((w) => w.discard(read.garbage!));
      check?.(c);
    } catch (e) {
      await c.close();
      throw e;
    }
    // A lease of ids, and the garbage deleted: later writers then take other ids.
    if (store) await c.#commit();
    return c;
  }

  /** Call the collection: its errors become RuvllmErrors. */
  run<T>(fn: (c: WasmCollection) => T): T {
    if (!this.#wasm) throw new RuvllmError('E_DISPOSED', 'this index was closed');
    const wasm = this.#wasm;
    return call(this.#glue, () => fn(wasm));
  }

  /** Apply the settings an opener gives a collection it just opened (`set`), and commit them; if they fail, the
   * collection is closed and the error thrown, the store keeping what it had. */
  async configure(set: () => void | Promise<void>): Promise<void> {
    try {
      await set();
      this.changed();
    } catch (e) {
      await this.close();
      throw e;
    }
  }

  /** Commit what changed, after the commits before it (one commit waiting takes every change made before it starts). */
  changed(): void {
    if (!this.#store || this.#queued) return;
    this.#queued = true;
    this.#writing = this.#writing.then(() => {
      this.#queued = false;
      return this.#commit();
    });
  }

  /** One commit under the store's lock, on the store's current state (see the top of this file). */
  async #commit(): Promise<void> {
    const store = this.#store!;
    try {
      await locked(store, async () => {
        if (!this.#wasm) return;
        const [meta] = await getRecords(this.#glue, store, [META]);
        if (!sameBytes(meta, this.#meta)) await this.#reload(store);
        const wasm = this.#wasm;
        this.run((w) => w.lease());
        const whole = this.#whole;
        const changes: Changes = this.run((w) => (whole ? w.takeAll() : w.takeChanges()));
        if (changes.put.length === 0) return;
        let stale = changes.delete;
        try {
          if (whole) {
            const keep = new Set(changes.put.map(([k]) => k));
            stale = (await store.list()).map((r) => r.key).filter((k) => !keep.has(k));
          }
          await store.put(changes.put.map(([key, bytes]) => ({ key, bytes })));
        } catch (e) {
          wasm.abort();
          this.#whole = true;
          throw e;
        }
        wasm.confirm();
        this.#whole = false;
        this.#meta = changes.put.find(([k]) => k === META)![1];
        this.#error = null;
        // The commit is stored: what a failed delete leaves is garbage, which the next reader finds and deletes.
        if (stale.length > 0) await store.delete(stale).catch(() => {});
      });
    } catch (e) {
      this.#error = e instanceof RuvllmError ? e : storeError(e, 'the index could not be stored');
    }
  }

  /** Read the store again (another writer committed) and replay this writer's changes since its last commit on it. */
  async #reload(store: Store): Promise<void> {
    const read = await readStore(this.#glue, store);
    const fresh = read?.wasm ?? this.run((w) => w.emptyLike());
    if (read?.garbage) {
      try {
        call(this.#glue, () => fresh.discard(read.garbage!));
      } catch (e) {
        fresh.free();
        throw e;
      }
    }
    this.run((w) => w.rebase(fresh)); // consumes `fresh`
    this.#meta = read?.meta;
    this.#whole = false;
  }

  /** Wait for the writes; throws the last one's failure (`E_STORE_FULL`, `E_STORE`, `E_INDEX`) until a later write
   * succeeds. */
  async flush(): Promise<void> {
    this.changed();
    await this.#writing;
    if (this.#error) throw this.#error;
  }

  /** Why the store is behind, if it is. */
  storeError(): RuvllmError | null {
    return this.#error;
  }

  /** Wait for the writes, then free the collection's memory. */
  async close(): Promise<void> {
    await this.#writing;
    this.#wasm?.free();
    this.#wasm = null;
  }
}

/** Commits of a store without `lock()` wait for each other within this process. */
let tail: Promise<unknown> = Promise.resolve();

/** Run `fn` holding `store`'s lock. */
function locked<T>(store: Store, fn: () => Promise<T>): Promise<T> {
  if (typeof store.lock === 'function') return store.lock(fn);
  const run = tail.then(fn, fn);
  tail = run.catch(() => {});
  return run;
}

/** The collection `store` holds: its records checked for size before they are read and copied into wasm. Null if it
 * holds none; `wasm` null and `garbage` set if it holds records of a first commit cut short (no meta record). */
async function readStore(glue: Glue, store: Store): Promise<{ wasm: WasmCollection | null; meta?: Uint8Array; garbage?: string[] } | null> {
  const listed = await store.list();
  if (!Array.isArray(listed)) throw new RuvllmError('E_STORE', 'the store listed something other than an array of records');
  if (listed.length === 0) return null;
  let total = 0;
  for (const { key, bytes } of listed) {
    if (typeof key !== 'string' || key.length > 64) throw new RuvllmError('E_INDEX', `the store holds a record under ${String(key).slice(0, 80)}, not an index's`);
    checkSize(glue, key, bytes);
    total += bytes;
  }
  if (total > MOST_BYTES) throw new RuvllmError('E_INDEX', `the store's records take ${total} bytes, more than wasm memory holds (the store is left as it is)`);
  const keys = listed.map((r) => r.key);
  if (!keys.includes(META)) return { wasm: null, garbage: keys };
  const records = await getRecords(glue, store, keys);
  const present = keys.flatMap((key, i) => (records[i] ? [[key, records[i]!] as const] : []));
  const wasm = call(glue, () => glue.Collection.fromRecords(present.map(([k]) => k), present.map(([, b]) => b)));
  return { wasm, meta: present.find(([k]) => k === META)?.[1] };
}

/** `keys`' records, each checked: plain bytes, no longer than any valid record under its key. */
async function getRecords(glue: Glue, store: Store, keys: string[]): Promise<Array<Uint8Array | undefined>> {
  const most = keys.map((k) => glue.Collection.maxRecordBytes(k));
  const largest = most.reduce((a, b) => Math.max(a, b), 0);
  let got: unknown;
  try {
    got = store.getMany ? await store.getMany(keys, largest) : await Promise.all(keys.map((k, i) => store.get(k, most[i])));
  } catch (e) {
    throw storeError(e, 'the index could not be read');
  }
  if (!Array.isArray(got) || got.length !== keys.length) throw new RuvllmError('E_STORE', `the store gave ${Array.isArray(got) ? got.length : 'no'} records for ${keys.length}`);
  return got.map((bytes, i) => (bytes === undefined ? undefined : checkedBytes(glue, keys[i], bytes)));
}

const TYPED_ARRAY = Object.getPrototypeOf(Uint8Array.prototype);
const intrinsic = (name: string) => Object.getOwnPropertyDescriptor(TYPED_ARRAY, name)!.get!;
const [bufferOf, offsetOf, lengthOf] = ['buffer', 'byteOffset', 'byteLength'].map(intrinsic);

/** `bytes` as a plain Uint8Array of its real length (read through the built-in getters, which neither a subclass nor
 * a Proxy can change), no longer than any valid record under `key`: what wasm copies in. */
function checkedBytes(glue: Glue, key: string, bytes: unknown): Uint8Array {
  let view: Uint8Array;
  try {
    if (!(bytes instanceof Uint8Array)) throw new TypeError();
    view = new Uint8Array(bufferOf.call(bytes), offsetOf.call(bytes), lengthOf.call(bytes));
  } catch {
    throw new RuvllmError('E_STORE', `the store gave something other than a Uint8Array for the record ${key}`);
  }
  checkSize(glue, key, view.byteLength);
  return view;
}

/** A record of `bytes` under `key` is no larger than any valid one, else `E_INDEX` (it is left unread). */
function checkSize(glue: Glue, key: string, bytes: unknown): void {
  const most = glue.Collection.maxRecordBytes(key);
  if (most === 0) throw new RuvllmError('E_INDEX', `the store holds a record under '${key}', not an index's`);
  if (typeof bytes !== 'number' || !(bytes >= 0 && bytes <= most)) {
    throw new RuvllmError('E_INDEX', `the store's record ${key} is ${String(bytes)} bytes, more than any index record (${most}); the store is left as it is`);
  }
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Run `fn` on the engine, its errors as RuvllmErrors. */
function call<T>(glue: Glue, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw engineError(e, glue, 'open the index again');
  }
}

/** The collection `store` holds for `embedder`'s vectors, or a new one of their length; tagged with the embedder's
 * identity (its name, the vectors' length and `info().modelId`: a hash of its weights), so that a store of another
 * embedder's vectors is `E_INDEX` rather than compared with them. A store of the first format, tagged with the name
 * and length only, is taken as this embedder's once and tagged anew. */
/** What `openForEmbedder` needs of an embedder (a loaded `LLM`). */
export interface Embedder {
  embed(text: string): Promise<number[][]>;
  info(): Pick<ModelInfo, 'name' | 'architecture' | 'modelId'>;
}

export async function openForEmbedder(embedder: Embedder, store: Store | null, graph: GraphOptions): Promise<StoredCollection> {
  const [probe] = await embedder.embed('dimensions');
  const info = embedder.info();
  const named = `${(info.name ?? info.architecture).slice(0, 256)} ${probe.length}`;
  const tag = `${named} ${info.modelId}`;
  return StoredCollection.open(store, probe.length, graph, (c) => {
    const stored = c.run((w) => w.tag());
    if (stored === '' || stored === named) c.run((w) => w.setTag(tag));
    else if (stored !== tag) throw new RuvllmError('E_INDEX', `the stored vectors come from '${stored}', not the embedder loaded ('${tag}'): open another store`);
  });
}

/** A collection without an embedder is ordered by time: one dimension, the time in hours, compared by distance. */
const TIME_TAG = 'time 1';
const HOUR_MS = 3_600_000;

/** The collection `store` holds for `embedder`'s vectors (`openForEmbedder`), or without an embedder one whose
 * vectors are times (`timeVector`): a log searched by field, not meaning. A store of the other kind is `E_INDEX`. */
export async function openForEmbedderOrTime(embedder: Embedder | null, store: Store | null, graph: GraphOptions): Promise<StoredCollection> {
  if (embedder) return openForEmbedder(embedder, store, graph);
  return StoredCollection.open(store, 1, { ...graph, metric: 'l2' }, (c) => {
    const stored = c.run((w) => w.tag());
    if (stored === '') c.run((w) => w.setTag(TIME_TAG));
    else if (stored !== TIME_TAG) throw new RuvllmError('E_INDEX', `the store was made with the embedder '${stored}': open it with that embedder`);
  });
}

/** The vector of an entry at `time` (ms since the epoch) in a collection without an embedder. */
export function timeVector(time: number): Float32Array {
  return Float32Array.of(time / HOUR_MS);
}

/** An entry's text and label, checked before they are copied into wasm: strings, the text at most 1 MiB of UTF-8
 * (one code unit takes a byte at least), the label at most 1 KiB. */
export function checkEntry(text: unknown, label: unknown): void {
  if (typeof text !== 'string' || typeof label !== 'string') throw new RuvllmError('E_INVALID_ARGUMENT', 'text and label must be strings');
  if (text.length > 1 << 20 || label.length > 1024) throw new RuvllmError('E_INVALID_ARGUMENT', `an entry text of ${text.length} or a label of ${label.length} characters: at most 1 MiB and 1 KiB of UTF-8`);
}

/** `vector` as the engine takes it, checked: numbers, `dims` of them. */
export function toVector(vector: ArrayLike<number>, dims: number): Float32Array {
  if (typeof vector !== 'object' || vector === null || typeof vector.length !== 'number') {
    throw new RuvllmError('E_INVALID_ARGUMENT', 'a vector must be an array or a Float32Array of numbers');
  }
  if (vector.length !== dims) throw new RuvllmError('E_INVALID_ARGUMENT', `a vector of ${vector.length} values for an index of ${dims} dimensions`);
  return vector instanceof Float32Array ? vector : Float32Array.from(vector);
}
