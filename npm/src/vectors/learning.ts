// LearningLoop: the background and deep loops of learning from use (issue 43), around the instant loop `llm.learner`.
//
// - Instant: feedback on a chat request (`llm.feedback(requestId, { score, preferred?, route? })`) trains the instant
//   adapter (a rank-2 MicroLoRA, `llm.learner`) one step after the answer, and hands the request's conversation, answer
//   and score to this loop (`llm.trajectories`), which queues it: `take` returns at once; the trajectory is embedded
//   and added in the background. A trajectory scored at or above `minScore` (or given a preferred answer) waits under
//   `pending`; a route correction waits under `correction`.
// - Background (`run`, and on its own on the schedule the app sets: once the model has had no request for `idleMs`, at
//   most every `intervalMs`): the pending trajectories train the base adapter (a rank-8 MicroLoRA), `epochs` passes
//   over them; before each step the loop waits while a request runs (a request waits at most one step); the Router
//   learns the corrections. Then the checkpoint, in an order where a crash or a reload at any point loses at most
//   this run's work and never learns a trajectory twice: in memory, the base adapter's steps consolidated (EWC++:
//   the penalty toward what it knows, by how much each weight mattered, decayed), the trajectories moved from
//   `pending` to `learned`, the instant adapter reset (the base has learned what it held); then written: the instant
//   adapter, the trajectories, last the base adapter. The base adapter is stored by this loop only (`autosave:
//   false`), so the store holds checkpoints. A write that fails (a full store) leaves the run whole in memory, and
//   the next run writes the checkpoint again first. A stop (`close()`, `run`'s signal) comes between steps: what
//   took a step is learned, and checkpointed.
// - Deep (`deep`, on demand): near-duplicate learned trajectories pruned (the lower-scored of each pair goes),
//   k-means++ over the rest's embeddings into a pattern bank (each cluster's medoid, the trajectory nearest its centre)
//   that long-term memory (`Memory`) retrieves from, and witness entries past a byte budget archived as JSON Lines.
//
// Trajectories live in a collection (stored.ts: checksummed records, commits shared by tabs and processes, a byte
// budget dropping the oldest); the adapters in a MicroLoRA store. Nothing is on unless the app opens a loop.
import { lastUserText, type ChatMessage } from '../chat.js';
import { invalid, RuvllmError } from '../errors.js';
import type { LLM } from '../llm.js';
import type { MicroLora, MicroLoraOptions } from '../microlora.js';
import { openStore } from '../platform.js';
import type { Store } from '../store/store.js';
import type { Trajectory, TrajectorySink } from '../types.js';
import type { Memory } from './memory.js';
import type { Router } from './router.js';
import { checkEntry, openForEmbedderOrTime, timeVector, type StoredCollection } from './stored.js';
import { count, type IndexInfo } from './vector-index.js';
import type { WitnessLog } from './witness.js';

/** What a loop's adapters are made with (see `MicroLoraOptions`). */
export type LearningAdapterOptions = Pick<MicroLoraOptions, 'rank' | 'layers' | 'projections' | 'alpha' | 'learningRate' | 'ewcLambda' | 'fisherDecay' | 'seed'>;

