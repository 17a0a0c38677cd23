// A collection (crate/src/index/collection.rs: an HNSW index whose vectors stand for entries) kept in a store. It is
// read whole when opened, then written incrementally after each change: the records that changed, in the engine's
// order (index segments, entries, the index's header, meta), then the deletes; IndexedDB writes them in one
// transaction. Writes go one at a time in the background; `flush()` waits for them and throws the last failure. A
// failed write leaves the store behind the collection, so the next write rewrites every record and deletes the
// rest: the store never holds a mix the reader would refuse.
import type { Glue, WasmCollection } from '../builds.js';
import { RuvllmError } from '../errors.js';
import { engineError, indexGlue, type LLM } from '../llm.js';
import { storeError, type Store } from '../store/store.js';

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

export class StoredCollection {
  readonly #glue: Glue;
  #wasm: WasmCollection | null;
  readonly #store: Store | null;
  #writing: Promise<void> = Promise.resolve();
  #error: RuvllmError | null = null;
  /** The store lost track (a write failed): the next write is whole. */
  #whole = false;

  private constructor(glue: Glue, wasm: WasmCollection, store: Store | null) {
    this.#glue = glue;
    this.#wasm = wasm;
    this.#store = store;
  }

  /** The collection `store` holds, or a new one of `dims` and `graph` if it holds none (or there is no store). A
   * store whose records are not one collection is `E_INDEX`, and is left as it is. */
  static async open(store: Store | null, dims: number, graph: GraphOptions): Promise<StoredCollection> {
    const glue = await indexGlue();
    const listed = store ? await store.list() : [];
    if (listed.length === 0) {
      const options = JSON.stringify({ dims, metric: graph.metric ?? 'cosine', m: graph.m, efConstruction: graph.efConstruction, seed: graph.seed });
      const wasm = call(glue, () => new glue.Collection(options));
      const stored = new StoredCollection(glue, wasm, store);
      stored.#whole = true;
      return stored;
    }
    const keys = listed.map((r) => r.key);
    const bytes = store!.getMany ? await store!.getMany(keys) : await Promise.all(keys.map((k) => store!.get(k)));
    const present = keys.flatMap((key, i) => (bytes[i] ? [[key, bytes[i]!] as const] : []));
    const wasm = call(glue, () => glue.Collection.fromRecords(present.map(([k]) => k), present.map(([, b]) => b)));
    return new StoredCollection(glue, wasm, store);
  }

  /** Call the collection: its errors become RuvllmErrors. */
  run<T>(fn: (c: WasmCollection) => T): T {
    if (!this.#wasm) throw new RuvllmError('E_DISPOSED', 'this index was closed');
    const wasm = this.#wasm;
    return call(this.#glue, () => fn(wasm));
  }

  /** Write what changed, after the writes before it. */
  changed(): void {
    if (!this.#store) return;
    const store = this.#store;
    this.#writing = this.#writing.then(async () => {
      if (!this.#wasm) return;
      const whole = this.#whole;
      const changes: Changes = whole ? this.#wasm.takeAll() : this.#wasm.takeChanges();
      if (changes.put.length === 0 && changes.delete.length === 0) return;
      this.#whole = true; // until this write is done
      try {
        let stale = changes.delete;
        if (whole) {
          const keep = new Set(changes.put.map(([k]) => k));
          stale = (await store.list()).map((r) => r.key).filter((k) => !keep.has(k));
        }
        await store.put(changes.put.map(([key, bytes]) => ({ key, bytes })));
        if (stale.length > 0) await store.delete(stale);
        this.#whole = false;
        this.#error = null;
      } catch (e) {
        this.#error = storeError(e, 'the index could not be stored');
      }
    });
  }

  /** Wait for the writes; throws the last one's failure (`E_STORE_FULL`, `E_STORE`) until a later write succeeds. */
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

/** Run `fn` on the engine, its errors as RuvllmErrors. */
function call<T>(glue: Glue, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    throw engineError(e, glue, 'open the index again');
  }
}

/** The collection `store` holds for `embedder`'s vectors, or a new one of their length; marked with the embedder's
 * name and dims, so that a store of another embedder's vectors is `E_INDEX` rather than compared with them. */
export async function openForEmbedder(embedder: LLM, store: Store | null, graph: GraphOptions): Promise<StoredCollection> {
  const [probe] = await embedder.embed('dimensions');
  const c = await StoredCollection.open(store, probe.length, graph);
  const tag = `${embedder.info().name ?? embedder.info().architecture} ${probe.length}`;
  try {
    const stored = c.run((w) => w.tag());
    if (stored === '') c.run((w) => w.setTag(tag));
    else if (stored !== tag) throw new RuvllmError('E_INDEX', `the stored vectors come from '${stored}', not the embedder loaded ('${tag}'): open another store`);
  } catch (e) {
    await c.close();
    throw e;
  }
  return c;
}

/** `vector` as the engine takes it, checked: numbers, `dims` of them. */
export function toVector(vector: ArrayLike<number>, dims: number): Float32Array {
  if (typeof vector !== 'object' || vector === null || typeof vector.length !== 'number') {
    throw new RuvllmError('E_INVALID_ARGUMENT', 'a vector must be an array or a Float32Array of numbers');
  }
  if (vector.length !== dims) throw new RuvllmError('E_INVALID_ARGUMENT', `a vector of ${vector.length} values for an index of ${dims} dimensions`);
  return vector instanceof Float32Array ? vector : Float32Array.from(vector);
}
