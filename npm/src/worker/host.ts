// Where the engine runs for pages (what entry.ts serves): a dedicated Worker serving its page, or a SharedWorker or a
// leader tab's worker serving every page of the origin. Each page is a `Peer`; its loads are holders of a
// `HostedModel` (hosted-model.ts): two loads of the same URL with the same options share one model, loaded once
// (a second page's load downloads nothing and allocates no second copy), and take turns at it fairly. A generation
// streams as `chunk`s of its call; `cancel` aborts a call through its own AbortController, as a signal in the page
// would. Each answer carries the model's `info()`, the page's snapshot of it. A page that goes away (`bye`, or the
// Web Lock it held released when it closed) has its calls aborted and its holds released. The page holds the
// model's text side itself, from the GGUF header the load answers with. The MicroLoRAs pages open live here, by id;
// each answer on one carries its info and GGUF export, from which the page's `MicroLora` answers `info` and
// `exportGguf`.
import { invalid } from '../errors.js';
import { loadWithHeader, type LLM } from '../llm.js';
import type { MicroLora } from '../microlora.js';
import type { ModelInfo } from '../types.js';
import { HostedModel } from './hosted-model.js';
import { toWire, type Reply, type Request } from './protocol.js';

/** One page the host serves: how to answer it. */
export interface Peer {
  post(reply: Reply, transfer?: Transferable[]): void;
}

/** A load that pages share: its progress goes to each (the last figure first to a page that joins later, so that
 * its figure ends whole), and it is aborted when no page waits for it. */
class SharedLoad {
  readonly listeners = new Set<(progress: unknown) => void>();
  last: unknown = undefined;
  /** How many loads wait for it now. */
  waiting = 0;
  readonly controller = new AbortController();
  readonly model: Promise<HostedModel<Peer>>;

  constructor(source: unknown, options: Record<string, unknown>, key: string | null) {
    const onProgress = (p: unknown) => {
      this.last = p;
      this.listeners.forEach((listener) => listener(p));
    };
    this.model = (async () => {
      const { llm, header } = await loadWithHeader(source as Parameters<typeof loadWithHeader>[0], { ...options, signal: this.controller.signal, onProgress });
      return new HostedModel<Peer>(llm, header, key);
    })();
  }
}

interface Holder {
  peer: Peer;
  model: HostedModel<Peer>;
}

export class Host {
  /** Models by what loaded them (a URL and the options), for loads that can be shared; loads in progress too. */
  readonly #byKey = new Map<string, SharedLoad>();
  /** Each load of a page, by the handle it answered with. */
  readonly #holders = new Map<number, Holder>();
  /** Each page's calls in progress. */
  readonly #calls = new Map<Peer, Map<number, AbortController>>();
  /** Each model's MicroLoRAs, by id. */
  readonly #microLoras = new WeakMap<LLM, Map<number, MicroLora>>();
  #next = 1;

