import { AbortError, RuvllmError, invalid } from './errors.js';

/** Where a model comes from. Node also takes a file path (a string that is not a URL). */
export type ModelSource = string | URL | Request | Response | Blob | ArrayBuffer | ArrayBufferView;

/** Bytes read so far of `total` (undefined when the server does not say), over every file of the model. */
export interface LoadProgress {
  loaded: number;
  total: number | undefined;
  /** Of `loaded`, the bytes read from the model store (`cache`) rather than the network or the source. */
  fromCache: number;
  /** The file being read (1 for the first) of `files` (more than one for a split model's shards). */
  file: number;
  files: number;
}

/** A source opened for reading: its size, if known, and its bytes in chunks. A chunk may be a view of a buffer
 * the reader fills again for the next one: use or copy it before asking for the next. */
export interface OpenedSource {
  total: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
  /** Its first bytes that come from the model store (0 unless it was opened through one). */
  fromStore?: number;
  /** Called once its chunks are done with, read to the end or not: frees what opening it took (a store's lock). */
  close?(): Promise<void>;
  /** The engine refused these bytes as a model (not a GGUF, another architecture): a store forgets them, so that
   * the next load fetches the file again. */
  refused?(): Promise<void>;
}

/** A model's files, opened one at a time as the engine takes them: one file, or a split model's shards in order. */
export interface ModelFiles {
  /** Bytes of all of them, where known before they are read. */
  total: number | undefined;
  open: Array<() => Promise<OpenedSource>>;
}

