// A model behind an OpenAI-compatible server (`ruvllm serve`, llama.cpp's llama-server, OpenAI): `LLM.connect`'s
// `RemoteLLM`. It has a loaded `LLM`'s methods where HTTP carries them (`generate` and `complete` over /v1/completions,
// the chat API over /v1/chat/completions, embeddings, tokens over llama.cpp's /tokenize) and refuses the others with
// `E_UNSUPPORTED`: nothing here runs a model in this process. It uses only `fetch`, `ReadableStream`, `TextDecoder` and
// `AbortController`, so it runs in Node and in browsers alike. Below llm.ts, which hands it out; it sees chat.ts and
// embeddings.ts for their types only.
import type { Chat, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest } from './chat.js';
import type { EmbeddingRequest, EmbeddingResponse, Embeddings } from './embeddings.js';
import { AbortError, RemoteError, RuvllmError, invalid, type ErrorCode } from './errors.js';
import { engineOptions, freshSeed, tokenIds, writeJson, type GenerateOptions } from './options.js';
import type { EmbedOptions, GenerateResult, Usage } from './types.js';

export interface ConnectOptions {
  /** The API's base URL, as OpenAI's clients take it: `http://127.0.0.1:8080/v1`. */
  baseURL: string | URL;
  /** Sent as `Authorization: Bearer KEY`. */
  apiKey?: string;
  /** The model the requests name; default the first one the server's `GET /models` lists. */
  model?: string;
  /** Headers for every request. */
  headers?: Record<string, string>;
  /** How long an attempt waits for the server's answer, and a stream for each next event (default 600000 ms). */
  timeoutMs?: number;
  /** Attempts after the first on 429, 5xx and failed connections (default 2), never once a stream's body is read. */
  maxRetries?: number;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof fetch;
  /** Cancels `connect` itself. */
  signal?: AbortSignal;
}

/** `RemoteLLM.info()`. */
export interface RemoteModelInfo {
  engine: 'remote';
  /** The model the requests name. */
  name: string;
  baseURL: string;
  /** The models the server listed when connected (empty where it has no `/models`). */
  models: string[];
  /** `LLM.loadOrConnect`: why the model did not load here; null otherwise. */
  localError: { code: ErrorCode; message: string } | null;
}

/** A streamed piece of text. The OpenAI API sends text, not token ids: `id` is null. */
export interface RemoteGenerateChunk {
  id: null;
  text: string;
}

/** Usage as the server counted it; `cachedTokens` is null where the server does not say. */
export type RemoteUsage = Pick<Usage, 'promptTokens' | 'completionTokens' | 'totalTokens'> & { cachedTokens: number | null };

/** What a remote generation returns: the local `GenerateResult`'s fields the server gives. */
export interface RemoteGenerateResult {
  text: string;
  finishReason: GenerateResult['finishReason'] | (string & {});
  /** The seed sent: the request's, or the fresh one drawn for a request without one (as a local generation). */
  seed: number;
  /** Null when the server sent none. */
  usage: RemoteUsage | null;
}

const DEFAULT_TIMEOUT_MS = 600_000;
const DEFAULT_MAX_RETRIES = 2;
/** Backoff before retry n: about BASE × 2^n, at most MAX. */
const BASE_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 8_000;
/** A Retry-After longer than this ends the retries: the caller hears of it rather than waiting unseen. */
const MAX_RETRY_AFTER_MS = 60_000;
/** `generate`'s default, so that a remote generation stops where a local one does (OpenAI's completions stop at 16). */
const DEFAULT_MAX_TOKENS = 256;

// ---------------------------------------------------------------------------------------------------------------
// HTTP: one request's lifetime, retries, errors, server-sent events
// ---------------------------------------------------------------------------------------------------------------

interface HttpRequest {
  method: 'GET' | 'POST';
  /** Relative to the base URL (which ends in `/`). */
  path: string;
  body?: unknown;
}