  /** Start serving `peer` (its first message, or its `hello`). `lock`: the Web Lock it holds while it lives. */
  attach(peer: Peer, lock: string | null): void {
    if (this.#calls.has(peer)) return;
    this.#calls.set(peer, new Map());
    const locks = (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks;
    // Granted when the page has closed (or crashed): it frees its sessions and its turns.
    if (lock && locks) void locks.request(lock, async () => this.detach(peer));
  }

  /** `peer` is gone: its calls end and its holds on models are released (a model held by no page is freed). */
  detach(peer: Peer): void {
    const calls = this.#calls.get(peer);
    if (!calls) return;
    this.#calls.delete(peer);
    for (const controller of calls.values()) controller.abort();
    for (const [handle, holder] of this.#holders) if (holder.peer === peer) this.#release(handle);
  }

  /** How many pages the host serves. */
  get peers(): number {
    return this.#calls.size;
  }

  receive(peer: Peer, req: Request): void {
    switch (req.op) {
      case 'hello':
        this.attach(peer, req.lock);
        peer.post({ op: 'ready' });
        return;
      case 'bye':
        this.detach(peer);
        return;
      case 'load':
        return void this.#answer(peer, req.id, undefined, async (signal) => {
          const model = await this.#load(req.source, req.options, signal, (progress) => peer.post({ op: 'progress', id: req.id, progress }));
          const handle = this.#next++;
          model.hold(handle);
          this.#holders.set(handle, { peer, model });
          const header = model.header.slice(); // the page's own copy, transferred
          return { value: { handle, header }, handle, transfer: [header.buffer] };
        });
      case 'call':
        return void this.#answer(peer, req.id, req.handle, async (signal) => {
          const { model } = this.#holder(req.handle, peer);
          const { llm } = model;
          let value: unknown;
          if (req.method === 'saveState') value = await model.saveState(peer, req.handle);
          else if (req.method === 'restoreState') value = await model.restoreState(peer, req.handle, req.args[0] as Uint8Array);
          else if (req.method === 'reset') value = await model.reset(peer, req.handle);
          else if (req.method === 'unloadAdapter') value = llm.unloadAdapter(req.args[0] as number);
          else {
            const args = [...req.args];
            // The methods that take options take the call's signal in them.
            if (['score', 'embedWithUsage', 'loadAdapter'].includes(req.method)) args[1] = { ...(args[1] as object), signal };
            value = await model.run(peer, req.handle, signal, () => (llm[req.method] as (...a: unknown[]) => Promise<unknown>).apply(llm, args));
          }
          return { value, transfer: value instanceof Uint8Array ? [value.buffer] : [] };
        });
      case 'microLora':
        return void this.#answer(peer, req.id, req.handle, async (signal) => {
          const { model } = this.#holder(req.handle, peer);
          const { llm } = model;
          const loras = this.#microLoras.get(llm) ?? new Map<number, MicroLora>();
          this.#microLoras.set(llm, loras);
          return model.run(peer, req.handle, signal, async () => {
            let lora: MicroLora | undefined;
            let value: unknown;
            if (req.method === 'open') {
              lora = await llm.microLora(req.args[0] as Parameters<LLM['microLora']>[0]);
              loras.set(lora.id, lora);
              value = { id: lora.id, name: lora.name };
            } else {
              lora = loras.get(req.lora ?? -1);
              if (!lora) throw invalid(`no MicroLoRA ${req.lora} in this worker`);
              // feedback takes the call's signal in its argument.
              if (req.method === 'feedback') value = await lora.feedback({ ...(req.args[0] as Parameters<MicroLora['feedback']>[0]), signal });
              else if (req.method !== 'state') value = await (lora[req.method] as (...a: unknown[]) => unknown).apply(lora, req.args);
            }
            // The state the page answers info() and exportGguf() from; the export's bytes are transferred.
            const gguf = lora.exportGguf();
            return { value: { value, state: { info: lora.info(), gguf } }, transfer: [gguf.buffer] };
          });
        });
      case 'generate':
        return void this.#answer(peer, req.id, req.handle, async (signal) => {
          const { model } = this.#holder(req.handle, peer);
          const prompt = req.prompt instanceof Uint32Array ? Array.from(req.prompt) : req.prompt;
          const it = model.generate(peer, req.handle, prompt, { ...req.options, signal });
          for (;;) {
            const r = await it.next();
            if (r.done) return { value: r.value };
            peer.post({ op: 'chunk', id: req.id, chunk: r.value });
          }
        });
      case 'cancel':
        this.#calls.get(peer)?.get(req.id)?.abort();
        return;
      case 'dispose':
        if (this.#holders.get(req.handle)?.peer === peer) this.#release(req.handle);
        return;
    }
  }

  #holder(handle: number, peer: Peer): Holder {
    const holder = this.#holders.get(handle);
    if (!holder || holder.peer !== peer) throw invalid(`no model ${handle} in this worker`);
    return holder;
  }

  #release(handle: number): void {
    const holder = this.#holders.get(handle);
    if (!holder) return;
    this.#holders.delete(handle);
    if (!holder.model.release(handle)) this.#free(holder.model);
  }

  /** Free a model no page holds. */
  #free(model: HostedModel<Peer>): void {
    if (model.key !== null) this.#byKey.delete(model.key);
    model.llm.dispose();
  }

  /** The model `source` with `options`: one already held or loading for the same URL and options, else a new load.
   * Sources other than a URL (bytes, a Blob) are not shared. */
  async #load(source: unknown, options: Record<string, unknown>, signal: AbortSignal, onProgress: (progress: unknown) => void): Promise<HostedModel<Peer>> {
    const key = typeof source === 'string' ? JSON.stringify([source, options]) : null;
    let loading = key === null ? undefined : this.#byKey.get(key);
    if (!loading) {
      loading = new SharedLoad(source, options, key);
      if (key !== null) {
        this.#byKey.set(key, loading);
        loading.model.catch(() => this.#byKey.delete(key));
      }
    }
    const shared = loading;
    shared.waiting++;
    shared.listeners.add(onProgress);
    if (shared.last !== undefined) onProgress(shared.last);
    let onAbort!: () => void;
    const gaveUp = new Promise<never>((_, reject) => (onAbort = () => reject(signal.reason)));
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await Promise.race([shared.model, gaveUp]);
    } catch (e) {
      // The last page waiting gave up: the load stops, or the model it loaded meanwhile is freed.
      if (shared.waiting === 1) {
        shared.controller.abort(signal.reason);
        void shared.model.then((m) => m.holders === 0 && shared.waiting === 0 && this.#free(m), () => {});
      }
      throw e;
    } finally {
      signal.removeEventListener('abort', onAbort);
      shared.listeners.delete(onProgress);
      shared.waiting--;
    }
  }

  async #answer(peer: Peer, id: number, handle: number | undefined, run: (signal: AbortSignal) => Promise<{ value: unknown; handle?: number; transfer?: Transferable[] }>) {
    const calls = this.#calls.get(peer);
    if (!calls) return; // the page said bye
    const controller = new AbortController();
    calls.set(id, controller);
    try {
      const { value, handle: loaded, transfer = [] } = await run(controller.signal);
      peer.post({ op: 'done', id, value, info: this.#snapshot(handle ?? loaded) }, transfer);
    } catch (e) {
      peer.post({ op: 'failed', id, error: toWire(e), info: this.#snapshot(handle) });
    } finally {
      calls.delete(id);
    }
  }

  /** What the page's `info()` answers: the model's, with how many pages hold it. */
  #snapshot(handle: number | undefined): ModelInfo | null {
    const holder = handle === undefined ? undefined : this.#holders.get(handle);
    if (!holder) return null;
    try {
      const pages = new Set([...this.#holders.values()].filter((h) => h.model === holder.model).map((h) => h.peer)).size;
      return { ...holder.model.llm.info(), pages };
    } catch {
      return null; // disposed or crashed: the call's own answer says so
    }
  }
}