/** llama.cpp's names of a split model's shards: `NAME-00001-of-00003.gguf` (a query or fragment may follow). */
const SHARD = /^(.*-)(\d{5})(-of-)(\d{5})(\.gguf)((?:[?#].*)?)$/s;

/** The names of every shard of a split model when `name` (a URL or a path) is its first shard's, in order; else
 * `[name]`. A later shard's name stays one file, which the engine refuses as part of a split model. */
export function shardNames(name: string): string[] {
  const m = SHARD.exec(name);
  const count = m ? Number(m[4]) : 0;
  if (!m || Number(m[2]) !== 1 || count < 2) return [name];
  return Array.from({ length: count }, (_, i) => `${m[1]}${String(i + 1).padStart(5, '0')}${m[3]}${m[4]}${m[5]}${m[6]}`);
}

/**
 * The whole file lives in wasm memory, which wasm32 caps at 4 GiB; the KV cache, scratch buffers and
 * the engine itself need the rest. Bigger files are refused before anything is read or allocated.
 */
export const MAX_MODEL_BYTES = 4 * 1024 ** 3 - 256 * 1024 ** 2;

export function checkModelSize(bytes: number): void {
  if (bytes > MAX_MODEL_BYTES) {
    throw new RuvllmError(
      'E_MODEL_TOO_LARGE',
      `the model is ${formatBytes(bytes)} (${bytes} bytes); the wasm32 engine holds the whole file in its memory, ` +
        `which can grow to 4 GiB at most, so it loads files up to ${formatBytes(MAX_MODEL_BYTES)} (${MAX_MODEL_BYTES} bytes)`,
    );
  }
}

export function formatBytes(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(1)} MB`;
}

/** Chunks small enough that copying one into wasm memory never needs a big temporary allocation. */
const CHUNK = 4 << 20;

async function* slices(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  for (let at = 0; at < bytes.length; at += CHUNK) yield bytes.subarray(at, at + CHUNK);
}

/**
 * A stream's chunks. A byte stream (a fetched body, a Blob's stream) is read into one buffer of CHUNK bytes that
 * each read hands back (BYOB): every chunk is a view of it, so reading a file leaves no chunk behind for the garbage
 * collector, whose timing would otherwise decide how many of them the peak holds. Other streams' chunks come as the
 * stream makes them.
 */
export async function* streamChunks(stream: ReadableStream<Uint8Array>): AsyncIterable<Uint8Array> {
  let byob: ReadableStreamBYOBReader | undefined;
  try {
    byob = stream.getReader({ mode: 'byob' });
  } catch {
    // not a byte stream
  }
  if (byob === undefined) {
    yield* defaultChunks(stream.getReader());
    return;
  }
  try {
    let buffer = new ArrayBuffer(CHUNK);
    for (;;) {
      const { done, value }: ReadableStreamReadResult<Uint8Array<ArrayBuffer>> = await byob.read(new Uint8Array(buffer));
      if (done || value === undefined) return;
      yield value;
      buffer = value.buffer; // the read moved the buffer into `value`
    }
  } finally {
    byob.cancel().catch(() => {});
  }
}

async function* defaultChunks(reader: ReadableStreamDefaultReader<Uint8Array>): AsyncIterable<Uint8Array> {
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** The bytes a response's body yields, where its headers say (a compressed response's Content-Length counts the
 * compressed bytes, not what the stream yields). */
export function bodyLength(response: Response): number | undefined {
  const length = response.headers.get('content-encoding') ? null : response.headers.get('content-length');
  const total = length === null ? undefined : Number(length);
  return Number.isSafeInteger(total) ? total : undefined;
}

async function openResponse(response: Response, what: string): Promise<OpenedSource> {
  if (!response.ok) throw new RuvllmError('E_FETCH', `${what}: HTTP ${response.status} ${response.statusText}`.trim());
  if (!response.body) throw new RuvllmError('E_FETCH', `${what}: the response has no body`);
  return { total: bodyLength(response), chunks: streamChunks(response.body) };
}

/** `fetch`, its network failures as `E_FETCH` (an abort stays an abort). */
export async function fetchOrFail(input: string | URL | Request, init: RequestInit, what: string): Promise<Response> {
  try {
    return await fetch(input, init);
  } catch (e) {
    if (init.signal?.aborted) throw e;
    throw new RuvllmError('E_FETCH', `${what}: ${(e as Error).message}`, { cause: e });
  }
}

/** Open the sources every platform understands: URLs (fetched), Blobs and Files, bytes in memory. */
export async function openSource(source: ModelSource, signal?: AbortSignal): Promise<OpenedSource> {
  if (typeof source === 'string' || source instanceof URL || (typeof Request !== 'undefined' && source instanceof Request)) {
    const what = source instanceof Request ? source.url : String(source);
    return openResponse(await fetchOrFail(source, { signal }, what), what);
  }
  if (typeof Response !== 'undefined' && source instanceof Response) return openResponse(source, source.url || 'response');
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    return { total: source.size, chunks: streamChunks(source.stream()) };
  }
  if (source instanceof ArrayBuffer) return { total: source.byteLength, chunks: slices(new Uint8Array(source)) };
  if (ArrayBuffer.isView(source)) {
    const bytes = new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    return { total: bytes.length, chunks: slices(bytes) };
  }
  throw invalid('the model source must be a URL, Request, Response, Blob/File, ArrayBuffer or typed array (or a path in Node)');
}

// ---------------------------------------------------------------------------------------------------------------
// Prefixes: a source read from its start only as far as asked (a model's header, without its weights)
// ---------------------------------------------------------------------------------------------------------------

/** A source read from its start, as far as a reader asks: what a header-only load takes. */
export interface PrefixReader {
  /** The source's first bytes: at least `end` of them, or all of it when it is shorter (then fewer than `end`).
   * What was read is kept: a later call for more reads only the rest. The bytes are the reader's: copy them to keep
   * them past the next call. */
  read(end: number): Promise<Uint8Array>;
  /** Let go of the source (a response's stream left unread, a file handle). Idempotent. */
  close(): Promise<void>;
}

/**
 * A `PrefixReader` over `more(start, end)`, which returns bytes of the source from `start` (up to `end`, or more where
 * a stream gives more), or null or nothing at its end; `close` lets go of whatever `more` opened.
 */
export function prefixReader(more: (start: number, end: number) => Promise<Uint8Array | null>, close: () => Promise<void> = async () => {}): PrefixReader {
  let buffer = new Uint8Array(0);
  let length = 0;
  let ended = false;
  let closed = false;
  return {
    async read(end) {
      while (length < end && !ended) {
        const chunk = await more(length, end);
        if (!chunk || chunk.length === 0) {
          ended = true;
          break;
        }
        if (length + chunk.length > buffer.length) {
          const grown = new Uint8Array(Math.max(length + chunk.length, 2 * buffer.length));
          grown.set(buffer.subarray(0, length));
          buffer = grown;
        }
        buffer.set(chunk, length); // a copy: a stream's reader may fill the chunk's buffer again
        length += chunk.length;
      }
      return buffer.subarray(0, length);
    },
    async close() {
      if (closed) return;
      closed = true;
      await close();
    },
  };
}

/** Bytes of `stream`, `skip` of them left out first, one chunk a call; null at its end. `cancel` stops the stream. */
function streamPieces(stream: ReadableStream<Uint8Array>, skip: number) {
  const chunks = streamChunks(stream)[Symbol.asyncIterator]();
  return {
    async next(): Promise<Uint8Array | null> {
      for (;;) {
        const r = await chunks.next();
        if (r.done) return null;
        if (skip < r.value.length) {
          const piece = r.value.subarray(skip);
          skip = 0;
          return piece;
        }
        skip -= r.value.length;
      }
    },
    async cancel(): Promise<void> {
      await chunks.return?.();
    },
  };
}

/**
 * A URL (or a GET `Request`) read from its start with HTTP Range requests, each for the bytes the reader asks for
 * next. A server that ignores Range (200 and the whole file) is read as a stream only as far as asked, and cancelled
 * on `close`; 416 (the range starts past the end) is the end of the file. A ranged request that fails as a network
 * error (some servers and proxies break on Range: `vite preview` compresses ranged answers, which Chromium refuses) is
 * asked once more without Range, and that answer read as such a stream.
 */
function rangedPrefix(source: string | URL | Request, signal: AbortSignal | undefined): PrefixReader {
  const what = source instanceof Request ? source.url : String(source);
  let stream: ReturnType<typeof streamPieces> | null = null;
  const request = (range: string | null): Promise<Response> => {
    if (!(source instanceof Request)) return fetch(source, { headers: range === null ? {} : { Range: range }, signal });
    const headers = new Headers(source.headers);
    if (range !== null) headers.set('Range', range);
    return fetch(new Request(source, { headers, signal }));
  };
  const more = async (start: number, end: number): Promise<Uint8Array | null> => {
    if (stream) return stream.next();
    let response: Response;
    try {
      response = await request(`bytes=${start}-${end - 1}`).catch((e) => {
        if (signal?.aborted) throw e;
        return request(null); // the same file without Range: read from its first byte below
      });
    } catch (e) {
      if (signal?.aborted) throw new AbortError(signal.reason);
      throw new RuvllmError('E_FETCH', `${what}: ${(e as Error).message}`, { cause: e });
    }
    if (response.status === 416) {
      await response.body?.cancel();
      return null;
    }
    if (!response.ok) {
      await response.body?.cancel();
      throw new RuvllmError('E_FETCH', `${what}: HTTP ${response.status} ${response.statusText}`.trim());
    }
    if (!response.body) throw new RuvllmError('E_FETCH', `${what}: the response has no body`);
    if (response.status === 206) {
      const range = /^bytes (\d+)-\d+\//.exec(response.headers.get('content-range') ?? '');
      if (!range || Number(range[1]) !== start) {
        await response.body.cancel();
        throw new RuvllmError('E_FETCH', `${what}: asked for bytes from ${start}, got Content-Range '${response.headers.get('content-range')}'`);
      }
      return new Uint8Array(await response.arrayBuffer());
    }
    // The whole file from its first byte: read on as far as asked, past what was read already.
    stream = streamPieces(response.body, start);
    return stream.next();
  };
  return prefixReader(more, async () => {
    await stream?.cancel();
  });
}

/** Open the sources every platform understands for reading their first bytes only: URLs and GET Requests (HTTP Range
 * requests), a Response (its body read as far as asked), Blobs and Files (sliced), bytes in memory. */
export function openPrefix(source: ModelSource, signal?: AbortSignal): PrefixReader {
  if (typeof source === 'string' || source instanceof URL || (typeof Request !== 'undefined' && source instanceof Request)) {
    return rangedPrefix(source, signal);
  }
  if (typeof Response !== 'undefined' && source instanceof Response) {
    if (!source.ok) throw new RuvllmError('E_FETCH', `${source.url || 'response'}: HTTP ${source.status} ${source.statusText}`.trim());
    if (!source.body) throw new RuvllmError('E_FETCH', `${source.url || 'response'}: the response has no body`);
    const stream = streamPieces(source.body, 0);
    return prefixReader(() => stream.next(), () => stream.cancel());
  }
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    return prefixReader(async (start, end) => new Uint8Array(await source.slice(start, end).arrayBuffer()));
  }
  const bytes = source instanceof ArrayBuffer ? new Uint8Array(source) : ArrayBuffer.isView(source) ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : null;
  if (bytes) return prefixReader(async (start, end) => bytes.subarray(start, end));
  throw invalid('the source must be a URL, Request, Response, Blob/File, ArrayBuffer or typed array (or a path in Node)');
}
