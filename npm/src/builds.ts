// The wasm builds the package ships, which one a load uses, and starting it (once per process or page).
import { RuvllmError, invalid } from './errors.js';

/** `wasm`: one thread, runs everywhere. `wasm-mt`: rayon on Web Workers sharing the wasm memory.
 * `wasm-gpu`: `wasm` plus the WebGPU engine (chosen by the `backend` option, see backend.ts). */
export type BuildName = 'wasm' | 'wasm-mt' | 'wasm-gpu';

/** A CPU build's instruction set: plain SIMD128, or with relaxed SIMD (`wasm-relaxed/`, `wasm-mt-relaxed/`). */
export type Simd = 'simd128' | 'relaxed';
/** `LoadOptions.simd`. */
export type SimdOption = 'auto' | Simd;

/**
 * What the package uses of a build's wasm-bindgen glue module (the same in every build). Declared here
 * rather than imported, so that the published types do not pull in the glue's DOM-typed declarations;
 * FILES below checks that each glue module has this shape.
 */
export interface Glue {
  default(init: { module_or_path: Uint8Array | URL }): Promise<unknown>;
  /** wasm-bindgen-rayon's pool start (threaded build only). */
  initThreadPool?(threads: number): Promise<unknown>;
  /** `optionsJson`: `{kvCache?, chatTemplate?}`. */
  Engine: { fromBuffer(buffer: ModelBuffer, nCtx: number, optionsJson?: string): Engine };
  /** The WebGPU engine (crate/src/wasm/gpu.rs; `wasm-gpu` build only): the same methods, its forward passes return Promises. */
  GpuEngine?: {
    load(buffer: ModelBuffer, nCtx: number, optionsJson: string): Promise<Engine>;
    /** The model a `GpuStream` received whole, its matrices on the GPU only. */
    fromStream(stream: GpuStream, nCtx: number, optionsJson: string): Promise<Engine>;
  };
  /** A model file on its way to the GPU, its matrices never in wasm memory (`wasm-gpu` build only). `optionsJson`:
   * `{maxBindingBytes?}` (any adapter will do, as under `webgpu`). */
  GpuStream?: { open(len: number, optionsJson: string): Promise<GpuStream> };
  ModelBuffer: new (capacity: number) => ModelBuffer;
  /** SHA-256 over chunks (crate/src/wasm/mod.rs), for the model files a store keeps. */
  Sha256: new () => { update(chunk: Uint8Array): void; digest(): string; free(): void };
  /** A vector index with entries (crate/src/wasm/index.rs). */
  Collection: CollectionClass;
  /** Reads the tool calls of an answer as it streams (crate/src/wasm/chat.rs). */
  ToolCallParser: new (format: string, toolsJson?: string) => WasmToolCallParser;
  /** A model's text side from its GGUF header alone (crate/src/wasm/text.rs). */
  TextEngine: TextEngineClass;
  lastPanic(): string | undefined;
}

export interface CollectionClass {
  new (optionsJson: string): WasmCollection;
  fromRecords(keys: string[], records: Uint8Array[]): WasmCollection;
  /** The largest valid record under `key` (0: a key no collection uses). */
  maxRecordBytes(key: string): number;
}

/** crate/src/wasm/index.rs: JSON in and out, ids as numbers. */
export interface WasmCollection {
  info(): string;
  add(vector: Float32Array, text: string, label: string, now: number): string;
  remove(id: number): boolean;
  removeLabel(label: string): number;
  setThreshold(label: string | undefined, threshold: number | undefined): void;
  setBudget(bytes: number | undefined): string;
  entry(id: number): string | undefined;
  vector(id: number): Float32Array | undefined;
  entries(label: string | undefined): string;
  search(query: Float32Array, k: number, ef: number, label: string | undefined, exceptLabel: string | undefined): string;
  recall(query: Float32Array, k: number, ef: number, label: string | undefined, exceptLabel: string | undefined, minScore: number, now: number): string;
  route(query: Float32Array, k: number, ef: number): string;
  /** JSON `[{members, medoid}]`: k-means++ clusters of `label`'s entries, largest first. */
  clusters(label: string | undefined, k: number, seed: number): string;
  /** JSON `[{a, b, score}]`: pairs of `label`'s entries scoring at least `minScore` against each other. */
  nearPairs(label: string, minScore: number): string;
  tag(): string;
  setTag(tag: string): void;
  takeChanges(): { put: Array<[string, Uint8Array]>; delete: string[] };
  takeAll(): { put: Array<[string, Uint8Array]>; delete: string[] };
  confirm(): void;
  abort(): void;
  lease(): boolean;
  /** Consumes `fresh`. */
  rebase(fresh: WasmCollection): void;
  discard(keys: string[]): void;
  emptyLike(): WasmCollection;
  free(): void;
}

