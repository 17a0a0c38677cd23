// The API: `LLM`, a loaded model. It checks what callers give it, has platform.ts start the wasm build a load asks
// for, and runs the engine through engine.ts (loading, one call at a time, errors mapped). Its text side (tokens, chat
// templates and prompts, the tool-call reader) is text.ts's `TextSide`, which `Tokenizer` shares. It hands out the chat
// API (chat.ts), the embeddings API (embeddings.ts) and MicroLoRAs (microlora.ts), which see it through their narrow
// host interfaces and do not import this module. With `worker: true` in a browser the engine runs in a worker
// (worker/client.ts's `RemoteModel`): each compute call below then goes there, and the text side runs in the page on
// a `TextEngine` of the model's header, which the worker sends back. `LLM.connect` hands out remote.ts's `RemoteLLM` (a
// model behind an OpenAI-compatible server), and `LLM.loadOrConnect` one of the two.
import { checkBackend, type Backend, type BackendFallback } from './backend.js';
import { checkSimd, type Engine, type ThreadFallback } from './builds.js';
import { chatMessages, createChat, type Chat, type ChatMessage } from './chat.js';
import { createEmbeddings, type Embeddings } from './embeddings.js';
import { EngineHandle, engineError, loadEngine, nextTick, parseInfo, parseResult, readSource, type EngineResult, type EngineStep } from './engine.js';
import { AbortError, RuvllmError, invalid, throwIfAborted, type ErrorCode } from './errors.js';
import { MicroLora, type Feedback, type FeedbackResult, type MicroLoraHost, type MicroLoraOptions } from './microlora.js';
import { checkKvCache, engineOptions, freshRequestId, freshSeed, tokenIds, type GenerateOptions } from './options.js';
import { modelCache, type ModelCache } from './models/cache.js';
import type { ModelStore } from './models/store.js';
import { initWasm, openModelStore, openStore, type StartedWasm } from './platform.js';
import { TextSide, type TextHandle } from './text.js';
import { textEngine } from './tokenizer.js';
import { canUseSharedWorker, canUseWorker, RemoteModel, wireSource, workerDidNotStart } from './worker/client.js';
import type { LinkKind } from './worker/links.js';
import type { ModelSource } from './source.js';
import { RemoteLLM, connectedInstead, type ConnectOptions } from './remote.js';
import { IndexedDbStore } from './store/indexeddb.js';
import { Persistence } from './store/persistence.js';
import type { Store } from './store/store.js';
import type { EmbedOptions, GenerateChunk, GenerateResult, LoadOptions, ModelInfo, ScorePositions, TrajectorySink, WitnessInput, WitnessSink, WorkerFallback } from './types.js';

/**
 * A loaded model and its conversation state (one KV cache). Generations run one at a time: a call
 * made while another runs waits for it (FIFO), and its `signal` also cancels the wait. Its text side (`tokenize`,
 * `detokenize`, `applyChatTemplate`, `tokenizeChat`, `chatPrompt`, `toolCallReader`) is `TextSide`'s, as a
 * `Tokenizer`'s is: synchronous, and the same answers.
 */
