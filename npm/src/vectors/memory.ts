// Memory: long-term memory for chats. Each remembered turn (a user's or the assistant's message) is embedded into an
// index under its conversation; before a new message, the turns of other conversations nearest it are recalled and
// put in the prompt. The memory keeps within a byte budget, dropping the turns least recently remembered or
// recalled first, and lives in a store, so a page or process that reopens it recalls the same turns.
import { lastUserText, messageText, type ChatMessage } from '../chat.js';
import { invalid } from '../errors.js';
import type { LLM } from '../llm.js';
import { openStore } from '../platform.js';
import { checkEntry, openForEmbedder, type StoredCollection, type GraphOptions } from './stored.js';
import { count, type IndexInfo, type StoreSpec } from './vector-index.js';

export interface MemoryOptions extends GraphOptions {
  /** The model whose embeddings compare turns (an encoder such as all-MiniLM-L6-v2, or the chat model). */
  embedder: LLM;
  /** The most the turns may take, in bytes (texts, vectors, links; default 16 MiB): the least recently used go. */
  budgetBytes?: number;
  /** Turns recalled for a message (default 4), and the least score (cosine similarity) one needs (default 0.3). */
  k?: number;
  minScore?: number;
  store?: StoreSpec;
  /** The IndexedDB database with `store: 'indexeddb'` (default `ruvllm-memory`): one per app. */
  database?: string;
}

/** A turn recalled for a message. */
export interface RecalledTurn {
  id: number;
  conversation: string;
  role: string;
  content: string;
  score: number;
  /** When it was remembered or last recalled (ms since the epoch). */
  used: number;
}

export interface RecallOptions {
  k?: number;
  minScore?: number;
  /** Leave out this conversation's turns (those already in its prompt). */
  exceptConversation?: string;
  signal?: AbortSignal;
}

export interface MemoryInfo {
  turns: number;
  bytes: number;
  budgetBytes: number | null;
  conversations: number;
}

const ROLES = new Set(['user', 'assistant']);

export class Memory {
  readonly #c: StoredCollection;
  readonly #embedder: LLM;
  readonly #k: number;
  readonly #minScore: number;

  private constructor(c: StoredCollection, embedder: LLM, k: number, minScore: number) {
    this.#c = c;
    this.#embedder = embedder;
    this.#k = k;
    this.#minScore = minScore;
  }

  /** The memory `store` holds, or a new one. Records that are not a memory's are `E_INDEX`, and so is a memory
   * whose vectors came from another embedding model. */
  static async open(options: MemoryOptions): Promise<Memory> {
    const { embedder } = options ?? {};
    if (!embedder || typeof embedder.embed !== 'function') throw invalid('embedder must be a loaded LLM');
    const budget = count(options.budgetBytes, 16 << 20, 'budgetBytes', 0);
    const k = count(options.k, 4, 'k');
    const minScore = options.minScore ?? 0.3;
    if (!Number.isFinite(minScore)) throw invalid(`minScore must be a number, got ${options.minScore}`);
    const store = options.store === undefined ? null : openStore(options.store, 'store', options.database ?? 'ruvllm-memory');
    const c = await openForEmbedder(embedder, store, options);
    await c.configure(() => {
      c.run((w) => w.setBudget(budget));
    });
    return new Memory(c, embedder, k, minScore);
  }

