// `ruvllm serve`: an OpenAI-compatible HTTP server over loaded models (node:http, no framework). The chat and
// embeddings endpoints are the package's own APIs (`llm.chat.completions.create`, `llm.embeddings.create`) behind
// HTTP; /v1/completions maps OpenAI's legacy completions onto `llm.generate`.
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChatCompletionChunk, ChatCompletionRequest } from './chat.js';
import type { EmbeddingRequest } from './embeddings.js';
import { invalid, RuvllmError, type ErrorCode } from './errors.js';
import type { LLM } from './llm.js';
import type { GenerateOptions } from './options.js';
import type { GenerateResult } from './types.js';

/** A model the server answers with, and the id `/v1/models` lists it under. */
export interface ServedModel {
  llm: LLM;
  id: string;
}

export interface ServeOptions {
  /** Answers chat, completions and (without `embed`) embeddings. */
  model: ServedModel;
  /** Answers embeddings instead of `model` (an encoder such as all-MiniLM). */
  embed?: ServedModel;
  /** Default 127.0.0.1: only this machine can reach the server unless told otherwise. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  /** When set, every /v1 request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** The `Access-Control-Allow-Origin` to send (an origin or `*`); no CORS headers without it. */
  cors?: string;
  /** Most model requests waiting or running at once; more get a 429 (default 8). */
  maxQueue?: number;
  /** Largest request body (default 8 MiB); a larger one gets a 413. */
  maxBodyBytes?: number;
  /** One line per request (default: none). */
  log?: (line: string) => void;
}

export interface RunningServer {
  /** `http://HOST:PORT`, the port the server got. */
  url: string;
  /** Stop listening, abort the requests in flight and wait for them to end. */
  close(): Promise<void>;
}

/** An error that is an HTTP answer: its status, and OpenAI's `type` and our `code` for the body. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** Engine errors a request caused (its fields, prompt or messages): 400, not 500. */
const CLIENT_ERRORS = new Set<ErrorCode>(['E_INVALID_ARGUMENT', 'E_GRAMMAR', 'E_CONTEXT_OVERFLOW', 'E_TOKEN_OUT_OF_RANGE', 'E_CHAT_TEMPLATE']);

function httpError(e: unknown): HttpError {
  if (e instanceof HttpError) return e;
  if (e instanceof RuvllmError) {
    return CLIENT_ERRORS.has(e.code) ? new HttpError(400, 'invalid_request_error', e.code, e.message) : new HttpError(500, 'server_error', e.code, e.message);
  }
  return new HttpError(500, 'server_error', 'internal_error', e instanceof Error ? e.message : String(e));
}

const errorBody = (e: HttpError) => ({ error: { message: e.message, type: e.type, param: null, code: e.code } });

/** Seconds a client refused for a full queue is told to wait: about one short answer. */
const RETRY_AFTER_S = 2;

