// MicroLoRA (crate/src/training/mod.rs, bound in crate/src/wasm/lora.rs): a small LoRA adapter of the model's last
// layers that the engine trains from feedback on answers (gradient steps through a real backward pass, Adam, an EWC
// penalty toward what it consolidated), kept in a store across reloads, exported as llama.cpp's GGUF adapter file.
// It is an adapter like a loaded file: `adapters: [{ id: lora.id }]` in generate and the chat API applies it. With the
// engine in a worker (`worker: true`) the MicroLoRA lives there (a `MicroLora` of the worker's model, its store opened
// there) and the page's `MicroLora` is the same class over a `MicroLoraLink`: each method runs in the worker, whose
// answer brings the MicroLoRA's state (its info and GGUF export), which the page keeps for `info` and `exportGguf`.

import type { Engine } from './builds.js';
import type { ChatMessage } from './chat.js';
import { RuvllmError, invalid, throwIfAborted } from './errors.js';
import { KEY, storeError, type Store } from './store/store.js';

export type Projection = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';

/** How a MicroLoRA is made (a stored one keeps the options it was made with). */
export interface MicroLoraOptions {
  /** Where it is kept: `'indexeddb'`, a directory (Node), or a `Store`; none: this page or process only. */
  store?: 'indexeddb' | string | Store;
  /** Its name in the store: lowercase letters and digits (default `'default'`). */
  name?: string;
  /** Rank of each adapted projection, 1-16 (default 2). */
  rank?: number;
  /** How many of the model's last layers it adapts (default 4). */
  layers?: number;
  /** Which projections of those layers (default `['q', 'v']`). */
  projections?: Projection[];
  /** `B·A` is scaled by `alpha / rank` (default 2). */
  alpha?: number;
  /** Adam's step size (default 0.01). */
  learningRate?: number;
  /** Weight of the penalty toward the consolidated weights, by how much each weight mattered (default 1e6). */
  ewcLambda?: number;
  /** How much of the old importance estimate a consolidation keeps (default 0.9). */
  fisherDecay?: number;
  /** Seed of the initial weights (default 0). */
  seed?: number;
  /** Whether `feedback`, `protect`, `consolidate` and `reset` write it to its store (default true). False: only
   * `save()` does, so the store holds a checkpoint the app chose (the background loop's base adapter). */
  autosave?: boolean;
}

/** One piece of feedback: the conversation, the answer given to it, and whether it was good. */
export interface Feedback {
  messages: ChatMessage[];
  response: string;
  /** `true`: learn this answer (reward 1); `false`: move away from it (reward -1). */
  accepted?: boolean;
  /** Or a weight in [-1, 1], not 0: > 0 teaches the answer, < 0 pushes away from it. */
  reward?: number;
  signal?: AbortSignal;
}

/** What one training step did. */
export interface FeedbackResult {
  /** The loss on the answer before the step (cross-entropy per token, or unlikelihood for a negative reward). */
  loss: number;
  /** Answer tokens it was computed over. */
  tokens: number;
  /** Steps this adapter has taken in all. */
  steps: number;
  /** Milliseconds by phase: the frozen layers (0 when kept from a step on the same text), the trained layers'
   * forward pass and the loss, the backward pass, the optimizer. */
  timings: { frozenMs: number; forwardMs: number; backwardMs: number; updateMs: number };
}

export interface MicroLoraInfo {
  name: string;
  steps: number;
  /** Trainable weights. */
  params: number;
  /** What a store keeps of it: its whole training state, in bytes. */
  stateBytes: number;
  rank: number;
  layers: number;
  projections: Projection[];
  alpha: number;
  learningRate: number;
  ewcLambda: number;
  fisherDecay: number;
  /** Whether a store keeps it. */
  stored: boolean;
}

