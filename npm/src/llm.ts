import { checkBackend, chooseBackend, type Backend, type BackendFallback } from './backend.js';
import { chooseBuild, startBuild, type BuildName, type Engine, type Glue, type Host, type ModelBuffer, type ThreadFallback, type Wasm } from './builds.js';
import { createChat, type Chat, type ChatMessage, type ChatPrompt, type ChatTemplateOptions, type ToolCallDelta, type ToolCallReader, type ToolFormat } from './chat.js';
import { createEmbeddings, type Embeddings } from './embeddings.js';
import { AbortError, RuvllmError, invalid, throwIfAborted, type ErrorCode } from './errors.js';
import { engineOptions, tokenIds, writeJson, type GenerateOptions } from './options.js';
import { MicroLora, type Feedback, type FeedbackResult, type MicroLoraHost, type MicroLoraOptions } from './microlora.js';
import { checkModelSize, openSource, type LoadProgress, type ModelSource, type OpenedSource } from './source.js';
import { IndexedDbStore } from './store/indexeddb.js';
import { Persistence, type StoreError, type StoreLoad } from './store/persistence.js';
import type { Store } from './store/store.js';

/** What differs between Node and browsers: how the wasm builds are started, and extra sources. */
export interface Platform extends Host {
  /** Opens the sources only this platform understands (Node: file paths), else returns undefined. */
  open(source: ModelSource, signal?: AbortSignal): Promise<OpenedSource> | undefined;
  /** A store in the directory `dir` (Node), or undefined where there are no files (browsers). */
  fileStore(dir: string): Store | undefined;
}

let platform: Platform | undefined;

export function setPlatform(p: Platform): void {
  platform = p;
}

/**
 * The platform and the started wasm build for a load: the WebGPU build when `backend` chooses the GPU
 * (backend.ts), else a CPU build for `threads` (builds.ts); with the reasons the CPU runs where the GPU was
 * asked for, and one thread where more were wanted (a threaded build that cannot start falls back to one thread).
 */