/** One request from its first attempt to its end (a stream's last event). The caller's signal, `dispose` and the
 * attempt's timer abort its controller; `why` keeps which did, so that its failure is reported as that. Timeouts and
 * aborts are not retried, so one controller serves every attempt. */
class Call {
  readonly controller = new AbortController();
  why: RuvllmError | null = null;
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.abort(new AbortError(this.#signal?.reason));
  readonly #live: Set<Call>;

  constructor(signal: AbortSignal | undefined, live: Set<Call>) {
    this.#signal = signal;
    this.#live = live;
    live.add(this);
    if (signal?.aborted) this.#onAbort();
    else signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  abort(why: RuvllmError): void {
    this.why ??= why;
    this.controller.abort(why);
  }

  /** The answer (or a stream's next event) must come within `ms`. */
  arm(ms: number, what: string): void {
    this.disarm();
    this.#timer = setTimeout(() => this.abort(new RemoteError('E_REMOTE_TIMEOUT', `${what}: no answer within ${ms} ms`, null, null)), ms);
  }

  disarm(): void {
    clearTimeout(this.#timer);
  }

  /** Close the connection (a stream left early: the server stops its generation) and forget the call. */
  end(): void {
    this.disarm();
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#live.delete(this);
    this.controller.abort(new RuvllmError('E_ABORTED', 'the request ended'));
  }

  /** What to throw for `e`, which a fetch or a read of this call threw: why the call was aborted, else (fetch throws a
   * TypeError for every network failure) the server could not be reached. */
  failure(e: unknown, what: string): RuvllmError {
    if (this.why) return this.why;
    if (e instanceof RuvllmError) return e;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const detail = cause?.code ?? cause?.message;
    return new RemoteError('E_REMOTE_UNAVAILABLE', `${what}: ${(e as Error)?.message ?? String(e)}${detail ? ` (${detail})` : ''}`, null, null, { cause: e });
  }

  /** Wait `ms`, unless the call is aborted first. */
  sleep(ms: number): Promise<void> {
    const signal = this.controller.signal;
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(this.why);
      const stop = () => {
        clearTimeout(timer);
        reject(this.why);
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', stop);
        resolve();
      }, ms);
      signal.addEventListener('abort', stop, { once: true });
    });
  }
}

/** The server's API: requests with the key and headers, retried, their failures as `RemoteError`s. */
class Http {
  readonly base: URL;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #maxRetries: number;
  readonly #fetch: typeof fetch;
  /** The requests in flight, which `dispose` aborts. */
  readonly #live = new Set<Call>();
  #disposed = false;

  constructor(options: ConnectOptions) {
    this.base = baseUrl(options.baseURL);
    const { apiKey, headers = {}, timeoutMs = DEFAULT_TIMEOUT_MS, maxRetries = DEFAULT_MAX_RETRIES } = options;
    if (apiKey !== undefined && typeof apiKey !== 'string') throw invalid('apiKey must be a string');
    if (typeof headers !== 'object' || headers === null || Object.values(headers).some((v) => typeof v !== 'string')) throw invalid('headers must be an object of strings');
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw invalid(`timeoutMs must be an integer >= 1, got ${timeoutMs}`);
    if (!Number.isSafeInteger(maxRetries) || maxRetries < 0) throw invalid(`maxRetries must be an integer >= 0, got ${maxRetries}`);
    if (options.fetch !== undefined && typeof options.fetch !== 'function') throw invalid('fetch must be a function');
    this.#headers = { ...headers, ...(apiKey !== undefined && { authorization: `Bearer ${apiKey}` }) };
    this.#timeoutMs = timeoutMs;
    this.#maxRetries = maxRetries;
    // The global fetch is called unbound: browsers refuse a fetch called on another `this`.
    const f = options.fetch ?? globalThis.fetch;
    this.#fetch = (input, init) => f(input, init);
  }

