// The page's side of a worker-backed `LLM` (`LLM.load(src)` in a browser; `shared: true` for one engine for all
// tabs): a `Connection` to a host (links.ts: a dedicated Worker, the origin's SharedWorker, or a leader tab's
// worker), one per kind per page, ended when the page's last model on it is disposed. `RemoteModel` is one model
// there: its calls cross as protocol.ts's messages, a signal fired in the page cancels the call in the host, errors
// come back typed. When a leader host moves to another tab, each model loads again there (from the model store or
// the HTTP cache when it has them); a call in flight then fails with `E_WORKER`, and the next one runs on the new
// host, re-prefilling its prompt (from the prefix cache where the store has it). The text side is not here: the
// page runs it itself (llm.ts, from the header the load answers with).
import { AbortError, RuvllmError, throwIfAborted } from '../errors.js';
import type { MicroLoraLink, MicroLoraMethod, MicroLoraState } from '../microlora.js';
import type { ModelSource } from '../source.js';
import type { GenerateChunk, GenerateResult, ModelInfo } from '../types.js';
import { canShare, dedicatedLink, sharedLink, type Link, type LinkKind } from './links.js';
import { fromWire, type ModelMethod, type Reply, type Request } from './protocol.js';

interface Pending {
  resolve(reply: { value: unknown; info: ModelInfo | null }): void;
  reject(e: RuvllmError): void;
  progress?: (progress: never) => void;
  chunk?: (chunk: GenerateChunk) => void;
}

type Answer = { value: unknown; info: ModelInfo | null };

/** The cause of the error a call in flight fails with when its leader host closed. */
const MOVED = Symbol('the host moved');
/** The cause of the error a load fails with when its worker did not start (its script refused or missing). */
const NOT_STARTED = Symbol('the worker did not start');

/** Whether `e` says that the engine worker could not start (so the engine may run in the page instead). */
export function workerDidNotStart(e: unknown): boolean {
  return e instanceof RuvllmError && e.cause === NOT_STARTED;
}

/** A host the page reaches: its calls in flight and how many models it holds there. */
class Connection {
  readonly kind: LinkKind;
  readonly #link: Link;
  readonly #pending = new Map<number, Pending>();
  #next = 1;
  /** Models loaded or loading: the link closes when this comes back to 0. */
  users = 0;
  /** Why the host cannot serve (it failed to start, or failed since): every call then fails with it. */
  #broken: RuvllmError | null = null;
  readonly ready: Promise<void>;
  /** Whether the host answered (its script ran). */
  started = false;
  /** Told when a leader host moved to another tab. */
  readonly onMoved = new Set<() => void>();

