// A model file through a model store (`LLM.load(url, { cache })`): read from the store when it holds the whole file
// (no request at all), else downloaded into it while the engine takes the same chunks: the kept bytes of a cut
// download first, then the rest from the server (`Range: bytes=N-` with `If-Range`), each chunk hashed (SHA-256),
// written to the store and handed on before the next is read, so the file is never held twice in JavaScript.
// Invariants and why:
// - The entry's lock is held from the first look at the entry until the file's last byte is kept or the load gives up,
//   so two tabs or processes never write one entry at once (the second then finds the file whole, with no request).
// - Before a byte is downloaded, the bytes still to come are checked against the store's free space and the file
//   against the model size limit (`E_STORE_FULL` with the sizes, `E_MODEL_TOO_LARGE`), so a download that cannot be
//   kept or loaded never starts.
// - A download cut short (a network failure, an abort, the engine failing) keeps the bytes that came, with the
//   server's validator; without one (no strong ETag, no Last-Modified) a resume could join two versions of the file,
//   so nothing is kept. One the store refuses for want of room (a quota below the browser's estimate) keeps nothing
//   either: the file does not fit. A resume answered 200 (the file changed: `If-Range` failed, or the server ignores ranges)
//   starts over, the kept bytes deleted first.
// - A file is complete once its bytes are all kept, as many as the server announced, and their SHA-256 is the one
//   asked for (`sha256`); a mismatch is `E_INTEGRITY` and deletes the entry, so nothing of that file is kept. A complete
//   file is read back without being hashed again (its SHA-256 was recorded); one that reads back damaged (a part of
//   another size) is deleted and its load fails with `E_STORE`.
import { AbortError, RuvllmError } from '../errors.js';
import { bodyLength, checkModelSize, fetchOrFail, formatBytes, streamChunks, type OpenedSource } from '../source.js';
import { keptBytes, modelKey, PART_BYTES, StoreFullError, type ModelEntry, type ModelStore, type PartWriter } from './store.js';

/** SHA-256 over chunks (the wasm build's `Sha256`: WebCrypto hashes only whole buffers). */
export interface Hasher {
  update(chunk: Uint8Array): void;
  /** 64 lowercase hex digits. */
  digest(): string;
  free(): void;
}

export interface StoredFileOptions {
  /** The SHA-256 the file must have (lowercase hex). */
  sha256: string | undefined;
  signal: AbortSignal | undefined;
  hasher: () => Hasher;
}

/** The validator `If-Range` can send: a strong ETag (a weak one, `W/"..."`, never matches a range), else the date. */
function validator(response: Response): { etag: string | null; lastModified: string | null } {
  const etag = response.headers.get('etag');
  return { etag: etag?.startsWith('"') ? etag : null, lastModified: response.headers.get('last-modified') };
}

const resumable = (entry: ModelEntry) => entry.etag !== null || entry.lastModified !== null;

/** Take `key`'s lock, held until the returned function is called. `signal` gives up the wait (another tab or process
 * may hold the lock for a whole download); a lock that comes after that is released at once. */