async function initWasm(
  backend: Backend,
  allowSoftware: boolean,
  threads: number | undefined,
): Promise<{ host: Platform; wasm: Wasm; fallback: BackendFallback | null; threadFallback: ThreadFallback | null }> {
  const host = started();
  const choice = await chooseBackend(backend, allowSoftware);
  let fallback = choice.build === 'cpu' ? choice.fallback : null;
  if (choice.build === 'gpu') {
    try {
      return { host, wasm: await startBuild(host, 'wasm-gpu', 1), fallback, threadFallback: null };
    } catch (e) {
      if (backend === 'webgpu') throw e;
      fallback = { code: (e as RuvllmError).code, message: (e as Error).message };
    }
  }
  const { build, threads: n, fallback: threadFallback } = chooseBuild(host, threads);
  if (build === 'wasm-mt') {
    try {
      return { host, wasm: await startBuild(host, build, n), fallback, threadFallback };
    } catch (e) {
      const code = (e as RuvllmError).code;
      if (code !== 'E_THREADS' && code !== 'E_FETCH') throw e;
      const why = { code: 'E_THREADS' as const, message: `one thread runs: ${(e as Error).message}` };
      return { host, wasm: await startBuild(host, 'wasm', 1), fallback, threadFallback: why };
    }
  }
  return { host, wasm: await startBuild(host, build, n), fallback, threadFallback };
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

export interface LoadOptions {
  /** Called after each chunk of the file is read. */
  onProgress?: (progress: LoadProgress) => void;
  /** Context window in tokens (default: the model's, at most 4096). */
  contextSize?: number;
  /**
   * Threads for the forward passes (default: the cores, at most 8). More than one uses the threaded
   * build, which needs Node or a cross-origin isolated page (COOP/COEP headers); elsewhere, and with 1,
   * the single-thread build runs. The first threaded load fixes the count for the process or page.
   */
  threads?: number;
  signal?: AbortSignal;
  /**
   * Where the model runs: `cpu` (the wasm CPU engine), `webgpu` (WebGPU only: failures are `E_GPU_*` errors),
   * or `auto` (default: WebGPU when an adapter is usable, else the CPU; a GPU fault, even mid-generation,
   * moves the work to the CPU, and `info().fallback` says why).
   */
  backend?: Backend;
  /** Cap each GPU storage binding at this many bytes (below the device's limit), e.g. to test the too-small-limits path. */
  gpuMaxBindingBytes?: number;
  /** Let `auto` use a software adapter (SwiftShader, lavapipe), which it skips by default as slower than the CPU engine. */
  gpuAllowSoftware?: boolean;
  /**
   * The prefix cache: keys and values of token prefixes that later prompts start from instead of evaluating them
   * again (the next turn of a chat, another chat with the same system prompt, a regenerated answer). On by default
   * with a budget of 64 MiB of wasm memory (pages are allocated as it fills); `budgetBytes: 0` turns it off. The CPU
   * engine uses it (the WebGPU backend keeps its KV on the GPU).
   *
   * `store` keeps it across reloads and restarts: `'indexeddb'` (browsers), a directory path (Node), or an object
   * implementing `Store`. Pages are written after each generation and read back when a prompt can use them;
   * the store holds at most `storeBudgetBytes` (default 256 MiB), oldest first. A store that fails or stays full is
   * given up (the cache goes on in memory; `info().prefixCache.storeError` says why).
   */
  prefixCache?: { budgetBytes?: number; store?: 'indexeddb' | string | Store; storeBudgetBytes?: number };
  /**
   * The KV cache's format. By default every position's keys and values are f16. `cold: 'q8_0'` (or `'q4_0'`) makes a
   * two-tier cache: the most recent `hotTokens` positions (default 128, a multiple of 32; at most 31 more) stay f16,
   * older ones are stored in 32-position blocks of q8_0 (q4_0), so the cache takes less memory (the KV memory figures
   * are in the README), and the prefix cache's pages and stored records shrink alike. The CPU engine runs it: with
   * `backend: 'webgpu'` it is an `E_GPU_UNSUPPORTED` error, and `auto` runs on the CPU (`info().fallback` says why).
   * A model whose head size is not a multiple of 32 refuses it (`E_KV_CACHE`).
   */
  kvCache?: KvCacheOptions;
  /** A Jinja chat template to use instead of the one in the model file (llama.cpp's `--chat-template-file`): for a
   * file without one, or one that renders no tools. One that does not compile is `E_CHAT_TEMPLATE`. */
  chatTemplate?: string;
}

/** How keys and values are stored: f16, or q8_0 / q4_0 blocks (a two-tier cache's cold tier). */
export type KvCacheType = 'f16' | 'q8_0' | 'q4_0';

/** `LoadOptions.kvCache`. */
export interface KvCacheOptions {
  /** The type of positions older than the hot window; `'f16'` keeps one f16 tier (the default). */
  cold: KvCacheType;
  /** Positions kept in f16 (a multiple of 32, default 128). */
  hotTokens?: number;
}

/** The prefix cache's state (`info().prefixCache`). */
export interface PrefixCacheInfo {
  budgetBytes: number;
  /** Bytes of keys and values it holds. */
  bytes: number;
  /** Prompt tokens taken from it instead of evaluated, over every request. */
  restoredTokens: number;
  insertedTokens: number;
  evictedPages: number;
  /** Prompt tokens read back from the store. */
  loadedTokens: number;
  /** Whether a store keeps the cache, the bytes it holds (null until first used), and why it was given up. */
  store: boolean;
  storedBytes: number | null;
  storeError: StoreError | null;
  /** The last read from the store before a prompt (null before any): records and their bytes, the prompt tokens
   * they brought, milliseconds reading the store and milliseconds the engine took to check and take them. */
  lastLoad: StoreLoad | null;
}

export interface ModelInfo {
  name: string | null;
  architecture: string;
  /** The model's identity in hex: SHA-256 of its GGUF header and samples of its weights, what stored prefix-cache
   * pages and a router's or memory's vectors are bound to (null on the WebGPU engine, which does not embed). */
  modelId: string | null;
  layers: number;
  embeddingSize: number;
  heads: number;
  kvHeads: number;
  vocabSize: number;
  /** The context length the model was trained with. */
  trainedContextLength: number;
  /** This instance's context window in tokens. */
  contextSize: number;
  fileBytes: number;
  kvCacheBytes: number;
  /** The KV cache's format (`LoadOptions.kvCache`): `hotTokens` is null for a one-tier f16 cache. */
  kvCache: { cold: KvCacheType; hotTokens: number | null };
  /** The wasm instance's memory now (shared by every model loaded in it). */
  wasmMemoryBytes: number;
  simd128: boolean;
  hasChatTemplate: boolean;
  /** The wasm build running this model: `wasm` (single thread) or `wasm-mt` (threads on Web Workers). */
  build: BuildName;
  /** Where forward passes run now: 'webgpu', or 'cpu' (also after a fallback). */
  backend: 'webgpu' | 'cpu';
  /** The backend the load asked for. */
  requestedBackend: Backend;
  /** The WebGPU adapter in use (or that was in use before a fallback), as the browser describes it. */
  gpuAdapter: string | null;
  /** Why the CPU runs although the GPU was asked for (no adapter, limits, a shader or memory error, a lost device). */
  fallback: BackendFallback | null;
  /** Threads its forward passes use. */
  threads: number;
  /** Why one thread runs where more were asked for (by default: the cores): the page is not cross-origin
   * isolated, or the threaded build's workers could not start (the message says why). */
  threadFallback: ThreadFallback | null;
  /** The prefix cache (`null` while a forward pass on a worker holds it). */
  prefixCache: PrefixCacheInfo | null;
}

/** One generated token and the text it releases (empty while a UTF-8 sequence or a possible stop string is pending). */
export interface GenerateChunk {
  id: number;
  text: string;
}

export interface Usage {
  promptTokens: number;
  /** Prompt tokens whose keys and values were reused, not evaluated: the prefix shared with this model's previous
   * call or found in its prefix cache. */
  cachedTokens: number;
  completionTokens: number;
  /** Generated tokens a grammar forced (`grammar`): appended without sampling. */
  forcedTokens: number;
  totalTokens: number;
}

export interface GenerateResult {
  ids: number[];
  text: string;
  finishReason: 'stop' | 'length';
  usage: Usage;
  timings: {
    prefillMs: number;
    decodeMs: number;
    /** Before the prefill: moving keys and values between the conversation's cache and the prefix cache. */
    restoreMs: number;
    /** Compiling the request's grammar (\`grammar\`), its first step included; 0 without one. */
    grammarCompileMs: number;
    /** In the grammar while generating: its token masks, and taking the tokens chosen and forced. */
    grammarMs: number;
    prefillTokensPerSecond: number;
    decodeTokensPerSecond: number;
  };
}

/** Per prompt position, the top-k next tokens as [id, probability], most likely first. */
export type ScorePositions = Array<Array<[number, number]>>;

/** How a text's hidden states become one embedding (llama.cpp's `--pooling`). */
export type Pooling = 'mean' | 'cls' | 'last';

export interface EmbedOptions {
  pooling?: Pooling;
  /** Scale each embedding to unit length (default true). */
  normalize?: boolean;
  signal?: AbortSignal;
}

/** What `Engine.nextStep` returns: progress of the prompt's prefill, or a generated token. */
type EngineStep = { prefilled: number; total: number } | GenerateChunk;

/** Let the event loop run (rendering, input, timers) between steps, without timer clamping. */
const nextTick: () => Promise<void> =
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

/**
 * A loaded model and its conversation state (one KV cache). Generations run one at a time: a call
 * made while another runs waits for it (FIFO), and its `signal` also cancels the wait.
 */
export class LLM {
  #engine: Engine | null;
  readonly #wasm: Wasm;
  readonly #requested: Backend;
  /** Why the CPU build runs although the GPU was asked for (the GPU build reports its own fallbacks). */
  readonly #fallback: BackendFallback | null;
  readonly #threadFallback: ThreadFallback | null;
  /** The prefix cache's store, if `load` was given one. */
  #persistence: Persistence | null = null;
  #tail: Promise<void> = Promise.resolve();
  #busy = false;
  #disposed = false;
  #crashed: RuvllmError | null = null;
  /** The MicroLoRA `feedback` trains: the last `microLora()` opened. */
  #microLora: MicroLora | null = null;
  /** OpenAI-shaped chat completions: `llm.chat.completions.create({ messages, stream })`. */
  readonly chat: Chat;
  /** OpenAI-shaped embeddings: `llm.embeddings.create({ input })`. */
  readonly embeddings: Embeddings;

  private constructor(engine: Engine, wasm: Wasm, requested: Backend, fallback: BackendFallback | null, threadFallback: ThreadFallback | null) {
    this.#engine = engine;
    this.#wasm = wasm;
    this.#requested = requested;
    this.#fallback = fallback;
    this.#threadFallback = threadFallback;
    this.chat = createChat(this);
    this.embeddings = createEmbeddings(this);
  }

  /** Read a GGUF model (streaming it into wasm memory) and prepare a session. */
  static async load(source: ModelSource, options: LoadOptions = {}): Promise<LLM> {
    const { onProgress, contextSize = 0, threads, signal, gpuMaxBindingBytes, gpuAllowSoftware = false, prefixCache, chatTemplate } = options;
    if (chatTemplate !== undefined && typeof chatTemplate !== 'string') throw invalid('chatTemplate must be a string (a Jinja template)');
    if (!Number.isSafeInteger(contextSize) || contextSize < 0) throw invalid(`contextSize must be an integer >= 0, got ${contextSize}`);
    const kvCache = checkKvCache(options.kvCache);
    const budgetBytes = prefixCache?.budgetBytes;
    if (budgetBytes !== undefined && (!Number.isSafeInteger(budgetBytes) || budgetBytes < 0)) {
      throw invalid(`prefixCache.budgetBytes must be an integer >= 0, got ${budgetBytes}`);
    }
    const storeBudget = prefixCache?.storeBudgetBytes ?? 256 << 20;
    if (!Number.isSafeInteger(storeBudget) || storeBudget < 0) {
      throw invalid(`prefixCache.storeBudgetBytes must be an integer >= 0, got ${storeBudget}`);
    }
    const store = prefixCache?.store === undefined ? null : openStore(prefixCache.store, 'prefixCache.store', 'ruvllm-prefix-cache', 'relaxed');
    const backend = checkBackend(options.backend ?? 'auto');
    if (gpuMaxBindingBytes !== undefined && (!Number.isSafeInteger(gpuMaxBindingBytes) || gpuMaxBindingBytes < 4)) {
      throw invalid(`gpuMaxBindingBytes must be an integer >= 4, got ${gpuMaxBindingBytes}`);
    }
    throwIfAborted(signal);
    const { host, wasm, fallback, threadFallback } = await initWasm(backend, Boolean(gpuAllowSoftware), threads);
    const { Engine, ModelBuffer } = wasm.glue;
    const engineCall = <T>(fn: () => T): T => {
      try {
        return fn();
      } catch (e) {
        throw engineError(e, wasm.glue);
      }
    };
    let buffer: ModelBuffer | undefined;
    try {
      const opened = await (host.open(source, signal) ?? openSource(source, signal));
      if (opened.total !== undefined) checkModelSize(opened.total);
      buffer = engineCall(() => new ModelBuffer(opened.total ?? 0));
      let loaded = 0;
      for await (const chunk of opened.chunks) {
        throwIfAborted(signal);
        loaded += chunk.length;
        checkModelSize(loaded);
        engineCall(() => buffer!.push(chunk));
        onProgress?.({ loaded, total: opened.total });
      }
      throwIfAborted(signal);
      if (opened.total !== undefined && loaded !== opened.total) {
        throw new RuvllmError('E_IO', `the source ended after ${loaded} of ${opened.total} bytes`);
      }
      const bytes = buffer;
      buffer = undefined; // the engine consumes it, even when it fails
      if (wasm.build === 'wasm-gpu') {
        const gpuOptions = JSON.stringify({ backend, maxBindingBytes: gpuMaxBindingBytes, allowSoftware: Boolean(gpuAllowSoftware), kvCache, chatTemplate });
        const engine = await withWindowGlobal(() => wasm.glue.GpuEngine!.load(bytes, contextSize, gpuOptions)).catch((e) => {
          throw engineError(e, wasm.glue);
        });
        return LLM.#ready(engine, wasm, backend, fallback, threadFallback, budgetBytes, store, storeBudget);
      }
      const engine = engineCall(() => Engine.fromBuffer(bytes, contextSize, JSON.stringify({ kvCache, chatTemplate })));
      return LLM.#ready(engine, wasm, backend, fallback, threadFallback, budgetBytes, store, storeBudget);
    } catch (e) {
      buffer?.free();
      if (signal?.aborted && !(e instanceof AbortError)) throw new AbortError(signal.reason);
      throw e;
    }
  }

  static #ready(
    engine: Engine,
    wasm: Wasm,
    backend: Backend,
    fallback: BackendFallback | null,
    threadFallback: ThreadFallback | null,
    budgetBytes: number | undefined,
    store: Store | null,
    storeBudget: number,
  ): LLM {
    try {
      if (budgetBytes !== undefined) engine.setPrefixCacheBudget(budgetBytes);
      const llm = new LLM(engine, wasm, backend, fallback, threadFallback);
      if (store) llm.#persistence = new Persistence((fn) => llm.#call(fn), store, storeBudget);
      return llm;
    } catch (e) {
      engine.free();
      throw engineError(e, wasm.glue);
    }
  }

  info(): ModelInfo {
    const info = parseInfo(this.#call((e) => e.info()));
    const store = this.#persistence?.status();
    return {
      ...info,
      modelId: this.#call((e) => e.modelId?.() ?? null),
      build: this.#wasm.build,
      requestedBackend: this.#requested,
      fallback: info.fallback ?? this.#fallback,
      threadFallback: this.#threadFallback,
      prefixCache: info.prefixCache && {
        ...info.prefixCache,
        store: store !== undefined,
        storedBytes: store?.storedBytes ?? null,
        storeError: store?.error ?? null,
        lastLoad: store?.lastLoad ?? null,
      },
    };
  }

  /** Token ids of `text`. `special`: parse special-token text like `<|im_end|>`. `prompt`: tokenize
   * exactly as `generate` does with a string (special tokens parsed, BOS added if the model asks). */
  tokenize(text: string, options: { special?: boolean; prompt?: boolean } = {}): number[] {
    if (typeof text !== 'string') throw invalid('text must be a string');
    const ids = this.#call((e) => (options.prompt ? e.tokenizePrompt(text) : e.tokenize(text, Boolean(options.special))));
    return Array.from(ids);
  }

  detokenize(ids: readonly number[] | Uint32Array): string {
    const checked = tokenIds(ids, 'ids');
    return this.#call((e) => e.detokenize(checked));
  }

  /** Render messages with the model's own chat template (GGUF `tokenizer.chat_template`). The text is the
   * template's: tokenizing it with special tokens parsed (`generate(text)`) also parses control-token text the
   * messages hold. `tokenizeChat` (what the chat API runs) keeps the messages' text as text. */
  applyChatTemplate(messages: ChatMessage[], options: ChatTemplateOptions = {}): string {
    const json = chatRequestJson(messages, options);
    return this.#call((e) => e.applyChatTemplate(json));
  }

  /** The prompt ids of `messages` in the model's chat template, as the chat API generates from them. Control
   * tokens written in a message (`<|im_end|>`) are tokenized as text, so a message cannot end its turn or open
   * another; the template's own markup keeps its special tokens. `parseSpecialTokens: true` parses them in the
   * messages too (llama.cpp's behaviour): only for input you trust. */
  tokenizeChat(messages: ChatMessage[], options: ChatTemplateOptions & { parseSpecialTokens?: boolean } = {}): number[] {
    return this.chatPrompt(messages, options).ids;
  }

  /** What the chat API generates from: the prompt ids (as `tokenizeChat`), and where `tools` are offered (and
   * `toolChoice` is not `'none'`), the Lark grammar that holds the answer to the model's tool-call format and that
   * format's name (`'hermes'`, `'llama3'`, `'mistral'`, or `'generic'` for templates without tools, whose answer is
   * `{"tool_calls": [...]}` or `{"response": "..."}`). */
  chatPrompt(messages: ChatMessage[], options: ChatTemplateOptions & { parseSpecialTokens?: boolean } = {}): ChatPrompt {
    const json = chatRequestJson(messages, options);
    const parseSpecial = options.parseSpecialTokens ?? false;
    if (typeof parseSpecial !== 'boolean') throw invalid('parseSpecialTokens must be a boolean');
    const out = JSON.parse(this.#call((e) => e.chatPrompt(json, parseSpecial))) as { ids: number[]; grammar: string | null; tool_format: ToolFormat | null };
    return { ids: out.ids, grammar: out.grammar, toolFormat: out.tool_format };
  }

  /** A reader of the tool calls in an answer written in `format` (`chatPrompt(...).toolFormat`): `push` the answer's
   * text as it streams, then `finish` once; each returns what that text settled. Used by the chat API. */
  toolCallReader(format: ToolFormat): ToolCallReader {
    this.#usable();
    const parser = (() => {
      try {
        return new this.#wasm.glue.ToolCallParser(format);
      } catch (e) {
        throw engineError(e, this.#wasm.glue);
      }
    })();
    let done = false;
    const read = (json: string): ToolCallDelta[] => JSON.parse(json) as ToolCallDelta[];
    return {
      push: (text) => {
        if (done) throw invalid('the tool-call reader has finished');
        return read(parser.push(text));
      },
      finish: () => {
        if (done) return [];
        done = true;
        try {
          return read(parser.finish());
        } finally {
          parser.free();
        }
      },
    };
  }

  /**
   * Stream tokens for `prompt` (text, tokenized with special tokens parsed, or token ids). Each chunk
   * is yielded as soon as the engine produces it; the iterator's return value is the whole result.
   * Leaving the loop early (break, throw, abort) cancels the generation and keeps the model usable.
   */
  generate(prompt: string | readonly number[], options: GenerateOptions = {}): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    this.#usable();
    const json = engineOptions(options);
    const ids = typeof prompt === 'string' ? prompt : tokenIds(prompt, 'prompt');
    return this.#run(ids, json, options.signal);
  }

  /** `generate` run to the end. */
  async complete(prompt: string | readonly number[], options: GenerateOptions = {}): Promise<GenerateResult> {
    const it = this.generate(prompt, options);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  /** Read a LoRA adapter (llama.cpp's GGUF adapter format, as `convert_lora_to_gguf.py` writes it) for this model,
   * from the sources `load` takes: its id, for the `adapters` option of `generate` and the chat API
   * (`[{ id, scale }]`). A file that is not an adapter of this model (another architecture, other shapes) is
   * `E_ADAPTER`; a cut or broken file `E_GGUF`. Both engines run adapters: the WebGPU engine in its shaders. */
  async loadAdapter(source: ModelSource, options: { signal?: AbortSignal } = {}): Promise<number> {
    const { signal } = options;
    const opened = await (started().open(source, signal) ?? openSource(source, signal));
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
    return this.#exclusive(signal, async () => this.#call((e) => e.loadAdapter(bytes)));
  }

  /** A MicroLoRA of this model: the one `options.store` keeps under `options.name`, or a new one (see
   * `MicroLoraOptions`). It learns from `feedback` and applies as `adapters: [{ id: lora.id }]`. It becomes this
   * model's `llm.feedback` target. The CPU engine trains it (`backend: 'cpu'`). */
  async microLora(options: MicroLoraOptions = {}): Promise<MicroLora> {
    if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
    const store = options.store === undefined ? null : openStore(options.store, 'store', 'ruvllm-microlora');
    const host: MicroLoraHost = {
      call: (fn) => this.#call(fn),
      callAsync: (fn) => this.#callAsync(fn),
      exclusive: (signal, fn) => this.#exclusive(signal, fn),
      tokenize: (text, o) => this.tokenize(text, o),
      applyChatTemplate: (messages, o) => this.applyChatTemplate(messages, o),
      tokenizeChat: (messages, o) => this.tokenizeChat(messages, o),
    };
    this.#microLora = await MicroLora.open(host, store, options);
    return this.#microLora;
  }

  /** Delete the MicroLoRA `options.store` keeps under `options.name` (default `'default'`), also one that cannot be
   * opened (`E_ADAPTER`); whether there was one. A MicroLoRA open in a model keeps its weights there. */
  static async removeMicroLora(options: { store: 'indexeddb' | string | Store; name?: string }): Promise<boolean> {
    const store = openStore(options?.store, 'store', 'ruvllm-microlora');
    try {
      return await MicroLora.remove(store, options.name ?? 'default');
    } finally {
      if (store instanceof IndexedDbStore) store.close(); // opened here; a caller's own store stays open
    }
  }

  /** Teach this model's MicroLoRA (the last `llm.microLora()` opened; the first call opens a default one, kept in
   * memory) from one answer: `accepted` or a `reward` in [-1, 1]. One gradient step; see `MicroLora.feedback`. */
  async feedback(feedback: Feedback): Promise<FeedbackResult> {
    const lora = this.#microLora ?? (await this.microLora());
    return lora.feedback(feedback);
  }

  /** Forget adapter `id` (a generation running with it keeps it until it ends); whether it was loaded. */
  unloadAdapter(id: number): boolean {
    return this.#call((e) => e.unloadAdapter(id));
  }

  /** One embedding per text: an encoder's (`bert`: all-MiniLM, bge) or a decoder's final hidden states, pooled
   * (`pooling`: 'mean', 'cls' or 'last'; default the model's own, else mean) and L2-normalized unless
   * `normalize` is false. */
  async embed(texts: string | readonly string[], options: EmbedOptions = {}): Promise<number[][]> {
    return (await this.embedWithUsage(texts, options)).embeddings;
  }

  /** `embed`, with the number of tokens the texts took (special tokens included). */
  async embedWithUsage(texts: string | readonly string[], options: EmbedOptions = {}): Promise<{ embeddings: number[][]; tokens: number }> {
    const list = typeof texts === 'string' ? [texts] : texts;
    if (!Array.isArray(list) || !list.every((t) => typeof t === 'string')) throw invalid('texts must be a string or an array of strings');
    const { pooling, normalize = true } = options;
    if (pooling !== undefined && !['mean', 'cls', 'last'].includes(pooling)) throw invalid(`pooling must be 'mean', 'cls' or 'last', got ${JSON.stringify(pooling)}`);
    if (typeof normalize !== 'boolean') throw invalid('normalize must be a boolean');
    const textsJson = JSON.stringify(list);
    const optionsJson = JSON.stringify({ pooling, normalize });
    return this.#exclusive(options.signal, async () => {
      const json = await this.#callAsync((e) => {
        if (typeof e.embed !== 'function') throw invalid('embeddings need the CPU engine (load with backend: "cpu")');
        return e.embed(textsJson, optionsJson);
      });
      return JSON.parse(json as string);
    });
  }

  /** Teacher-forced scoring: for each position of `ids`, the `topK` most likely next tokens. */
  async score(ids: readonly number[], options: { topK?: number; signal?: AbortSignal } = {}): Promise<ScorePositions> {
    const topK = options.topK ?? 5;
    if (!Number.isSafeInteger(topK) || topK < 1) throw invalid(`topK must be an integer >= 1, got ${topK}`);
    const checked = tokenIds(ids, 'ids');
    return this.#exclusive(options.signal, async () => JSON.parse((await this.#callAsync((e) => e.score(checked, topK))) as string).positions);
  }

  /** Forget the conversation's KV cache. The prefix cache keeps what it holds: the next prompt may still start
   * from it (`clearPrefixCache()` forgets that too). */
  async reset(): Promise<void> {
    await this.#exclusive(undefined, () => this.#call((e) => e.reset()));
  }

  /** Forget what the prefix cache holds, in memory and in its store. */
  async clearPrefixCache(): Promise<void> {
    await this.#exclusive(undefined, async () => {
      this.#call((e) => e.clearPrefixCache());
      await this.#persistence?.clear();
    });
  }

  /**
   * The conversation this model holds (its tokens and their keys and values) as bytes, to keep anywhere and give to
   * `restoreState` later, in this page or process or another, for the same model file (as llama.cpp's slot
   * save/restore). Either backend's state restores on either backend (the WebGPU backend reads its keys and values
   * back from the GPU).
   */
  async saveState(): Promise<Uint8Array> {
    return this.#exclusive(undefined, () => this.#callAsync((e) => e.saveState()));
  }

  /** Continue a conversation `saveState` gave. Bytes of another model, damaged or cut, are `E_INVALID_ARGUMENT` and
   * change nothing. */
  async restoreState(bytes: Uint8Array): Promise<void> {
    if (!(bytes instanceof Uint8Array)) throw invalid('restoreState takes the Uint8Array saveState gave');
    await this.#exclusive(undefined, () => this.#call((e) => e.restoreState(bytes)));
  }

  /** Wait until the prefix cache's pages are written to its store (writes run in the background). */
  async flushPrefixCache(): Promise<void> {
    await this.#persistence?.flush();
  }

  /** Free the model's memory. A generation in progress ends with an `E_DISPOSED` error. Idempotent. */
  dispose(): void {
    this.#disposed = true;
    if (!this.#busy) this.#free();
  }

  async *#run(prompt: string | Uint32Array, json: string, signal: AbortSignal | undefined): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    const release = await this.#lock(signal);
    let started = false;
    /** The prompt, then the answer too: the store's records it used are marked used. */
    let conversation: Uint32Array = new Uint32Array(0);
    try {
      const ids = typeof prompt === 'string' ? this.#call((e) => e.tokenizePrompt(prompt)) : prompt;
      conversation = ids;
      // The prompt but its last token, which is always evaluated: what the store may hold.
      if (ids.length > 1) await this.#persistence?.load(ids.subarray(0, ids.length - 1));
      await this.#callAsync((e) => e.start(ids, json));
      started = true;
      // Each step is one prefill batch of the prompt or one token: yield to the event loop and
      // honour the signal between steps, so a long prompt can be aborted too.
      for (;;) {
        await nextTick();
        throwIfAborted(signal);
        const step = (await this.#callAsync((e) => e.nextStep())) as EngineStep | undefined;
        if (!step) break;
        if ('id' in step) yield { id: step.id, text: step.text };
      }
      started = false;
      const result = parseResult(this.#call((e) => e.finish(false)));
      conversation = Uint32Array.from([...conversation, ...result.ids]);
      return result;
    } finally {
      if (started && this.#engine) this.#engine.finish(true); // cancelled: the session is ready for the next call
      if (this.#engine && !this.#crashed) this.#persistence?.save(conversation);
      release();
    }
  }

  /** Wait for our turn; the returned function ends it. */
  async #lock(signal: AbortSignal | undefined): Promise<() => void> {
    throwIfAborted(signal);
    const turn = this.#tail;
    let release!: () => void;
    const done = new Promise<void>((resolve) => (release = resolve));
    this.#tail = turn.then(() => done);
    try {
      await abortable(turn, signal);
      this.#usable();
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

  async #exclusive<T>(signal: AbortSignal | undefined, fn: () => T | Promise<T>): Promise<T> {
    const release = await this.#lock(signal);
    try {
      return await fn();
    } finally {
      release();
    }
  }

  #usable(): Engine {
    if (this.#crashed) throw this.#crashed;
    if (this.#disposed || !this.#engine) throw new RuvllmError('E_DISPOSED', 'the model was disposed');
    return this.#engine;
  }

  /** Call the engine; its errors become RuvllmErrors, and a trap (a Rust panic) retires this model. */
  #call<T>(fn: (engine: Engine) => T): T {
    const engine = this.#usable();
    try {
      return fn(engine);
    } catch (e) {
      throw this.#failed(e);
    }
  }

  /** `#call` for the forward passes, which the threaded build runs on its pool and returns as Promises. */
  async #callAsync<T>(fn: (engine: Engine) => T | Promise<T>): Promise<T> {
    const engine = this.#usable();
    try {
      return await this.#wasm.settle(fn(engine));
    } catch (e) {
      throw this.#failed(e);
    }
  }

  #failed(e: unknown): RuvllmError {
    const err = engineError(e, this.#wasm.glue);
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

function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new AbortError(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** The store `spec` names (the option `option`): `'indexeddb'` (the IndexedDB database `database`, whose writes are
 * flushed to disk before they count unless `durability` is 'relaxed': for a cache), a directory (Node), or the
 * caller's own. */
export function openStore(spec: 'indexeddb' | string | Store, option: string, database: string, durability: 'strict' | 'relaxed' = 'strict'): Store {
  if (typeof spec === 'object' && spec !== null) {
    for (const m of ['list', 'get', 'put', 'delete', 'clear'] as const) {
      if (typeof spec[m] !== 'function') throw invalid(`${option} has no ${m}() method`);
    }
    return spec;
  }
  if (spec === 'indexeddb') {
    if (typeof indexedDB === 'undefined') throw invalid(`${option} 'indexeddb': this runtime has no IndexedDB`);
    return new IndexedDbStore(database, { durability });
  }
  if (typeof spec === 'string' && spec !== '') {
    const store = started().fileStore(spec);
    if (!store) throw invalid(`${option} '${spec}': only Node keeps a store in a directory; in a browser use 'indexeddb'`);
    return store;
  }
  throw invalid(`${option} must be 'indexeddb', a directory path (Node) or a Store`);
}

/** The one-thread build's glue, which the vector indexes run in (started once, shared with models that use it). */
export async function indexGlue(): Promise<Glue> {
  return (await startBuild(started(), 'wasm', 1)).glue;
}

function started(): Platform {
  if (!platform) throw new Error('import @ruvector/ruvllm (its node or browser entry), not an internal module');
  return platform;
}

const KV_CACHE_TYPES: readonly KvCacheType[] = ['f16', 'q8_0', 'q4_0'];

/** Check `LoadOptions.kvCache`'s types (the engine checks the hot window against the model); undefined: f16. */
function checkKvCache(kv: KvCacheOptions | undefined): KvCacheOptions | undefined {
  if (kv === undefined) return undefined;
  if (typeof kv !== 'object' || kv === null) throw invalid('kvCache must be an object');
  for (const key of Object.keys(kv)) {
    if (key !== 'cold' && key !== 'hotTokens') throw invalid(`unknown kvCache option '${key}'`);
  }
  if (!KV_CACHE_TYPES.includes(kv.cold)) throw invalid(`kvCache.cold must be one of ${KV_CACHE_TYPES.join(', ')}, got ${String(kv.cold)}`);
  const { hotTokens } = kv;
  if (hotTokens !== undefined && (!Number.isSafeInteger(hotTokens) || hotTokens < 0)) {
    throw invalid(`kvCache.hotTokens must be an integer >= 0, got ${String(hotTokens)}`);
  }
  return { cold: kv.cold, ...(hotTokens !== undefined && { hotTokens }) };
}

function parseInfo(
  json: string,
): Omit<ModelInfo, 'modelId' | 'build' | 'requestedBackend' | 'threadFallback' | 'prefixCache'> & {
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
    fileBytes: i.file_bytes,
    kvCacheBytes: i.kv_cache_bytes,
    kvCache: { cold: i.kv_cache.cold, hotTokens: i.kv_cache.hot_tokens ?? null },
    wasmMemoryBytes: i.wasm_memory_bytes,
    simd128: i.simd128,
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

function parseResult(json: string | undefined): GenerateResult {
  if (json === undefined) throw new RuvllmError('E_ENGINE_CRASHED', 'the engine lost the generation in progress');
  const o = JSON.parse(json);
  return {
    ids: o.ids,
    text: o.text,
    finishReason: o.finish_reason,
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

const MESSAGE_FIELDS = new Set(['role', 'content', 'name', 'tool_calls', 'tool_call_id', 'refusal']);

/** A chat request as the engine takes it (crate/src/wasm_chat.rs), the messages checked; the tools and tool choice
 * are checked there. */
function chatRequestJson(messages: ChatMessage[], options: ChatTemplateOptions): string {
  if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
  if (!Array.isArray(messages)) throw invalid('messages must be an array');
  const checked = messages.map((m, i) => {
    const at = `messages[${i}]`;
    if (typeof m !== 'object' || m === null) throw invalid(`${at} must be an object`);
    const unknown = Object.keys(m).find((k) => !MESSAGE_FIELDS.has(k));
    if (unknown !== undefined) throw invalid(`${at}: unsupported field '${unknown}'`);
    if (typeof m.role !== 'string') throw invalid(`${at}.role must be a string`);
    if (m.refusal !== undefined && m.refusal !== null) throw invalid(`${at}.refusal: a refusal cannot be continued`);
    const out: Record<string, unknown> = { role: m.role, content: messageText(m, at) };
    if (m.name !== undefined) {
      if (typeof m.name !== 'string') throw invalid(`${at}.name must be a string`);
      out.name = m.name;
    }
    if (m.tool_call_id !== undefined) {
      if (typeof m.tool_call_id !== 'string') throw invalid(`${at}.tool_call_id must be a string`);
      out.tool_call_id = m.tool_call_id;
    } else if (m.role === 'tool') {
      throw invalid(`${at}: a tool message needs the tool_call_id of the call it answers`);
    }
    if (m.tool_calls !== undefined && m.tool_calls !== null) {
      if (!Array.isArray(m.tool_calls)) throw invalid(`${at}.tool_calls must be an array`);
      out.tool_calls = m.tool_calls.map((c, j) => {
        const here = `${at}.tool_calls[${j}]`;
        if (typeof c !== 'object' || c === null || (c.type !== undefined && c.type !== 'function')) throw invalid(`${here} must be {id, type: 'function', function: {name, arguments}}`);
        const f = c.function;
        if (typeof c.id !== 'string' || typeof f !== 'object' || f === null || typeof f.name !== 'string' || typeof f.arguments !== 'string') {
          throw invalid(`${here} must be {id, type: 'function', function: {name, arguments (JSON text)}}`);
        }
        return { id: c.id, function: { name: f.name, arguments: f.arguments } };
      });
    }
    return out;
  });
  const { addGenerationPrompt, tools, toolChoice, parallelToolCalls, chatTemplateKwargs } = options;
  if (addGenerationPrompt !== undefined && typeof addGenerationPrompt !== 'boolean') throw invalid('addGenerationPrompt must be a boolean');
  if (parallelToolCalls !== undefined && typeof parallelToolCalls !== 'boolean') throw invalid('parallelToolCalls must be a boolean');
  if (chatTemplateKwargs !== undefined && (typeof chatTemplateKwargs !== 'object' || chatTemplateKwargs === null || Array.isArray(chatTemplateKwargs))) {
    throw invalid('chatTemplateKwargs must be an object of template variables');
  }
  return writeJson({
    messages: checked,
    tools: tools ?? undefined,
    tool_choice: toolChoice ?? undefined,
    parallel_tool_calls: parallelToolCalls,
    chat_template_kwargs: chatTemplateKwargs,
    add_generation_prompt: addGenerationPrompt,
  }, 'the chat request');
}

/** A message's text: a string, OpenAI's text parts joined, or empty for null (an assistant turn of calls only). */
function messageText(m: ChatMessage, at: string): string {
  const content = m.content as unknown;
  if (typeof content === 'string') return content;
  if ((content === null || content === undefined) && m.role === 'assistant') return '';
  if (Array.isArray(content)) {
    return content
      .map((part, j) => {
        if (typeof part !== 'object' || part === null || part.type !== 'text' || typeof part.text !== 'string') {
          throw invalid(`${at}.content[${j}]: only text parts ({type: 'text', text}) are supported`);
        }
        return part.text as string;
      })
      .join('');
  }
  throw invalid(`${at}.content must be a string or an array of text parts`);
}