  constructor(kind: LinkKind) {
    this.kind = kind;
    let started!: () => void;
    let failed!: (e: RuvllmError) => void;
    this.ready = new Promise((resolve, reject) => ((started = resolve), (failed = reject)));
    this.ready.catch(() => {});
    const link = kind === 'shared' ? sharedLink : dedicatedLink;
    this.#link = link({
      reply: (data: Reply) => {
        if (data.op === 'ready') {
          this.started = true;
          return started();
        }
        const call = this.#pending.get(data.id);
        if (!call) return;
        if (data.op === 'progress') return call.progress?.(data.progress as never);
        if (data.op === 'chunk') return call.chunk?.(data.chunk);
        this.#pending.delete(data.id);
        if (data.op === 'done') call.resolve(data);
        else call.reject(fromWire(data.error));
      },
      broken: (e) => {
        this.#broken = e;
        failed(e);
        this.#failAll(e);
        this.#link?.close();
      },
      moved: () => {
        this.#failAll(new RuvllmError('E_WORKER', 'the tab that ran the shared engine closed while this call streamed; the engine moved to another tab (the next call runs there)', { cause: MOVED }));
        for (const f of this.onMoved) f();
      },
    });
  }

  #failAll(e: RuvllmError): void {
    for (const call of this.#pending.values()) call.reject(e);
    this.#pending.clear();
  }

  /** Send request `make(id)` and wait for its answer; `signal` cancels it in the host. */
  async call(make: (id: number) => Request, signal: AbortSignal | undefined, transfer: Transferable[] = [], handlers: Omit<Pending, 'resolve' | 'reject'> = {}): Promise<Answer> {
    throwIfAborted(signal);
    await this.ready;
    if (this.#broken) throw this.#broken;
    const id = this.#next++;
    const onAbort = () => this.#link.send({ op: 'cancel', id });
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<Answer>((resolve, reject) => {
        this.#pending.set(id, { resolve, reject, ...handlers });
        this.#link.send(make(id), transfer);
      });
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  post(request: Request): void {
    if (!this.#broken) this.#link.send(request);
  }

  get broken(): RuvllmError | null {
    return this.#broken;
  }

  close(): void {
    this.#link.close();
  }
}

const connections = new Map<LinkKind, Connection>();

/** Whether the engine can run in a worker here: in browsers (Node has no `Worker` global). */
export function canUseWorker(): boolean {
  return typeof Worker === 'function' && typeof (globalThis as { document?: unknown }).document !== 'undefined';
}

/** Whether `shared: true` can share the engine between this page's tabs (else it runs in a worker of the page's own). */
export function canUseSharedWorker(): boolean {
  return canUseWorker() && canShare();
}

/** A model in an engine host. Its methods are `LLM`'s compute calls; `info` is the snapshot its last answer sent.
 * It is its MicroLoRAs' link to the host, where they live (microlora.ts). */
export class RemoteModel implements MicroLoraLink {
  readonly #connection: Connection;
  /** What loaded it, to load it again on a new leader. */
  readonly #source: { value: unknown; transfer: Transferable[] };
  readonly #options: Record<string, unknown>;
  #handle: number;
  /** Loading again on a new leader: calls wait for it. */
  #attached: Promise<void> = Promise.resolve();
  #info: ModelInfo;
  #disposed = false;
  /** The calls and generations in progress, ended with `E_DISPOSED` by `dispose`. */
  readonly #streams = new Set<(e: RuvllmError) => void>();
  /** A new leader: load the model there (calls wait for it, and fail with its error). */
  readonly #onMoved = () => {
    this.#attached = this.#attach();
    this.#attached.catch(() => {});
  };

  private constructor(connection: Connection, source: { value: unknown; transfer: Transferable[] }, options: Record<string, unknown>, handle: number, info: ModelInfo) {
    this.#connection = connection;
    this.#source = source;
    this.#options = options;
    this.#handle = handle;
    this.#info = info;
    connection.onMoved.add(this.#onMoved);
  }

  /** Load `source` in a host of `kind` (started if none runs); the model and its GGUF header. */
  static async load(kind: LinkKind, source: ModelSource, options: Record<string, unknown>, onProgress: ((p: never) => void) | undefined, signal: AbortSignal | undefined): Promise<{ model: RemoteModel; header: Uint8Array }> {
    const wire = await wireSource(source);
    throwIfAborted(signal);
    let connection = connections.get(kind);
    try {
      if (!connection || connection.broken) connections.set(kind, (connection = new Connection(kind)));
    } catch (e) {
      throw new RuvllmError('E_WORKER', (e as Error).message, { cause: NOT_STARTED });
    }
    connection.users++;
    try {
      // A leader's channel transfers nothing (links.ts): the page keeps the bytes, to load the model again on a new
      // leader; elsewhere they move.
      const { value, info } = await connection.call((id) => ({ op: 'load', id, source: wire.value, options }), signal, wire.transfer, { progress: onProgress });
      const { handle, header } = value as { handle: number; header: Uint8Array };
      return { model: new RemoteModel(connection, wire, options, handle, info!), header };
    } catch (e) {
      release(connection);
      if (signal?.aborted && !(e instanceof AbortError)) throw new AbortError(signal.reason);
      if (!connection.started && (e as RuvllmError).code === 'E_WORKER') throw new RuvllmError('E_WORKER', (e as Error).message, { cause: NOT_STARTED });
      throw e;
    }
  }

  async #attach(): Promise<void> {
    const { value, info } = await this.#connection.call((id) => ({ op: 'load', id, source: this.#source.value, options: this.#options }), undefined);
    this.#handle = (value as { handle: number }).handle;
    if (info) this.#info = info;
    if (this.#disposed) this.#connection.post({ op: 'dispose', handle: this.#handle });
  }

  get kind(): LinkKind {
    return this.#connection.kind;
  }

  get info(): ModelInfo {
    return this.#info;
  }

  usable(): void {
    if (this.#disposed) throw new RuvllmError('E_DISPOSED', 'the model was disposed');
    if (this.#connection.broken) throw this.#connection.broken;
  }

  /** `LLM`'s method `method` run in the host on this model. */
  async call<T>(method: ModelMethod, args: unknown[], signal?: AbortSignal, transfer: Transferable[] = []): Promise<T> {
    return this.#request((id) => ({ op: 'call', id, handle: this.#handle, method, args }), signal, transfer);
  }

  /** `method` of this model's MicroLoRA `lora` run in the host (`MicroLoraLink`). */
  async microLora<T>(lora: number | null, method: MicroLoraMethod, args: unknown[], signal?: AbortSignal): Promise<{ value: T; state: MicroLoraState }> {
    return this.#request((id) => ({ op: 'microLora', id, handle: this.#handle, lora, method, args }), signal);
  }

  /** A call on this model. One that was lost with a leader host before it streamed anything runs again on the new
   * one (after the model loaded there); one that streamed fails. */
  async #request<T>(make: (id: number) => Request, signal: AbortSignal | undefined, transfer: Transferable[] = [], chunk?: (c: GenerateChunk) => void): Promise<T> {
    this.usable();
    let end!: (e: RuvllmError) => void;
    const disposed = new Promise<never>((_, reject) => (end = reject));
    this.#streams.add(end);
    let streamed = false;
    const onChunk = chunk && ((c: GenerateChunk) => ((streamed = true), chunk(c)));
    try {
      for (;;) {
        await Promise.race([this.#attached, disposed]);
        try {
          const { value, info } = await Promise.race([this.#connection.call(make, signal, transfer, { chunk: onChunk }), disposed]);
          if (info) this.#info = info;
          return value as T;
        } catch (e) {
          if ((e as Error).cause !== MOVED || streamed) throw e;
        }
      }
    } catch (e) {
      throw e instanceof AbortError && signal?.aborted ? new AbortError(signal.reason) : e;
    } finally {
      this.#streams.delete(end);
    }
  }

  /** A generation in the host, streamed as its call's chunks; leaving the loop early cancels it there. */
  async *generate(prompt: string | Uint32Array, options: Record<string, unknown>, signal: AbortSignal | undefined): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    this.usable();
    throwIfAborted(signal);
    const chunks: GenerateChunk[] = [];
    let wake: (() => void) | null = null;
    // Cancelled when the caller's signal fires or the loop is left early.
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let outcome: { result: GenerateResult } | { error: unknown } | null = null;
    const done = this.#request<GenerateResult>((id) => ({ op: 'generate', id, handle: this.#handle, prompt, options }), stop.signal, [], (c) => {
      chunks.push(c);
      wake?.();
    }).then(
      (result) => (outcome = { result }),
      (error) => (outcome = { error }),
    );
    void done.then(() => wake?.());
    try {
      for (;;) {
        while (chunks.length === 0 && outcome === null) {
          await new Promise<void>((resolve) => (wake = resolve));
          wake = null;
        }
        if (chunks.length > 0) {
          yield chunks.shift()!;
          continue;
        }
        const o = outcome as unknown as { result: GenerateResult } | { error: unknown };
        if ('result' in o) return o.result;
        const e = o.error;
        throw e instanceof AbortError && signal?.aborted ? new AbortError(signal.reason) : e;
      }
    } finally {
      if (outcome === null) stop.abort(); // left early (break, throw): the host stops and keeps the model usable
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Free the model in the host (the link closes with the page's last model); calls in progress end with
   * `E_DISPOSED`. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const e = new RuvllmError('E_DISPOSED', 'the model was disposed');
    for (const end of this.#streams) end(e);
    this.#streams.clear();
    this.#connection.onMoved.delete(this.#onMoved);
    this.#connection.post({ op: 'dispose', handle: this.#handle });
    release(this.#connection);
  }
}

function release(connection: Connection): void {
  if (--connection.users > 0) return;
  connection.close();
  if (connections.get(connection.kind) === connection) connections.delete(connection.kind);
}

/** `source` as it crosses to the host, and what to transfer: a URL (a string or Request resolved against the
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
