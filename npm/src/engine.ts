// One loaded model's engine, below the `LLM` class: the model's bytes streamed into a started build's memory and the
// engine made from them, the engine's calls (one caller at a time; its errors as `RuvllmError`s, a trap retiring it),
// and the engine's JSON read into the API's shapes.
import type { Backend } from './backend.js';
import type { Engine, Glue, GpuStream, ModelBuffer, Wasm } from './builds.js';
import { AbortError, RuvllmError, throwIfAborted, type ErrorCode } from './errors.js';
import type { ModelStore } from './models/store.js';
import { getPlatform, openModelFiles, openModelSource, type StartedWasm } from './platform.js';
import { checkModelSize, type ModelSource, type OpenedSource } from './source.js';
import type { GenerateChunk, GenerateResult, KvCacheOptions, LoadOptions, ModelInfo, PrefixCacheInfo } from './types.js';

/** The engine throws JS Errors with a `code`; a Rust panic surfaces as a wasm trap (RuntimeError), after which the
 * object that trapped is unusable (`remedy` says what to do). */
export function engineError(e: unknown, glue: Glue, remedy = 'load the model again'): RuvllmError {
  if (e instanceof RuvllmError) return e;
  const code = (e as { code?: unknown } | null)?.code;
  if (e instanceof Error && typeof code === 'string') return new RuvllmError(code as ErrorCode, e.message);
  const panic = glue.lastPanic();
  const what = panic ? `the engine panicked: ${panic}` : `the engine failed: ${e instanceof Error ? e.message : String(e)}`;
  return new RuvllmError('E_ENGINE_CRASHED', `${what} (${remedy})`, { cause: e });
}

// ---------------------------------------------------------------------------------------------------------------
// Loading: the model's bytes into wasm memory, the engine made from them
// ---------------------------------------------------------------------------------------------------------------

/** What making the engine takes of `LoadOptions`, checked. */
export interface EngineOptions extends Pick<LoadOptions, 'onProgress' | 'signal' | 'gpuMaxBindingBytes' | 'chatTemplate'> {
  backend: Backend;
  contextSize: number;
  gpuAllowSoftware: boolean;
  kvCache: KvCacheOptions | undefined;
  /** Where URLs' files are kept (`cache`), and each file's SHA-256 (`sha256`, one per shard). */
  store: ModelStore | null;
  sha256: readonly string[] | undefined;
  /** Given the first file's GGUF header as it streams past (read once: no second request), for an engine worker's
   * page to make its text side of (worker/host.ts). */
  onHeader?: (header: Uint8Array) => void;
}

/** Errors that say the bytes are no model the engine runs: a model store forgets a file it refused so. */
const REFUSED: ReadonlySet<ErrorCode> = new Set(['E_GGUF', 'E_UNSUPPORTED_ARCH', 'E_UNSUPPORTED_TENSOR_TYPE', 'E_MODEL', 'E_TOKENIZER']);

/** Stream `source`'s files (one, or a split model's shards) into the memory of `build`'s wasm as they arrive from the
 * network or a model store (checking the size as they come) and make the engine of the model they hold: the WebGPU
 * engine in the `wasm-gpu` build, else the CPU engine. Under `backend: 'webgpu'` one file of known size goes to the
 * GPU instead as it arrives (`GpuStream`): wasm memory keeps its header and small vectors only, so a file larger than
 * that memory (past 4 GiB too) loads (the engine then never runs on the CPU, which 'webgpu' does not anyway). */
