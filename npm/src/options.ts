import { invalid, RuvllmError } from './errors.js';
import type { KvCacheOptions, KvCacheType, WitnessNote } from './types.js';

/** Sampling and stopping options of `generate` (defaults are llama.cpp's, as in the native CLI). */
export interface GenerateOptions {
  /** Most tokens to generate, end-of-generation token included (default 256). 0 evaluates the prompt into the cache
   * and returns without a token (a reopened conversation made ready while its user types). */
  maxTokens?: number;
  /** 0 = greedy (default 0.8). */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off (default 40). */
  topK?: number;
  /** Nucleus sampling, in [0, 1]; 1 = off (default 0.95). */
  topP?: number;
  /** Drop tokens less likely than minP × the most likely one, in [0, 1]; 0 = off (default 0.05). */
  minP?: number;
  /** 1 = off (default). */
  repeatPenalty?: number;
  /** 0 = off (default). */
  presencePenalty?: number;
  /** 0 = off (default). */
  frequencyPenalty?: number;
  /** How many recent tokens the penalties look at (default 64). */
  penaltyLastN?: number;
  /** Integer seed in [0, 2^53); the same seed, prompt and options give the same tokens. Default: a fresh random seed
   * per request (as llama.cpp and OpenAI sample), which the result's `seed` names, so that asking again gives
   * another answer. */
  seed?: number;
  /** Generation ends when the text contains one of these; the stop string itself is not returned. */
  stop?: string | string[];
  /** Keep generating past end-of-generation tokens. */
  ignoreEos?: boolean;
  /** LoRA adapters (`llm.loadAdapter`) this generation runs with, each with its scale (default 1); none: the base
   * model. The conversation's cache is kept only while the set stays the same. CPU engine only. */
  adapters?: Array<{ id: number; scale?: number }>;
  /** The grammar the output must follow: every token is sampled from those it allows, and the tokens it forces are
   * appended without sampling. A grammar that does not compile, or uses a feature the engine lacks, is `E_GRAMMAR`
   * before any token. */
  grammar?: Grammar;
  /** Stops generation (the iterator throws an `AbortError`); the model stays usable. */
  signal?: AbortSignal;
  /** The conversation this request belongs to, in the app's words (at most 256 characters): the witness log
   * (`llm.witness`) records it. */
  session?: string;
  /** The request's id (1 to 256 characters): the result's `requestId`; default a fresh one. */
  requestId?: string;
  /** What the witness log records of this request beyond what the engine measures; `false`: the request is not
   * recorded (a call the app makes for itself, such as evaluating a conversation ahead with `maxTokens: 0`). */
  witness?: WitnessNote | false;
}

/** A constraint on the output. `json_schema`: JSON that validates against `schema` (drafts 4 to 2020-12, `$ref`s within
 * the document), written with `", "` and `": "` and no other whitespace unless the schema's `x-guidance` says otherwise;
 * `json_object`: any JSON object; `gbnf`: llama.cpp's GBNF (`root ::= ...`); `regex`: a regular expression the whole
 * output matches; `lark`: llguidance's Lark dialect (`start: ...`, with `%json {...}` for inline schemas). */
export type Grammar =
  | { type: 'json_schema'; schema: Record<string, unknown> | boolean }
  | { type: 'json_object' }
  | { type: 'gbnf'; grammar: string }
  | { type: 'regex'; pattern: string }
  | { type: 'lark'; grammar: string };

const GRAMMAR_FIELDS: Record<string, string | null> = {
  json_schema: 'schema', json_object: null, gbnf: 'grammar', regex: 'pattern', lark: 'grammar',
};

