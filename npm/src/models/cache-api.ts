// Model files in the Cache API (browsers without OPFS, or `cache: 'cache-api'`): the cache `ruvllm-models`, whose
// requests are names under `https://ruvllm-models.invalid/<key>/` (never fetched): `entry` (the entry record) and
// `<index>.part`. A `put` stores a response whole or not at all, so a part is gathered in memory (at most `PART_BYTES`)
// and put when it closes; a part cut short by an error is put with what came.
import { streamChunks } from '../source.js';
import { webLock } from '../store/store.js';
import { entryBytes, estimateSpace, MAX_ENTRY_BYTES, modelStoreError, parseEntry, type ModelEntry, type ModelStore, type PartWriter, type StoreSpace } from './store.js';

const CACHE = 'ruvllm-models';
const BASE = 'https://ruvllm-models.invalid/';
const OCTETS = { 'content-type': 'application/octet-stream' };

const entryUrl = (key: string) => `${BASE}${key}/entry`;
const partUrl = (key: string, index: number) => `${BASE}${key}/${index}.part`;

export class CacheApiModelStore implements ModelStore {
  readonly kind = 'cache-api' as const;
  readonly where = `the Cache API (cache '${CACHE}')`;

  async #do<T>(what: string, fn: (cache: Cache) => Promise<T>): Promise<T> {
    try {
      return await fn(await caches.open(CACHE));
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not ${what}`);
    }
  }

  entries(): Promise<ModelEntry[]> {
    return this.#do('list its entries', async (cache) => {
      const out: ModelEntry[] = [];
      for (const request of await cache.keys()) {
        const m = /^([0-9a-f]{40})\/entry$/.exec(request.url.slice(BASE.length));
        const entry = request.url.startsWith(BASE) && m ? await this.entry(m[1]) : undefined;
        if (entry) out.push(entry);
      }
      return out;
    });
  }

  entry(key: string): Promise<ModelEntry | undefined> {
    return this.#do('read an entry', async (cache) => {
      const response = await cache.match(entryUrl(key));
      if (!response) return undefined;
      const length = Number(response.headers.get('content-length'));
      if (!(length <= MAX_ENTRY_BYTES)) return undefined;
      return parseEntry(new Uint8Array(await response.arrayBuffer()));
    });
  }

  setEntry(key: string, entry: ModelEntry): Promise<void> {
    const bytes = entryBytes(entry);
    const headers = { 'content-type': 'application/json', 'content-length': String(bytes.length) };
    return this.#do('write an entry', (cache) => cache.put(entryUrl(key), new Response(bytes as Uint8Array<ArrayBuffer>, { headers })));
  }

  async *readPart(key: string, index: number): AsyncIterable<Uint8Array> {
    const response = await this.#do(`read part ${index} of a model`, async (cache) => {
      const r = await cache.match(partUrl(key, index));
      if (!r?.body) throw new Error(`part ${index} of ${key} is not there`);
      return r;
    });
    try {
      yield* streamChunks(response.body!);
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not read part ${index} of a model`);
    }
  }

  async writePart(key: string, index: number): Promise<PartWriter> {
    const chunks: Uint8Array[] = [];
    let size = 0;
    return {
      write: async (chunk) => {
        chunks.push(chunk.slice()); // the reader fills the chunk's buffer again
        size += chunk.length;
      },
      close: () =>
        this.#do(`write part ${index} of a model`, async (cache) => {
          const body = new Blob(chunks as Uint8Array<ArrayBuffer>[], { type: OCTETS['content-type'] });
          chunks.length = 0;
          await cache.put(partUrl(key, index), new Response(body, { headers: { ...OCTETS, 'content-length': String(size) } }));
        }),
    };
  }

  delete(key: string): Promise<void> {
    return this.#do('delete an entry', async (cache) => {
      // The entry first: from then on no reader takes the parts for a file.
      await cache.delete(entryUrl(key));
      const prefix = `${BASE}${key}/`;
      for (const request of await cache.keys()) {
        if (request.url.startsWith(prefix)) await cache.delete(request);
      }
    });
  }

  async clear(): Promise<void> {
    try {
      await caches.delete(CACHE);
    } catch (e) {
      throw modelStoreError(e, `the model store in ${this.where} could not clear`);
    }
  }

  space(): Promise<StoreSpace | undefined> {
    return estimateSpace();
  }

  lock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return webLock(`ruvllm-model:${key}`, fn);
  }
}