export async function loadEngine(build: StartedWasm, source: ModelSource, options: EngineOptions): Promise<Engine> {
  const { host, wasm } = build;
  const { onProgress, signal, backend, contextSize, gpuMaxBindingBytes, gpuAllowSoftware, kvCache, chatTemplate } = options;
  const { Engine, ModelBuffer, Sha256 } = wasm.glue;
  const engineCall = <T>(fn: () => T): T => {
    try {
      return fn();
    } catch (e) {
      throw engineError(e, wasm.glue);
    }
  };
  let buffer: ModelBuffer | undefined;
  let stream: GpuStream | undefined;
  const header = options.onHeader && headerCollector(options.onHeader, (prefix) => engineCall(() => wasm.glue.TextEngine.headerBytes(prefix)));
  const opened: OpenedSource[] = [];
  try {
    const files = await openModelFiles(host, source, { store: options.store, sha256: options.sha256, signal, hasher: () => new Sha256() });
    const toGpu = wasm.build === 'wasm-gpu' && backend === 'webgpu' && files.open.length === 1 && wasm.glue.GpuStream !== undefined;
    // Streamed to the GPU, the file never sits in wasm memory: no limit here (the GPU's memory has its own).
    const checkSize = toGpu ? () => {} : checkModelSize;
    if (files.total !== undefined) checkSize(files.total);
    let total = files.total;
    let loaded = 0;
    let fromCache = 0;
    for (const [i, open] of files.open.entries()) {
      throwIfAborted(signal);
      const file = await open();
      opened.push(file);
      try {
        if (files.open.length === 1) total = file.total;
        if (file.total !== undefined) checkSize(loaded + file.total);
        if (toGpu && file.total !== undefined) {
          const streamOptions = JSON.stringify({ maxBindingBytes: gpuMaxBindingBytes });
          stream = await withWindowGlobal(() => wasm.glue.GpuStream!.open(file.total!, streamOptions)).catch((e) => {
            throw engineError(e, wasm.glue);
          });
        } else if (i === 0) buffer = engineCall(() => new ModelBuffer(file.total ?? 0));
        else engineCall(() => buffer!.nextShard(file.total ?? 0));
        const fromStore = file.fromStore ?? 0;
        let read = 0;
        for await (const chunk of file.chunks) {
          throwIfAborted(signal);
          fromCache += Math.max(0, Math.min(chunk.length, fromStore - read));
          read += chunk.length;
          loaded += chunk.length;
          checkSize(loaded);
          if (i === 0) header?.(chunk);
          if (stream) await stream.push(chunk).catch((e) => {
            throw engineError(e, wasm.glue);
          });
          else engineCall(() => buffer!.push(chunk));
          onProgress?.({ loaded, total, fromCache, file: i + 1, files: files.open.length });
        }
        throwIfAborted(signal);
        if (file.total !== undefined && read !== file.total) {
          throw new RuvllmError('E_IO', `the source ended after ${read} of ${file.total} bytes`);
        }
      } finally {
        await file.close?.();
      }
    }
    const bytes = buffer!;
    const streamed = stream;
    buffer = stream = undefined; // the engine consumes it, even when it fails
    try {
      if (streamed) {
        const gpuOptions = JSON.stringify({ backend, kvCache, chatTemplate });
        return await withWindowGlobal(() => wasm.glue.GpuEngine!.fromStream(streamed, contextSize, gpuOptions)).catch((e) => {
          throw engineError(e, wasm.glue);
        });
      }
      if (wasm.build === 'wasm-gpu') {
        const gpuOptions = JSON.stringify({ backend, maxBindingBytes: gpuMaxBindingBytes, allowSoftware: gpuAllowSoftware, kvCache, chatTemplate });
        return await withWindowGlobal(() => wasm.glue.GpuEngine!.load(bytes, contextSize, gpuOptions)).catch((e) => {
          throw engineError(e, wasm.glue);
        });
      }
      return engineCall(() => Engine.fromBuffer(bytes, contextSize, JSON.stringify({ kvCache, chatTemplate })));
    } catch (e) {
      if (REFUSED.has((e as RuvllmError).code)) await Promise.all(opened.map((f) => f.refused?.().catch(() => {})));
      throw e;
    }
  } catch (e) {
    buffer?.free();
    stream?.free();
    throw e;
  }
}

/** A sink for a file's chunks, from its start, that gives `onHeader` the GGUF header once the chunks hold it whole
 * (`headerBytes`: how much the header takes, a lower bound while a prefix ends inside it), and then ignores them. */
function headerCollector(onHeader: (header: Uint8Array) => void, headerBytes: (prefix: Uint8Array) => number): (chunk: Uint8Array) => void {
  let chunks: Uint8Array[] | null = [];
  let size = 0;
  let want = 1 << 10;
  return (chunk) => {
    if (!chunks) return;
    chunks.push(chunk.slice()); // the reader may fill the chunk's buffer again
    size += chunk.length;
    if (size < want) return;
    const prefix = new Uint8Array(size);
    chunks.reduce((at, c) => (prefix.set(c, at), at + c.length), 0);
    chunks = [prefix];
    const need = headerBytes(prefix);
    if (need > size) {
      want = Math.max(need, 2 * want); // at least doubled: the prefix is copied O(log) times
      return;
    }
    chunks = null;
    onHeader(prefix.slice(0, need));
  };
}