/** `grammar` checked for shape (the engine compiles it); the form the engine takes. */
export function checkGrammar(grammar: unknown): Grammar {
  if (typeof grammar !== 'object' || grammar === null) throw invalid('grammar must be an object with a type');
  const { type, ...rest } = grammar as Record<string, unknown>;
  if (typeof type !== 'string' || !(type in GRAMMAR_FIELDS)) {
    throw invalid(`grammar.type must be one of ${Object.keys(GRAMMAR_FIELDS).join(', ')}, got ${JSON.stringify(type)}`);
  }
  const field = GRAMMAR_FIELDS[type];
  for (const key of Object.keys(rest)) {
    if (key !== field) throw invalid(`grammar of type ${type}: unknown field '${key}'`);
  }
  if (field === null) return { type } as Grammar;
  const value = rest[field];
  if (field === 'schema') {
    if (typeof value !== 'boolean' && (typeof value !== 'object' || value === null || Array.isArray(value))) {
      throw invalid('grammar.schema must be a JSON Schema: an object or a boolean');
    }
  } else if (typeof value !== 'string') {
    throw invalid(`grammar.${field} must be a string`);
  }
  return { type, [field]: value } as Grammar;
}

const INTEGERS = ['maxTokens', 'topK', 'penaltyLastN', 'seed'] as const;
const NUMBERS = ['temperature', 'topP', 'minP', 'repeatPenalty', 'presencePenalty', 'frequencyPenalty'] as const;
// session, requestId and witness are the package's (the witness log's), checked here and not sent to the engine.
const KNOWN = new Set<string>([...INTEGERS, ...NUMBERS, 'stop', 'ignoreEos', 'signal', 'adapters', 'grammar', 'session', 'requestId', 'witness']);

/** A seed for a request that names none: random, within the integers `seed` takes. */
export function freshSeed(): number {
  const [high, low] = crypto.getRandomValues(new Uint32Array(2));
  return (high & 0x1fffff) * 2 ** 32 + low;
}

/** An id for a request that names none: `req-` and 16 random hex digits. */
export function freshRequestId(): string {
  return `req-${Array.from(crypto.getRandomValues(new Uint32Array(2)), (v) => v.toString(16).padStart(8, '0')).join('')}`;
}

/** Check types and integer ranges here (the engine checks the float ranges) and build the engine's JSON. */
export function engineOptions(options: GenerateOptions): string {
  if (typeof options !== 'object' || options === null) throw invalid('options must be an object');
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) throw invalid(`unknown option '${key}'`);
  }
  const out: Record<string, unknown> = {};
  for (const key of INTEGERS) {
    const v = options[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
      throw invalid(`${key} must be an integer >= 0${key === 'seed' ? ` and <= ${Number.MAX_SAFE_INTEGER}` : ''}, got ${String(v)}`);
    }
    out[key] = v;
  }
  for (const key of NUMBERS) {
    const v = options[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(`${key} must be a finite number, got ${String(v)}`);
    out[key] = v;
  }
  if (options.stop !== undefined) {
    const stop = typeof options.stop === 'string' ? [options.stop] : options.stop;
    if (!Array.isArray(stop) || stop.some((s) => typeof s !== 'string' || s.length === 0)) {
      throw invalid('stop must be a non-empty string or an array of them');
    }
    out.stop = stop;
  }
  if (options.ignoreEos !== undefined) out.ignoreEos = Boolean(options.ignoreEos);
  if (options.adapters !== undefined) {
    if (!Array.isArray(options.adapters)) throw invalid('adapters must be an array of {id, scale?}');
    out.adapters = options.adapters.map((a) => {
      if (typeof a !== 'object' || a === null || !Number.isSafeInteger(a.id) || a.id < 0) throw invalid(`adapters: ${JSON.stringify(a)} has no adapter id`);
      if (a.scale !== undefined && (typeof a.scale !== 'number' || !Number.isFinite(a.scale))) throw invalid(`adapters: the scale of adapter ${a.id} must be a finite number`);
      return { id: a.id, scale: a.scale };
    });
  }
  if (options.grammar !== undefined) out.grammar = checkGrammar(options.grammar);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) throw invalid('signal must be an AbortSignal');
  checkRecordOptions(options);
  // The engine refuses a grammar over MAX_GRAMMAR_BYTES of text (crate/src/constraint), but only once the options are
  // copied into wasm memory: one that JSON's escapes (6 characters for one at most) and the object around it cannot
  // bring under that bound is refused here, before the copy.
  if (out.grammar !== undefined && writeJson(out.grammar).length > 6 * MAX_GRAMMAR_BYTES + 64) {
    throw new RuvllmError('E_GRAMMAR', `grammar: the grammar is more than the ${MAX_GRAMMAR_BYTES} bytes allowed`);
  }
  return writeJson(out);
}