export class LLM extends TextSide {
  /** The engine, its build, and the turns callers take at it; null when the engine runs in a worker. */
  readonly #local: EngineHandle | null;
  /** The engine in a worker (`worker: true`), else null; the page then holds only the text side. */
  readonly #remote: RemoteModel | null;
  /** The text side's engine: the model's own, or (in worker mode) a `TextEngine` of its header. */
  readonly #text: TextHandle & { dispose(): void };
  /** Worker mode: the adapters loaded, so that `unloadAdapter` answers synchronously. */
  readonly #adapters = new Set<number>();
  readonly #requested: Backend;
  /** Why the CPU build runs although the GPU was asked for (the GPU build reports its own fallbacks). */
  readonly #fallback: BackendFallback | null;
  readonly #threadFallback: ThreadFallback | null;
  /** Why the engine runs in the page although a worker was the default (its worker could not start). */
  readonly #workerFallback: WorkerFallback | null;
  /** The prefix cache's store, if `load` was given one. */
  #persistence: Persistence | null = null;
  /** The MicroLoRA `feedback` trains: the last `microLora()` opened. */
  #microLora: MicroLora | null = null;
  /** Where this model's requests are recorded (`WitnessLog.open`, or the app's own `WitnessSink`): each
   * `generate`, `complete` and chat completion, when it ends or fails, after its answer. Null (the default): none. */
  witness: WitnessSink | null = null;
  /** The instant loop's MicroLoRA (`llm.microLora()`): feedback on a chat request (`feedback(requestId, { score })`)
   * trains it one step, after the answer. Null (the default): none. */
  learner: MicroLora | null = null;
  /** Where feedback on a chat request goes with its conversation and answer, for the background learning loop
   * (`LearningLoop.open` sets it). Null (the default): nowhere. */
  trajectories: TrajectorySink | null = null;
  /** The last chat requests answered while a learner or a trajectory sink was set, by request id: what feedback on
   * them trains. */
  readonly #trajectories = new Map<string, { messages: ChatMessage[]; response: string }>();
  /** The instant loop's step in flight, if one is. */
  #instantStep: Promise<unknown> | null = null;
  /** Requests running now, and when the last one ended (`performance.now()`): `activity()`. */
  #running = 0;
  #lastEnded = performance.now();
  /** OpenAI-shaped chat completions: `llm.chat.completions.create({ messages, stream })`. */
  readonly chat: Chat;
  /** OpenAI-shaped embeddings: `llm.embeddings.create({ input })`. */
  readonly embeddings: Embeddings;

  private constructor(
    text: TextHandle & { dispose(): void },
    local: EngineHandle | null,
    remote: RemoteModel | null,
    requested: Backend,
    fallback: BackendFallback | null,
    threadFallback: ThreadFallback | null,
    workerFallback: WorkerFallback | null,
  ) {
    super(text);
    this.#text = text;
    this.#local = local;
    this.#remote = remote;
    this.#requested = requested;
    this.#fallback = fallback;
    this.#threadFallback = threadFallback;
    this.#workerFallback = workerFallback;
    this.chat = createChat(this);
    this.embeddings = createEmbeddings(this);
  }