/** What a MicroLoRA needs of its `LLM`: the engine, one call at a time, and the model's chat template. */
export interface MicroLoraHost {
  call<T>(fn: (engine: Engine) => T): T;
  callAsync<T>(fn: (engine: Engine) => T | Promise<T>): Promise<T>;
  exclusive<T>(signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T>;
  tokenize(text: string, options: { special?: boolean; prompt?: boolean }): number[];
  applyChatTemplate(messages: ChatMessage[], options: { addGenerationPrompt?: boolean }): string;
  tokenizeChat(messages: ChatMessage[], options: { addGenerationPrompt?: boolean }): number[];
}

/** How the page reaches a MicroLoRA in the engine worker (worker/client.ts's `RemoteModel`): `method` of the worker's
 * `MicroLora` number `lora` (or `'open'`, the worker's model's `microLora(options)`), or `'state'` (none: the state
 * only), run there and answered with its value and the MicroLoRA's state after it. */
export interface MicroLoraLink {
  usable(): void;
  microLora<T>(lora: number | null, method: MicroLoraMethod, args: unknown[], signal?: AbortSignal): Promise<{ value: T; state: MicroLoraState }>;
}

export type MicroLoraMethod = 'open' | 'feedback' | 'protect' | 'consolidate' | 'reset' | 'save' | 'state';

/** What the page keeps of a MicroLoRA in the worker, as its last answer sent it: `info()` and `exportGguf()`. */
export interface MicroLoraState {
  info: MicroLoraInfo;
  gguf: Uint8Array;
}

const TRAINING_OPTIONS = ['rank', 'layers', 'projections', 'alpha', 'learningRate', 'ewcLambda', 'fisherDecay', 'seed'] as const;

export class MicroLora {
  /** Its adapter id, for the `adapters` option of generate and the chat API. */
  readonly id: number;
  readonly name: string;
  readonly #host: MicroLoraHost;
  readonly #store: Store | null;
  readonly #autosave: boolean;
  /** With the engine in a worker: the MicroLoRA there, and its state as the last answer from there sent it. */
  readonly #link: MicroLoraLink | null;
  #state: MicroLoraState | null;

  private constructor(host: MicroLoraHost, id: number, name: string, store: Store | null, autosave: boolean, link: MicroLoraLink | null = null, state: MicroLoraState | null = null) {
    this.#host = host;
    this.id = id;
    this.name = name;
    this.#store = store;
    this.#autosave = autosave;
    this.#link = link;
    this.#state = state;
  }