/** The witness log's options of a request (`session`, `requestId`, `witness`) checked for shape. */
function checkRecordOptions(options: GenerateOptions): void {
  const id = (v: unknown, name: string) => {
    if (v !== undefined && (typeof v !== 'string' || v === '' || v.length > 256)) throw invalid(`${name} must be a string of 1 to 256 characters`);
  };
  id(options.session, 'session');
  id(options.requestId, 'requestId');
  const w = options.witness;
  if (w === undefined || w === false) return;
  if (typeof w !== 'object' || w === null) throw invalid('witness must be an object { query?, route?, latencyMs? }');
  if (w.query !== undefined && typeof w.query !== 'string') throw invalid('witness.query must be a string');
  if (w.kind !== undefined && w.kind !== 'chat' && w.kind !== 'generate') throw invalid("witness.kind must be 'chat' or 'generate'");
  if (w.route !== undefined && w.route !== null && (typeof w.route !== 'object' || typeof w.route.label !== 'string' || typeof w.route.score !== 'number')) {
    throw invalid('witness.route must be { label, score } or null');
  }
  for (const [k, v] of Object.entries(w.latencyMs ?? {})) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw invalid(`witness.latencyMs.${k} must be a number of milliseconds >= 0`);
  }
}

/** `value` as JSON; a value JSON cannot hold (a cycle, a string past the engine's limit) is E_INVALID_ARGUMENT. */
/** `value` as JSON; `E_INVALID_ARGUMENT` (naming `what`) where it cannot be written (cyclic, or too big). */
export function writeJson(value: unknown, what = 'options'): string {
  try {
    return JSON.stringify(value);
  } catch (e) {
    throw invalid(`${what} cannot be written as JSON (cyclic or oversized?): ${(e as Error).message}`);
  }
}

/** The engine's bound on a grammar's text (`constraint::MAX_GRAMMAR_BYTES`). */
const MAX_GRAMMAR_BYTES = 1 << 20;

/** Token ids as the engine takes them: integers in 0..2^32. */
export function tokenIds(ids: unknown, what: string): Uint32Array {
  if (!Array.isArray(ids) && !(ids instanceof Uint32Array)) throw invalid(`${what} must be an array of token ids`);
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw invalid(`${what}: ${String(id)} is not a token id`);
  }
  return Uint32Array.from(ids);
}

const KV_CACHE_TYPES: readonly KvCacheType[] = ['f16', 'q8_0', 'q4_0'];

/** Check `LoadOptions.kvCache`'s types (the engine checks the hot window against the model); undefined: f16. */
export function checkKvCache(kv: KvCacheOptions | undefined): KvCacheOptions | undefined {
  if (kv === undefined) return undefined;
  if (typeof kv !== 'object' || kv === null) throw invalid('kvCache must be an object');
  for (const key of Object.keys(kv)) {
    if (key !== 'cold' && key !== 'hotTokens') throw invalid(`unknown kvCache option '${key}'`);
  }
  if (!KV_CACHE_TYPES.includes(kv.cold)) throw invalid(`kvCache.cold must be one of ${KV_CACHE_TYPES.join(', ')}, got ${String(kv.cold)}`);
  const { hotTokens } = kv;
  if (hotTokens !== undefined && (!Number.isSafeInteger(hotTokens) || hotTokens < 0)) {
    throw invalid(`kvCache.hotTokens must be an integer >= 0, got ${String(hotTokens)}`);
  }
  return { cold: kv.cold, ...(hotTokens !== undefined && { hotTokens }) };
}