  /** Remember a conversation's user and assistant turns that it does not hold yet (system messages are not turns,
   * nor are an assistant's calls without text, or tool results); the ids of the turns added. Over the budget, the
   * least recently used turns are dropped. */
  async remember(conversation: string, messages: ChatMessage | ChatMessage[], options: { signal?: AbortSignal } = {}): Promise<number[]> {
    if (typeof conversation !== 'string' || conversation === '') throw invalid('conversation must be a non-empty string');
    const list = Array.isArray(messages) ? messages : [messages];
    for (const m of list) {
      if (typeof m !== 'object' || m === null || typeof m.role !== 'string' || (typeof m.content !== 'string' && m.content !== null)) {
        throw invalid('messages must be {role, content}, content a string (or null in a turn of tool calls)');
      }
    }
    const held = new Set(this.#turns(conversation).map((t) => `${t.role}\n${t.content}`));
    const texts = list.flatMap((m) => (typeof m.content === 'string' && ROLES.has(m.role) ? [{ role: m.role, content: m.content }] : []));
    const fresh = texts.filter((m) => m.content.trim() !== '' && !held.has(`${m.role}\n${m.content}`));
    if (fresh.length === 0) return [];
    const entries = fresh.map((m) => JSON.stringify({ role: m.role, content: m.content }));
    entries.forEach((text) => checkEntry(text, conversation));
    const vectors = await this.#embedder.embed(fresh.map((m) => m.content), { signal: options.signal });
    const ids = entries.map((text, i) => JSON.parse(this.#c.run((w) => w.add(Float32Array.from(vectors[i]), text, conversation, Date.now()))).id as number);
    this.#c.changed();
    return ids.filter((id) => this.#c.run((w) => w.entry(id)) !== undefined);
  }

  /** The remembered turns nearest `text`, best first, marked used. */
  async recall(text: string, options: RecallOptions = {}): Promise<RecalledTurn[]> {
    if (typeof text !== 'string') throw invalid('text must be a string');
    const k = count(options.k, this.#k, 'k');
    const minScore = options.minScore ?? this.#minScore;
    if (!Number.isFinite(minScore)) throw invalid(`minScore must be a number, got ${options.minScore}`);
    const [v] = await this.#embedder.embed(text, { signal: options.signal });
    const hits = JSON.parse(this.#c.run((w) => w.recall(Float32Array.from(v), k, Math.max(64, k), undefined, options.exceptConversation, minScore, Date.now())));
    if (hits.length > 0) this.#c.changed();
    return hits.map(turnOf);
  }

  /** `messages` with the turns of other conversations nearest their last user message added to the system message
   * (one is put first if there is none), and the turns recalled. */
  async augment(messages: ChatMessage[], options: RecallOptions & { conversation?: string } = {}): Promise<{ messages: ChatMessage[]; recalled: RecalledTurn[] }> {
    if (!Array.isArray(messages)) throw invalid('messages must be an array');
    const question = lastUserText(messages);
    if (question === null) return { messages, recalled: [] };
    const recalled = await this.recall(question, { ...options, exceptConversation: options.exceptConversation ?? options.conversation });
    if (recalled.length === 0) return { messages, recalled };
    const note = ['Relevant turns from earlier conversations (most relevant first):', ...recalled.map((t) => `- ${t.role}: ${t.content}`)].join('\n');
    const [first, ...rest] = messages;
    const out = first?.role === 'system' ? [{ ...first, content: `${messageText(first, 'messages[0]')}\n\n${note}` }, ...rest] : [{ role: 'system', content: note }, ...messages];
    return { messages: out, recalled };
  }

  /** A conversation's remembered turns, oldest first (every conversation's without one). */
  turns(conversation?: string): RecalledTurn[] {
    return this.#turns(conversation);
  }

  #turns(conversation?: string): RecalledTurn[] {
    return JSON.parse(this.#c.run((w) => w.entries(conversation))).map(turnOf);
  }

  /** Forget a conversation's turns; how many there were. */
  forget(conversation: string): number {
    const n = this.#c.run((w) => w.removeLabel(conversation));
    this.#c.changed();
    return n;
  }

  info(): MemoryInfo {
    const i = JSON.parse(this.#c.run((w) => w.info())) as IndexInfo;
    return { turns: i.entries, bytes: i.bytes, budgetBytes: i.budget, conversations: Object.keys(i.labels).length };
  }

  /** Wait until the store holds every change (throws `E_STORE_FULL` or `E_STORE` if it cannot). */
  flush(): Promise<void> {
    return this.#c.flush();
  }

  close(): Promise<void> {
    return this.#c.close();
  }
}

function turnOf(e: { id: number; text: string; label: string; score: number; used: number }): RecalledTurn {
  let turn: { role?: unknown; content?: unknown } = {};
  try {
    turn = JSON.parse(e.text);
  } catch {
    // not a turn this class wrote: shown as text
  }
  const role = typeof turn.role === 'string' ? turn.role : 'user';
  const content = typeof turn.content === 'string' ? turn.content : e.text;
  return { id: e.id, conversation: e.label, role, content, score: e.score, used: e.used };
}