  /** The MicroLoRA `store` keeps under `options.name`, or a new one (also stored, when there is a store). A stored
   * record that is damaged or of another model is `E_ADAPTER`, and is left as it is. */
  static async open(host: MicroLoraHost, store: Store | null, options: MicroLoraOptions): Promise<MicroLora> {
    const name = checkName(options.name ?? 'default');
    for (const key of Object.keys(options)) {
      if (key !== 'store' && key !== 'name' && key !== 'autosave' && !(TRAINING_OPTIONS as readonly string[]).includes(key)) throw invalid(`unknown MicroLoRA option '${key}'`);
    }
    if (options.autosave !== undefined && typeof options.autosave !== 'boolean') throw invalid('autosave must be a boolean');
    const autosave = options.autosave ?? true;
    const maxBytes = host.call((e) => engine(e).microLoraMaxBytes());
    const saved = store ? await storeCall('read', () => store.get(recordKey(name), maxBytes)) : undefined;
    return host.exclusive(undefined, async () => {
      if (saved) return new MicroLora(host, host.call((e) => engine(e).openMicroLora(saved)), name, store, autosave);
      const training = Object.fromEntries(TRAINING_OPTIONS.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]));
      const lora = new MicroLora(host, host.call((e) => engine(e).createMicroLora(JSON.stringify(training))), name, store, autosave);
      await lora.#save();
      return lora;
    });
  }

  /** `open` in the engine worker, on its model (`options.store`, a name, opens there): the page's `MicroLora` of it.
   * `host` is the page's text side only (the worker's `MicroLora` tokenizes for itself). */
  static async openRemote(link: MicroLoraLink, host: MicroLoraHost, options: MicroLoraOptions): Promise<MicroLora> {
    const { value, state } = await link.microLora<{ id: number; name: string }>(null, 'open', [options]);
    return new MicroLora(host, value.id, value.name, null, options.autosave ?? true, link, state);
  }

  /** Delete the MicroLoRA `store` keeps under `name` (one that cannot be opened too); whether there was one. */
  static async remove(store: Store, name: string): Promise<boolean> {
    const key = recordKey(checkName(name));
    const had = (await storeCall('read', () => store.get(key))) !== undefined;
    await storeCall('stored', () => store.delete([key]));
    return had;
  }

  /** One training step on `feedback.response` as the answer to `feedback.messages` (then kept in the store). The
   * answer's tokens, with the chat template's end of turn, are what the step teaches or pushes away from. */
  async feedback(feedback: Feedback): Promise<FeedbackResult> {
    if (this.#link) {
      const { signal, ...rest } = feedback ?? ({} as Feedback); // checked in the worker; a signal cannot cross
      return this.#remote('feedback', [rest], signal);
    }
    const { messages, response, accepted, reward, signal } = feedback ?? ({} as Feedback);
    if (typeof response !== 'string' || response === '') throw invalid('response must be a non-empty string');
    if (accepted !== undefined && reward !== undefined) throw invalid('give accepted or reward, not both');
    const weight = reward ?? (accepted === false ? -1 : 1);
    if (typeof weight !== 'number' || !Number.isFinite(weight) || weight === 0 || Math.abs(weight) > 1) {
      throw invalid('reward must be a number in [-1, 1], not 0');
    }
    const { ids, first } = this.#example(messages, response);
    return this.#host.exclusive(signal, async () => {
      throwIfAborted(signal);
      const json = await this.#host.callAsync((e) => engine(e).trainMicroLora(this.id, Uint32Array.from(ids), first, weight));
      const r = JSON.parse(json as string);
      await this.#autosaved();
      return { loss: r.loss, tokens: r.tokens, steps: r.steps, timings: { frozenMs: r.frozenMs, forwardMs: r.forwardMs, backwardMs: r.backwardMs, updateMs: r.updateMs } };
    });
  }

  /** Keep what the model already says: make `examples` (conversations and answers it should go on giving, e.g. its
   * own answers to everyday questions) what the penalty toward the consolidated weights protects, around the weights
   * as they are now. Later feedback then moves the weights that matter to them less. Takes no step; then stored. */
  async protect(examples: Array<{ messages: ChatMessage[]; response: string }>): Promise<void> {
    if (this.#link) return this.#remote('protect', [examples]);
    if (!Array.isArray(examples) || examples.length === 0) throw invalid('examples must be a non-empty array of { messages, response }');
    const pairs = examples.map((x) => {
      if (typeof x?.response !== 'string' || x.response === '') throw invalid('each example needs a non-empty response');
      const { ids, first } = this.#example(x.messages, x.response);
      return [ids, first];
    });
    await this.#host.exclusive(undefined, async () => {
      await this.#host.callAsync((e) => engine(e).protectMicroLora(this.id, JSON.stringify(pairs)));
      await this.#autosaved();
    });
  }

  /** Fold the steps since the last consolidation into the weights later steps are held toward (the slow loop: call
   * it at the end of a session, or when idle); how many steps it folded. Then kept in the store. */
  async consolidate(): Promise<number> {
    if (this.#link) return this.#remote('consolidate', []);
    return this.#host.exclusive(undefined, async () => {
      const folded = this.#host.call((e) => engine(e).consolidateMicroLora(this.id));
      await this.#autosaved();
      return folded;
    });
  }

  /** Start again as a fresh MicroLoRA of the same options (`B = 0`: the base model as it is), its steps and what it
   * consolidated gone; then stored. The background loop resets the instant adapter once the base adapter has
   * learned what it had. */
  async reset(): Promise<void> {
    if (this.#link) return this.#remote('reset', []);
    await this.#host.exclusive(undefined, async () => {
      this.#host.call((e) => engine(e).resetMicroLora(this.id));
      await this.#autosaved();
    });
  }

  /** What it is and how many steps it took. With the engine in a worker (`worker: true`) it answers synchronously
   * from what the worker sent with its last answer (the open, and after each `feedback`, `protect`, `consolidate` and
   * `save`): a call still running is not in it yet. */
  info(): MicroLoraInfo {
    if (this.#link) {
      this.#link.usable();
      const { info } = this.#state!;
      return { ...info, projections: [...info.projections] };
    }
    const info = JSON.parse(this.#host.call((e) => engine(e).microLoraInfo(this.id)));
    return { name: this.name, ...info, stored: this.#store !== null };
  }

  /** Its weights as llama.cpp's GGUF LoRA adapter file (`llm.loadAdapter`, llama.cpp's `--lora`, node-llama-cpp).
   * With the engine in a worker (`worker: true`) the worker sends the export with each answer (the open, and after
   * each `feedback`, `protect`, `consolidate` and `save`), so this stays synchronous: it is the weights as of the last
   * answered call (a copy: yours to change). */
  exportGguf(): Uint8Array {
    if (this.#link) {
      this.#link.usable();
      return this.#state!.gguf.slice();
    }
    return this.#host.call((e) => engine(e).exportMicroLora(this.id, `ruvllm microlora ${this.name}`));
  }

  /** Write it to its store now (feedback and consolidate do, unless `autosave: false`); `E_STORE_FULL` or `E_STORE` if the store refuses,
   * with the adapter kept as it is here. */
  async save(): Promise<void> {
    if (this.#link) return this.#remote('save', []);
    await this.#host.exclusive(undefined, () => this.#save());
  }

  /** `method` run on the MicroLoRA in the worker; its state after it kept. A call that fails may still have changed
   * it (a step taken, then a store that refused it): the state is asked for again. */
  async #remote<T>(method: MicroLoraMethod, args: unknown[], signal?: AbortSignal): Promise<T> {
    const link = this.#link!;
    try {
      const { value, state } = await link.microLora<T>(this.id, method, args, signal);
      this.#state = state;
      return value;
    } catch (e) {
      await link.microLora(this.id, 'state', []).then(({ state }) => (this.#state = state), () => {});
      throw e;
    }
  }

  async #autosaved(): Promise<void> {
    if (this.#autosave) await this.#save();
  }

  async #save(): Promise<void> {
    const store = this.#store;
    if (!store) return;
    const bytes = this.#host.call((e) => engine(e).saveMicroLora(this.id));
    await storeCall('stored', () => store.put([{ key: recordKey(this.name), bytes }]));
  }

  /** The example's tokens: the prompt as generation sees it, then the answer and the template's end of turn. */
  #example(messages: ChatMessage[], response: string): { ids: number[]; first: number } {
    if (!Array.isArray(messages) || messages.length === 0) throw invalid('messages must be a non-empty array');
    const prompt = this.#host.applyChatTemplate(messages, { addGenerationPrompt: true });
    const whole = this.#host.applyChatTemplate([...messages, { role: 'assistant', content: response }], { addGenerationPrompt: false });
    if (!whole.startsWith(prompt)) throw new RuvllmError('E_CHAT_TEMPLATE', "the chat template renders the answer's turn in a way that does not continue the prompt");
    const promptIds = this.#host.tokenizeChat(messages, { addGenerationPrompt: true });
    // The answer's tokens and one more: the end-of-turn token that follows it (what generation stops on).
    const answer = this.#host.tokenize(response, {});
    const tail = this.#host.tokenize(whole.slice(prompt.length), { special: true });
    const ids = [...promptIds, ...tail.slice(0, Math.min(tail.length, answer.length + 1))];
    return { ids, first: promptIds.length };
  }
}

function checkName(name: unknown): string {
  if (typeof name !== 'string' || !/^[0-9a-z]{1,48}$/.test(name)) throw invalid('name must be 1-48 lowercase letters and digits');
  return name;
}

function recordKey(name: string): string {
  const key = `microlora${name}`;
  if (!KEY.test(key)) throw invalid(`name '${name}' makes no store key`);
  return key;
}

/** The engine's MicroLoRA calls (crate/src/wasm/lora.rs), which the WebGPU build's engine has not. */
function engine(e: Engine): Required<Pick<Engine, MicroLoraCall>> {
  if (typeof e.createMicroLora !== 'function') throw new RuvllmError('E_GPU_UNSUPPORTED', 'MicroLoRA trains on the CPU engine: load with backend: "cpu"');
  return e as Required<Pick<Engine, MicroLoraCall>>;
}

type MicroLoraCall =
  | 'createMicroLora'
  | 'openMicroLora'
  | 'microLoraMaxBytes'
  | 'trainMicroLora'
  | 'protectMicroLora'
  | 'consolidateMicroLora'
  | 'resetMicroLora'
  | 'saveMicroLora'
  | 'exportMicroLora'
  | 'microLoraInfo';

/** A store's call, its failure as `E_STORE_FULL` or `E_STORE`. */
async function storeCall<T>(what: 'read' | 'stored', fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw storeError(e, `the MicroLoRA could not be ${what}`);
  }
}
