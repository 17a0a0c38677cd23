import { RuvllmError, invalid } from './errors.js';

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