/** `push` and `finish` return JSON arrays of `{content}`, `{index, name}` (a call begins) and `{index, arguments}`. */
export interface WasmToolCallParser {
  push(text: string): string;
  finish(): string;
  free(): void;
}

export interface GpuStream {
  /** Take the file's next chunk; await each before the next. */
  push(chunk: Uint8Array): Promise<void>;
  free(): void;
}

export interface ModelBuffer {
  push(chunk: Uint8Array): void;
  /** The next chunks are the next shard of a split model, of `capacity` bytes (0: unknown). */
  nextShard(capacity: number): void;
  free(): void;
}

export interface TextEngineClass {
  /** `optionsJson`: `{chatTemplate?}`. */
  new (header: Uint8Array, optionsJson?: string): TextEngine;
  /** How many bytes of the file the header in `prefix` takes: at most `prefix.length` when all of it is there, else
   * at least how many it needs. */
  headerBytes(prefix: Uint8Array): number;
}

/** The text calls every engine answers (crate/src/wasm/text.rs): the same functions on each engine's text side. */
export interface TextCalls {
  tokenize(text: string, parseSpecial: boolean): Uint32Array;
  tokenizePrompt(text: string): Uint32Array;
  detokenize(ids: Uint32Array): string;
  /** `requestJson`: `{messages, tools?, tool_choice?, parallel_tool_calls?, chat_template_kwargs?, add_generation_prompt?}`. */
  applyChatTemplate(requestJson: string): string;
  /** JSON `{ids, grammar, tool_format}` (crate/src/wasm/chat.rs). */
  chatPrompt(requestJson: string, parseSpecialInMessages: boolean): string;
}

/** A model's text side without its weights: its `info()` is JSON `{name, architecture, vocab_size, has_chat_template,
 * bos, eos}`. */
export interface TextEngine extends TextCalls {
  info(): string;
  free(): void;
}

/** An engine (crate/src/wasm/mod.rs, gpu.rs). The forward passes (start, nextStep, score) return Promises in the
 * threaded and WebGPU builds. */
export interface Engine extends TextCalls {
  info(): string;
  start(promptIds: Uint32Array, optionsJson: string): unknown;
  nextStep(): unknown;
  finish(cancel: boolean): string | undefined;
  score(ids: Uint32Array, k: number): unknown;
  /** A LoRA adapter file read for the model: its id (both engines run adapters). */
  loadAdapter(bytes: Uint8Array): number;
  unloadAdapter(id: number): boolean;
  /** MicroLoRA (crate/src/wasm/lora.rs only): adapters trained here, with adapter ids. trainMicroLora returns JSON
   * (a Promise of it in the threaded build). */
  createMicroLora?(optionsJson: string): number;
  openMicroLora?(bytes: Uint8Array): number;
  microLoraMaxBytes?(): number;
  trainMicroLora?(id: number, ids: Uint32Array, firstTarget: number, reward: number): unknown;
  protectMicroLora?(id: number, examplesJson: string): unknown;
  consolidateMicroLora?(id: number): number;
  resetMicroLora?(id: number): void;
  saveMicroLora?(id: number): Uint8Array;
  exportMicroLora?(id: number, name: string): Uint8Array;
  microLoraInfo?(id: number): string;
  /** SHA-256 of the GGUF header and samples of the weights, hex (crate/src/wasm/mod.rs only). */
  modelId?(): string;
  /** JSON `{embeddings, tokens}` (crate/src/wasm/mod.rs only: the WebGPU build's engine has none). */
  embed?(textsJson: string, optionsJson: string): unknown;
  reset(): void;
  setPrefixCacheBudget(bytes: number): void;
  clearPrefixCache(): void;
  prefixCachePersist(on: boolean): void;
  prefixCacheMissing(ids: Uint32Array): string[];
  prefixCacheLoad(ids: Uint32Array, records: Uint8Array[]): string;
  /** Bytes of every record of the prefix cache: a stored record of another size is refused unread. */
  prefixCacheRecordBytes(): number;
  prefixCacheTakeUnsaved(): unknown[];
  prefixCacheKeys(ids: Uint32Array): string[];
  /** A Promise in the WebGPU build (the GPU's rows are read back). */
  saveState(): Uint8Array | Promise<Uint8Array>;
  restoreState(bytes: Uint8Array): void;
  free(): void;
}

