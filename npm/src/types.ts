// The types the API shares: what `LLM.load` takes, what `info()`, `generate` and `score` return, and the embedding
// options. Below every module that uses them (llm.ts, chat.ts, embeddings.ts, engine.ts): this module imports only
// types, and none from those.
import type { Backend, BackendFallback } from './backend.js';
import type { BuildName, SimdOption, ThreadFallback } from './builds.js';
import type { ModelCacheOption } from './models/cache.js';
import type { LoadProgress } from './source.js';
import type { StoreError, StoreLoad } from './store/persistence.js';
import type { Store } from './store/store.js';

export interface LoadOptions {
  /** Called after each chunk of the file is read: bytes of all the model's files, and how many came from `cache`. */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Keep a URL's model file where a later load finds it, with no request: `true` (OPFS in browsers, else the Cache
   * API; `~/.cache/ruvllm/models` in Node), `'opfs'`, `'cache-api'`, or a directory path (Node). The file is
   * downloaded in parts as it streams into the engine; a download cut short keeps what came (where the server gives an
   * ETag or Last-Modified) and the next load asks only for the rest (`Range`, `If-Range`). Before downloading, the
   * store's free space is checked (`E_STORE_FULL`, with the sizes). `LLM.models` lists, deletes and clears what is
   * kept. Other sources (files, Blobs, bytes) are read as they are.
   */
  cache?: ModelCacheOption | false;
  /**
   * The file's SHA-256 (64 hex digits), or one per shard of a split model, in order. A file of another hash is
   * `E_INTEGRITY`, and a store keeps nothing of it; a stored file of another hash is downloaded again.
   */
  sha256?: string | readonly string[];
  /** Context window in tokens (default: the model's, at most 4096). */
  contextSize?: number;
  /**
   * Threads for the forward passes (default: the cores, at most 8). More than one uses the threaded
   * build, which needs Node or a cross-origin isolated page (COOP/COEP headers); elsewhere, and with 1,
   * the single-thread build runs. The first threaded load fixes the count for the process or page.
   */
  threads?: number;
  /**
   * The CPU build's instruction set: `auto` (default) runs the relaxed-SIMD build where the runtime validates it
   * (Chromium 114+, Node 22+), else the plain SIMD128 one; `relaxed` requires it (`E_UNSUPPORTED` where missing);
   * `simd128` the plain build everywhere. Both give the same probabilities to the last bit: the relaxed instructions
   * are used only where every engine computes them alike, into the plain kernels' float sums. The WebGPU build is
   * SIMD128. `info().relaxedSimd` says which runs.
   */
  simd?: SimdOption;
  signal?: AbortSignal;
  /**
   * Browsers: where the engine runs. By default in a dedicated Worker, so forward passes never block the page;
   * `worker: false` runs it on the page's thread (as does a `prefixCache.store` object of your own, which cannot
   * cross to a worker; with `worker: true` such an object is `E_INVALID_ARGUMENT`). The API is the same; the text side
   * (`tokenize`, `chatPrompt`, ...) stays synchronous in the page, on the model's header; `info()` is the worker's
   * last snapshot; MicroLoRAs live and train in the worker (a `Store` object of your own cannot cross). Node ignores it.
   */
  worker?: boolean;
  /**
   * Browsers: one engine for all tabs of the origin: the origin's SharedWorker (or, where SharedWorker is missing, a
   * leader tab's worker elected with Web Locks). A tab that loads a URL another tab loaded with the same options gets
   * the same model: nothing downloaded, no second copy. Tabs' requests take turns fairly; each tab's conversation is
   * its own (`saveState` saves this tab's); a tab that closes frees its turns. When a leader tab closes, another
   * takes over and loads the models again (from the model store with `cache`). Where neither exists, a dedicated
   * worker runs (`info().engine` says which).
   */
  shared?: boolean;
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
  /** Elements of all the model's tensors (its "135M"). */
  parameters: number;
  /** The type holding most of the weight matrices' bytes (`'Q4_K'` for a Q4_K_M file); null without matrices. */
  quantization: string | null;
  fileBytes: number;
  kvCacheBytes: number;
  /** The KV cache's format (`LoadOptions.kvCache`): `hotTokens` is null for a one-tier f16 cache. */
  kvCache: { cold: KvCacheType; hotTokens: number | null };
  /** Whether the model's matrices are in wasm memory: `false` where the file was streamed to the GPU
   * (`backend: 'webgpu'`), whose matrices are there only, so the model never runs on the CPU. */
  weightsInMemory: boolean;
  /** The wasm instance's memory now (shared by every model loaded in it). */
  wasmMemoryBytes: number;
  simd128: boolean;
  /** Whether the build has relaxed SIMD (`LoadOptions.simd`): the quantized kernels' one-instruction byte dots. */
  relaxedSimd: boolean;
  hasChatTemplate: boolean;
  /** The wasm build running this model: `wasm` (single thread), `wasm-mt` (threads on Web Workers) or `wasm-gpu`;
   * each CPU one in a relaxed-SIMD form too (`relaxedSimd`). */
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
  /** Where the engine runs: `'page'` (the caller's thread), `'worker'` (a dedicated Worker, the browser's default)
   * or `'shared'` (`LoadOptions.shared`): in a worker, this `info()` is the snapshot it sent with its last answer. */
  engine: 'page' | 'worker' | 'shared';
  /** Why the engine runs in the page although a worker is the browser's default: its worker could not start (a
   * Content-Security-Policy whose worker-src refuses the package's script, or the script missing). */
  workerFallback: WorkerFallback | null;
  /** How many pages use this model in its engine: 1, or with `shared` the tabs that loaded it. */
  pages: number;
  /** The prefix cache (`null` while a forward pass on a worker holds it). */
  prefixCache: PrefixCacheInfo | null;
}

