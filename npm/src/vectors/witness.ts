// WitnessLog: an audit record of every request a model answers (its id and session, the route, the model and
// adapters, tokens, a latency breakdown, how it finished, its error, a quality score once one is given), for
// postmortems: entries by field, the nearest past requests to a text, and an export as JSON Lines.
//
// The entries are a collection's (stored.ts: an HNSW index whose vectors stand for entries, checksummed records in a
// store, commits that several tabs or processes share, a byte budget): each request one entry under the label
// `request`, its vector the embedding of its query when the log has an embedder, else its time (in hours, one
// dimension, so that the log is an index by time); a quality score given later is an entry of its own under
// `quality`, with the request's vector, and is read back into the request's entry. Nothing is written on the
// request's path: `record` and `score` queue their entry and return; a background task embeds and adds them, one at
// a time, and the collection commits in the background too. A queue longer than `maxPending` drops what comes next,
// and `info()` counts it, so the log never holds up or fails a request. The budget drops the oldest entries first.
import { invalid } from '../errors.js';
import type { LLM } from '../llm.js';
import { openStore } from '../platform.js';
import type { WitnessInput, WitnessSink } from '../types.js';
import { checkEntry, openForEmbedderOrTime, timeVector, type GraphOptions, type StoredCollection } from './stored.js';
import { count, type IndexInfo, type StoreSpec } from './vector-index.js';

export interface WitnessOptions extends GraphOptions {
  /** The model whose embeddings of the requests' queries make `search` possible (an encoder such as
   * all-MiniLM-L6-v2). Without one the log is searched by field only. A log keeps the embedder it was made with. */
  embedder?: LLM;
  /** The most the entries may take, in bytes (default 8 MiB): the oldest go first. */
  budgetBytes?: number;
  /** Entries waiting to be written at most (default 256); more are dropped and counted in `info().dropped`. */
  maxPending?: number;
  store?: StoreSpec;
  /** The IndexedDB database with `store: 'indexeddb'` (default `ruvllm-witness`): one per app. */
  database?: string;
}

/** One request as the log holds it. */
export interface WitnessEntry {
  requestId: string;
  session: string | null;
  /** When the request started (ms since the epoch). */
  time: number;
  kind: 'chat' | 'generate';
  /** The request's text: a chat's last user message, or the prompt (at most 2,000 characters). */
  query: string;
  route: { label: string; score: number } | null;
  model: { name: string | null; architecture: string; backend: string };
  adapters: number[];
  tokens: { prompt: number; cached: number; generated: number };
  latencyMs: { embedding: number | null; retrieval: number | null; routing: number | null; prefill: number; decode: number; total: number };
  finishReason: string | null;
  /** The error's code, when the request failed. */
  error: string | null;
  /** The last quality score given (`score`), or null. */
  quality: number | null;
}

/** Which entries `entries` and `export` return; each field narrows. */
export interface WitnessFilter {
  session?: string;
  kind?: 'chat' | 'generate';
  /** Started at or after / before (ms since the epoch). */
  since?: number;
  until?: number;
  finishReason?: string;
  /** An error code, or true for every failed request. */
  error?: string | true;
  /** Took at least this long in all (ms). */
  minTotalMs?: number;
  /** Scored at most / at least this (entries without a score are left out by either). */
  maxQuality?: number;
  minQuality?: number;
  /** The newest this many. */
  limit?: number;
}

export interface WitnessHit extends WitnessEntry {
  /** Similarity of the query to the text searched for (cosine, with the default metric). */
  score: number;
}

export interface WitnessInfo {
  entries: number;
  /** What the entries take (texts, vectors, links), about what the store holds of them. */
  bytes: number;
  budgetBytes: number;
  /** Entries queued, not yet in the log. */
  pending: number;
  /** Entries dropped because the queue was full, or because embedding their query failed. */
  dropped: number;
  /** The embedder's name, or null for a log searched by field only. */
  embedder: string | null;
  /** Why the store is behind the log (a write failed: `E_STORE_FULL`, `E_STORE`), if it is. */
  storeError: { code: string; message: string } | null;
}

const REQUEST = 'request';
const QUALITY = 'quality';
const MAX_QUERY = 2000;
/** How many recent requests' vectors are kept for their quality entries (older ones are computed again). */
const RECENT_VECTORS = 512;

type Job = { label: typeof REQUEST | typeof QUALITY; requestId: string; text: string; query: string; time: number };