export interface LearningOptions {
  /** Where the trajectories and the checkpoints are kept: `'indexeddb'` (the databases `database` and
   * `ruvllm-microlora`), a directory (Node: its `trajectories` and `adapters` folders), or two `Store`s of the app's
   * (an engine in the page only: `worker: false`, or Node). None: this page or process only. */
  store?: 'indexeddb' | string | { trajectories: Store; adapters: Store };
  /** The IndexedDB database of the trajectories with `store: 'indexeddb'` (default `ruvllm-learning`). */
  database?: string;
  /** The loop's name: its adapters are the MicroLoRAs `<name>base` and `<name>instant` (default `'default'`). */
  name?: string;
  /** The model whose embeddings of the requests make the deep loop's clusters (an encoder such as all-MiniLM-L6-v2).
   * Without one the loop has no deep loop. A store keeps the embedder it was made with. */
  embedder?: LLM;
  /** The Router that route corrections (`feedback(requestId, { route })`) teach. */
  router?: Router;
  /** The least score a trajectory needs to train the base adapter (default 0.5); a preferred answer always does. */
  minScore?: number;
  /** The loop runs on its own once the model has had no request for this long (ms, default 2,000)... */
  idleMs?: number;
  /** ...and at most this often (ms, default 60,000); 0: only when `run()` is called. */
  intervalMs?: number;
  /** Steps the base adapter takes on each trajectory (default 2). */
  epochs?: number;
  /** The base adapter (default rank 8, alpha 8, learning rate 3e-4, EWC lambda 1e8) and the instant one (default
   * rank 2, learning rate 1e-4), or `instant: false` for no instant loop: gentle steps, so that text the loops were not taught
   * changes little (benches/learning_stream.rs). */
  base?: LearningAdapterOptions;
  instant?: LearningAdapterOptions | false;
  /** The most the trajectories may take, in bytes (default 4 MiB): the oldest go first. */
  budgetBytes?: number;
  /** What the base adapter is to keep answering as the model does, so that what it learns disturbs the rest least
   * (its EWC penalty, `MicroLora.protect`): `'own'` (the default), the model's own greedy answers to eight everyday
   * questions, made when the base adapter is new (some seconds); your own examples; or `false`. */
  protect?: 'own' | Array<{ messages: ChatMessage[]; response: string }> | false;
}

/** Everyday questions whose answers, the model's own, the base adapter keeps by default (`protect: 'own'`). */
const EVERYDAY = [
  'What causes the seasons on Earth?',
  "Give me three tips for a good night's sleep.",
  'How do I make a cup of tea?',
  'Write a Python function that adds two numbers.',
  'What is photosynthesis?',
  'Tell me a short story about a cat.',
  'Why is the sky blue?',
  'How many legs does a spider have?',
];

/** What one background run did. */
export interface LearningRun {
  /** When it started (ms since the epoch), and how long it took in all (ms). */
  time: number;
  ms: number;
  /** Trajectories the base adapter learned, and its steps on them. */
  trajectories: number;
  steps: number;
  /** Route corrections the Router learned. */
  corrections: number;
  /** Times it waited for a request before a step. */
  interrupted: number;
  /** Trajectories it could not learn (the chat template, the tokenizer or the context refuses them), removed. */
  dropped: number;
  /** Steps the consolidation folded. */
  consolidated: number;
  /** Whether it ended early (`close()`, or `run`'s signal): the trajectories that took a step are checkpointed as learned. */
  stopped: boolean;
}

export interface LearningInfo {
  /** Trajectories waiting for the background loop, learned by it, and route corrections waiting. */
  pending: number;
  learned: number;
  corrections: number;
  /** What the trajectories take (texts, vectors, links), about what their store holds, within `budgetBytes`; and
   * what the store keeps of the two adapters (their training states). */
  bytes: number;
  budgetBytes: number;
  adapterBytes: number;
  /** Trajectories dropped: the queue was full, embedding failed, or a conversation was too long to keep. */
  dropped: number;
  /** Whether a background run is going on; the runs of this page or process; the last one. */
  running: boolean;
  runs: number;
  lastRun: LearningRun | null;
  /** The last run's failure, if it failed (a scheduled run's failure is kept here, not thrown). */
  lastError: { code: string; message: string } | null;
  /** Steps the adapters have taken in all. */
  baseSteps: number;
  instantSteps: number | null;
  /** Why the trajectories' store is behind, if it is. */
  storeError: { code: string; message: string } | null;
}

/** One pattern of the bank the deep loop makes: a cluster of learned trajectories, by its medoid. */
export interface LearnedPattern {
  query: string;
  response: string;
  /** Trajectories in the cluster, and their mean score. */
  members: number;
  score: number;
}

export interface DeepOptions {
  /** Clusters at most (default: the square root of half the learned trajectories, at least 1, at most 64). */
  clusters?: number;
  /** Two learned trajectories whose queries score at least this against each other are one too many (default 0.95). */
  duplicateScore?: number;
  /** The memory the pattern bank goes into, as the turns of the conversation `patterns` (replacing those). */
  memory?: Memory;
  /** A witness log to archive, down to `keepWitnessBytes` (default: half its budget). */
  witness?: WitnessLog;
  keepWitnessBytes?: number;
  /** The seed of k-means++ (default 0). */
  seed?: number;
}