/** Why the engine runs in the page although a worker is the default (`ModelInfo.workerFallback`). */
export interface WorkerFallback {
  code: 'E_WORKER';
  message: string;
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
  /** The request's id: `options.requestId`, or a fresh one (a chat completion's own `id`); what a witness log
   * (`llm.witness`) records the request under and `llm.feedback(requestId, ...)` names it by. */
  requestId: string;
  ids: number[];
  text: string;
  finishReason: 'stop' | 'length';
  /** The sampler's seed: the request's, or the fresh one drawn for a request without one. */
  seed: number;
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

/** What the app knows of a request beyond what the engine measures, for the witness log (`GenerateOptions.witness`,
 * a chat request's `witness`): its text (default: a chat's last user message, or the prompt), the route it took, and
 * the milliseconds spent embedding, retrieving and routing before it. */
export interface WitnessNote {
  /** Which API the request came through (the chat API says 'chat'; default 'generate'). */
  kind?: 'chat' | 'generate';
  query?: string;
  route?: { label: string; score: number } | null;
  latencyMs?: { embedding?: number; retrieval?: number; routing?: number };
}

/** One request as a witness log takes it (`WitnessLog.record`; the model records its own requests, `llm.witness`). */
export interface WitnessInput {
  requestId: string;
  session?: string | null;
  /** When it started (ms since the epoch; default now). */
  time?: number;
  kind?: 'chat' | 'generate';
  query?: string;
  route?: { label: string; score: number } | null;
  model?: { name: string | null; architecture: string; backend: string };
  adapters?: number[];
  tokens?: { prompt: number; cached: number; generated: number };
  latencyMs?: { embedding?: number | null; retrieval?: number | null; routing?: number | null; prefill?: number; decode?: number; total?: number };
  finishReason?: string | null;
  error?: string | null;
}

/** Where a model's requests are recorded: a `WitnessLog` (npm/src/vectors/witness.ts), or the app's own. Both calls
 * return at once; the log writes in the background. */
export interface WitnessSink {
  record(entry: WitnessInput): void;
  score(requestId: string, quality: number): void;
}

/** A request the model answered and the feedback given on it (`llm.feedback(requestId, ...)`): what the background
 * learning loop learns from (`LearningLoop`, npm/src/vectors/learning.ts). */
export interface Trajectory {
  requestId: string;
  /** The conversation the request answered, and the answer it gave. */
  messages: Array<{ role: string; content: unknown }>;
  response: string;
  score: number;
  preferred: string | null;
  /** The route the app says the request should have taken (a correction for the Router), or null. */
  route: string | null;
  /** When the feedback came (ms since the epoch). */
  time: number;
}

/** Where feedback on requests goes besides the instant loop (`llm.trajectories`): returns at once. */
export interface TrajectorySink {
  take(trajectory: Trajectory): void;
}