function hold(store: ModelStore, key: string, signal: AbortSignal | undefined): Promise<() => void> {
  return new Promise((acquired, failed) => {
    if (signal?.aborted) return failed(new AbortError(signal.reason));
    let gaveUp = false;
    const onAbort = () => {
      gaveUp = true;
      failed(new AbortError(signal!.reason));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    store
      .lock(
        key,
        () =>
          new Promise<void>((release) => {
            signal?.removeEventListener('abort', onAbort);
            if (gaveUp) release();
            else acquired(release);
          }),
      )
      .catch(failed);
  });
}

/** `E_STORE_FULL` unless `store` has room for `need` more bytes (where it says how much it has). */
export async function checkSpace(store: ModelStore, need: number, what: string): Promise<void> {
  const space = await store.space();
  if (space === undefined || need <= space.free) return;
  throw new StoreFullError(what, need, space, store.where);
}

/** The server's size of `url` (a HEAD request), or undefined where it does not say. */
export async function headSize(url: string, signal: AbortSignal | undefined): Promise<number | undefined> {
  const response = await fetchOrFail(url, { method: 'HEAD', signal, cache: 'no-store' }, url);
  return response.ok ? bodyLength(response) : undefined;
}

/** What `store` holds of `url` (`kept` bytes) and its size (from a complete entry, else a HEAD request). */
export async function storedSize(url: string, store: ModelStore, signal: AbortSignal | undefined): Promise<{ total: number | undefined; kept: number }> {
  const entry = await store.entry(await modelKey(url));
  if (entry?.url === url && entry.complete) return { total: entry.total!, kept: entry.total! };
  const kept = entry?.url === url && resumable(entry) ? keptBytes(entry) : 0;
  return { total: await headSize(url, signal), kept };
}

/** `url`'s file through `store`: from the store when it is whole there, else downloaded into it (see the top). */
export async function openStored(url: string, store: ModelStore, options: StoredFileOptions): Promise<OpenedSource> {
  const key = await modelKey(url);
  const release = await hold(store, key, options.signal);
  try {
    let entry = await store.entry(key);
    if (entry && entry.url !== url) entry = undefined;
    // A whole file of another SHA-256 is not the one asked for (the file at the URL changed, or another was meant).
    if (entry?.complete && options.sha256 !== undefined && entry.sha256 !== options.sha256) entry = await forget(store, key);
    if (entry?.complete) return readStored(url, key, entry, store, release);
    if (entry && !resumable(entry)) entry = await forget(store, key);
    return await Download.start(url, key, entry, store, options, release);
  } catch (e) {
    release();
    throw e;
  }
}

async function forget(store: ModelStore, key: string): Promise<undefined> {
  await store.delete(key);
  return undefined;
}

/** The stored parts of `key` in order, each checked against its recorded length as it is read: where one has more or
 * fewer bytes, what `damaged` makes of it (index, bytes read, length) is thrown, and no byte past the length is given. */
async function* storedParts(
  store: ModelStore,
  key: string,
  lengths: readonly number[],
  damaged: (index: number, read: number, length: number) => Error | Promise<Error>,
): AsyncIterable<Uint8Array> {
  for (const [index, length] of lengths.entries()) {
    let read = 0;
    for await (const chunk of store.readPart(key, index)) {
      read += chunk.length;
      if (read > length) break;
      yield chunk;
    }
    if (read !== length) throw await damaged(index, read, length);
  }
}

/** A whole file from the store, each part's size checked against the entry as it is read. */
function readStored(url: string, key: string, entry: ModelEntry, store: ModelStore, release: () => void): OpenedSource {
  let released = false;
  const done = () => {
    if (!released) release();
    released = true;
  };
  async function* chunks(): AsyncIterable<Uint8Array> {
    try {
      yield* storedParts(store, key, entry.parts, async (index, read, length) => {
        await store.delete(key).catch(() => {});
        return new RuvllmError(
          'E_STORE',
          `the stored copy of ${url} in ${store.where} is damaged (part ${index} has ${read > length ? 'more than ' : ''}${read} bytes, not ${length}): it is deleted, and the next load downloads the file again`,
        );
      });
    } finally {
      done();
    }
  }
  return {
    total: entry.total!,
    fromStore: entry.total!,
    chunks: chunks(),
    close: async () => done(),
    refused: () => store.lock(key, () => store.delete(key)),
  };
}

/** A download into the store: the kept bytes, then the response's (see the top). */
class Download {
  #entry: ModelEntry;
  #writer: PartWriter | undefined;
  #partBytes = 0;
  #settled = false;
  #started = false;

  private constructor(
    readonly url: string,
    readonly key: string,
    entry: ModelEntry,
    readonly store: ModelStore,
    readonly response: Response,
    readonly options: StoredFileOptions,
    readonly release: () => void,
  ) {
    this.#entry = entry;
  }

  /** Request the bytes `kept` lacks (all of them without it), check the size and the store's space, and return the
   * file's chunks. */
  static async start(url: string, key: string, kept: ModelEntry | undefined, store: ModelStore, options: StoredFileOptions, release: () => void): Promise<OpenedSource> {
    const { signal } = options;
    let response = await Download.#request(url, kept, signal);
    let from = kept ? keptBytes(kept) : 0;
    let total: number | undefined;
    if (kept && response?.status === 206) {
      total = Download.#rangeTotal(response, from) ?? undefined;
      const v = validator(response);
      const changed = (kept.etag !== null && v.etag !== null && v.etag !== kept.etag) || (kept.total !== null && total !== kept.total);
      if (total === undefined || changed) response = await cancel(response);
    } else if (response && response.status !== 200) {
      response = await cancel(response); // the range refused (416): the whole file instead
    }
    if (!response || response.status !== 206) {
      // No resume: the server sends the whole file (it changed, or it ignores ranges), or is asked for it now. The
      // kept bytes go once it answers (not while it cannot be reached).
      response ??= await fetchOrFail(url, { signal, cache: 'no-store' }, url);
      if (!response.ok) {
        await cancel(response);
        throw new RuvllmError('E_FETCH', `${url}: HTTP ${response.status} ${response.statusText}`.trim());
      }
      if (kept) kept = await forget(store, key);
      from = 0;
      total = bodyLength(response);
    }
    if (!response.body) throw new RuvllmError('E_FETCH', `${url}: the response has no body`);
    try {
      if (total !== undefined) {
        await checkSpace(store, total - from, url);
        checkModelSize(total);
      }
    } catch (e) {
      await cancel(response);
      throw e;
    }
    const entry: ModelEntry = kept
      ? { ...kept, parts: [...kept.parts], total: total ?? kept.total }
      : { url, parts: [], total: total ?? null, complete: false, sha256: null, ...validator(response), saved: Date.now() };
    const download = new Download(url, key, entry, store, response, options, release);
    return { total, fromStore: from, chunks: download.#chunks(), close: () => download.#close(), refused: () => store.lock(key, () => store.delete(key)) };
  }

  /** A resume's request (`Range` from the kept bytes, `If-Range` their validator), else the whole file's. A resume
   * that fails on the way (a cross-origin server that does not allow `If-Range`) is undefined: the caller starts over. */
  static async #request(url: string, kept: ModelEntry | undefined, signal: AbortSignal | undefined): Promise<Response | undefined> {
    const from = kept ? keptBytes(kept) : 0;
    if (!kept || from === 0) return undefined;
    const headers = { range: `bytes=${from}-`, 'if-range': kept.etag ?? kept.lastModified! };
    try {
      return await fetch(url, { signal, headers, cache: 'no-store' });
    } catch (e) {
      if (signal?.aborted) throw new AbortError(signal.reason);
      return undefined;
    }
  }

  /** The file's size from a 206's `Content-Range` if the range starts at `from`; null if it does not say so. */
  static #rangeTotal(response: Response, from: number): number | null {
    const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(response.headers.get('content-range')?.trim() ?? '');
    if (!m || Number(m[1]) !== from || Number(m[2]) + 1 !== Number(m[3])) return null;
    const total = Number(m[3]);
    return Number.isSafeInteger(total) ? total : null;
  }

  async *#chunks(): AsyncIterable<Uint8Array> {
    this.#started = true;
    const { url, key, store, options } = this;
    const entry = this.#entry;
    const hasher = options.hasher();
    let received = keptBytes(entry);
    try {
      const damaged = (index: number) => {
        entry.parts.length = 0; // nothing of it is kept (see #settle)
        return new RuvllmError('E_STORE', `the kept bytes of ${url} in ${store.where} are damaged (part ${index}): they are deleted, and the next load starts over`);
      };
      for await (const chunk of storedParts(store, key, entry.parts, damaged)) {
        hasher.update(chunk);
        yield chunk;
      }
      for await (const chunk of this.#network()) {
        received += chunk.length;
        if (entry.total !== null && received > entry.total) {
          throw new RuvllmError('E_FETCH', `${url}: the server sent more than the ${entry.total} bytes it announced`);
        }
        hasher.update(chunk);
        await this.#full(async () => {
          this.#writer ??= await store.writePart(key, entry.parts.length);
          await this.#writer.write(chunk);
        });
        this.#partBytes += chunk.length;
        yield chunk;
        if (this.#partBytes >= PART_BYTES) await this.#full(() => this.#closePart());
      }
      await this.#full(() => this.#closePart());
      if (entry.total !== null && received !== entry.total) {
        throw new RuvllmError('E_FETCH', `${url}: the download broke off at ${received} of ${entry.total} bytes`);
      }
      const digest = hasher.digest();
      if (options.sha256 !== undefined && digest !== options.sha256) {
        entry.parts.length = 0;
        throw new RuvllmError(
          'E_INTEGRITY',
          `${url}: its SHA-256 is ${digest}, not the ${options.sha256} asked for (sha256): it is not the file meant, and nothing of it is kept`,
        );
      }
      await store.setEntry(key, { ...entry, total: received, complete: true, sha256: digest, saved: Date.now() });
      this.#settled = true;
      this.release();
    } finally {
      hasher.free();
      await this.#close();
    }
  }

  /** The response's chunks; its failures as `E_FETCH` saying what is kept (an abort stays an abort). */
  async *#network(): AsyncIterable<Uint8Array> {
    const { signal } = this.options;
    try {
      yield* streamChunks(this.response.body!);
    } catch (e) {
      if (signal?.aborted) throw new AbortError(signal.reason);
      if (e instanceof RuvllmError) throw e;
      const at = keptBytes(this.#entry) + this.#partBytes;
      const of = this.#entry.total === null ? '' : ` of ${formatBytes(this.#entry.total)}`;
      const kept = resumable(this.#entry) ? `the ${at} bytes that came are kept, and the next load resumes` : 'the server gives no validator (ETag, Last-Modified) to resume with, so nothing is kept';
      throw new RuvllmError('E_FETCH', `${this.url}: the download broke off at ${formatBytes(at)}${of} (${(e as Error)?.message ?? e}); ${kept}`, { cause: e });
    }
  }

  /** `fn`, a write to the store; a store that refuses it for want of room is `StoreFullError` with the sizes (the
   * bytes not kept yet), and nothing of the file is kept: it does not fit. */
  async #full(fn: () => Promise<void>): Promise<void> {
    try {
      await fn();
    } catch (e) {
      if ((e as RuvllmError).code !== 'E_STORE_FULL') throw e;
      const entry = this.#entry;
      const needed = (entry.total ?? keptBytes(entry) + this.#partBytes) - keptBytes(entry);
      entry.parts.length = 0;
      this.#partBytes = 0;
      await this.#writer?.close().catch(() => {});
      this.#writer = undefined;
      throw new StoreFullError(this.url, needed, (await this.store.space()) ?? { free: 0 }, this.store.where, true);
    }
  }

  /** Close the part being written and name it in the entry. */
  async #closePart(): Promise<void> {
    if (!this.#writer) return;
    const writer = this.#writer;
    this.#writer = undefined;
    await writer.close();
    this.#entry.parts.push(this.#partBytes);
    this.#partBytes = 0;
    this.#entry.saved = Date.now();
    await this.store.setEntry(this.key, this.#entry);
  }

  /** The download ends without its file whole: keep what came if it can be resumed, else delete it; free the lock.
   * Idempotent; nothing is done after a complete file. */
  async #close(): Promise<void> {
    if (this.#settled) return;
    this.#settled = true;
    // The load's own error is what its caller hears, not a failure here; an entry left as it was names only parts
    // that were kept.
    try {
      if (!this.#started) await cancel(this.response);
      let keep = resumable(this.#entry) && this.#entry.parts.length + this.#partBytes > 0;
      if (this.#writer) {
        const writer = this.#writer;
        this.#writer = undefined;
        try {
          await writer.close();
          if (keep && this.#partBytes > 0) this.#entry.parts.push(this.#partBytes);
        } catch {
          keep &&= this.#entry.parts.length > 0; // the part is lost; the parts before it are not
        }
      }
      if (keep) await this.store.setEntry(this.key, { ...this.#entry, saved: Date.now() });
      else await this.store.delete(this.key);
    } catch {
      // see above
    } finally {
      this.release();
    }
  }
}

async function cancel(response: Response): Promise<undefined> {
  await response.body?.cancel().catch(() => {});
  return undefined;
}

/** `opened`'s chunks, hashed as they pass: `E_INTEGRITY` after the last one unless their SHA-256 is `sha256`. */
export function verified(opened: OpenedSource, sha256: string, hasher: () => Hasher, what: string): OpenedSource {
  async function* chunks(): AsyncIterable<Uint8Array> {
    const h = hasher();
    try {
      for await (const chunk of opened.chunks) {
        h.update(chunk);
        yield chunk;
      }
      const digest = h.digest();
      if (digest !== sha256) throw new RuvllmError('E_INTEGRITY', `${what}: its SHA-256 is ${digest}, not the ${sha256} asked for (sha256)`);
    } finally {
      h.free();
    }
  }
  return { ...opened, chunks: chunks() };
}