/** Start serving; resolves once the server listens. */
export async function serve(options: ServeOptions): Promise<RunningServer> {
  const { model, embed = model, host = '127.0.0.1', port = 8080, apiKey, cors, maxQueue = 8, maxBodyBytes = 8 << 20, log } = options;
  if (!Number.isSafeInteger(maxQueue) || maxQueue < 1) throw invalid(`maxQueue must be an integer >= 1, got ${maxQueue}`);
  const keyDigest = apiKey === undefined ? null : sha256(apiKey);
  const created = Math.floor(Date.now() / 1000);
  const models = [model, ...(embed === model ? [] : [embed])];

  // Each model runs one call at a time, FIFO (the LLM's own lock). `inFlight` counts the model requests admitted and
  // not yet ended, waiting or running: it is what the bound applies to. Each has a controller, aborted when its client
  // leaves or the server closes, so that a request nobody awaits never holds the model.
  const inFlight = new Set<AbortController>();
  const counts = { served: 0, aborted: 0 };

  /** A model request: admitted against the bound, its body read, aborted when the client leaves. */
  async function modelRequest(req: IncomingMessage, res: ServerResponse, run: (body: Record<string, unknown>, signal: AbortSignal) => Promise<void>) {
    if (inFlight.size >= maxQueue) {
      res.setHeader('retry-after', String(RETRY_AFTER_S));
      throw new HttpError(429, 'rate_limit_error', 'queue_full', `${inFlight.size} requests are waiting or running (--max-queue ${maxQueue}); retry later`);
    }
    const controller = new AbortController();
    inFlight.add(controller);
    // 'close' before the response ended: the client is gone (a response that ended has writableFinished set).
    const left = () => {
      if (!res.writableFinished) controller.abort(new Error('the client disconnected'));
    };
    res.on('close', left);
    // The client left before its response ended: 'close' may come after a write found the socket gone, or after the
    // generation's last token, so this is read from the response, not only from the controller.
    const gone = () => controller.signal.aborted || (res.destroyed && !res.writableFinished);
    try {
      await run(await readJson(req, maxBodyBytes), controller.signal);
      if (gone()) counts.aborted++;
      else counts.served++;
    } catch (e) {
      if (!gone()) throw e;
      counts.aborted++; // whatever it threw, the generation was stopped for a client that is gone (or the server closing)
      res.destroy();
    } finally {
      res.off('close', left);
      inFlight.delete(controller);
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (cors !== undefined) {
      res.setHeader('access-control-allow-origin', cors);
      if (cors !== '*') res.setHeader('vary', 'Origin');
      if (req.method === 'OPTIONS') {
        res.writeHead(204, {
          'access-control-allow-methods': 'GET, POST, OPTIONS',
          'access-control-allow-headers': req.headers['access-control-request-headers'] ?? 'authorization, content-type',
          'access-control-max-age': '600',
        });
        res.end();
        return;
      }
    }
    // /health is open (a load balancer's probe carries no key); everything under /v1 needs the key when there is one.
    if (req.method === 'GET' && path === '/health') {
      return sendJson(res, 200, { status: 'ok', requests: inFlight.size, max_queue: maxQueue, ...counts });
    }
    if (keyDigest !== null) {
      const auth = req.headers.authorization ?? '';
      const given = auth.startsWith('Bearer ') ? auth.slice(7).trim() : null;
      if (given === null || !timingSafeEqual(sha256(given), keyDigest)) {
        throw new HttpError(401, 'authentication_error', 'invalid_api_key', given === null ? 'missing API key: send Authorization: Bearer KEY' : 'invalid API key');
      }
    }
    const route = `${req.method} ${path}`;
    switch (route) {
      case 'GET /v1/models':
        return sendJson(res, 200, { object: 'list', data: models.map((m) => ({ id: m.id, object: 'model', created, owned_by: 'ruvllm' })) });
      case 'POST /v1/chat/completions':
        return modelRequest(req, res, (body, signal) => chatCompletions(model.llm, body, signal, res));
      case 'POST /v1/completions':
        return modelRequest(req, res, (body, signal) => completions(model.llm, body, signal, res));
      case 'POST /v1/embeddings':
        return modelRequest(req, res, (body, signal) => embeddings(embed.llm, body, signal, res));
      default:
        throw new HttpError(404, 'invalid_request_error', 'not_found', `no route ${route}`);
    }
  }

  const server = createServer((req, res) => {
    const t0 = performance.now();
    handle(req, res)
      .catch((e) => {
        const error = httpError(e);
        if (res.headersSent) return endStreamWithError(res, error);
        // A 413 whose body was not read to its end: close the connection rather than read the rest.
        if (error.status === 413 && !req.complete) res.setHeader('connection', 'close');
        sendJson(res, error.status, errorBody(error));
      })
      .finally(() => log?.(`${req.method} ${req.url} ${res.destroyed && !res.writableFinished ? 'aborted' : res.statusCode} ${(performance.now() - t0).toFixed(0)} ms`));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}`,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const controller of inFlight) controller.abort(new Error('the server is closing'));
      server.closeIdleConnections();
      // The aborted requests end their responses within a step; a keep-alive connection left after that is cut.
      const grace = setTimeout(() => server.closeAllConnections(), 2000);
      await closed;
      clearTimeout(grace);
    },
  };
}

const sha256 = (text: string) => createHash('sha256').update(text).digest();

/** The request body, parsed as a JSON object. A body over `limit` is read to its end and dropped, then answered 413:
 * a client still sending when the connection closed would see a reset rather than the answer. One far over it (4 ×)
 * is not read: its connection is closed. */
function readJson(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const tooLarge = new HttpError(413, 'invalid_request_error', 'body_too_large', `the request body is over ${limit} bytes`);
  if (Number(req.headers['content-length'] ?? 0) > 4 * limit) return Promise.reject(tooLarge);
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (part: Buffer) => {
      size += part.length;
      if (size <= limit) parts.push(part);
      else if (size > 4 * limit) req.destroy(tooLarge);
    });
    req.on('error', reject);
    req.on('close', () => reject(new Error('the client disconnected'))); // after 'end' this is a no-op
    req.on('end', () => {
      if (size > limit) return reject(tooLarge);
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8'));
      } catch (e) {
        return reject(new HttpError(400, 'invalid_request_error', 'E_INVALID_ARGUMENT', `the body is not valid JSON: ${(e as Error).message}`));
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body)) return reject(invalid('the body must be a JSON object'));
      resolve(body as Record<string, unknown>);
    });
  });
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

// ---------------------------------------------------------------------------------------------------------------
// Server-sent events: `data: {json}\n\n` per chunk, then `data: [DONE]\n\n`.
// ---------------------------------------------------------------------------------------------------------------

/**
 * Stream `chunks` as server-sent events. The headers wait for the first `hold` chunks, so that an error before the
 * model's first token (a full context, a grammar that does not compile) still gets its own status and body; after
 * them an error can only end the stream, as an `error` event.
 */
async function sendEvents(res: ServerResponse, chunks: AsyncIterable<object>, hold: number): Promise<void> {
  const held: object[] = [];
  const it = chunks[Symbol.asyncIterator]();
  try {
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      if (!res.headersSent) {
        held.push(r.value);
        if (held.length < hold) continue;
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
        for (const chunk of held.splice(0)) await write(res, `data: ${JSON.stringify(chunk)}\n\n`);
      } else {
        await write(res, `data: ${JSON.stringify(r.value)}\n\n`);
      }
    }
  } finally {
    await it.return?.(); // a stream left early (an error, a client gone) cancels its generation
  }
  if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  for (const chunk of held) await write(res, `data: ${JSON.stringify(chunk)}\n\n`);
  res.end('data: [DONE]\n\n');
}

function endStreamWithError(res: ServerResponse, error: HttpError): void {
  if (res.writableEnded || res.destroyed) return;
  res.end(`data: ${JSON.stringify(errorBody(error))}\n\n`);
}

/** Write, waiting for the socket to drain when its buffer is full (or for the client to leave). */
function write(res: ServerResponse, text: string): Promise<void> {
  if (res.write(text)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** `stream_options.include_usage` as OpenAI reads it: true, the usage comes in one more chunk of no choices before
 * [DONE] (and every other chunk has `usage: null`); otherwise no chunk carries usage. */
function includeUsage(body: Record<string, unknown>): boolean {
  const so = body.stream_options;
  if (so === undefined || so === null) return false;
  if (typeof so !== 'object' || Array.isArray(so)) throw invalid('stream_options must be an object');
  const { include_usage: include, ...rest } = so as Record<string, unknown>;
  if (Object.keys(rest).length) throw invalid(`stream_options: unsupported field '${Object.keys(rest)[0]}'`);
  if (include !== undefined && include !== null && typeof include !== 'boolean') throw invalid('stream_options.include_usage must be a boolean');
  return include === true;
}

/** The chunks of a stream with usage placed as `include_usage` asks: `usage` is taken off the chunk that has it. */
async function* placeUsage<C extends { id: string; created: number; model: string; object: string; usage?: unknown }>(chunks: AsyncIterable<C>, include: boolean) {
  for await (const chunk of chunks) {
    const { usage, ...rest } = chunk;
    yield include ? { ...rest, usage: null } : rest;
    if (usage !== undefined && include) yield { id: chunk.id, object: chunk.object, created: chunk.created, model: chunk.model, choices: [], usage };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The endpoints.
// ---------------------------------------------------------------------------------------------------------------

async function chatCompletions(llm: LLM, body: Record<string, unknown>, signal: AbortSignal, res: ServerResponse): Promise<void> {
  const request = body as unknown as ChatCompletionRequest;
  if (!request.stream) return sendJson(res, 200, await llm.chat.completions.create({ ...request, stream: false }, { signal }));
  const include = includeUsage(body);
  const stream = await llm.chat.completions.create({ ...request, stream: true }, { signal });
  // The chat stream's first chunk (the role) comes before the model runs: hold it and the next one.
  await sendEvents(res, placeUsage<ChatCompletionChunk>(stream, include), 2);
}

/** OpenAI's legacy completions fields, and the `generate` options they are (null: read here, or accepted and unused). */
const COMPLETION_FIELDS: Record<string, keyof GenerateOptions | null> = {
  model: null, prompt: null, stream: null, stream_options: null, n: null, best_of: null, echo: null, logprobs: null, suffix: null, user: null,
  max_tokens: 'maxTokens', temperature: 'temperature', top_p: 'topP', top_k: 'topK', min_p: 'minP', repeat_penalty: 'repeatPenalty',
  presence_penalty: 'presencePenalty', frequency_penalty: 'frequencyPenalty', seed: 'seed', stop: 'stop', ignore_eos: 'ignoreEos',
};

/** OpenAI's default for completions (not `generate`'s 256). */
const COMPLETION_MAX_TOKENS = 16;

/** One prompt: text (its control tokens parsed, as `generate` reads text) or token ids; a list of one is that one. */
function completionPrompt(prompt: unknown): string | number[] {
  const one = Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0])) ? prompt[0] : prompt;
  if (typeof one === 'string' || (Array.isArray(one) && one.length > 0 && one.every((t) => typeof t === 'number'))) return one;
  throw invalid('prompt must be a string or an array of token ids (one prompt: n = 1 only)');
}

async function completions(llm: LLM, body: Record<string, unknown>, signal: AbortSignal, res: ServerResponse): Promise<void> {
  const options: Record<string, unknown> = { maxTokens: COMPLETION_MAX_TOKENS, signal };
  for (const [field, value] of Object.entries(body)) {
    if (!(field in COMPLETION_FIELDS)) throw invalid(`unsupported completion field '${field}'`);
    const name = COMPLETION_FIELDS[field];
    if (name && value !== undefined && value !== null) options[name] = value;
  }
  // Accepted only as what asks for nothing more: one completion, no echo, no logprobs, no suffix.
  const only = (field: string, ok: unknown) => {
    if (body[field] !== undefined && body[field] !== null && body[field] !== ok) throw invalid(`${field}: only ${JSON.stringify(ok)} is supported`);
  };
  only('n', 1);
  only('best_of', 1);
  only('echo', false);
  only('logprobs', null);
  only('suffix', '');
  const include = includeUsage(body);
  const generation = llm.generate(completionPrompt(body.prompt), options as GenerateOptions); // checks the options now
  const head = {
    id: `cmpl-${Math.random().toString(36).slice(2, 14)}`,
    object: 'text_completion' as const,
    created: Math.floor(Date.now() / 1000),
    model: typeof body.model === 'string' ? body.model : (llm.info().name ?? 'ruvllm'),
  };
  const usage = (r: GenerateResult) => ({ prompt_tokens: r.usage.promptTokens, completion_tokens: r.usage.completionTokens, total_tokens: r.usage.totalTokens });
  const choice = (text: string, finish: GenerateResult['finishReason'] | null) => ({ text, index: 0, logprobs: null, finish_reason: finish });
  if (!body.stream) {
    let r = await generation.next();
    while (!r.done) r = await generation.next();
    return sendJson(res, 200, { ...head, choices: [choice(r.value.text, r.value.finishReason)], usage: usage(r.value) });
  }
  async function* chunks() {
    try {
      let r = await generation.next();
      for (; !r.done; r = await generation.next()) if (r.value.text) yield { ...head, choices: [choice(r.value.text, null)] };
      yield { ...head, choices: [choice('', r.value.finishReason)], usage: usage(r.value) };
    } finally {
      await generation.return(undefined as never); // cancels a generation left early
    }
  }
  await sendEvents(res, placeUsage(chunks(), include), 1);
}

async function embeddings(llm: LLM, body: Record<string, unknown>, signal: AbortSignal, res: ServerResponse): Promise<void> {
  // OpenAI's clients ask for base64 by default (little-endian float32s); the package API answers floats.
  const base64 = body.encoding_format === 'base64';
  const request = { ...body, encoding_format: base64 ? undefined : body.encoding_format } as EmbeddingRequest;
  const answer = await llm.embeddings.create(request, { signal });
  if (!base64) return sendJson(res, 200, answer);
  const encode = (v: number[]) => Buffer.from(new Float32Array(v).buffer).toString('base64');
  sendJson(res, 200, { ...answer, data: answer.data.map((d) => ({ ...d, embedding: encode(d.embedding) })) });
}
