// The page's side of a worker-backed `LLM` (`LLM.load(src, { worker: true })`): one engine worker, started from its
// real URL (so bundlers see and bundle it, and a Content-Security-Policy needs no `blob:`), holding every model loaded
// so (by handle) and ended when the last is disposed. `RemoteModel` is one of them: its calls cross as protocol.ts's
// messages, a signal fired in the page cancels the call in the worker, errors come back typed. The text side is not
// here: the page runs it itself (llm.ts, from the header the load answers with).
import { AbortError, RuvllmError, throwIfAborted } from '../errors.js';
import type { MicroLoraLink, MicroLoraMethod, MicroLoraState } from '../microlora.js';
import type { ModelSource } from '../source.js';
import type { GenerateChunk, GenerateResult, ModelInfo } from '../types.js';
import { fromWire, type ModelMethod, type Reply, type Request, type StreamMessage } from './protocol.js';

interface Pending {
  resolve(reply: { value: unknown; info: ModelInfo | null }): void;
  reject(e: RuvllmError): void;
  progress?: (progress: never) => void;
}

/** The engine worker: its calls in flight and how many models it holds. */
class Connection {
  readonly #worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #next = 1;
  /** Models loaded or loading: the worker ends when this comes back to 0. */
  users = 0;
  /** Why the worker cannot serve (it failed to start, or failed since): every call then fails with it. */
  #broken: RuvllmError | null = null;
  readonly ready: Promise<void>;

