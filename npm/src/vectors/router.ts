// Router: a semantic router over an embedding model. Each route is named and known by example utterances (and may
// have a threshold); `route(text)` embeds the text, finds the nearest utterances, scores each route by its best one,
// and answers the best route, or none when its score is below the route's threshold (else the router's). `add`
// teaches it a new utterance (a correction). Kept in a store, so a page or process that reopens it routes the same.
import { invalid } from '../errors.js';
import type { LLM } from '../llm.js';
import { openStore } from '../platform.js';
import { checkEntry, openForEmbedder, type StoredCollection, type GraphOptions } from './stored.js';
import { count, type IndexInfo, type StoreSpec } from './vector-index.js';

export interface RouteDefinition {
  name: string;
  utterances: string[];
  /** The score (cosine similarity) a text must reach to take this route; default: the router's threshold. */
  threshold?: number;
}

export interface RouterOptions extends GraphOptions {
  /** The model whose embeddings the router compares (an encoder such as all-MiniLM-L6-v2, or a chat model). */
  embedder: LLM;
  /** Routes to have: utterances not yet known are added, thresholds set (a reopened router keeps what it learned). */
  routes?: RouteDefinition[];
  /** The threshold of routes without their own (default none: the best route always answers). */
  threshold?: number;
  /** Nearest utterances each decision looks at (default 10), and candidates searched (default 64). */
  k?: number;
  ef?: number;
  store?: StoreSpec;
  /** The IndexedDB database with `store: 'indexeddb'` (default `ruvllm-router`): one per router. */
  database?: string;
}

/** A route and its best utterance's score. */
export interface RouteScore {
  route: string;
  score: number;
}

export interface RouteDecision {
  /** The best route, or null when no route reached its threshold (or the router knows none). */
  route: string | null;
  score: number | null;
  /** Every route among the nearest utterances with its score, best first (the best one too, even when it fell short). */
  candidates: RouteScore[];
}

export interface RouteSummary {
  name: string;
  utterances: number;
  threshold: number | null;
}

export class Router {
  readonly #c: StoredCollection;
  readonly #embedder: LLM;
  readonly #k: number;
  readonly #ef: number;

  private constructor(c: StoredCollection, embedder: LLM, k: number, ef: number) {
    this.#c = c;
    this.#embedder = embedder;
    this.#k = k;
    this.#ef = ef;
  }

  /** The router `store` holds (or a new one), with `routes` added. Records that are not a router's are `E_INDEX`,
   * and so is a router whose vectors came from another embedding model. */
  static async open(options: RouterOptions): Promise<Router> {
    const { embedder, routes = [], threshold } = options ?? {};
    if (!embedder || typeof embedder.embed !== 'function') throw invalid('embedder must be a loaded LLM');
    if (!Array.isArray(routes)) throw invalid('routes must be an array');
    routes.forEach(checkRoute);
    if (threshold !== undefined && !Number.isFinite(threshold)) throw invalid(`threshold must be a number, got ${threshold}`);
    const k = count(options.k, 10, 'k');
    const ef = count(options.ef, 64, 'ef');
    const store = options.store === undefined ? null : openStore(options.store, 'store', options.database ?? 'ruvllm-router');
    const c = await openForEmbedder(embedder, store, options);
    const router = new Router(c, embedder, k, ef);
    await c.configure(async () => {
      if (threshold !== undefined) c.run((w) => w.setThreshold(undefined, threshold));
      for (const r of routes) await router.addRoute(r);
    });
    return router;
  }

  /** The route for `text`. */
  async route(text: string, options: { signal?: AbortSignal } = {}): Promise<RouteDecision> {
    if (typeof text !== 'string') throw invalid('text must be a string');
    const [v] = await this.#embedder.embed(text, { signal: options.signal });
    const d = JSON.parse(this.#c.run((w) => w.route(Float32Array.from(v), this.#k, this.#ef)));
    const candidates: RouteScore[] = d.candidates.map((c: { label: string; score: number }) => ({ route: c.label, score: c.score }));
    return { route: d.route?.label ?? null, score: d.route?.score ?? null, candidates };
  }

  /** Teach the router that `text` takes `route` (a new route if it has none); the utterance's id. */
  async add(text: string, route: string): Promise<number> {
    if (typeof text !== 'string' || typeof route !== 'string' || route === '') throw invalid('text and a route name must be strings');
    checkEntry(text, route);
    const [v] = await this.#embedder.embed(text);
    const { id } = JSON.parse(this.#c.run((w) => w.add(Float32Array.from(v), text, route, Date.now())));
    this.#c.changed();
    return id;
  }

  /** Add a route's utterances that it does not know yet, and set its threshold (`undefined` keeps the router's). */
  async addRoute(definition: RouteDefinition): Promise<void> {
    checkRoute(definition);
    const { name, utterances, threshold } = definition;
    const known = new Set(this.utterances(name));
    const fresh = [...new Set(utterances)].filter((u) => !known.has(u));
    const vectors = fresh.length > 0 ? await this.#embedder.embed(fresh) : [];
    fresh.forEach((text, i) => this.#c.run((w) => w.add(Float32Array.from(vectors[i]), text, name, Date.now())));
    this.#c.run((w) => w.setThreshold(name, threshold));
    this.#c.changed();
  }

  /** Forget a route and its utterances; how many it had. */
  removeRoute(name: string): number {
    const n = this.#c.run((w) => w.removeLabel(name));
    this.#c.changed();
    return n;
  }

  routes(): RouteSummary[] {
    const info = JSON.parse(this.#c.run((w) => w.info())) as IndexInfo;
    return Object.entries(info.labels).map(([name, l]) => ({ name, utterances: l.entries, threshold: l.threshold ?? info.threshold ?? null }));
  }

  /** A route's utterances (all routes' without a name). */
  utterances(route?: string): string[] {
    return (JSON.parse(this.#c.run((w) => w.entries(route))) as Array<{ text: string }>).map((e) => e.text);
  }

  /** Wait until the store holds every change (throws `E_STORE_FULL` or `E_STORE` if it cannot). */
  flush(): Promise<void> {
    return this.#c.flush();
  }

  close(): Promise<void> {
    return this.#c.close();
  }
}

function checkRoute(r: RouteDefinition): void {
  if (typeof r !== 'object' || r === null || typeof r.name !== 'string' || r.name === '') throw invalid('a route needs a name');
  if (!Array.isArray(r.utterances) || !r.utterances.every((u) => typeof u === 'string')) throw invalid(`route '${r.name}': utterances must be strings`);
  if (r.threshold !== undefined && !Number.isFinite(r.threshold)) throw invalid(`route '${r.name}': threshold must be a number`);
}