export interface DeepResult {
  pruned: number;
  patterns: LearnedPattern[];
  /** The witness entries taken out of the log, as JSON Lines (empty without `witness`). */
  archived: { entries: number; jsonl: string };
}

const PENDING = 'pending';
const LEARNED = 'learned';
const CORRECTION = 'correction';
/** The memory conversation the pattern bank is. */
export const PATTERNS = 'patterns';
const MAX_QUEUE = 256;

type Stored = { id: number; text: string; used: number };
type Kept = { requestId: string; query: string; messages: ChatMessage[]; response: string; score: number; time: number };
type Correction = { requestId: string; query: string; route: string; time: number };

export class LearningLoop implements TrajectorySink {
  /** The base adapter and the instant one: apply them with `adapters: loop.adapters()`. */
  readonly base: MicroLora;
  readonly instant: MicroLora | null;
  readonly #llm: LLM;
  readonly #c: StoredCollection;
  readonly #embedder: LLM | null;
  readonly #router: Router | null;
  readonly #minScore: number;
  readonly #idleMs: number;
  readonly #intervalMs: number;
  readonly #epochs: number;
  readonly #budget: number;
  readonly #queue: Trajectory[] = [];
  #draining: Promise<void> | null = null;
  #dropped = 0;
  #running: Promise<LearningRun> | null = null;
  #stop = false;
  #closed = false;
  #runs = 0;
  #lastRun: LearningRun | null = null;
  #lastError: { code: string; message: string } | null = null;
  /** When the last run ended (ms since the epoch): the schedule counts `intervalMs` from it. */
  #lastEnded = 0;
  /** A run's checkpoint is in memory but not all in the store (a write failed). */
  #checkpointDue = false;
  readonly #timer: ReturnType<typeof setInterval> | null;

