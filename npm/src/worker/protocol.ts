// The messages between pages and their engine (client.ts in the page, host.ts where the engine runs: a dedicated
// Worker, a SharedWorker, or a leader tab's worker reached over a BroadcastChannel). A call is one request with an
// `id`, answered by one `done` or `failed` with that `id`; a load sends `progress` before it and a generation
// `chunk`s. Every message is a plain object, so the same ones cross a worker, a SharedWorker's port and a
// BroadcastChannel (which carries no MessagePorts). Errors cross as plain {name, code, message} and are rebuilt as
// `RuvllmError`s (an `AbortError` stays one), so callers see the codes they would see in the page.
import { AbortError, RuvllmError, type ErrorCode } from '../errors.js';
import type { MicroLoraMethod } from '../microlora.js';
import { StoreFullError } from '../models/store.js';
import type { GenerateChunk, ModelInfo } from '../types.js';

/** The compute calls a host answers on a loaded model (`handle`), each `LLM`'s method of that name. */
export type ModelMethod =
  | 'score'
  | 'embedWithUsage'
  | 'loadAdapter'
  | 'unloadAdapter'
  | 'reset'
  | 'clearPrefixCache'
  | 'saveState'
  | 'restoreState'
  | 'flushPrefixCache';

/** Page to host. `hello` is a page's first message to a shared host: `lock` names the Web Lock the page holds while it
 * lives, which the host waits for to learn that the page is gone. `cancel` aborts call `id` (its signal fired in the
 * page, or a stream left early). `microLora` runs a method of the model's MicroLoRA `lora` (`open`: the model's
 * `microLora(options)`), answered with `{ value, state }` (microlora.ts). `bye`: the page uses the host no more. */
export type Request =
  | { op: 'hello'; lock: string | null }
  | { op: 'load'; id: number; source: unknown; options: Record<string, unknown> }
  | { op: 'call'; id: number; handle: number; method: ModelMethod; args: unknown[] }
  | { op: 'microLora'; id: number; handle: number; lora: number | null; method: MicroLoraMethod; args: unknown[] }
  | { op: 'generate'; id: number; handle: number; prompt: string | Uint32Array; options: Record<string, unknown> }
  | { op: 'dispose'; handle: number }
  | { op: 'cancel'; id: number }
  | { op: 'bye' };

/** Host to page. `ready` answers `hello` (and is a dedicated worker's first message: its script ran). */
export type Reply =
  | { op: 'ready' }
  | { op: 'progress'; id: number; progress: unknown }
  | { op: 'chunk'; id: number; chunk: GenerateChunk }
  | { op: 'done'; id: number; value: unknown; info: ModelInfo | null }
  | { op: 'failed'; id: number; error: WireError; info: ModelInfo | null };

export interface WireError {
  name: string;
  code: string | undefined;
  message: string;
  /** The error's own data (a `StoreFullError`'s sizes, `RefusedRecords`' keys). */
  fields: Record<string, unknown>;
}

export function toWire(e: unknown): WireError {
  const err = e as { name?: unknown; code?: unknown; message?: unknown } | null;
  const fields: Record<string, unknown> = {};
  if (err instanceof RuvllmError) {
    for (const [key, value] of Object.entries(err)) {
      if (key !== 'code' && key !== 'name' && (value === null || ['number', 'string', 'boolean', 'undefined'].includes(typeof value) || Array.isArray(value))) fields[key] = value;
    }
  }
  return {
    name: typeof err?.name === 'string' ? err.name : 'Error',
    code: typeof err?.code === 'string' ? err.code : undefined,
    message: typeof err?.message === 'string' ? err.message : String(e),
    fields,
  };
}

/** The error `toWire` carried, as the page's own: a `RuvllmError` with its code and data, a `StoreFullError` again (an
 * engine error without a code is `E_WORKER`, which says it came from the worker). */
export function fromWire(w: WireError): RuvllmError {
  if (w.name === 'AbortError' || w.code === 'E_ABORTED') {
    const e = new AbortError();
    e.message = w.message;
    return e;
  }
  const e = new RuvllmError((w.code ?? 'E_WORKER') as ErrorCode, w.code ? w.message : `the engine worker failed: ${w.message}`);
  if (w.name === 'StoreFullError') Object.setPrototypeOf(e, StoreFullError.prototype);
  if (w.code) e.name = w.name;
  return Object.assign(e, w.fields);
}

/** The BroadcastChannel a leader tab's engine serves on (one per origin), and the lock whose holder is the leader. */
export const LEADER_CHANNEL = 'ruvllm-engine';
export const LEADER_LOCK = 'ruvllm-engine-leader';

/** What crosses the leader's channel: a page's request to the host, the host's reply to one page, and the host's
 * announcement when it starts (`host`: its id, new at each hand-over). Every tab's channel sees every message. */
export type ChannelMessage =
  | { to: 'host'; from: string; request: Request }
  | { to: string; host: string; reply: Reply }
  | { announce: string };
