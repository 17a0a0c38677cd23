// How a page reaches an engine host (host.ts): `dedicatedLink`, a Worker of its own; `sharedLink`, the origin's
// SharedWorker; `leaderLink`, where SharedWorker is missing (Chrome on Android), the worker of a leader tab elected
// with Web Locks, reached over a BroadcastChannel. Each worker starts from the package's real script URL, written
// literally so that Vite and webpack 5 find and bundle it and a Content-Security-Policy needs no `blob:`. A link
// delivers the host's replies, says when it broke (a script that did not load, a worker that failed) and, for a
// leader, when the host moved to another tab (the leader closed: the host and the models it held are gone).
import { RuvllmError } from '../errors.js';
import { LEADER_CHANNEL, LEADER_LOCK, type ChannelMessage, type Reply, type Request } from './protocol.js';

export interface LinkEvents {
  reply(reply: Reply): void;
  broken(e: RuvllmError): void;
  /** The host is a new one (leader links): calls in flight are lost and models must be loaded again. */
  moved(): void;
}

export interface Link {
  send(request: Request, transfer?: Transferable[]): void;
  /** The page uses the host no more (a shared host frees what this page held). */
  close(): void;
}

export type LinkKind = 'worker' | 'shared';

/** The worker's name that makes its script serve a leader's channel (entry.ts). */
export const LEADER_WORKER = 'ruvllm-leader';

const started = (e: unknown) => new RuvllmError('E_WORKER', `the engine worker could not start: ${(e as Error)?.message ?? e}`, { cause: e });

function failed(event: ErrorEvent | Event): RuvllmError {
  event.preventDefault?.();
  const message = (event as ErrorEvent).message;
  return new RuvllmError('E_WORKER', `the engine worker failed${message ? `: ${message}` : ' to start (its script could not be loaded: see the README on what a Content-Security-Policy needs)'}`);
}

export function dedicatedLink(events: LinkEvents): Link {
  let worker: Worker;
  try {
    worker = new Worker(new URL('./entry.js', import.meta.url), { type: 'module' });
  } catch (e) {
    throw started(e); // a CSP without this worker's origin in worker-src may refuse it here (SecurityError)
  }
  worker.onmessage = ({ data }: MessageEvent<Reply>) => events.reply(data);
  // A script that does not load (404, refused by a CSP, a syntax error) or an error the worker did not catch.
  worker.onerror = (event) => {
    events.broken(failed(event));
    worker.terminate();
  };
  worker.postMessage({ op: 'hello', lock: null } satisfies Request);
  return { send: (request, transfer = []) => worker.postMessage(request, transfer), close: () => worker.terminate() };
}

/** Whether this page can share an engine with its other tabs: SharedWorker, or Web Locks and BroadcastChannel. */
export function canShare(): boolean {
  return typeof SharedWorker === 'function' || (typeof BroadcastChannel === 'function' && locks() !== null);
}

export function sharedLink(events: LinkEvents): Link {
  if (typeof SharedWorker !== 'function') return leaderLink(events);
  let worker: SharedWorker;
  try {
    worker = new SharedWorker(new URL('./entry.js', import.meta.url), { type: 'module', name: 'ruvllm-engine' });
  } catch (e) {
    throw started(e);
  }
  const { port } = worker;
  port.onmessage = ({ data }: MessageEvent<Reply>) => events.reply(data);
  worker.onerror = (event) => events.broken(failed(event));
  const send = (request: Request, transfer: Transferable[] = []) => port.postMessage(request, transfer);
  const lifetime = holdLifetimeLock();
  void lifetime.name.then((lock) => send({ op: 'hello', lock }));
  return {
    send,
    close: () => {
      send({ op: 'bye' });
      port.close();
      lifetime.release();
    },
  };
}

/** The leader's host, reached over the origin's BroadcastChannel. Every tab that uses it also stands for leader
 * (queued on the leader lock): when the leader closes, the next tab in the queue starts the host in a worker of its
 * own and announces it; the others see the new host and load their models again (moved). */
function leaderLink(events: LinkEvents): Link {
  const me = crypto.randomUUID();
  const channel = new BroadcastChannel(LEADER_CHANNEL);
  let host: string | null = null;
  const lifetime = holdLifetimeLock();
  // Every message waits for the lifetime lock, as `hello` does: a new host hears this page's `hello` before its calls.
  // A channel clones and transfers nothing, so what a page sends stays its own (client.ts loads a model again from it).
  const send = (request: Request) => void lifetime.name.then(() => channel.postMessage({ to: 'host', from: me, request } satisfies ChannelMessage));
  const hello = () => void lifetime.name.then((lock) => channel.postMessage({ to: 'host', from: me, request: { op: 'hello', lock } } satisfies ChannelMessage));
  channel.onmessage = ({ data }: MessageEvent<ChannelMessage>) => {
    if ('announce' in data) {
      const moved = host !== null && data.announce !== host;
      host = data.announce;
      if (moved) events.moved();
      hello();
    } else if (data.to === me && 'reply' in data) {
      if (host === null) host = data.host;
      if (data.host === host) events.reply(data.reply);
    }
  };
  leaderFailed.add(events.broken);
  standForLeader();
  hello(); // a host already running answers; otherwise the leader's announcement asks again
  return {
    send,
    close: () => {
      leaderFailed.delete(events.broken);
      channel.postMessage({ to: 'host', from: me, request: { op: 'bye' } } satisfies ChannelMessage);
      channel.close();
      lifetime.release();
    },
  };
}

let standing = false;
/** This page's leader links, told when the host this page was to run failed (then no host answers them). */
const leaderFailed = new Set<(e: RuvllmError) => void>();

/** Queue this page for the leader lock (once): granted, it runs the host in a worker for as long as it lives. */
function standForLeader(): void {
  if (standing) return;
  standing = true;
  void locks()!.request(LEADER_LOCK, () => {
    const fail = (e: RuvllmError) => leaderFailed.forEach((broken) => broken(e));
    try {
      const worker = new Worker(new URL('./entry.js', import.meta.url), { type: 'module', name: LEADER_WORKER });
      worker.onerror = (event) => fail(failed(event));
    } catch (e) {
      fail(started(e));
    }
    return new Promise<void>(() => {}); // held until the page closes
  });
}

/** A Web Lock this page holds while it lives (a host waits for it to learn that the page closed), by a name of its
 * own; null where Web Locks are missing. */
function holdLifetimeLock(): { name: Promise<string | null>; release(): void } {
  const manager = locks();
  if (!manager) return { name: Promise.resolve(null), release() {} };
  const name = `ruvllm-page-${crypto.randomUUID()}`;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const granted = new Promise<string>((resolve) => void manager.request(name, () => (resolve(name), held)));
  return { name: granted, release };
}

function locks(): LockManager | null {
  return (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks ?? null;
}