  usable(): void {
    if (this.#disposed) throw new RuvllmError('E_DISPOSED', 'the remote model was disposed');
  }

  dispose(): void {
    this.#disposed = true;
    for (const call of this.#live) call.abort(new RuvllmError('E_DISPOSED', 'the remote model was disposed'));
  }

  /** The answer's JSON. The body is read within the attempt (nothing has reached the caller yet), so a connection
   * that fails while it comes is retried too. */
  async json<T>(request: HttpRequest, signal: AbortSignal | undefined): Promise<T> {
    this.usable();
    const call = new Call(signal, this.#live);
    try {
      return await this.#attempts(call, request, async (res, what) => readJson(await res.text(), what) as T);
    } finally {
      call.end();
    }
  }

  /** The answer as server-sent events, each event's data parsed as JSON, up to `data: [DONE]`. Resolves once the
   * answer's headers came (its status checked, retried until then); after that nothing is retried. Leaving the
   * events early closes the connection, which stops the server's generation. */
  async stream(request: HttpRequest, signal: AbortSignal | undefined): Promise<AsyncGenerator<Record<string, unknown>, void, undefined>> {
    this.usable();
    const call = new Call(signal, this.#live);
    let body: ReadableStream<Uint8Array>;
    let what = '';
    try {
      body = await this.#attempts(call, request, async (res, w) => {
        what = w;
        if (!res.body) throw new RemoteError('E_REMOTE_HTTP', `${w}: the answer has no body`, res.status, null);
        return res.body;
      });
    } catch (e) {
      call.end();
      throw e;
    }
    const timeoutMs = this.#timeoutMs;
    return (async function* () {
      const reader = body.getReader();
      const read = async () => {
        // Once aborted, no event is given, even one the body holds already.
        if (call.why) throw call.why;
        call.arm(timeoutMs, what);
        try {
          return await reader.read();
        } catch (e) {
          throw call.failure(e, `${what}: the stream broke`);
        } finally {
          call.disarm();
        }
      };
      try {
        for await (const data of sseData(read)) {
          if (data === '[DONE]') return;
          const event = readJson(data, what);
          if (typeof event !== 'object' || event === null || Array.isArray(event)) throw new RemoteError('E_REMOTE_HTTP', `${what}: an event that is not an object: ${data.slice(0, 200)}`, null, null);
          const error = (event as { error?: unknown }).error;
          if (error !== undefined && error !== null) throw bodyError(error, what, null);
          yield event as Record<string, unknown>;
        }
        throw new RemoteError('E_REMOTE_UNAVAILABLE', `${what}: the stream ended before data: [DONE]`, null, null);
      } finally {
        call.end();
        reader.cancel().catch(() => {});
      }
    })();
  }

  /** Attempts of `request` until one is answered with a success status and `read` takes it, or a failure that is
   * not retried (or the last retry's). */
  async #attempts<T>(call: Call, request: HttpRequest, read: (res: Response, what: string) => Promise<T>): Promise<T> {
    const url = new URL(request.path, this.base);
    const what = `${request.method} ${url.href}`;
    const headers: Record<string, string> = { ...this.#headers };
    if (request.body !== undefined) headers['content-type'] = 'application/json';
    const body = request.body === undefined ? undefined : writeJson(request.body, 'the request');
    for (let retry = 0; ; retry++) {
      let failure: RuvllmError;
      let wait: number | null = null;
      call.arm(this.#timeoutMs, what);
      try {
        const res = await this.#fetch(url, { method: request.method, headers, body, signal: call.controller.signal });
        if (res.ok) {
          const value = await read(res, what);
          call.disarm();
          return value;
        }
        failure = await answerError(res, what);
        if (res.status === 429 || res.status >= 500) wait = retryAfterMs(res) ?? backoffMs(retry);
      } catch (e) {
        failure = call.failure(e, what);
        if (failure.code === 'E_REMOTE_UNAVAILABLE') wait = backoffMs(retry);
      }
      call.disarm();
      if (wait === null || retry >= this.#maxRetries || wait > MAX_RETRY_AFTER_MS) throw failure;
      await call.sleep(wait);
    }
  }
}

/** `baseURL` with a trailing `/`, so that paths resolve under it (`models` under `.../v1/`). */
function baseUrl(value: string | URL): URL {
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw invalid(`baseURL must be an http(s) URL, got ${JSON.stringify(String(value))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(`baseURL must be an http(s) URL, got ${url.href}`);
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

function readJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new RemoteError('E_REMOTE_HTTP', `${what}: the answer is not JSON: ${text.slice(0, 200)}`, null, null);
  }
}

/** The code of an answer's status: 401 and 403 the key, 429 the server's rate limit, 502 to 504 a server (or the
 * proxy before it) that cannot answer now; every other one is the request's or the server's fault. */
function statusCode(status: number): ErrorCode {
  if (status === 401 || status === 403) return 'E_REMOTE_AUTH';
  if (status === 429) return 'E_REMOTE_RATE_LIMIT';
  if (status >= 502 && status <= 504) return 'E_REMOTE_UNAVAILABLE';
  return 'E_REMOTE_HTTP';
}

/** An error answer as a `RemoteError`, with the server's message (OpenAI's `{error: {message, code, type}}`, a plain
 * `{error: "..."}`, or the body's text). */
async function answerError(res: Response, what: string): Promise<RemoteError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The status says enough.
  }
  let error: unknown = text.trim().slice(0, 1000) || res.statusText;
  try {
    const body = JSON.parse(text) as { error?: unknown };
    error = body?.error ?? body;
  } catch {
    // Not JSON: the text is the message.
  }
  return bodyError(error, what, res.status);
}

function bodyError(error: unknown, what: string, status: number | null): RemoteError {
  const e = (typeof error === 'object' && error !== null ? error : { message: String(error) }) as { message?: unknown; code?: unknown; type?: unknown };
  const message = typeof e.message === 'string' ? e.message : JSON.stringify(error);
  const remoteCode = e.code !== undefined && e.code !== null ? String(e.code) : typeof e.type === 'string' ? e.type : null;
  const code = status === null ? 'E_REMOTE_HTTP' : statusCode(status);
  return new RemoteError(code, `${what}: ${status === null ? 'the stream ended with an error' : status}: ${message}`, status, remoteCode);
}

/** Retry-After (seconds or an HTTP date) in milliseconds; null without one. */
function retryAfterMs(res: Response): number | null {
  const value = res.headers.get('retry-after');
  if (value === null) return null;
  const seconds = Number(value);
  if (value.trim() !== '' && Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
}

/** Exponential backoff with jitter: clients that failed together do not all come back together. */
function backoffMs(retry: number): number {
  const ceiling = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** retry);
  return ceiling / 2 + (Math.random() * ceiling) / 2;
}

/**
 * The data of each server-sent event that `read` gives the bytes of (its `data:` lines joined by newlines), as the
 * EventSource standard reads them: lines end in CR LF, LF or CR; an empty line ends an event; `:` starts a comment;
 * fields other than `data` are skipped. An event the body ends without an empty line after is still given.
 */
// `read`'s result is spelled out rather than the DOM's ReadableStreamReadResult: the published types need no DOM lib.
export async function* sseData(read: () => Promise<{ done: boolean; value?: Uint8Array }>): AsyncGenerator<string, void, undefined> {
  const decoder = new TextDecoder();
  let rest = '';
  let data: string[] = [];
  for (;;) {
    const { done, value } = await read();
    let text = rest + (done ? decoder.decode() : decoder.decode(value, { stream: true }));
    // A CR that ends the chunk may be the first half of a CR LF: it waits for the next chunk.
    const held = !done && text.endsWith('\r') ? '\r' : '';
    if (held) text = text.slice(0, -1);
    const lines = text.split(/\r\n|\r|\n/);
    rest = done ? '' : lines.pop()! + held;
    if (done) lines.push('');
    for (const line of lines) {
      if (line === '') {
        if (data.length > 0) yield data.join('\n');
        data = [];
        continue;
      }
      const colon = line.indexOf(':');
      if (colon === 0) continue;
      const field = colon < 0 ? line : line.slice(0, colon);
      const v = colon < 0 ? '' : line.slice(colon + 1);
      if (field === 'data') data.push(v.startsWith(' ') ? v.slice(1) : v);
    }
    if (done) return;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------------------------

/** `GenerateOptions` as OpenAI's completions fields (llama.cpp's names for those OpenAI lacks). */
const COMPLETION_FIELDS: Array<[keyof GenerateOptions, string]> = [
  ['temperature', 'temperature'], ['topP', 'top_p'], ['topK', 'top_k'], ['minP', 'min_p'], ['repeatPenalty', 'repeat_penalty'],
  ['presencePenalty', 'presence_penalty'], ['frequencyPenalty', 'frequency_penalty'], ['penaltyLastN', 'repeat_last_n'],
  ['stop', 'stop'], ['ignoreEos', 'ignore_eos'],
];

/** Why the model did not load here, for `RemoteLLM`s `LLM.loadOrConnect` made (not a constructor argument: callers
 * of `connect` never give it). */
const localErrors = new WeakMap<RemoteLLM, RemoteModelInfo['localError']>();

/** Mark `remote` as the fallback for a model that could not load here because of `error`. */
export function connectedInstead(remote: RemoteLLM, error: RuvllmError): RemoteLLM {
  localErrors.set(remote, { code: error.code, message: error.message });
  return remote;
}

function unsupported(method: string, why: string): RuvllmError {
  return new RuvllmError('E_UNSUPPORTED', `${method} is not available on a remote model (LLM.connect): ${why}`);
}

const ADAPTERS = 'adapters are loaded into an engine in this process (LLM.load)';
const STATE = 'the conversation and its caches are kept by the server';
const TEMPLATE = 'the server applies the chat template (Tokenizer.load of the model file renders it here)';

/**
 * A model served over OpenAI's HTTP API. Requests are independent: the server keeps what it caches. Methods that need
 * the engine in this process (scoring, adapters, MicroLoRAs, saved states, the chat template) throw `E_UNSUPPORTED`.
 */
export class RemoteLLM {
  readonly #http: Http;
  readonly #model: string;
  readonly #models: string[];
  /** OpenAI-shaped chat completions: `remote.chat.completions.create({ messages, stream })`. */
  readonly chat: Chat;
  /** OpenAI-shaped embeddings: `remote.embeddings.create({ input })`. */
  readonly embeddings: Embeddings;

  private constructor(http: Http, model: string, models: string[]) {
    this.#http = http;
    this.#model = model;
    this.#models = models;
    this.chat = { completions: { create: (body: ChatCompletionRequest, options?: { signal?: AbortSignal }) => this.#chat(body, options?.signal) } } as Chat;
    this.embeddings = { create: (body, options) => this.#embeddings(body, options?.signal) };
  }

  /** Reach the server at `options.baseURL`: `GET /models` checks the key and names the model when `options.model`
   * does not (a server without that route needs `model`). */
  static async connect(options: ConnectOptions): Promise<RemoteLLM> {
    if (typeof options !== 'object' || options === null) throw invalid('connect takes an options object with a baseURL');
    if (options.model !== undefined && (typeof options.model !== 'string' || options.model === '')) throw invalid('model must be a non-empty string');
    const http = new Http(options);
    let models: string[] = [];
    try {
      const list = await http.json<{ data?: Array<{ id?: unknown }> }>({ method: 'GET', path: 'models' }, options.signal);
      if (Array.isArray(list?.data)) models = list.data.map((m) => m?.id).filter((id): id is string => typeof id === 'string');
    } catch (e) {
      if (!(e instanceof RemoteError && e.status === 404 && options.model !== undefined)) throw e;
    }
    const model = options.model ?? models[0];
    if (model === undefined) throw invalid(`${http.base.href} lists no model: give connect a model`);
    return new RemoteLLM(http, model, models);
  }

  info(): RemoteModelInfo {
    this.#http.usable();
    return { engine: 'remote', name: this.#model, baseURL: this.#http.base.href, models: [...this.#models], localError: localErrors.get(this) ?? null };
  }

  // -------------------------------------------------------------------------------------------------------------
  // Generation: /v1/completions, streamed
  // -------------------------------------------------------------------------------------------------------------

  /** Stream the server's completion of `prompt` (text, its special tokens parsed by the server, or token ids), with
   * `generate`'s options; the iterator's return value is the whole result, its usage the server's. Leaving the loop
   * early (break, throw, abort) closes the request, which stops the server's generation. */
  generate(prompt: string | readonly number[], options: GenerateOptions = {}): AsyncGenerator<RemoteGenerateChunk, RemoteGenerateResult, undefined> {
    this.#http.usable();
    const seed = options.seed ?? freshSeed();
    engineOptions({ ...options, seed }); // the checks a local generation makes, before any request
    if (options.adapters?.length) throw unsupported('adapters', ADAPTERS);
    const body: Record<string, unknown> = {
      model: this.#model,
      prompt: typeof prompt === 'string' ? prompt : Array.from(tokenIds(prompt, 'prompt')),
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: options.maxTokens ?? DEFAULT_MAX_TOKENS,
      seed,
    };
    for (const [option, field] of COMPLETION_FIELDS) if (options[option] !== undefined) body[field] = options[option];
    const grammar = options.grammar;
    // llama.cpp's completions take a GBNF grammar or a JSON Schema; a server without them answers 400.
    if (grammar?.type === 'gbnf') body.grammar = grammar.grammar;
    else if (grammar?.type === 'json_schema') body.json_schema = grammar.schema;
    else if (grammar?.type === 'json_object') body.json_schema = { type: 'object' };
    else if (grammar) throw unsupported(`a ${grammar.type} grammar in generate`, 'completions carry GBNF and JSON Schemas only (chat.completions.create takes response_format)');
    return this.#generate(body, seed, options.signal);
  }

  async *#generate(body: Record<string, unknown>, seed: number, signal: AbortSignal | undefined): AsyncGenerator<RemoteGenerateChunk, RemoteGenerateResult, undefined> {
    const events = await this.#http.stream({ method: 'POST', path: 'completions', body }, signal);
    let text = '';
    let finishReason: string | null = null;
    let usage: RemoteUsage | null = null;
    for await (const event of events) {
      const choice = (event.choices as Array<{ text?: unknown; finish_reason?: unknown }> | undefined)?.[0];
      if (typeof choice?.text === 'string' && choice.text !== '') {
        text += choice.text;
        yield { id: null, text: choice.text };
      }
      if (typeof choice?.finish_reason === 'string') finishReason = choice.finish_reason;
      if (event.usage) usage = remoteUsage(event.usage as Record<string, unknown>);
    }
    return { text, finishReason: finishReason ?? 'stop', seed, usage };
  }

  /** `generate` run to the end. */
  async complete(prompt: string | readonly number[], options: GenerateOptions = {}): Promise<RemoteGenerateResult> {
    const it = this.generate(prompt, options);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  // -------------------------------------------------------------------------------------------------------------
  // The chat API and embeddings: the request as given, the server's answer as it is
  // -------------------------------------------------------------------------------------------------------------

  async #chat(body: ChatCompletionRequest, signal: AbortSignal | undefined): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    this.#http.usable();
    if (typeof body !== 'object' || body === null) throw invalid('the request must be an object');
    const request = { ...body, model: body.model ?? this.#model };
    if (!body.stream) return this.#http.json<ChatCompletion>({ method: 'POST', path: 'chat/completions', body: request }, signal);
    const events = await this.#http.stream({ method: 'POST', path: 'chat/completions', body: { ...request, stream_options: { include_usage: true } } }, signal);
    return chatChunks(events);
  }

  async #embeddings(body: EmbeddingRequest, signal: AbortSignal | undefined): Promise<EmbeddingResponse> {
    this.#http.usable();
    if (typeof body !== 'object' || body === null) throw invalid('the request must be an object');
    // OpenAI's clients ask for base64; this API answers floats, as the local one does.
    const request = { ...body, model: body.model ?? this.#model, encoding_format: body.encoding_format ?? 'float' };
    return this.#http.json<EmbeddingResponse>({ method: 'POST', path: 'embeddings', body: request }, signal);
  }

  /** One embedding per text, from the server's embeddings endpoint (which normalizes them: `normalize: false` is
   * `E_UNSUPPORTED`; `pooling` is sent as `ruvllm serve` takes it). */
  async embed(texts: string | readonly string[], options: EmbedOptions = {}): Promise<number[][]> {
    return (await this.embedWithUsage(texts, options)).embeddings;
  }

  /** `embed`, with the number of tokens the server counted. */
  async embedWithUsage(texts: string | readonly string[], options: EmbedOptions = {}): Promise<{ embeddings: number[][]; tokens: number }> {
    const list = typeof texts === 'string' ? [texts] : texts;
    if (!Array.isArray(list) || !list.every((t) => typeof t === 'string')) throw invalid('texts must be a string or an array of strings');
    if (options.normalize === false) throw unsupported('normalize: false', 'an embeddings endpoint answers normalized vectors');
    const answer = await this.#embeddings({ input: [...list], ...(options.pooling !== undefined && { pooling: options.pooling }) }, options.signal);
    const data = [...answer.data].sort((a, b) => a.index - b.index);
    return { embeddings: data.map((d) => d.embedding), tokens: answer.usage?.prompt_tokens ?? 0 };
  }

  // -------------------------------------------------------------------------------------------------------------
  // Tokens: llama.cpp's /tokenize and /detokenize, beside the API's base
  // -------------------------------------------------------------------------------------------------------------

  /** Token ids of `text` from the server's `/tokenize` (llama.cpp's llama-server has one; `ruvllm serve` and OpenAI
   * do not: `E_UNSUPPORTED`). `special` parses special-token text; `prompt` tokenizes as a prompt (BOS, special). */
  async tokenize(text: string, options: { special?: boolean; prompt?: boolean; signal?: AbortSignal } = {}): Promise<number[]> {
    if (typeof text !== 'string') throw invalid('text must be a string');
    const body = { content: text, add_special: Boolean(options.prompt), parse_special: Boolean(options.special || options.prompt) };
    const answer = await this.#tokens<{ tokens?: Array<number | { id: number }> }>('tokenize', body, options.signal);
    if (!Array.isArray(answer?.tokens)) throw new RemoteError('E_REMOTE_HTTP', '/tokenize answered without tokens', null, null);
    return answer.tokens.map((t) => (typeof t === 'number' ? t : t.id));
  }

  /** The text of `ids`, from the server's `/detokenize` (as `tokenize`). */
  async detokenize(ids: readonly number[], options: { signal?: AbortSignal } = {}): Promise<string> {
    const answer = await this.#tokens<{ content?: unknown }>('detokenize', { tokens: Array.from(tokenIds(ids, 'ids')) }, options.signal);
    if (typeof answer?.content !== 'string') throw new RemoteError('E_REMOTE_HTTP', '/detokenize answered without content', null, null);
    return answer.content;
  }

  async #tokens<T>(route: 'tokenize' | 'detokenize', body: unknown, signal: AbortSignal | undefined): Promise<T> {
    try {
      // llama.cpp serves them at its root, beside /v1: `../tokenize` from `.../v1/`.
      return await this.#http.json<T>({ method: 'POST', path: `../${route}`, body }, signal);
    } catch (e) {
      if (e instanceof RemoteError && (e.status === 404 || e.status === 405 || e.status === 501)) {
        throw unsupported(route, `the server has no /${route} (llama.cpp's llama-server has; ruvllm serve and OpenAI do not): ${e.message}`);
      }
      throw e;
    }
  }

  // -------------------------------------------------------------------------------------------------------------
  // What needs the engine in this process: E_UNSUPPORTED, never run locally
  // -------------------------------------------------------------------------------------------------------------

  async score(..._args: unknown[]): Promise<never> {
    throw unsupported('score', 'teacher-forced scoring needs the logits, which the API does not send');
  }
  async loadAdapter(..._args: unknown[]): Promise<never> {
    throw unsupported('loadAdapter', ADAPTERS);
  }
  unloadAdapter(..._args: unknown[]): never {
    throw unsupported('unloadAdapter', ADAPTERS);
  }
  async microLora(..._args: unknown[]): Promise<never> {
    throw unsupported('microLora', 'MicroLoRAs train on an engine in this process (LLM.load)');
  }
  async feedback(..._args: unknown[]): Promise<never> {
    throw unsupported('feedback', 'MicroLoRAs train on an engine in this process (LLM.load)');
  }
  async saveState(): Promise<never> {
    throw unsupported('saveState', STATE);
  }
  async restoreState(..._args: unknown[]): Promise<never> {
    throw unsupported('restoreState', STATE);
  }
  async reset(): Promise<never> {
    throw unsupported('reset', STATE);
  }
  async clearPrefixCache(): Promise<never> {
    throw unsupported('clearPrefixCache', STATE);
  }
  async flushPrefixCache(): Promise<never> {
    throw unsupported('flushPrefixCache', STATE);
  }
  applyChatTemplate(..._args: unknown[]): never {
    throw unsupported('applyChatTemplate', TEMPLATE);
  }
  tokenizeChat(..._args: unknown[]): never {
    throw unsupported('tokenizeChat', TEMPLATE);
  }
  chatPrompt(..._args: unknown[]): never {
    throw unsupported('chatPrompt', TEMPLATE);
  }
  toolCallReader(..._args: unknown[]): never {
    throw unsupported('toolCallReader', TEMPLATE);
  }

  /** Abort the requests in flight (they end with `E_DISPOSED`, and so does every later call). Idempotent. */
  dispose(): void {
    this.#http.dispose();
  }
}

function remoteUsage(u: Record<string, unknown>): RemoteUsage {
  const cached = (u.prompt_tokens_details as { cached_tokens?: unknown } | undefined)?.cached_tokens;
  return {
    promptTokens: Number(u.prompt_tokens),
    completionTokens: Number(u.completion_tokens),
    totalTokens: Number(u.total_tokens),
    cachedTokens: typeof cached === 'number' ? cached : null,
  };
}

/** The server's chat chunks in the local chat API's shape: OpenAI's `include_usage` sends the usage in a chunk of no
 * choices after the one with the finish reason, and the local API puts it on that chunk; other chunks carry none. */
async function* chatChunks(events: AsyncGenerator<Record<string, unknown>, void, undefined>): AsyncGenerator<ChatCompletionChunk, void, undefined> {
  let finish: ChatCompletionChunk | null = null;
  for await (const event of events) {
    const chunk = event as unknown as ChatCompletionChunk & { usage?: ChatCompletionChunk['usage'] | null };
    if (chunk.usage === null) delete chunk.usage;
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    if (choices.length === 0 && finish && chunk.usage) {
      finish.usage = chunk.usage;
      continue;
    }
    if (finish) yield finish;
    finish = null;
    if (choices[0]?.finish_reason != null && chunk.usage === undefined) finish = chunk;
    else yield chunk;
  }
  if (finish) yield finish;
}