  private constructor(llm: LLM, c: StoredCollection, base: MicroLora, instant: MicroLora | null, o: Required<Pick<LearningOptions, 'minScore' | 'idleMs' | 'intervalMs' | 'epochs' | 'budgetBytes'>> & { embedder: LLM | null; router: Router | null }) {
    this.#llm = llm;
    this.#c = c;
    this.base = base;
    this.instant = instant;
    this.#embedder = o.embedder;
    this.#router = o.router;
    this.#minScore = o.minScore;
    this.#idleMs = o.idleMs;
    this.#intervalMs = o.intervalMs;
    this.#epochs = o.epochs;
    this.#budget = o.budgetBytes;
    if (o.intervalMs > 0) {
      this.#timer = setInterval(() => this.#tick(), Math.min(1000, Math.max(50, o.idleMs)));
      (this.#timer as { unref?: () => void }).unref?.(); // a Node process is not kept alive by the schedule
    } else {
      this.#timer = null;
    }
  }

  /** The loop of `llm` that `options.store` keeps (or a new one), made the model's learner (`llm.learner`: the
   * instant adapter) and its trajectory sink (`llm.trajectories`). The CPU engine trains (`backend: 'cpu'`). */
  static async open(llm: LLM, options: LearningOptions = {}): Promise<LearningLoop> {
    if (!llm || typeof llm.microLora !== 'function') throw invalid('the first argument must be a loaded LLM');
    if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
    const name = options.name ?? 'default';
    if (typeof name !== 'string' || !/^[0-9a-z]{1,40}$/.test(name)) throw invalid('name must be 1-40 lowercase letters and digits');
    const minScore = options.minScore ?? 0.5;
    if (typeof minScore !== 'number' || !(Math.abs(minScore) <= 1)) throw invalid(`minScore must be a number in [-1, 1], got ${minScore}`);
    const idleMs = count(options.idleMs, 2000, 'idleMs', 0);
    const intervalMs = count(options.intervalMs, 60_000, 'intervalMs', 0);
    const epochs = count(options.epochs, 2, 'epochs');
    const budgetBytes = count(options.budgetBytes, 4 << 20, 'budgetBytes', 1024);
    const embedder = options.embedder ?? null;
    if (embedder !== null && typeof embedder.embed !== 'function') throw invalid('embedder must be a loaded LLM');
    const router = options.router ?? null;
    const { trajectories, adapters } = stores(options.store, options.database ?? 'ruvllm-learning');
    const c = await openForEmbedderOrTime(embedder, trajectories, {});
    await c.configure(() => {
      c.run((w) => w.setBudget(budgetBytes));
    });
    try {
      const adapter = (which: 'base' | 'instant', o: LearningAdapterOptions, autosave: boolean) =>
        llm.microLora({ ...o, ...(adapters === undefined ? {} : { store: adapters }), name: `${name}${which}`, autosave });
      // The instant adapter opened last: it is what `llm.feedback({ messages, response })` trains too.
      const base = await adapter('base', { rank: 8, alpha: 8, learningRate: 3e-4, ewcLambda: 1e8, ...options.base }, false);
      const protect = options.protect ?? 'own';
      if (protect !== false && base.info().steps === 0) await base.protect(protect === 'own' ? await ownAnswers(llm) : protect);
      const instantOptions = options.instant;
      const instant = instantOptions === false ? null : await adapter('instant', { rank: 2, learningRate: 1e-4, ...instantOptions }, true);
      const loop = new LearningLoop(llm, c, base, instant, { minScore, idleMs, intervalMs, epochs, budgetBytes, embedder, router });
      llm.learner = instant;
      llm.trajectories = loop;
      return loop;
    } catch (e) {
      await c.close();
      throw e;
    }
  }

  /** The adapters a request runs with to have what the loops learned: `{ adapters: loop.adapters() }`. */
  adapters(): Array<{ id: number; scale: number }> {
    return [this.base, ...(this.instant ? [this.instant] : [])].map((a) => ({ id: a.id, scale: 1 }));
  }

  /** Queue a trajectory (`llm.feedback` calls this); returns at once. */
  take(t: Trajectory): void {
    if (this.#closed) return;
    if (this.#queue.length >= MAX_QUEUE) {
      this.#dropped++;
      return;
    }
    this.#queue.push(t);
    this.#draining ??= this.#drain();
  }

  /** One background run now (or the run going on): it waits while requests run before each step, as a scheduled
   * one does, but not for `idleMs`. Its failure is thrown (and kept in `info().lastError`). */
  async run(options: { signal?: AbortSignal } = {}): Promise<LearningRun> {
    if (this.#closed) throw new RuvllmError('E_DISPOSED', 'this learning loop was closed');
    await this.#settled();
    return this.#start(false, options.signal);
  }

  /** The deep loop: prune near-duplicate learned trajectories, cluster the rest into the pattern bank (into
   * `options.memory`, when given), archive the witness log's oldest entries. Needs an embedder. */
  async deep(options: DeepOptions = {}): Promise<DeepResult> {
    if (!this.#embedder) throw invalid('the deep loop clusters embeddings: open the loop with an embedder');
    const duplicateScore = options.duplicateScore ?? 0.95;
    if (typeof duplicateScore !== 'number' || !Number.isFinite(duplicateScore)) throw invalid('duplicateScore must be a number');
    const seed = count(options.seed, 0, 'seed', 0);
    await this.#settled();
    // Prune: of each near pair, the lower-scored (then the older) goes.
    const learned = new Map(this.#entries(LEARNED).map((s) => [s.id, parseKept(s.text)] as const));
    let pruned = 0;
    for (const { a, b } of JSON.parse(this.#c.run((w) => w.nearPairs(LEARNED, duplicateScore))) as Array<{ a: number; b: number }>) {
      const [ka, kb] = [learned.get(a), learned.get(b)];
      if (!ka || !kb) continue; // one of them already pruned
      const drop = ka.score !== kb.score ? (ka.score < kb.score ? a : b) : ka.time <= kb.time ? a : b;
      this.#c.run((w) => w.remove(drop));
      learned.delete(drop);
      pruned++;
    }
    const n = learned.size;
    const k = count(options.clusters, Math.min(64, Math.max(1, Math.round(Math.sqrt(n / 2)))), 'clusters');
    const clusters = n === 0 ? [] : (JSON.parse(this.#c.run((w) => w.clusters(LEARNED, k, seed))) as Array<{ members: number[]; medoid: number }>);
    const patterns: LearnedPattern[] = clusters.flatMap((c) => {
      const medoid = learned.get(c.medoid);
      if (!medoid) return [];
      const scores = c.members.map((m) => learned.get(m)?.score ?? 0);
      return [{ query: medoid.query, response: medoid.response, members: c.members.length, score: scores.reduce((a, b) => a + b, 0) / scores.length }];
    });
    this.#c.changed();
    if (options.memory) {
      options.memory.forget(PATTERNS);
      await options.memory.remember(
        PATTERNS,
        patterns.flatMap((p) => [
          { role: 'user', content: p.query },
          { role: 'assistant', content: p.response },
        ]),
      );
    }
    let archived = { entries: 0, jsonl: '' };
    if (options.witness) {
      const keep = options.keepWitnessBytes ?? Math.floor(options.witness.info().budgetBytes / 2);
      archived = options.witness.archive(keep);
    }
    await this.#c.flush();
    return { pruned, patterns, archived };
  }

  info(): LearningInfo {
    const i = JSON.parse(this.#c.run((w) => w.info())) as IndexInfo;
    const e = this.#c.storeError();
    return {
      pending: i.labels[PENDING]?.entries ?? 0,
      learned: i.labels[LEARNED]?.entries ?? 0,
      corrections: i.labels[CORRECTION]?.entries ?? 0,
      bytes: i.bytes,
      budgetBytes: this.#budget,
      adapterBytes: this.base.info().stateBytes + (this.instant?.info().stateBytes ?? 0),
      dropped: this.#dropped,
      running: this.#running !== null,
      runs: this.#runs,
      lastRun: this.#lastRun && { ...this.#lastRun },
      lastError: this.#lastError && { ...this.#lastError },
      baseSteps: this.base.info().steps,
      instantSteps: this.instant ? this.instant.info().steps : null,
      storeError: e && { code: e.code, message: e.message },
    };
  }

  /** Wait until every trajectory taken is in the store (throws `E_STORE_FULL` or `E_STORE` if it cannot). */
  async flush(): Promise<void> {
    while (this.#draining) await this.#draining;
    await this.#c.flush();
  }

  /** Stop the schedule, end a run going on after its current step (checkpointing what it learned), write what is queued,
   * and free the trajectories' memory; the model's learner and trajectory sink are unset. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#stop = true;
    await this.#running?.catch(() => {});
    while (this.#draining) await this.#draining;
    if (this.#llm.trajectories === this) this.#llm.trajectories = null;
    if (this.#llm.learner === this.instant && this.instant) this.#llm.learner = null;
    await this.#c.close();
  }

  /** The schedule: a run when there is something to learn, the model has been idle for `idleMs`, and `intervalMs`
   * has passed since the last run. */
  #tick(): void {
    if (this.#running || this.#closed || this.#draining || Date.now() - this.#lastEnded < this.#intervalMs) return;
    const i = JSON.parse(this.#c.run((w) => w.info())) as IndexInfo;
    if (!i.labels[PENDING]?.entries && !i.labels[CORRECTION]?.entries && !this.#checkpointDue) return;
    if (this.#llm.activity().idleMs < this.#idleMs) return;
    this.#start(true).catch(() => {}); // kept in info().lastError
  }

  #start(scheduled: boolean, signal?: AbortSignal): Promise<LearningRun> {
    this.#running ??= this.#run(scheduled, signal).finally(() => {
      this.#running = null;
      this.#stop = false;
      this.#lastEnded = Date.now();
    });
    return this.#running;
  }

  async #run(scheduled: boolean, signal: AbortSignal | undefined): Promise<LearningRun> {
    const time = Date.now();
    const started = performance.now();
    const run: LearningRun = { time, ms: 0, trajectories: 0, steps: 0, corrections: 0, interrupted: 0, dropped: 0, consolidated: 0, stopped: false };
    const stopped = () => this.#stop || signal?.aborted === true;
    try {
      if (this.#checkpointDue) await this.#checkpoint();
      // Epoch by epoch over the batch, oldest first: each answer's steps spread among the others', so that the last
      // one does not crowd out the first. A stop comes between steps; what has taken a step is learned.
      const batch = this.#entries(PENDING)
        .sort((a, b) => a.used - b.used)
        .map((t) => ({ ...t, kept: parseKept(t.text) }));
      const done = new Set(batch.filter((t) => !t.kept)); // text this class did not write leaves the queue too
      for (let epoch = 0; epoch < this.#epochs && !stopped(); epoch++) {
        for (const t of batch) {
          if (!t.kept) continue;
          if (await this.#waitForRequests(scheduled, stopped)) run.interrupted++;
          if (stopped()) break;
          try {
            await this.base.feedback({ messages: t.kept.messages, response: t.kept.response, reward: 1 });
          } catch (e) {
            // A conversation the model cannot take as an example would fail every run: it leaves the queue.
            if (!(e instanceof RuvllmError && UNLEARNABLE.has(e.code))) throw e;
            t.kept = null;
            done.add(t);
            run.dropped++;
            continue;
          }
          run.steps++;
          done.add(t);
        }
      }
      const corrections = stopped() ? [] : this.#entries(CORRECTION);
      for (const c of corrections) {
        const k = parseCorrection(c.text);
        if (k && this.#router && !this.#router.utterances(k.route).includes(k.query)) await this.#router.add(k.query, k.route);
      }
      run.stopped = stopped();
      run.trajectories = [...done].filter((t) => t.kept).length;
      run.corrections = corrections.length;
      if (done.size > 0) {
        // The checkpoint, in the order the top of this file gives: first in memory, then written. Should a write
        // fail (a full store), memory holds the run whole and the next run (or tick) writes the checkpoint again.
        run.consolidated = await this.base.consolidate();
        for (const t of done) {
          const vector = this.#c.run((w) => w.vector(t.id));
          this.#c.run((w) => w.remove(t.id));
          if (vector && t.kept) this.#c.run((w) => w.add(vector, t.text, LEARNED, Date.now()));
        }
        this.#checkpointDue = true;
        await this.instant?.reset();
      }
      for (const c of corrections) this.#c.run((w) => w.remove(c.id));
      this.#c.changed();
      await this.#router?.flush();
      if (this.#checkpointDue) await this.#checkpoint();
      else await this.#c.flush();
      this.#lastError = null;
      return run;
    } catch (e) {
      this.#lastError = e instanceof RuvllmError ? { code: e.code, message: e.message } : { code: e instanceof Error ? e.name : 'Error', message: String(e) };
      throw e;
    } finally {
      run.ms = performance.now() - started;
      this.#runs++;
      this.#lastRun = run;
    }
  }

  /** Write the last run's checkpoint: the instant adapter (reset), the trajectories, last the base adapter. */
  async #checkpoint(): Promise<void> {
    await this.instant?.save();
    await this.#c.flush();
    await this.base.save();
    this.#checkpointDue = false;
  }

  /** Wait while the model answers a request (and, for a scheduled run, until it has been idle for `idleMs`);
   * whether it waited. */
  async #waitForRequests(scheduled: boolean, stopped: () => boolean): Promise<boolean> {
    // A turn of the event loop first: with the engine on this thread, a step and the next would otherwise follow
    // each other in microtasks, and a request (or anything else) would find no turn until the run ended.
    await new Promise((resolve) => setTimeout(resolve, 0));
    let waited = false;
    for (;;) {
      const a = this.#llm.activity();
      if (stopped() || (a.running === 0 && (!scheduled || a.idleMs >= this.#idleMs))) return waited;
      waited = true;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Wait for the trajectories taken so far to be in the collection. */
  async #settled(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  async #drain(): Promise<void> {
    // After the caller's task: the request's answer goes out first.
    await new Promise((resolve) => setTimeout(resolve, 0));
    try {
      for (let t = this.#queue.shift(); t; t = this.#queue.shift()) {
        try {
          const query = queryOf(t);
          this.#add(t, query, await this.#vector(t, query));
        } catch {
          this.#dropped++; // an embedding that failed, or a conversation too long to keep
        }
      }
    } finally {
      this.#draining = null;
    }
  }

  #add(t: Trajectory, query: string, vector: Float32Array): void {
    if (t.route !== null) {
      const correction: Correction = { requestId: t.requestId, query, route: t.route, time: t.time };
      const text = JSON.stringify(correction);
      checkEntry(text, CORRECTION);
      this.#c.run((w) => w.add(vector, text, CORRECTION, t.time));
    }
    if (t.preferred !== null || t.score >= this.#minScore) {
      const kept: Kept = { requestId: t.requestId, query, messages: t.messages as ChatMessage[], response: t.preferred ?? t.response, score: t.preferred !== null ? 1 : t.score, time: t.time };
      const text = JSON.stringify(kept);
      checkEntry(text, PENDING);
      this.#c.run((w) => w.add(vector, text, PENDING, t.time));
    }
    this.#c.changed();
  }

  async #vector(t: Trajectory, query: string): Promise<Float32Array> {
    if (!this.#embedder) return timeVector(t.time);
    const [v] = await this.#embedder.embed(query === '' ? ' ' : query);
    return Float32Array.from(v);
  }

  #entries(label: string): Stored[] {
    return JSON.parse(this.#c.run((w) => w.entries(label)));
  }
}

/** The model's own greedy answers (48 tokens) to the everyday questions, as examples to protect; not recorded. */
async function ownAnswers(llm: LLM): Promise<Array<{ messages: ChatMessage[]; response: string }>> {
  const out = [];
  for (const question of EVERYDAY) {
    const messages = [{ role: 'user', content: question }];
    const answer = await llm.chat.completions.create({ messages, max_tokens: 48, temperature: 0, witness: false });
    const response = answer.choices[0].message.content ?? '';
    if (response !== '') out.push({ messages, response });
  }
  return out;
}

/** The stores of a loop's trajectories and of its adapters (a MicroLoRA's `store` option: a name reaches an engine in
 * a worker too; the app's own `Store`s serve an engine in the page). */
function stores(spec: LearningOptions['store'], database: string): { trajectories: Store | null; adapters: string | Store | undefined } {
  if (spec === undefined) return { trajectories: null, adapters: undefined };
  if (spec === 'indexeddb') return { trajectories: openStore('indexeddb', 'store', database), adapters: 'indexeddb' };
  if (typeof spec === 'string' && spec !== '') {
    const dir = spec.replace(/[\\/]+$/, '');
    return { trajectories: openStore(`${dir}/trajectories`, 'store', database), adapters: `${dir}/adapters` };
  }
  if (typeof spec === 'object' && spec !== null && typeof spec.trajectories === 'object' && typeof spec.adapters === 'object') {
    return { trajectories: openStore(spec.trajectories, 'store.trajectories', database), adapters: openStore(spec.adapters, 'store.adapters', database) };
  }
  throw invalid("store must be 'indexeddb', a directory path (Node) or { trajectories: Store, adapters: Store }");
}

/** What `MicroLora.feedback` throws for a conversation it can never take as an example. */
const UNLEARNABLE = new Set(['E_CHAT_TEMPLATE', 'E_TOKENIZER', 'E_CONTEXT_OVERFLOW', 'E_INVALID_ARGUMENT']);

/** A trajectory's query: its last user message, at most 2,000 characters ('' if it has none that is text). */
function queryOf(t: Trajectory): string {
  try {
    return (lastUserText(t.messages as ChatMessage[]) ?? '').slice(0, 2000);
  } catch {
    return '';
  }
}

/** A stored trajectory, or null for text this class did not write. */
function parseKept(text: string): Kept | null {
  try {
    const k = JSON.parse(text);
    if (typeof k?.response !== 'string' || !Array.isArray(k.messages) || !Number.isFinite(k.score) || !Number.isFinite(k.time)) return null;
    return { requestId: String(k.requestId), query: typeof k.query === 'string' ? k.query : '', messages: k.messages, response: k.response, score: k.score, time: k.time };
  } catch {
    return null;
  }
}

function parseCorrection(text: string): Correction | null {
  try {
    const c = JSON.parse(text);
    if (typeof c?.query !== 'string' || typeof c.route !== 'string' || c.route === '') return null;
    return c;
  } catch {
    return null;
  }
}
