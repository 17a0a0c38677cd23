// Node has no Web Workers, and the threaded build's start-up (npm/threads/workerHelpers.js, run by
// wasm-bindgen-rayon's `initThreadPool`) needs them: it fetches its own file, makes a blob: URL of it, starts a module Worker
// on that and talks to it with postMessage / addEventListener('message'); and that file, which the glue
// imports, listens on `self` at import. `withWebWorkers` runs the threaded build's start-up with just
// enough of those APIs (workers on worker_threads), and then puts the globals back.
import { resolveObjectURL } from 'node:buffer';
import { readFile } from 'node:fs/promises';
import { Worker as Thread } from 'node:worker_threads';

// Runs first in each thread (an ES module, whatever the parent's --input-type): the Web Worker globals the
// script uses; the first message is the script's text (imported as a module), and messages that arrive
// while it loads are handed to it once it listens.
const PRELUDE = `
import { parentPort } from 'node:worker_threads';
const listeners = new Set();
const early = [];
let state = 'empty';
const dispatch = (data) => { for (const fn of [...listeners]) fn({ data }); };
globalThis.self = globalThis;
globalThis.addEventListener = (type, fn) => { if (type === 'message') listeners.add(fn); };
globalThis.removeEventListener = (type, fn) => listeners.delete(fn);
globalThis.postMessage = (data) => parentPort.postMessage(data);
parentPort.on('message', (data) => {
  if (state === 'ready') return dispatch(data);
  if (state === 'loading') return early.push(data);
  state = 'loading';
  import('data:text/javascript,' + encodeURIComponent(data)).then(() => {
    state = 'ready';
    early.splice(0).forEach(dispatch);
  });
});`;

type Listener = (event: { data?: unknown; message?: string }) => void;

/** The part of the Web Worker API that the thread start-up (npm/threads/workerHelpers.js) uses, for a blob: URL script. */
class WebWorker {
  readonly #thread = new Thread(new URL(`data:text/javascript,${encodeURIComponent(PRELUDE)}`));
  readonly #handlers = new Map<Listener, { type: 'message' | 'error'; handler: (value: unknown) => void }>();
  #sent: Promise<void>;

  constructor(url: string | URL) {
    // A thread parks in the pool's work loop once started: it must not keep the process alive then.
    this.#thread.once('message', () => this.#thread.unref());
    // Without a listener, a thread's uncaught error would be the process's: the start-up listens and reports it.
    this.#thread.on('error', () => {});
    this.#sent = scriptOf(String(url)).then(
      (text) => this.#thread.postMessage(text),
      (e) => void this.#thread.emit('error', e),
    );
  }

  postMessage(data: unknown): void {
    this.#sent = this.#sent.then(() => this.#thread.postMessage(data));
  }

  addEventListener(type: string, fn: Listener): void {
    if (type !== 'message' && type !== 'error') return;
    const handler =
      type === 'message' ? (data: unknown) => fn({ data }) : (e: unknown) => fn({ message: (e as Error)?.message ?? String(e) });
    this.#handlers.set(fn, { type, handler });
    this.#thread.on(type, handler);
  }

  removeEventListener(type: string, fn: Listener): void {
    const entry = this.#handlers.get(fn);
    if (entry?.type === type) {
      this.#thread.off(type, entry.handler);
      this.#handlers.delete(fn);
    }
  }

  terminate(): void {
    void this.#thread.terminate();
  }
}

async function scriptOf(url: string): Promise<string> {
  const blob = resolveObjectURL(url);
  if (!blob) throw new Error(`cannot read the worker script ${url}`);
  return blob.text();
}

/** Node's fetch cannot read file: URLs (the helper fetches its own file). */
function fetchFiles(fetch: typeof globalThis.fetch): typeof globalThis.fetch {
  return async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (!url.startsWith('file:')) return fetch(input, init);
    return new Response(await readFile(new URL(url)), { headers: { 'content-type': 'text/javascript' } });
  };
}

export async function withWebWorkers(start: () => Promise<void>): Promise<void> {
  const g = globalThis as { Worker?: unknown; self?: unknown; fetch: typeof globalThis.fetch };
  const { Worker, self, fetch } = g;
  g.Worker ??= WebWorker;
  g.self ??= { addEventListener() {}, removeEventListener() {} }; // no messages come to Node's main thread
  g.fetch = fetchFiles(fetch);
  try {
    await start();
  } finally {
    g.fetch = fetch;
    if (Worker === undefined) delete g.Worker;
    if (self === undefined) delete g.self;
  }
}
