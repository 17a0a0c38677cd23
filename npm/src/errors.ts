/** Stable, machine-readable error codes. The first group comes from the engine (`Error::code` in Rust); the `E_REMOTE_`
 * group from a server `LLM.connect` reached (remote.ts). */
export type ErrorCode =
  | 'E_GGUF'
  | 'E_UNSUPPORTED_TENSOR_TYPE'
  | 'E_UNSUPPORTED_ARCH'
  | 'E_MODEL'
  | 'E_TOKENIZER'
  | 'E_CHAT_TEMPLATE'
  | 'E_TOKEN_OUT_OF_RANGE'
  | 'E_CONTEXT_OVERFLOW'
  | 'E_INVALID_ARGUMENT'
  | 'E_IO'
  | 'E_KV_CACHE'
  | 'E_INDEX'
  | 'E_ADAPTER'
  | 'E_GRAMMAR'
  | 'E_GPU_NO_ADAPTER'
  | 'E_GPU_LIMITS'
  | 'E_GPU_UNSUPPORTED'
  | 'E_GPU_SHADER'
  | 'E_GPU_OUT_OF_MEMORY'
  | 'E_GPU_DEVICE_LOST'
  | 'E_OUT_OF_MEMORY'
  | 'E_THREADS'
  | 'E_MODEL_TOO_LARGE'
  | 'E_FETCH'
  | 'E_STORE'
  | 'E_STORE_FULL'
  | 'E_INTEGRITY'
  | 'E_ABORTED'
  | 'E_DISPOSED'
  | 'E_WORKER'
  | 'E_UNSUPPORTED'
  | 'E_ENGINE_CRASHED'
  | 'E_REMOTE_HTTP'
  | 'E_REMOTE_AUTH'
  | 'E_REMOTE_RATE_LIMIT'
  | 'E_REMOTE_UNAVAILABLE'
  | 'E_REMOTE_TIMEOUT';

/** Every error this package throws or rejects with. */
export class RuvllmError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RuvllmError';
    this.code = code;
  }
}

/** An error a server answered (or a failure to reach it): `status` is the HTTP status (null: no answer came), and
 * `remoteCode` the `error.code` of the server's body (`ruvllm serve` sends the package's codes there, OpenAI its own). */
export class RemoteError extends RuvllmError {
  readonly status: number | null;
  readonly remoteCode: string | null;

  constructor(code: ErrorCode, message: string, status: number | null, remoteCode: string | null, options?: { cause?: unknown }) {
    super(code, message, options);
    this.name = 'RemoteError';
    this.status = status;
    this.remoteCode = remoteCode;
  }
}

/** Thrown when an `AbortSignal` stops loading or generation; named like the DOM's AbortError. */
export class AbortError extends RuvllmError {
  constructor(reason?: unknown) {
    const why = reason instanceof Error ? `: ${reason.message}` : reason !== undefined ? `: ${String(reason)}` : '';
    super('E_ABORTED', `aborted${why}`, { cause: reason });
    this.name = 'AbortError';
  }
}

export function invalid(message: string): RuvllmError {
  return new RuvllmError('E_INVALID_ARGUMENT', message);
}

export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new AbortError(signal.reason);
}