  constructor() {
    let started!: () => void;
    let failed!: (e: RuvllmError) => void;
    this.ready = new Promise((resolve, reject) => ((started = resolve), (failed = reject)));
    try {
      // Written literally so Vite and webpack 5 find the worker script and bundle it.
      this.#worker = new Worker(new URL('./entry.js', import.meta.url), { type: 'module' });
    } catch (e) {
      // A CSP without this worker's origin in worker-src may refuse it here (SecurityError).
      throw new RuvllmError('E_WORKER', `the engine worker could not start: ${(e as Error)?.message ?? e}`, { cause: e });
    }
    this.#worker.onmessage = ({ data }: MessageEvent<Reply>) => {
      if (data.op === 'ready') return started();
      const call = this.#pending.get(data.id);
      if (!call) return;
      if (data.op === 'progress') return call.progress?.(data.progress as never);
      this.#pending.delete(data.id);
      if (data.op === 'done') call.resolve(data);
      else call.reject(fromWire(data.error));
    };
    // A script that does not load (404, refused by a CSP, a syntax error) or an error the worker did not catch: the
    // worker serves no more, so no call waits on it forever.
    this.#worker.onerror = (event) => {
      event.preventDefault?.();
      const e = new RuvllmError('E_WORKER', `the engine worker failed${event.message ? `: ${event.message}` : ' to start (its script could not be loaded: see the README on what a Content-Security-Policy needs)'}`);
      this.#broken = e;
      failed(e);
      for (const call of this.#pending.values()) call.reject(e);
      this.#pending.clear();
      this.#worker.terminate();
    };
    this.ready.catch(() => {});
  }

  /** Send request `make(id)` and wait for its answer; `signal` cancels it in the worker. */
  async call(make: (id: number) => Request, signal: AbortSignal | undefined, transfer: Transferable[] = [], progress?: (p: never) => void) {
    throwIfAborted(signal);
    await this.ready;
    if (this.#broken) throw this.#broken;
    const id = this.#next++;
    const onAbort = () => this.post({ op: 'cancel', id });
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<{ value: unknown; info: ModelInfo | null }>((resolve, reject) => {
        this.#pending.set(id, { resolve, reject, progress });
        this.post(make(id), transfer);
      });
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  post(request: Request, transfer: Transferable[] = []): void {
    if (!this.#broken) this.#worker.postMessage(request, transfer);
  }

  get broken(): RuvllmError | null {
    return this.#broken;
  }

  terminate(): void {
    this.#worker.terminate();
  }
}

let shared: Connection | null = null;

/** Whether `worker: true` runs the engine in a worker here: in browsers (Node has no `Worker` global and ignores it). */
export function canUseWorker(): boolean {
  return typeof Worker === 'function' && typeof (globalThis as { document?: unknown }).document !== 'undefined';
}

/** A model in the engine worker. Its methods are `LLM`'s compute calls; `info` is the snapshot its last answer sent.
 * It is its MicroLoRAs' link to the worker, where they live (microlora.ts). */
export class RemoteModel implements MicroLoraLink {
  readonly #connection: Connection;
  readonly #handle: number;
  #info: ModelInfo;
  #disposed = false;
  /** The calls and generations in progress, ended with `E_DISPOSED` by `dispose`. */
  readonly #streams = new Set<(e: RuvllmError) => void>();

  private constructor(connection: Connection, handle: number, info: ModelInfo) {
    this.#connection = connection;
    this.#handle = handle;
    this.#info = info;
  }

  /** Load `source` in the engine worker (started if none runs); the model and its GGUF header. */
  static async load(source: ModelSource, options: Record<string, unknown>, onProgress: ((p: never) => void) | undefined, signal: AbortSignal | undefined): Promise<{ model: RemoteModel; header: Uint8Array }> {
    const { value: wire, transfer } = await wireSource(source);
    throwIfAborted(signal);
    const connection = shared && !shared.broken ? shared : (shared = new Connection());
    connection.users++;
    try {
      const { value, info } = await connection.call((id) => ({ op: 'load', id, source: wire, options }), signal, transfer, onProgress);
      const { handle, header } = value as { handle: number; header: Uint8Array };
      return { model: new RemoteModel(connection, handle, info!), header };
    } catch (e) {
      release(connection);
      if (signal?.aborted && !(e instanceof AbortError)) throw new AbortError(signal.reason);
      throw e;
    }
  }

  get info(): ModelInfo {
    return this.#info;
  }

  usable(): void {
    if (this.#disposed) throw new RuvllmError('E_DISPOSED', 'the model was disposed');
    if (this.#connection.broken) throw this.#connection.broken;
  }

  /** `LLM`'s method `method` run in the worker on this model. */
  async call<T>(method: ModelMethod, args: unknown[], signal?: AbortSignal, transfer: Transferable[] = []): Promise<T> {
    return this.#request((id) => ({ op: 'call', id, handle: this.#handle, method, args }), signal, transfer);
  }

  /** `method` of this model's MicroLoRA `lora` run in the worker (`MicroLoraLink`). */
  async microLora<T>(lora: number | null, method: MicroLoraMethod, args: unknown[], signal?: AbortSignal): Promise<{ value: T; state: MicroLoraState }> {
    return this.#request((id) => ({ op: 'microLora', id, handle: this.#handle, lora, method, args }), signal);
  }

  async #request<T>(make: (id: number) => Request, signal: AbortSignal | undefined, transfer: Transferable[] = []): Promise<T> {
    this.usable();
    let end!: (e: RuvllmError) => void;
    const disposed = new Promise<never>((_, reject) => (end = reject));
    this.#streams.add(end);
    try {
      const { value, info } = await Promise.race([this.#connection.call(make, signal, transfer), disposed]);
      if (info) this.#info = info;
      return value as T;
    } finally {
      this.#streams.delete(end);
    }
  }

  /** A generation in the worker, streamed over a port of its own; leaving the loop early cancels it there. */
  async *generate(prompt: string | Uint32Array, options: Record<string, unknown>, signal: AbortSignal | undefined): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    this.usable();
    throwIfAborted(signal);
    await this.#connection.ready;
    const { port1, port2 } = new MessageChannel();
    const queue: StreamMessage[] = [];
    let wake: (() => void) | null = null;
    let ended: RuvllmError | null = null;
    const end = (e: RuvllmError) => {
      ended = e;
      wake?.();
    };
    this.#streams.add(end);
    port1.onmessage = ({ data }: MessageEvent<StreamMessage>) => {
      queue.push(data);
      wake?.();
    };
    const cancel = () => port1.postMessage('cancel');
    signal?.addEventListener('abort', cancel, { once: true });
    let finished = false;
    try {
      this.#connection.post({ op: 'generate', handle: this.#handle, prompt, options, port: port2 }, [port2]);
      for (;;) {
        while (queue.length === 0) {
          if (ended) throw ended;
          await new Promise<void>((resolve) => (wake = resolve));
          wake = null;
        }
        const m = queue.shift()!;
        if ('chunk' in m) yield m.chunk;
        else if ('result' in m) {
          finished = true;
          this.#info = m.info;
          return m.result;
        } else {
          finished = true;
          if (m.info) this.#info = m.info;
          const e = fromWire(m.error);
          throw e instanceof AbortError && signal?.aborted ? new AbortError(signal.reason) : e;
        }
      }
    } finally {
      if (!finished) cancel(); // left early (break, throw): the worker stops and keeps the model usable
      signal?.removeEventListener('abort', cancel);
      this.#streams.delete(end);
      port1.close();
    }
  }

  /** Free the model in the worker (the worker ends with its last model); calls in progress end with `E_DISPOSED`. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const e = new RuvllmError('E_DISPOSED', 'the model was disposed');
    for (const end of this.#streams) end(e);
    this.#streams.clear();
    this.#connection.post({ op: 'dispose', handle: this.#handle });
    release(this.#connection);
  }
}

function release(connection: Connection): void {
  if (--connection.users > 0) return;
  connection.terminate();
  if (shared === connection) shared = null;
}

/** `source` as it crosses to the worker, and what to transfer: a URL (a string or Request resolved against the
 * page), a Blob or File (cloned: no bytes copied), bytes (copied, the copy transferred: the caller's buffer stays
 * theirs), a Response read here and its bytes transferred. Node's paths have no meaning in a browser's worker. */
export async function wireSource(source: ModelSource): Promise<{ value: unknown; transfer: Transferable[] }> {
  const base = (globalThis as { location?: { href: string } }).location?.href;
  if (typeof source === 'string') return { value: base ? new URL(source, base).href : source, transfer: [] };
  if (source instanceof URL) return { value: source.href, transfer: [] };
  if (typeof Request !== 'undefined' && source instanceof Request) return { value: source.url, transfer: [] };
  if (typeof Response !== 'undefined' && source instanceof Response) {
    const bytes = new Uint8Array(await source.arrayBuffer());
    return { value: bytes, transfer: [bytes.buffer] };
  }
  if (source instanceof ArrayBuffer) {
    const copy = source.slice(0);
    return { value: copy, transfer: [copy] };
  }
  if (ArrayBuffer.isView(source)) {
    const copy = new Uint8Array(source.buffer, source.byteOffset, source.byteLength).slice();
    return { value: copy, transfer: [copy.buffer] };
  }
  return { value: source, transfer: [] }; // a Blob or File (structured clone), or what the worker's load refuses
}