export class WitnessLog implements WitnessSink {
  readonly #c: StoredCollection;
  readonly #embedder: LLM | null;
  readonly #budget: number;
  readonly #maxPending: number;
  readonly #jobs: Job[] = [];
  #draining: Promise<void> | null = null;
  #dropped = 0;
  #closed = false;
  readonly #vectors = new Map<string, Float32Array>();

  private constructor(c: StoredCollection, embedder: LLM | null, budget: number, maxPending: number) {
    this.#c = c;
    this.#embedder = embedder;
    this.#budget = budget;
    this.#maxPending = maxPending;
  }

  /** The log `store` holds, or a new one. Records that are not a witness log's are `E_INDEX`, and so is a log made
   * with another embedder (or with one, opened without, and the reverse). */
  static async open(options: WitnessOptions = {}): Promise<WitnessLog> {
    const embedder = options.embedder ?? null;
    if (embedder !== null && typeof embedder.embed !== 'function') throw invalid('embedder must be a loaded LLM');
    const budget = count(options.budgetBytes, 8 << 20, 'budgetBytes', 1024);
    const maxPending = count(options.maxPending, 256, 'maxPending');
    const store = options.store === undefined ? null : openStore(options.store, 'store', options.database ?? 'ruvllm-witness');
    const c = await openForEmbedderOrTime(embedder, store, options);
    await c.configure(() => {
      c.run((w) => w.setBudget(budget));
    });
    return new WitnessLog(c, embedder, budget, maxPending);
  }

  /** Queue one request's entry; returns at once (see the top of this file). */
  record(input: WitnessInput): void {
    const entry = entryOf(input);
    this.#queue({ label: REQUEST, requestId: entry.requestId, text: JSON.stringify(entry), query: entry.query, time: entry.time });
  }

  /** Queue a quality score for request `requestId` (the last one given counts); returns at once. */
  score(requestId: string, quality: number): void {
    if (typeof requestId !== 'string' || requestId === '' || requestId.length > 256) throw invalid('requestId must be a string of 1 to 256 characters');
    if (typeof quality !== 'number' || !Number.isFinite(quality)) throw invalid(`a quality score must be a finite number, got ${quality}`);
    const time = Date.now();
    // The request's query and time (for the vector) are looked up when the entry is written, in the background.
    this.#queue({ label: QUALITY, requestId, text: JSON.stringify({ requestId, quality, time }), query: '', time });
  }

  /** The entries `filter` asks for, oldest first. */
  entries(filter: WitnessFilter = {}): WitnessEntry[] {
    const keep = matcher(filter);
    const found = this.#requests().filter(keep);
    const limit = filter.limit === undefined ? found.length : count(filter.limit, 0, 'limit', 0);
    return found.slice(Math.max(0, found.length - limit));
  }