/** A started build: its glue module and its thread count. */
export interface Wasm {
  build: BuildName;
  threads: number;
  glue: Glue;
  /** Await a forward pass (a Promise in the threaded build), keeping the process alive meanwhile. */
  settle<T>(result: T | Promise<T>): Promise<T>;
}

/** What differs between Node and browsers. */
export interface Host {
  /** What wasm-bindgen's init takes for a build's .wasm: its bytes (Node) or its URL (browsers). */
  wasmSource(url: URL): Promise<Uint8Array | URL>;
  /** Why the threaded build cannot run here (a page that is not cross-origin isolated has no
   * SharedArrayBuffer), or null where it can (Node, a cross-origin isolated page). */
  whyNoThreads(): string | null;
  /** Threads to use when the caller does not say: the cores, at most 8. */
  defaultThreads(): number;
  /** Start the threaded build: import its glue, instantiate, run wasm-bindgen-rayon's `initThreadPool`
   * (Node wraps this in the Web Worker shims that needs). */
  startThreaded(start: () => Promise<void>): Promise<void>;
  /** Await `promise` keeping the process alive (Node does not wait for a wasm thread to wake it up). */
  keepAlive<T>(promise: Promise<T>): Promise<T>;
}

interface BuildFiles {
  glue: () => Promise<Glue>;
  wasm: URL;
}

/** A build's folder: its name, with `-relaxed` for the relaxed-SIMD form of a CPU build. */
type Folder = BuildName | 'wasm-relaxed' | 'wasm-mt-relaxed';

// One row per folder; literal paths so that bundlers find every file.
const FILES: Record<Folder, BuildFiles> = {
  wasm: { glue: () => import('../wasm/ruvllm.js'), wasm: new URL('../wasm/ruvllm_bg.wasm', import.meta.url) },
  'wasm-mt': { glue: () => import('../wasm-mt/ruvllm.js'), wasm: new URL('../wasm-mt/ruvllm_bg.wasm', import.meta.url) },
  'wasm-relaxed': { glue: () => import('../wasm-relaxed/ruvllm.js'), wasm: new URL('../wasm-relaxed/ruvllm_bg.wasm', import.meta.url) },
  'wasm-mt-relaxed': { glue: () => import('../wasm-mt-relaxed/ruvllm.js'), wasm: new URL('../wasm-mt-relaxed/ruvllm_bg.wasm', import.meta.url) },
  'wasm-gpu': { glue: () => import('../wasm-gpu/ruvllm.js'), wasm: new URL('../wasm-gpu/ruvllm_bg.wasm', import.meta.url) },
};

function folder(build: BuildName, simd: Simd): Folder {
  if (simd === 'simd128') return build;
  if (build === 'wasm-gpu') throw new Error('the WebGPU build has no relaxed-SIMD form');
  return `${build}-relaxed`;
}

/** A module whose one function uses `i16x8.relaxed_dot_i8x16_i7x16_s`, the relaxed instruction the kernels rely on
 * most: a runtime that validates it runs the relaxed builds (engines ship relaxed SIMD as one feature). */
const RELAXED_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
  0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, // types: () -> v128
  0x03, 0x02, 0x01, 0x00, // one function of type 0
  0x0a, 0x0f, 0x01, 0x0d, 0x00, // code: one body of 13 bytes, no locals
  0x41, 0x01, 0xfd, 0x0f, 0x41, 0x02, 0xfd, 0x0f, // i8x16.splat(1), i8x16.splat(2)
  0xfd, 0x92, 0x02, 0x0b, // i16x8.relaxed_dot_i8x16_i7x16_s, end
]);

let relaxedValidates: boolean | undefined;

/** Whether this runtime has relaxed SIMD (checked once). */
export function hasRelaxedSimd(): boolean {
  relaxedValidates ??= WebAssembly.validate(RELAXED_PROBE);
  return relaxedValidates;
}