/**
 * wgpu finds `navigator.gpu` through `globalThis.Window`, which only browsers define. Node with a WebGPU
 * implementation (the npm `webgpu` package) gets a placeholder while the engine opens its device.
 */
async function withWindowGlobal<T>(fn: () => Promise<T>): Promise<T> {
  const g = globalThis as { Window?: unknown };
  if (g.Window !== undefined) return fn();
  g.Window = class Window {};
  try {
    return await fn();
  } finally {
    delete g.Window;
  }
}

/** The whole of `source` in one array (a LoRA adapter file, which the engine copies in), refused past the model size
 * limit as it comes. */
export async function readSource(source: ModelSource, signal: AbortSignal | undefined): Promise<Uint8Array> {
  const opened = await openModelSource(getPlatform(), source, signal);
  if (opened.total !== undefined) checkModelSize(opened.total);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of opened.chunks) {
    throwIfAborted(signal);
    chunks.push(chunk.slice()); // the reader may fill the chunk's buffer again
    size += chunk.length;
    checkModelSize(size);
  }
  const bytes = new Uint8Array(size);
  chunks.reduce((at, c) => (bytes.set(c, at), at + c.length), 0);
  return bytes;
}

// ---------------------------------------------------------------------------------------------------------------
// Calls: one caller at a time, errors mapped, a trap retires the engine
// ---------------------------------------------------------------------------------------------------------------

/**
 * A loaded engine and its build. Callers take turns (`lock`, FIFO; a waiting caller's `signal` also cancels its
 * wait); `call` and `callAsync` run the engine and turn its errors into `RuvllmError`s, a trap (a Rust panic)
 * retiring it for good (`E_ENGINE_CRASHED` from then on). `dispose` frees it, once the caller holding it is done.
 * A model's `Engine` by default; a `Tokenizer`'s `TextEngine` too.
 */
export class EngineHandle<E extends { free(): void } = Engine> {
  #engine: E | null;
  readonly wasm: Wasm;
  #tail: Promise<void> = Promise.resolve();
  #busy = false;
  #disposed = false;
  #crashed: RuvllmError | null = null;

  constructor(engine: E, wasm: Wasm) {
    this.#engine = engine;
    this.wasm = wasm;
  }

  /** The engine unless it was freed or retired, unchecked: for the clean-up of a call in progress. */
  get engine(): E | null {
    return this.#engine;
  }

  /** Whether a trap retired the engine. */
  get crashed(): boolean {
    return this.#crashed !== null;
  }