  /** The `k` past requests whose queries are nearest `text` (default 5), best first; a log without an embedder
   * cannot answer (`E_INVALID_ARGUMENT`). */
  async search(text: string, options: { k?: number; session?: string; signal?: AbortSignal } = {}): Promise<WitnessHit[]> {
    if (typeof text !== 'string') throw invalid('text must be a string');
    if (!this.#embedder) throw invalid('this witness log has no embedder: open it with one to search by similarity');
    const k = count(options.k, 5, 'k');
    const [v] = await this.#embedder.embed(text, { signal: options.signal });
    // Ask for more than k: entries of other sessions are filtered out after the search.
    const want = options.session === undefined ? k : Math.max(4 * k, 32);
    const hits: Array<{ id: number; score: number }> = JSON.parse(this.#c.run((w) => w.search(Float32Array.from(v), want, Math.max(64, want), REQUEST, undefined)));
    const quality = this.#qualities();
    const out: WitnessHit[] = [];
    for (const h of hits) {
      const stored = JSON.parse(this.#c.run((w) => w.entry(h.id)) ?? 'null') as { text: string } | null;
      const e = stored && parseEntry(stored.text, quality);
      if (e && (options.session === undefined || e.session === options.session)) out.push({ ...e, score: h.score });
    }
    return out.slice(0, k);
  }

  /** The entries `filter` asks for as JSON Lines, one entry per line, oldest first. */
  export(filter: WitnessFilter = {}): string {
    return jsonLines(this.entries(filter));
  }

  /** Take the oldest entries out of the log (with their scores) until it holds at most `keepBytes`: the deep
   * learning loop's archiving. They are returned as JSON Lines, oldest first, for the app to keep where it archives;
   * the store drops them at the log's next commit. */
  archive(keepBytes: number): { entries: number; jsonl: string } {
    const keep = count(keepBytes, 0, 'keepBytes', 0);
    const bytes = () => (JSON.parse(this.#c.run((w) => w.info())) as IndexInfo).bytes;
    if (bytes() <= keep) return { entries: 0, jsonl: '' };
    const quality = this.#qualities();
    const scores = new Map<string, number[]>();
    for (const q of this.#scores()) scores.set(q.requestId, [...(scores.get(q.requestId) ?? []), q.id]);
    const stored: Array<{ id: number; text: string }> = JSON.parse(this.#c.run((w) => w.entries(REQUEST)));
    const oldest = stored.flatMap((s) => {
      const e = parseEntry(s.text, quality);
      return e ? [{ id: s.id, e }] : [];
    });
    oldest.sort((a, b) => a.e.time - b.e.time);
    const taken: WitnessEntry[] = [];
    for (const { id, e } of oldest) {
      if (bytes() <= keep) break;
      this.#c.run((w) => w.remove(id));
      for (const q of scores.get(e.requestId) ?? []) this.#c.run((w) => w.remove(q));
      this.#vectors.delete(e.requestId);
      taken.push(e);
    }
    this.#c.changed();
    return { entries: taken.length, jsonl: jsonLines(taken) };
  }

  info(): WitnessInfo {
    const i = JSON.parse(this.#c.run((w) => w.info())) as IndexInfo;
    const e = this.#c.storeError();
    return {
      entries: i.labels[REQUEST]?.entries ?? 0,
      bytes: i.bytes,
      budgetBytes: this.#budget,
      pending: this.#jobs.length,
      dropped: this.#dropped,
      embedder: this.#embedder ? this.#c.run((w) => w.tag()) : null,
      storeError: e && { code: e.code, message: e.message },
    };
  }

  /** Wait until every queued entry is in the log and the store holds it (throws `E_STORE_FULL` or `E_STORE` if it
   * cannot). */
  async flush(): Promise<void> {
    while (this.#draining) await this.#draining;
    await this.#c.flush();
  }

  /** Write what is queued, then free the log's memory; `record` and `score` are then ignored. */
  async close(): Promise<void> {
    while (this.#draining) await this.#draining;
    this.#closed = true;
    await this.#c.close();
  }

  #queue(job: Job): void {
    if (this.#closed) return;
    if (this.#jobs.length >= this.#maxPending) {
      this.#dropped++;
      return;
    }
    this.#jobs.push(job);
    this.#draining ??= this.#drain();
  }

  async #drain(): Promise<void> {
    // After the caller's task: the request's answer goes out first.
    await new Promise((resolve) => setTimeout(resolve, 0));
    try {
      for (let job = this.#jobs.shift(); job; job = this.#jobs.shift()) {
        try {
          const vector = await this.#vector(job);
          checkEntry(job.text, job.label);
          this.#c.run((w) => w.add(vector, job.text, job.label, Date.now()));
          this.#c.changed();
        } catch {
          // An embedding that failed (the embedder disposed, its engine retired): the entry is dropped, never the
          // request. A store's failure is not here: the collection keeps it for `info()` and `flush()`.
          this.#dropped++;
        }
      }
    } finally {
      this.#draining = null;
    }
  }

  /** A request's vector: its query's embedding, or its time. A quality entry takes its request's. */
  async #vector(job: Job): Promise<Float32Array> {
    const kept = this.#vectors.get(job.requestId);
    if (kept) return kept;
    if (job.label === QUALITY) {
      const held = this.#requests().find((e) => e.requestId === job.requestId);
      job = { ...job, query: held?.query ?? '', time: held?.time ?? job.time };
    }
    if (!this.#embedder) return timeVector(job.time);
    const [v] = await this.#embedder.embed(job.query === '' ? ' ' : job.query);
    const vector = Float32Array.from(v);
    if (job.label === REQUEST) {
      this.#vectors.set(job.requestId, vector);
      if (this.#vectors.size > RECENT_VECTORS) this.#vectors.delete(this.#vectors.keys().next().value!);
    }
    return vector;
  }

  /** Every request's entry, oldest first, with its last quality score. */
  #requests(): WitnessEntry[] {
    const quality = this.#qualities();
    const stored: Array<{ text: string }> = JSON.parse(this.#c.run((w) => w.entries(REQUEST)));
    return stored.flatMap((s) => parseEntry(s.text, quality) ?? []).sort((a, b) => a.time - b.time);
  }

  /** The last quality score given per request id. */
  #qualities(): Map<string, number> {
    const scores = this.#scores().filter((q): q is { id: number; requestId: string; quality: number; time: number } => Number.isFinite(q.quality) && Number.isFinite(q.time));
    scores.sort((a, b) => a.time - b.time);
    return new Map(scores.map((q) => [q.requestId, q.quality]));
  }

  /** The score entries this class wrote, by their request id: each one's id, score and time as stored. */
  #scores(): Array<{ id: number; requestId: string; quality: unknown; time: unknown }> {
    return (JSON.parse(this.#c.run((w) => w.entries(QUALITY))) as Array<{ id: number; text: string }>).flatMap((s) => {
      try {
        const q = JSON.parse(s.text);
        return typeof q?.requestId === 'string' ? [{ id: s.id, requestId: q.requestId, quality: q.quality, time: q.time }] : [];
      } catch {
        return []; // not a score this class wrote
      }
    });
  }

}

/** Entries as JSON Lines: one entry per line, each line ended. */
function jsonLines(entries: WitnessEntry[]): string {
  return entries.map((e) => `${JSON.stringify(e)}\n`).join('');
}

/** The entry `input` describes, checked and in the log's shape. */
function entryOf(input: WitnessInput): WitnessEntry {
  if (typeof input !== 'object' || input === null) throw invalid('a witness entry must be an object');
  const { requestId } = input;
  if (typeof requestId !== 'string' || requestId === '' || requestId.length > 256) throw invalid('requestId must be a string of 1 to 256 characters');
  const ms = (v: number | null | undefined) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  const n = (v: number | undefined) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return {
    requestId,
    session: typeof input.session === 'string' ? input.session.slice(0, 256) : null,
    time: n(input.time) || Date.now(),
    kind: input.kind === 'chat' ? 'chat' : 'generate',
    query: typeof input.query === 'string' ? input.query.slice(0, MAX_QUERY) : '',
    route: input.route && typeof input.route.label === 'string' ? { label: input.route.label.slice(0, 256), score: n(input.route.score) } : null,
    model: { name: input.model?.name ?? null, architecture: input.model?.architecture ?? '', backend: input.model?.backend ?? '' },
    adapters: Array.isArray(input.adapters) ? input.adapters.filter((a) => Number.isSafeInteger(a)).slice(0, 64) : [],
    tokens: { prompt: n(input.tokens?.prompt), cached: n(input.tokens?.cached), generated: n(input.tokens?.generated) },
    latencyMs: {
      embedding: ms(input.latencyMs?.embedding),
      retrieval: ms(input.latencyMs?.retrieval),
      routing: ms(input.latencyMs?.routing),
      prefill: n(input.latencyMs?.prefill),
      decode: n(input.latencyMs?.decode),
      total: n(input.latencyMs?.total),
    },
    finishReason: typeof input.finishReason === 'string' ? input.finishReason : null,
    error: typeof input.error === 'string' ? input.error : null,
    quality: null,
  };
}

/** A stored request entry with its quality, or null for text this class did not write. Read back through `entryOf`,
 * as it was written: every field in the log's shape whatever the record holds. */
function parseEntry(text: string, quality: Map<string, number>): WitnessEntry | null {
  try {
    const stored = JSON.parse(text);
    if (typeof stored?.time !== 'number' || !Number.isFinite(stored.time)) return null;
    const e = entryOf(stored);
    return { ...e, quality: quality.get(e.requestId) ?? null };
  } catch {
    return null;
  }
}

function matcher(f: WitnessFilter): (e: WitnessEntry) => boolean {
  if (typeof f !== 'object' || f === null) throw invalid('a witness filter must be an object');
  return (e) =>
    (f.session === undefined || e.session === f.session) &&
    (f.kind === undefined || e.kind === f.kind) &&
    (f.since === undefined || e.time >= f.since) &&
    (f.until === undefined || e.time < f.until) &&
    (f.finishReason === undefined || e.finishReason === f.finishReason) &&
    (f.error === undefined || (f.error === true ? e.error !== null : e.error === f.error)) &&
    (f.minTotalMs === undefined || e.latencyMs.total >= f.minTotalMs) &&
    (f.maxQuality === undefined || (e.quality !== null && e.quality <= f.maxQuality)) &&
    (f.minQuality === undefined || (e.quality !== null && e.quality >= f.minQuality));
}
