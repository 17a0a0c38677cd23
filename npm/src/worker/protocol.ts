// The messages between a page and its engine worker (client.ts in the page, host.ts in the worker). A call is one
// request with an `id`, answered by one reply with that `id` (and, for a load, progress messages before it); a
// generation streams over a `MessagePort` sent with its call. Errors cross as plain {name, code, message} and are
// rebuilt as `RuvllmError`s (an `AbortError` stays one), so callers see the codes they would see in the page.
import { AbortError, RuvllmError, type ErrorCode } from '../errors.js';
import type { MicroLoraMethod } from '../microlora.js';
import type { GenerateChunk, GenerateResult, ModelInfo } from '../types.js';

/** The compute calls a worker answers on a loaded model (`handle`), each `LLM`'s method of that name. */
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

/** Page to worker. `cancel` aborts call `id` (its signal fired in the page). `microLora` runs a method of the model's
 * MicroLoRA `lora` (`open`: the model's `microLora(options)`), answered with `{ value, state }` (microlora.ts). */
export type Request =
  | { op: 'load'; id: number; source: unknown; options: Record<string, unknown> }
  | { op: 'call'; id: number; handle: number; method: ModelMethod; args: unknown[] }
  | { op: 'microLora'; id: number; handle: number; lora: number | null; method: MicroLoraMethod; args: unknown[] }
  | { op: 'generate'; handle: number; prompt: string | Uint32Array; options: Record<string, unknown>; port: MessagePort }
  | { op: 'dispose'; handle: number }
  | { op: 'cancel'; id: number };

/** Worker to page. `ready` is the worker's first message: its script ran and it serves calls. */
export type Reply =
  | { op: 'ready' }
  | { op: 'progress'; id: number; progress: unknown }
  | { op: 'done'; id: number; value: unknown; info: ModelInfo | null }
  | { op: 'failed'; id: number; error: WireError; info: ModelInfo | null };

/** What a generation's port carries: chunks, then its end (the result or the error); the page sends `cancel`. */
export type StreamMessage =
  | { chunk: GenerateChunk }
  | { result: GenerateResult; info: ModelInfo }
  | { error: WireError; info: ModelInfo | null };

export interface WireError {
  name: string;
  code: string | undefined;
  message: string;
}

export function toWire(e: unknown): WireError {
  const err = e as { name?: unknown; code?: unknown; message?: unknown } | null;
  return {
    name: typeof err?.name === 'string' ? err.name : 'Error',
    code: typeof err?.code === 'string' ? err.code : undefined,
    message: typeof err?.message === 'string' ? err.message : String(e),
  };
}

/** The error `toWire` carried, as the page's own: a `RuvllmError` with its code (an engine error without one is
 * `E_WORKER`, which says it came from the worker). */
export function fromWire(w: WireError): RuvllmError {
  if (w.name === 'AbortError' || w.code === 'E_ABORTED') {
    const e = new AbortError();
    e.message = w.message;
    return e;
  }
  return new RuvllmError((w.code ?? 'E_WORKER') as ErrorCode, w.code ? w.message : `the engine worker failed: ${w.message}`);
}