export function checkSimd(simd: unknown): SimdOption {
  if (simd === 'auto' || simd === 'relaxed' || simd === 'simd128') return simd;
  throw invalid(`simd must be one of auto, relaxed, simd128, got ${String(simd)}`);
}

/** The instruction set of CPU build `build` for the option `simd` (the WebGPU build: SIMD128, whatever asked). */
export function chooseSimd(simd: SimdOption, build: BuildName): Simd {
  if (build === 'wasm-gpu' || simd === 'simd128') return 'simd128';
  if (hasRelaxedSimd()) return 'relaxed';
  if (simd === 'relaxed') throw new RuvllmError('E_UNSUPPORTED', 'simd: relaxed: this runtime has no relaxed SIMD (Chromium 114+ and Node 22+ have it)');
  return 'simd128';
}

/** Why a load runs on fewer threads than it asked for (or, by default, than the cores): `info().threadFallback`. */
export interface ThreadFallback {
  code: 'E_THREADS';
  message: string;
}

/**
 * The build for a load that asks for `threads` (undefined = as many as suit this host): the threaded
 * one where it can run and more than one thread is wanted, else the single-thread one (and why).
 */
export function chooseBuild(host: Host, threads: number | undefined): { build: BuildName; threads: number; fallback: ThreadFallback | null } {
  if (threads !== undefined && (!Number.isSafeInteger(threads) || threads < 1)) {
    throw invalid(`threads must be an integer >= 1, got ${String(threads)}`);
  }
  const wanted = threads ?? host.defaultThreads();
  if (wanted === 1) return { build: 'wasm', threads: 1, fallback: null };
  const why = host.whyNoThreads();
  if (why !== null) return { build: 'wasm', threads: 1, fallback: { code: 'E_THREADS', message: why } };
  return { build: 'wasm-mt', threads: wanted, fallback: null };
}

const started = new Map<Folder, Promise<Wasm>>();

/** Start `build` in the instruction set `simd` chose (`chooseSimd`) once. A failed fetch is retried by the next load; a
 * thread pool that failed to start (E_THREADS) is not, since the build's instance is left half made. The pool is made
 * at the first start, so a later load asking for another thread count is refused. Under `auto`, a relaxed build that
 * cannot be fetched (a checkout that built only the plain ones) gives way to the plain one. */
export async function startBuild(host: Host, build: BuildName, threads: number, simd: SimdOption = 'auto'): Promise<Wasm> {
  const set = chooseSimd(simd, build);
  try {
    return await startFolder(host, build, folder(build, set), threads);
  } catch (e) {
    if (set === 'simd128' || simd !== 'auto' || (e as RuvllmError).code !== 'E_FETCH') throw e;
    return startFolder(host, build, build, threads);
  }
}

async function startFolder(host: Host, build: BuildName, at: Folder, threads: number): Promise<Wasm> {
  let wasm = started.get(at);
  if (!wasm) {
    wasm = start(host, build, at, threads);
    started.set(at, wasm);
    wasm.catch((e) => {
      if ((e as RuvllmError).code !== 'E_THREADS') started.delete(at);
    });
  }
  const w = await wasm;
  if (w.threads !== threads) {
    throw invalid(`the threaded engine already runs ${w.threads} threads in this ${typeof window === 'undefined' ? 'process' : 'page'}; it cannot change to ${threads}`);
  }
  return w;
}

async function start(host: Host, build: BuildName, at: Folder, threads: number): Promise<Wasm> {
  const files = FILES[at];
  let glue!: Glue;
  let instantiated = false;
  const run = async () => {
    glue = await files.glue();
    await glue.default({ module_or_path: await host.wasmSource(files.wasm) });
    instantiated = true;
    if (build === 'wasm-mt') await glue.initThreadPool!(threads);
  };
  try {
    await (build === 'wasm-mt' ? host.startThreaded(run) : run());
  } catch (e) {
    const message = (e as Error)?.message ?? String(e);
    if (instantiated) throw new RuvllmError('E_THREADS', `the thread pool could not start: ${message}`, { cause: e });
    throw new RuvllmError('E_FETCH', `cannot load the wasm engine (${at}): ${message}`, { cause: e });
  }
  const settle = <T>(result: T | Promise<T>) => (result instanceof Promise ? host.keepAlive(result) : Promise.resolve(result));
  return { build, threads, glue, settle };
}
