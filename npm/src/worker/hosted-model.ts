// A model as an engine host holds it for the pages that loaded it (host.ts): one `LLM` (one copy of the weights, one
// KV cache, one prefix cache) shared by every holder, each holder being one `LLM.load` in some page. Calls take turns
// in rotation over the pages waiting (`FairQueue`), so a tab that queues many requests does not starve the others.
// Each holder keeps a session of its own over the shared KV cache: its last conversation (the tokens it ran, or the
// state it restored). A generation needs none of it (its prompt is the whole conversation; the prefix cache and the
// shared KV give back what another holder's turn replaced), but `saveState` saves the holder's own conversation, so
// the host first puts it back when another holder ran since.
import { AbortError, throwIfAborted } from '../errors.js';
import type { LLM } from '../llm.js';
import type { GenerateChunk, GenerateResult } from '../types.js';

/** Turns at one resource, granted one at a time in rotation over the keys (pages) that wait, each key's own turns
 * in the order they were asked for: a key that just had a turn waits while another key waits. */
export class FairQueue<K> {
  #busy = false;
  /** Waiting turns by key; the map's order is the rotation (a key served goes to the back). */
  readonly #waiting = new Map<K, Array<() => void>>();
  /** The key of the turn in progress. */
  #holder: K | undefined;

  /** Wait for a turn for `key`; the function it resolves to ends the turn. `signal` gives up the wait. */
  async turn(key: K, signal?: AbortSignal): Promise<() => void> {
    throwIfAborted(signal);
    if (!this.#busy) {
      this.#busy = true;
      this.#holder = key;
      return this.#release();
    }
    await new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = () => {
        const list = this.#waiting.get(key);
        const at = list?.indexOf(grant) ?? -1;
        if (at >= 0) list!.splice(at, 1);
        if (list?.length === 0) this.#waiting.delete(key);
        reject(new AbortError(signal!.reason));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const list = this.#waiting.get(key) ?? [];
      list.push(grant);
      this.#waiting.set(key, list);
    });
    return this.#release();
  }

  #release(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const keys = [...this.#waiting.keys()];
      if (keys.length === 0) {
        this.#busy = false;
        return;
      }
      const key = keys.find((k) => k !== this.#holder) ?? keys[0];
      const list = this.#waiting.get(key)!;
      this.#waiting.delete(key);
      this.#holder = key;
      const grant = list.shift()!;
      if (list.length > 0) this.#waiting.set(key, list); // to the back of the rotation
      grant();
    };
  }
}

/** A holder's conversation: the tokens its last generation ran (with the adapters that ran them), or the state it
 * restored. */
type Conversation = { ids: number[]; adapters: unknown } | { state: Uint8Array };

export class HostedModel<K = unknown> {
  readonly llm: LLM;
  /** The model's GGUF header, which each holder's page makes its text side of. */
  readonly header: Uint8Array;
  /** What loaded it (a URL and the options), when other loads of the same may share it. */
  readonly key: string | null;
  readonly queue = new FairQueue<K>();
  /** Holders by handle. */
  readonly #sessions = new Map<number, Conversation | null>();
  /** The holder whose conversation the KV cache holds (null: none, or not known). */
  #current: number | null = null;

  constructor(llm: LLM, header: Uint8Array, key: string | null) {
    this.llm = llm;
    this.header = header;
    this.key = key;
  }

  get holders(): number {
    return this.#sessions.size;
  }

  hold(handle: number): void {
    this.#sessions.set(handle, null);
  }

  /** Forget holder `handle`; whether any holder is left. */
  release(handle: number): boolean {
    this.#sessions.delete(handle);
    if (this.#current === handle) this.#current = null;
    return this.#sessions.size > 0;
  }

  /** `fn` in a turn of page `key` for holder `handle`, which leaves the KV cache as that holder's; `fn` is told whether
   * it was the holder's before. */
  async run<T>(key: K, handle: number, signal: AbortSignal | undefined, fn: (wasCurrent: boolean) => Promise<T>): Promise<T> {
    const release = await this.queue.turn(key, signal);
    try {
      const wasCurrent = this.#current === handle;
      this.#current = handle;
      return await fn(wasCurrent);
    } finally {
      release();
    }
  }

  /** A generation for holder `handle` in a turn of page `key`: it remembers the conversation that ran. */
  async *generate(key: K, handle: number, prompt: string | number[], options: Record<string, unknown> & { signal: AbortSignal }): AsyncGenerator<GenerateChunk, GenerateResult, undefined> {
    const release = await this.queue.turn(key, options.signal);
    try {
      const ids = typeof prompt === 'string' ? this.llm.tokenize(prompt, { prompt: true }) : prompt;
      this.#current = handle;
      this.#sessions.set(handle, { ids, adapters: options.adapters });
      const result = yield* this.llm.generate(ids, options);
      // The KV cache holds the prompt and the answer but its last token, which was sampled and never evaluated.
      this.#sessions.set(handle, { ids: [...ids, ...result.ids.slice(0, -1)], adapters: options.adapters });
      return result;
    } finally {
      release();
    }
  }

  /** The holder's conversation as bytes: put back first if another holder's turn replaced it. */
  async saveState(key: K, handle: number): Promise<Uint8Array> {
    return this.run(key, handle, undefined, async (wasCurrent) => {
      if (!wasCurrent) await this.#restore(handle);
      return this.llm.saveState();
    });
  }

  async restoreState(key: K, handle: number, bytes: Uint8Array): Promise<void> {
    return this.run(key, handle, undefined, async () => {
      await this.llm.restoreState(bytes);
      this.#sessions.set(handle, { state: bytes });
    });
  }

  /** Forget the holder's conversation (the KV cache's too: another holder's is back from the prefix cache). */
  async reset(key: K, handle: number): Promise<void> {
    return this.run(key, handle, undefined, async () => {
      this.#sessions.set(handle, null);
      await this.llm.reset();
    });
  }

  async #restore(handle: number): Promise<void> {
    const conversation = this.#sessions.get(handle);
    if (!conversation) await this.llm.reset();
    else if ('state' in conversation) await this.llm.restoreState(conversation.state);
    else await this.llm.complete(conversation.ids, { maxTokens: 0, adapters: conversation.adapters as never });
  }
}