  /** Wait for our turn; the returned function ends it. */
  async lock(signal: AbortSignal | undefined): Promise<() => void> {
    throwIfAborted(signal);
    const turn = this.#tail;
    let release!: () => void;
    const done = new Promise<void>((resolve) => (release = resolve));
    this.#tail = turn.then(() => done);
    try {
      await abortable(turn, signal);
      this.usable();
    } catch (e) {
      turn.then(release); // give up our place once it comes
      throw e;
    }
    this.#busy = true;
    return () => {
      this.#busy = false;
      if (this.#disposed) this.#free();
      release();
    };
  }

  /** `fn` in our turn. */
  async exclusive<T>(signal: AbortSignal | undefined, fn: () => T | Promise<T>): Promise<T> {
    const release = await this.lock(signal);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** The engine, or the error that retired it, or `E_DISPOSED`. */
  usable(): E {
    if (this.#crashed) throw this.#crashed;
    if (this.#disposed || !this.#engine) throw new RuvllmError('E_DISPOSED', 'the model was disposed');
    return this.#engine;
  }

  /** Call the engine; its errors become RuvllmErrors, and a trap (a Rust panic) retires this model. */
  call<T>(fn: (engine: E) => T): T {
    const engine = this.usable();
    try {
      return fn(engine);
    } catch (e) {
      throw this.#failed(e);
    }
  }

  /** `call` for the forward passes, which the threaded build runs on its pool and returns as Promises. */
  async callAsync<T>(fn: (engine: E) => T | Promise<T>): Promise<T> {
    const engine = this.usable();
    try {
      return await this.wasm.settle(fn(engine));
    } catch (e) {
      throw this.#failed(e);
    }
  }

  /** Call the build's glue (not the engine: a trap there does not retire the model); its errors as the engine's. */
  glueCall<T>(fn: (glue: Glue) => T): T {
    try {
      return fn(this.wasm.glue);
    } catch (e) {
      throw engineError(e, this.wasm.glue);
    }
  }

  /** Free the engine: now, or when the caller holding it is done. Idempotent. */
  dispose(): void {
    this.#disposed = true;
    if (!this.#busy) this.#free();
  }

  #failed(e: unknown): RuvllmError {
    const err = engineError(e, this.wasm.glue);
    if (err.code === 'E_ENGINE_CRASHED') {
      this.#crashed = err;
      this.#engine = null; // its wasm state is unknown after a trap: never touch it again
    }
    return err;
  }

  #free(): void {
    this.#engine?.free();
    this.#engine = null;
  }
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new AbortError(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** What `Engine.nextStep` returns: progress of the prompt's prefill, or a generated token. */
export type EngineStep = { prefilled: number; total: number } | GenerateChunk;

/** Let the event loop run (rendering, input, timers) between steps, without timer clamping. */
export const nextTick: () => Promise<void> =
  typeof setImmediate === 'function'
    ? () => new Promise((resolve) => setImmediate(resolve))
    : () =>
        new Promise((resolve) => {
          const channel = new MessageChannel();
          channel.port1.onmessage = () => {
            channel.port1.close();
            resolve();
          };
          channel.port2.postMessage(null);
        });

// ---------------------------------------------------------------------------------------------------------------
// The engine's JSON, read
// ---------------------------------------------------------------------------------------------------------------

/** `Engine.info()`: what the engine knows of the model (the `LLM` adds what it knows). */
export function parseInfo(
  json: string,
): Omit<ModelInfo, 'modelId' | 'build' | 'requestedBackend' | 'threadFallback' | 'engine' | 'workerFallback' | 'pages' | 'prefixCache'> & {
  prefixCache: Omit<PrefixCacheInfo, 'store' | 'storedBytes' | 'storeError' | 'lastLoad'> | null;
} {
  const i = JSON.parse(json);
  return {
    name: i.name ?? null,
    architecture: i.architecture,
    layers: i.n_layers,
    embeddingSize: i.d_model,
    heads: i.n_heads,
    kvHeads: i.n_kv_heads,
    vocabSize: i.vocab_size,
    trainedContextLength: i.context_length,
    contextSize: i.n_ctx,
    parameters: i.parameters,
    quantization: i.quantization ?? null,
    fileBytes: i.file_bytes,
    weightsInMemory: i.weights_in_memory,
    kvCacheBytes: i.kv_cache_bytes,
    kvCache: { cold: i.kv_cache.cold, hotTokens: i.kv_cache.hot_tokens ?? null },
    wasmMemoryBytes: i.wasm_memory_bytes,
    simd128: i.simd128,
    relaxedSimd: i.relaxed_simd ?? false,
    hasChatTemplate: i.has_chat_template,
    threads: i.threads,
    backend: i.backend,
    gpuAdapter: i.adapter?.name ?? null,
    fallback: i.fallback ?? null,
    prefixCache: i.prefix_cache
      ? {
          budgetBytes: i.prefix_cache.budget_bytes,
          bytes: i.prefix_cache.bytes,
          restoredTokens: i.prefix_cache.restored_tokens,
          insertedTokens: i.prefix_cache.inserted_tokens,
          evictedPages: i.prefix_cache.evicted_pages,
          loadedTokens: i.prefix_cache.loaded_tokens,
        }
      : null,
  };
}

/** A generation's result as the engine gives it: the package adds the request's id (llm.ts). */
export type EngineResult = Omit<GenerateResult, 'requestId'>;

/** `Engine.finish(false)`: the result of a generation sampled with `seed`. */
export function parseResult(json: string | undefined, seed: number): EngineResult {
  if (json === undefined) throw new RuvllmError('E_ENGINE_CRASHED', 'the engine lost the generation in progress');
  const o = JSON.parse(json);
  return {
    ids: o.ids,
    text: o.text,
    finishReason: o.finish_reason,
    seed,
    usage: {
      promptTokens: o.prompt_tokens,
      cachedTokens: o.cached_tokens,
      completionTokens: o.generated_tokens,
      forcedTokens: o.forced_tokens,
      totalTokens: o.prompt_tokens + o.generated_tokens,
    },
    timings: {
      prefillMs: o.prefill_ms,
      decodeMs: o.decode_ms,
      restoreMs: o.restore_ms,
      grammarCompileMs: o.grammar_compile_ms,
      grammarMs: o.grammar_ms,
      prefillTokensPerSecond: o.prefill_tok_s,
      decodeTokensPerSecond: o.decode_tok_s,
    },
  };
}
