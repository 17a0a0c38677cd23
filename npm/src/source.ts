import { RuvllmError, invalid } from './errors.js';

/** Where a model comes from. Node also takes a file path (a string that is not a URL). */
export type ModelSource = string | URL | Request | Response | Blob | ArrayBuffer | ArrayBufferView;

/** Bytes read so far of `total` (undefined when the server does not say). */
export interface LoadProgress {
  loaded: number;
  total: number | undefined;
}

/** A source opened for reading: its size, if known, and its bytes in chunks. A chunk may be a view of a buffer
 * the reader fills again for the next one: use or copy it before asking for the next. */
export interface OpenedSource {
  total: number | undefined;
  chunks: AsyncIterable<Uint8Array>;
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

function formatBytes(n: number): string {
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
async function* streamChunks(stream: ReadableStream<Uint8Array>): AsyncIterable<Uint8Array> {
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

async function openResponse(response: Response, what: string): Promise<OpenedSource> {
  if (!response.ok) throw new RuvllmError('E_FETCH', `${what}: HTTP ${response.status} ${response.statusText}`.trim());
  if (!response.body) throw new RuvllmError('E_FETCH', `${what}: the response has no body`);
  // A compressed response's Content-Length counts compressed bytes, not what the stream yields.
  const length = response.headers.get('content-encoding') ? null : response.headers.get('content-length');
  const total = length === null ? undefined : Number(length);
  return { total: Number.isSafeInteger(total) ? total : undefined, chunks: streamChunks(response.body) };
}

/** Open the sources every platform understands: URLs (fetched), Blobs and Files, bytes in memory. */
export async function openSource(source: ModelSource, signal?: AbortSignal): Promise<OpenedSource> {
  if (typeof source === 'string' || source instanceof URL || (typeof Request !== 'undefined' && source instanceof Request)) {
    const what = source instanceof Request ? source.url : String(source);
    let response: Response;
    try {
      response = await fetch(source, { signal });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw new RuvllmError('E_FETCH', `${what}: ${(e as Error).message}`, { cause: e });
    }
    return openResponse(response, what);
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