  /** The in-page engine (every compute call below is reached only when `#remote` is null). */
  get #engine(): EngineHandle {
    return this.#local!;
  }

  // -------------------------------------------------------------------------------------------------------------
  // 1. Load
  // -------------------------------------------------------------------------------------------------------------

  /** The model files kept by loads with `cache`: `LLM.models.list()`, `delete(url)`, `clear()`. */
  static readonly models: ModelCache = modelCache(openModelStore);

  /** Read a GGUF model (streaming it into wasm memory) and prepare a session. */
  static async load(source: ModelSource, options: LoadOptions = {}): Promise<LLM> {
    const { onProgress, contextSize = 0, threads, signal, gpuMaxBindingBytes, gpuAllowSoftware = false, prefixCache, chatTemplate } = options;
    const sha256 = checkSha256(options.sha256);
    const cache = options.cache ?? false;
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
    if (options.worker !== undefined && typeof options.worker !== 'boolean') throw invalid('worker must be a boolean');
    if (options.shared !== undefined && typeof options.shared !== 'boolean') throw invalid('shared must be a boolean');
    if (options.shared && options.worker === false) throw invalid('shared: true runs the engine in a worker: it cannot be given with worker: false');
    let workerFallback: WorkerFallback | null = null;
    if (canUseWorker() && (options.shared || options.worker || (options.worker === undefined && !ownsObjects(options)))) {
      try {
        return await LLM.#loadInWorker(options.shared && canUseSharedWorker() ? 'shared' : 'worker', source, options);
      } catch (e) {
        // By default, a worker that cannot start (a CSP without worker-src for it) leaves the engine in the page.
        if (options.worker !== undefined || options.shared || !workerDidNotStart(e)) throw e;
        workerFallback = { code: 'E_WORKER', message: (e as Error).message };
      }
    }
    const store = prefixCache?.store === undefined ? null : openStore(prefixCache.store, 'prefixCache.store', 'ruvllm-prefix-cache', 'relaxed');
    const backend = checkBackend(options.backend ?? 'auto');
    if (gpuMaxBindingBytes !== undefined && (!Number.isSafeInteger(gpuMaxBindingBytes) || gpuMaxBindingBytes < 4)) {
      throw invalid(`gpuMaxBindingBytes must be an integer >= 4, got ${gpuMaxBindingBytes}`);
    }
    const modelStore: ModelStore | null = cache === false ? null : await openModelStore(cache);
    throwIfAborted(signal);
    const build = await initWasm(backend, Boolean(gpuAllowSoftware), threads, checkSimd(options.simd ?? 'auto'));
    try {
      const engine = await loadEngine(build, source, {
        onProgress,
        signal,
        backend,
        contextSize,
        gpuMaxBindingBytes,
        gpuAllowSoftware: Boolean(gpuAllowSoftware),
        kvCache,
        chatTemplate,
        store: modelStore,
        sha256,
        onHeader: headerSinks.get(options),
      });
      return LLM.#ready(engine, build, backend, budgetBytes, store, storeBudget, workerFallback);
    } catch (e) {
      if (signal?.aborted && !(e instanceof AbortError)) throw new AbortError(signal.reason);
      throw e;
    }
  }

  /** A model behind an OpenAI-compatible server (`ruvllm serve`, llama.cpp's llama-server, OpenAI): the chat API,
   * `generate`, embeddings and `info()` over HTTP (remote.ts). */
  static connect(options: ConnectOptions): Promise<RemoteLLM> {
    return RemoteLLM.connect(options);
  }

  /** Local first: `LLM.load(source, loadOptions)`, and where the model cannot run here (a load error of
   * `CANNOT_RUN_HERE`: too large for wasm32 memory, out of memory, no usable WebGPU for `backend: 'webgpu'`, an
   * architecture or tensor type the engine lacks), `LLM.connect(remote)` instead; its `info().localError` says why.
   * Any other load error (a missing file, a bad option, an abort) is thrown: the server is not a cover for those. */
  static async loadOrConnect(source: ModelSource, loadOptions: LoadOptions, remote: ConnectOptions): Promise<LLM | RemoteLLM> {
    try {
      return await LLM.load(source, loadOptions);
    } catch (e) {
      if (!(e instanceof RuvllmError) || !CANNOT_RUN_HERE.includes(e.code)) throw e;
      return connectedInstead(await RemoteLLM.connect({ signal: loadOptions.signal, ...remote }), e);
    }
  }

  static #ready(engine: Engine, build: StartedWasm, backend: Backend, budgetBytes: number | undefined, store: Store | null, storeBudget: number, workerFallback: WorkerFallback | null): LLM {
    const { wasm, fallback, threadFallback } = build;
    try {
      if (budgetBytes !== undefined) engine.setPrefixCacheBudget(budgetBytes);
      const handle = new EngineHandle(engine, wasm);
      const llm = new LLM(handle, handle, null, backend, fallback, threadFallback, workerFallback);
      if (store) llm.#persistence = new Persistence((fn) => llm.#engine.call(fn), store, storeBudget);
      return llm;
    } catch (e) {
      engine.free();
      throw engineError(e, wasm.glue);
    }
  }

  /** `load` in an engine worker of `kind` (which checks the options as `load` does); the page makes its text side of
   * the header the worker answers with. */
  static async #loadInWorker(kind: LinkKind, source: ModelSource, options: LoadOptions): Promise<LLM> {
    const { onProgress, signal, worker: _, shared: __, ...rest } = options;
    if (ownsObjects(options)) {
      throw invalid("prefixCache.store: a Store object of your own cannot cross to the engine worker (name a store, 'indexeddb', or load with worker: false)");
    }
    const { model, header } = await RemoteModel.load(kind, source, rest as Record<string, unknown>, onProgress as ((p: never) => void) | undefined, signal);
    try {
      const text = await textEngine(header, options.chatTemplate);
      return new LLM(text, null, model, model.info.requestedBackend, model.info.fallback, model.info.threadFallback, null);
    } catch (e) {
      model.dispose();
      throw e;
    }
  }

  // -------------------------------------------------------------------------------------------------------------
  // 2. Info (the text side, tokens and chat prompts, is TextSide's: text.ts)
  // -------------------------------------------------------------------------------------------------------------

  /** What the model is and how it runs. With `worker: true` this is the snapshot the worker sent with its last answer
   * (after the load, each call and each generation's end), so it stays synchronous; `engine` says which. */
  info(): ModelInfo {
    if (this.#remote) {
      this.#remote.usable();
      return { ...this.#remote.info, engine: this.#remote.kind, workerFallback: null };
    }
    const info = parseInfo(this.#engine.call((e) => e.info()));
    const store = this.#persistence?.status();
    return {
      ...info,
      modelId: this.#engine.call((e) => e.modelId?.() ?? null),
      build: this.#engine.wasm.build,
      requestedBackend: this.#requested,
      fallback: info.fallback ?? this.#fallback,
      threadFallback: this.#threadFallback,
      engine: 'page',
      workerFallback: this.#workerFallback,
      pages: 1,
      prefixCache: info.prefixCache && {
        ...info.prefixCache,
        store: store !== undefined,
        storedBytes: store?.storedBytes ?? null,
        storeError: store?.error ?? null,
        lastLoad: store?.lastLoad ?? null,
      },
    };
  }

  // -------------------------------------------------------------------------------------------------------------
  // 3. Generation
  // -------------------------------------------------------------------------------------------------------------

  /**
   * Stream tokens for `prompt` (text, tokenized with special tokens parsed, or token ids). Each chunk
   * is yielded as soon as the engine produces it; the iterator's return value is the whole result.
   * Leaving the loop early (break, throw, abort) cancels the generation and keeps the model usable.
   */
  generate(prompt: string | readonly number[], options: GenerateOptions = {}): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    (this.#remote ?? this.#engine).usable();
    const seed = options.seed ?? freshSeed();
    const json = engineOptions({ ...options, seed });
    const ids = typeof prompt === 'string' ? prompt : tokenIds(prompt, 'prompt');
    const requestId = options.requestId ?? freshRequestId();
    let run;
    if (this.#remote) {
      const { signal, ...rest } = options;
      run = this.#remote.generate(ids, { ...rest, seed }, signal);
    } else {
      run = this.#run(ids, json, seed, options.signal);
    }
    return this.#recorded(run, requestId, ids, options);
  }

  #keepTrajectory(requestId: string, trajectory: { messages: ChatMessage[]; response: string }): void {
    // A copy: the app goes on with its own array.
    this.#trajectories.set(requestId, { messages: trajectory.messages.map((m) => ({ ...m })), response: trajectory.response });
    if (this.#trajectories.size > TRAJECTORIES) this.#trajectories.delete(this.#trajectories.keys().next().value!);
  }

  /** `run` with its result's `requestId`, recorded in the witness log when it ends, fails or is left early. */
  async *#recorded(run: AsyncGenerator<GenerateChunk, EngineResult, undefined>, requestId: string, prompt: string | Uint32Array, options: GenerateOptions): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    const time = Date.now();
    const started = performance.now();
    let result: GenerateResult | null = null;
    let error: string | null = null;
    this.#running++;
    try {
      result = { ...(yield* run), requestId };
      const messages = chatMessages.get(options);
      if (messages && (this.learner || this.trajectories)) this.#keepTrajectory(requestId, { messages, response: result.text });
      return result;
    } catch (e) {
      error = e instanceof RuvllmError ? e.code : e instanceof AbortError ? 'E_ABORTED' : 'E_INTERNAL';
      throw e;
    } finally {
      this.#running--;
      this.#lastEnded = performance.now();
      const witness = options.witness === false ? null : this.witness;
      if (witness) {
        const note = options.witness || {};
        let model = { name: null as string | null, architecture: '', backend: '' };
        try {
          const i = this.info();
          model = { name: i.name, architecture: i.architecture, backend: i.backend };
        } catch {
          // a retired engine: the entry says what failed
        }
        const query = note.query ?? (typeof prompt === 'string' ? prompt.slice(0, 2000) : '');
        recordQuietly(witness, {
          requestId,
          session: options.session ?? null,
          time,
          kind: note.kind ?? 'generate',
          query,
          route: note.route ?? null,
          model,
          adapters: (options.adapters ?? []).map((a) => a.id),
          tokens: result ? { prompt: result.usage.promptTokens, cached: result.usage.cachedTokens, generated: result.usage.completionTokens } : undefined,
          latencyMs: {
            ...note.latencyMs,
            prefill: result?.timings.prefillMs,
            decode: result?.timings.decodeMs,
            total: performance.now() - started,
          },
          finishReason: result?.finishReason ?? (error ? null : 'cancelled'),
          error,
        });
      }
    }
  }

  /** This model's requests (`generate`, `complete`, chat completions) running now, and how long since the last one
   * ended (ms; 0 while one runs): what the background learning loop waits on to run when the model is idle. */
  activity(): { running: number; idleMs: number } {
    return { running: this.#running, idleMs: this.#running > 0 ? 0 : performance.now() - this.#lastEnded };
  }

  /** `generate` run to the end. */
  async complete(prompt: string | readonly number[], options: GenerateOptions = {}): Promise<GenerateResult> {
    const it = this.generate(prompt, options);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  /** Teacher-forced scoring: for each position of `ids`, the `topK` most likely next tokens. */
  async score(ids: readonly number[], options: { topK?: number; signal?: AbortSignal } = {}): Promise<ScorePositions> {
    const topK = options.topK ?? 5;
    if (!Number.isSafeInteger(topK) || topK < 1) throw invalid(`topK must be an integer >= 1, got ${topK}`);
    const checked = tokenIds(ids, 'ids');
    if (this.#remote) return this.#remote.call('score', [Array.from(checked), { topK }], options.signal);
    return this.#engine.exclusive(options.signal, async () => JSON.parse((await this.#engine.callAsync((e) => e.score(checked, topK))) as string).positions);
  }

  async *#run(prompt: string | Uint32Array, json: string, seed: number, signal: AbortSignal | undefined): AsyncGenerator<GenerateChunk, EngineResult, undefined> {
    const handle = this.#engine;
    const release = await handle.lock(signal);
    let started = false;
    /** The prompt, then the answer too: the store's records it used are marked used. */
    let conversation: Uint32Array = new Uint32Array(0);
    try {
      const ids = typeof prompt === 'string' ? handle.call((e) => e.tokenizePrompt(prompt)) : prompt;
      conversation = ids;
      // The prompt but its last token, which is always evaluated: what the store may hold.
      if (ids.length > 1) await this.#persistence?.load(ids.subarray(0, ids.length - 1));
      await handle.callAsync((e) => e.start(ids, json));
      started = true;
      // Each step is one prefill batch of the prompt or one token: yield to the event loop and
      // honour the signal between steps, so a long prompt can be aborted too.
      for (;;) {
        await nextTick();
        throwIfAborted(signal);
        const step = (await handle.callAsync((e) => e.nextStep())) as EngineStep | undefined;
        if (!step) break;
        if ('id' in step) yield { id: step.id, text: step.text };
      }
      started = false;
      const result = parseResult(handle.call((e) => e.finish(false)), seed);
      conversation = Uint32Array.from([...conversation, ...result.ids]);
      return result;
    } finally {
      if (started && handle.engine) handle.engine.finish(true); // cancelled: the session is ready for the next call
      if (handle.engine && !handle.crashed) this.#persistence?.save(conversation);
      release();
    }
  }

  // -------------------------------------------------------------------------------------------------------------
  // 4. Embeddings
  // -------------------------------------------------------------------------------------------------------------

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
    if (this.#remote) return this.#remote.call('embedWithUsage', [list, { pooling, normalize }], options.signal);
    const textsJson = JSON.stringify(list);
    const optionsJson = JSON.stringify({ pooling, normalize });
    return this.#engine.exclusive(options.signal, async () => {
      const json = await this.#engine.callAsync((e) => {
        if (typeof e.embed !== 'function') throw invalid('embeddings need the CPU engine (load with backend: "cpu")');
        return e.embed(textsJson, optionsJson);
      });
      return JSON.parse(json as string);
    });
  }

  // -------------------------------------------------------------------------------------------------------------
  // 5. Adapters: LoRA files and MicroLoRAs
  // -------------------------------------------------------------------------------------------------------------

  /** Read a LoRA adapter (llama.cpp's GGUF adapter format, as `convert_lora_to_gguf.py` writes it) for this model,
   * from the sources `load` takes: its id, for the `adapters` option of `generate` and the chat API
   * (`[{ id, scale }]`). A file that is not an adapter of this model (another architecture, other shapes) is
   * `E_ADAPTER`; a cut or broken file `E_GGUF`. Both engines run adapters: the WebGPU engine in its shaders. */
  async loadAdapter(source: ModelSource, options: { signal?: AbortSignal } = {}): Promise<number> {
    const { signal } = options;
    if (this.#remote) {
      this.#remote.usable();
      const { value, transfer } = await wireSource(source);
      const id = await this.#remote.call<number>('loadAdapter', [value, {}], signal, transfer);
      this.#adapters.add(id);
      return id;
    }
    const bytes = await readSource(source, signal);
    return this.#engine.exclusive(signal, async () => this.#engine.call((e) => e.loadAdapter(bytes)));
  }

  /** Forget adapter `id` (a generation running with it keeps it until it ends); whether it was loaded. */
  unloadAdapter(id: number): boolean {
    if (this.#remote) {
      // The page knows which ids it loaded; the worker forgets the adapter after the calls before this one.
      this.#remote.usable();
      const had = this.#adapters.delete(id);
      if (had) this.#remote.call('unloadAdapter', [id]).catch(() => {});
      return had;
    }
    return this.#engine.call((e) => e.unloadAdapter(id));
  }

  /** A MicroLoRA of this model: the one `options.store` keeps under `options.name`, or a new one (see
   * `MicroLoraOptions`). It learns from `feedback` and applies as `adapters: [{ id: lora.id }]`. It becomes this
   * model's `llm.feedback` target. The CPU engine trains it (`backend: 'cpu'`). With `worker: true` it lives and
   * trains in the worker, which opens its `store` (a name: a `Store` object of your own cannot cross,
   * `E_INVALID_ARGUMENT`); the page's `MicroLora` has the same methods, its `info()` and `exportGguf()` as of the
   * worker's last answer. */
  async microLora(options: MicroLoraOptions = {}): Promise<MicroLora> {
    if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
    const host: MicroLoraHost = {
      call: (fn) => this.#engine.call(fn),
      callAsync: (fn) => this.#engine.callAsync(fn),
      exclusive: (signal, fn) => this.#engine.exclusive(signal, fn),
      tokenize: (text, o) => this.tokenize(text, o),
      applyChatTemplate: (messages, o) => this.applyChatTemplate(messages, o),
      tokenizeChat: (messages, o) => this.tokenizeChat(messages, o),
    };
    if (this.#remote) {
      // It lives in the worker, which opens its store (a name) and trains it there.
      if (typeof options.store === 'object' && options.store !== null) {
        throw invalid("store: a Store object of your own cannot cross to the engine worker (name a store, 'indexeddb', or load with worker: false)");
      }
      this.#microLora = await MicroLora.openRemote(this.#remote, host, options);
      return this.#microLora;
    }
    const store = options.store === undefined ? null : openStore(options.store, 'store', 'ruvllm-microlora');
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
  async feedback(feedback: Feedback): Promise<FeedbackResult>;
  /** Feedback on the request `requestId` (a result's `requestId`, a chat completion's `id`): `score` in [-1, 1]
   * (its quality), or an answer the user `preferred`. The witness log (`llm.witness`) records the score; the instant
   * loop (`llm.learner`) trains one step on the request's conversation, after this call returns: toward `preferred`,
   * else toward the answer given (score > 0) or away from it (score < 0). One step runs at a time: feedback that comes
   * while one runs takes none (`step: 'skipped'`). Returns at once; `learned` settles when the step has run. */
  async feedback(requestId: string, quality: RequestFeedback): Promise<RequestFeedbackResult>;
  async feedback(feedback: Feedback | string, quality?: RequestFeedback): Promise<FeedbackResult | RequestFeedbackResult> {
    if (typeof feedback === 'string') return this.#requestFeedback(feedback, quality);
    const lora = this.#microLora ?? (await this.microLora());
    return lora.feedback(feedback);
  }

  #requestFeedback(requestId: string, quality: RequestFeedback | undefined): RequestFeedbackResult {
    if (typeof quality !== 'object' || quality === null) throw invalid('feedback(requestId, { score, preferred? }): the score is missing');
    const { score, preferred, route } = quality;
    if (typeof score !== 'number' || !Number.isFinite(score) || Math.abs(score) > 1) throw invalid(`score must be a number in [-1, 1], got ${score}`);
    if (preferred !== undefined && (typeof preferred !== 'string' || preferred === '')) throw invalid('preferred must be a non-empty string');
    if (route !== undefined && (typeof route !== 'string' || route === '')) throw invalid('route must be a non-empty string');
    if (!this.witness && !this.learner && !this.trajectories) {
      throw invalid('nothing takes feedback on a request: set llm.witness (WitnessLog.open), llm.learner (llm.microLora()) or a learning loop (LearningLoop.open)');
    }
    this.witness?.score(requestId, score);
    const trajectory = this.#trajectories.get(requestId);
    if (trajectory && this.trajectories) {
      const taken = { requestId, ...trajectory, score, preferred: preferred ?? null, route: route ?? null, time: Date.now() };
      try {
        this.trajectories.take(taken);
      } catch (e) {
        console.warn('ruvllm: the learning loop refused a trajectory:', e);
      }
    }
    const none = (step: RequestFeedbackResult['step']) => ({ recorded: this.witness !== null, step, learned: Promise.resolve(null) });
    const learner = this.learner;
    if (!learner) return none('off');
    if (!trajectory) return none('unknown');
    if (preferred === undefined && score === 0) return none('neutral');
    if (this.#instantStep) return none('skipped');
    const step = { messages: trajectory.messages, response: preferred ?? trajectory.response, reward: preferred === undefined ? score : 1 };
    const learned = (async () => {
      // After the caller's task: its answer goes out first.
      await new Promise((resolve) => setTimeout(resolve, 0));
      return learner.feedback(step);
    })();
    this.#instantStep = learned.then(
      () => (this.#instantStep = null),
      () => (this.#instantStep = null),
    );
    return { recorded: this.witness !== null, step: 'scheduled', learned };
  }

  // -------------------------------------------------------------------------------------------------------------
  // 6. Persistence: the conversation, the prefix cache, the model's memory
  // -------------------------------------------------------------------------------------------------------------

  /** Forget the conversation's KV cache. The prefix cache keeps what it holds: the next prompt may still start
   * from it (`clearPrefixCache()` forgets that too). */
  async reset(): Promise<void> {
    if (this.#remote) return this.#remote.call('reset', []);
    await this.#engine.exclusive(undefined, () => this.#engine.call((e) => e.reset()));
  }

  /** Forget what the prefix cache holds, in memory and in its store. */
  async clearPrefixCache(): Promise<void> {
    if (this.#remote) return this.#remote.call('clearPrefixCache', []);
    await this.#engine.exclusive(undefined, async () => {
      this.#engine.call((e) => e.clearPrefixCache());
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
    if (this.#remote) return this.#remote.call('saveState', []); // the worker transfers the bytes: no copy
    return this.#engine.exclusive(undefined, () => this.#engine.callAsync((e) => e.saveState()));
  }

  /** Continue a conversation `saveState` gave. Bytes of another model, damaged or cut, are `E_INVALID_ARGUMENT` and
   * change nothing. */
  async restoreState(bytes: Uint8Array): Promise<void> {
    if (!(bytes instanceof Uint8Array)) throw invalid('restoreState takes the Uint8Array saveState gave');
    if (this.#remote) {
      const copy = bytes.slice(); // the caller keeps theirs; the copy is transferred
      return this.#remote.call('restoreState', [copy], undefined, [copy.buffer]);
    }
    await this.#engine.exclusive(undefined, () => this.#engine.call((e) => e.restoreState(bytes)));
  }

  /** Wait until the prefix cache's pages are written to its store (writes run in the background). */
  async flushPrefixCache(): Promise<void> {
    if (this.#remote) return this.#remote.call('flushPrefixCache', []);
    await this.#persistence?.flush();
  }

  /** Free the model's memory. A generation in progress ends with an `E_DISPOSED` error. Idempotent. */
  dispose(): void {
    this.#remote?.dispose();
    this.#text.dispose();
  }
}

/** How many chat requests' conversations the instant loop keeps for feedback on them. */
const TRAJECTORIES = 64;

/** Feedback on one request: `llm.feedback(requestId, { score, preferred? })`. */
export interface RequestFeedback {
  score: number;
  preferred?: string;
  /** The route the request should have taken: a correction the learning loop teaches the Router. */
  route?: string;
}

/** What `llm.feedback(requestId, ...)` did: whether the witness log took the score, and the instant loop's step:
 * `scheduled` (`learned` gives its result), `skipped` (a step was running), `off` (no `llm.learner`), `unknown` (not
 * a chat request answered while a learner was set, or one of more than the last 64), `neutral` (a score of 0). */
export interface RequestFeedbackResult {
  recorded: boolean;
  step: 'scheduled' | 'skipped' | 'off' | 'unknown' | 'neutral';
  learned: Promise<FeedbackResult | null>;
}

/** Record `entry` in `witness`: a sink that throws (the app's own) never fails the request it records. */
function recordQuietly(witness: WitnessSink, entry: WitnessInput): void {
  try {
    witness.record(entry);
  } catch (e) {
    console.warn('ruvllm: the witness log refused an entry:', e);
  }
}

/** The load errors that mean the model cannot run in this runtime (rather than that the source or the options are
 * wrong): those `LLM.loadOrConnect` answers by connecting to the server. */
export const CANNOT_RUN_HERE: readonly ErrorCode[] = [
  'E_MODEL_TOO_LARGE',
  'E_OUT_OF_MEMORY',
  'E_GPU_NO_ADAPTER',
  'E_GPU_LIMITS',
  'E_GPU_UNSUPPORTED',
  'E_GPU_OUT_OF_MEMORY',
  'E_UNSUPPORTED_ARCH',
  'E_UNSUPPORTED_TENSOR_TYPE',
];

/** The loads whose GGUF header goes to a sink (`loadWithHeader`), by their options object: not a `LoadOptions` field,
 * which callers would see. */
const headerSinks = new WeakMap<LoadOptions, (header: Uint8Array) => void>();

/** `LLM.load` in the page (never a worker), and the model's GGUF header as the load read it (no second read of the
 * source): what the engine worker (worker/host.ts) answers a load with. */
export async function loadWithHeader(source: ModelSource, options: LoadOptions): Promise<{ llm: LLM; header: Uint8Array }> {
  let header: Uint8Array | undefined;
  const opts = { ...options, worker: false };
  headerSinks.set(opts, (h) => (header = h));
  const llm = await LLM.load(source, opts);
  if (!header) {
    llm.dispose();
    throw new RuvllmError('E_GGUF', 'the model loaded without a whole GGUF header in its first file');
  }
  return { llm, header };
}

/** Whether `options` hold objects of the caller's that cannot cross to an engine worker (a `Store` of their own). */
function ownsObjects(options: LoadOptions): boolean {
  const store = options.prefixCache?.store;
  return typeof store === 'object' && store !== null;
}

/** The `sha256` option as lowercase hex, one per file (undefined: none given). */
function checkSha256(sha256: string | readonly string[] | undefined): string[] | undefined {
  if (sha256 === undefined) return undefined;
  const list = typeof sha256 === 'string' ? [sha256] : Array.isArray(sha256) ? sha256 : undefined;
  if (!list || list.length === 0 || !list.every((h) => typeof h === 'string' && /^[0-9a-fA-F]{64}$/.test(h))) {
    throw invalid('sha256 must be a SHA-256 in hex (64 digits), or an array of them, one per shard of a split model');
  }
  return list.map((h) => h.toLowerCase());
}
