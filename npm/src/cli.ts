#!/usr/bin/env node
// `ruvllm` for Node: the native CLI's commands, flags and JSON output (cli/src/main.rs), on the wasm engine.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { createInterface } from 'node:readline';
import { LLM, RuvllmError, Tokenizer, type Backend, type ChatMessage, type GenerateOptions, type GenerateResult, type Grammar, type KvCacheType } from './node.js';
import { serve } from './serve.js';

/** One option a command takes: a boolean flag when it has no `value` (what the value is called in the usage). */
interface Opt {
  name: string;
  value?: string;
  required?: boolean;
  /** Every value counts (`Args.all`); other options given twice keep the last one. */
  repeats?: boolean;
}

const flag = (name: string): Opt => ({ name });
const value = (name: string, v: string): Opt => ({ name, value: v });
const required = (name: string, v: string): Opt => ({ name, value: v, required: true });
const repeated = (name: string, v: string): Opt => ({ name, value: v, repeats: true });

/** `--name V`, `[--name V]` or `[--name V]...`, as the usage shows it. */
function optUsage(o: Opt): string {
  const s = o.value === undefined ? `--${o.name}` : `--${o.name} ${o.value}`;
  return o.required ? s : o.repeats ? `[${s}]...` : `[${s}]`;
}

/** A command's options and positionals: the parser checks command lines against them, and the usage shows them. */
interface Command {
  name: string;
  run: (args: Args) => Promise<void>;
  options: Opt[];
  /** What its positional arguments are called, if it takes them (one or more, required). */
  positional?: string;
  about?: string;
}

const SAMPLING: Opt[] = [
  value('max-tokens', 'N'), value('temperature', 'T'), value('top-k', 'K'), value('top-p', 'P'), value('min-p', 'P'),
  value('repeat-penalty', 'R'), value('seed', 'S'), repeated('stop', 'S'), flag('ignore-eos'),
];

// (The command functions further down are function declarations, so they already exist here.)
const COMMANDS: Command[] = [
  { name: 'tokenize', run: tokenize, options: [flag('special')], positional: 'TEXT' },
  {
    name: 'generate',
    run: generate,
    options: [
      required('prompt', 'TEXT'), flag('chat'), ...SAMPLING, flag('json'), repeated('lora', 'FILE[:SCALE]'),
      value('json-schema', 'FILE'), value('grammar', 'FILE'), value('regex', 'RX'),
    ],
  },
  {
    name: 'chat', run: chat, options: [value('system', 'TEXT'), ...SAMPLING, flag('json')],
    about: 'an interactive conversation: one line per message, /reset forgets it, /exit or EOF ends it',
  },
  { name: 'score', run: score, options: [required('ids', '1,2,3'), value('top-k', 'K')] },
  { name: 'bench', run: bench, options: [value('prompt-tokens', 'N'), value('gen-tokens', 'N'), repeated('lora', 'FILE[:SCALE]')] },
  {
    name: 'serve',
    run: serveModel,
    options: [value('host', 'ADDR'), value('port', 'N'), value('api-key', 'KEY'), value('cors', 'ORIGIN|*'), value('max-queue', 'N'), value('embed-model', 'E')],
    about: 'an OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health',
  },
];

/** Options every command takes. */
const COMMON: Opt[] = [
  value('model', 'M'),
  value('threads', 'N'),
  value('ctx', 'N'),
  value('backend', 'auto|webgpu|cpu'),
  value('kv-cold', 'f16|q8_0|q4_0'),
  value('kv-hot', 'N'),
];

const NOTES = `--model defaults to $RUVLLM_MODEL. --threads: default the cores, at most 8; 1 = the single-thread build.
--ctx: the context window. --backend: default auto (WebGPU when navigator.gpu offers an adapter, e.g. the npm
\`webgpu\` package in Node, see the README; else the CPU).
--kv-cold: the two-tier KV cache, positions older than the hot window stored as q8_0 or q4_0 (default f16: one
tier; the CPU runs it). --kv-hot: positions the hot window keeps in f16, a multiple of 32 (default 128).
--lora (generate, bench): a llama.cpp GGUF LoRA adapter applied at SCALE (default 1), several in the order given.
--seed (generate): the sampler's seed; default a fresh random one, which --json prints.
--json-schema, --grammar, --regex (generate, one of them): the output is JSON valid under the schema in FILE, follows
the grammar in FILE (llama.cpp's GBNF; llguidance's Lark when FILE ends in .lark), or matches RX.
serve: listens on --host (default 127.0.0.1: this machine only) and --port (default 8080; 0 picks a free one) and
prints \`listening on http://HOST:PORT\`; OpenAI's clients take http://HOST:PORT/v1 as their base URL. --api-key (or
$RUVLLM_API_KEY): /v1 requests need \`Authorization: Bearer KEY\`. --cors: send Access-Control-Allow-Origin ORIGIN (none
without it). --max-queue: most requests waiting or running (default 8), more get 429. --embed-model: answer
/v1/embeddings with this model (default --model). Ctrl+C or SIGTERM stops it.
\`--name=value\` is \`--name value\`. \`--\` ends the options: what follows is TEXT even if it begins with \`-\`.`;

/** `head` and the words after it, wrapped at 100 columns; continuation lines are indented under the first word. */
function wrap(head: string, words: string[]): string {
  const indent = ' '.repeat(head.length + 1);
  let out = head;
  let lineLength = head.length;
  for (const w of words) {
    if (lineLength + 1 + w.length > 100 && lineLength > indent.length) {
      out += `\n${indent}${w}`;
      lineLength = indent.length + w.length;
    } else {
      out += ` ${w}`;
      lineLength += 1 + w.length;
    }
  }
  return out;
}

function synopsis(cmd: Command, prefix: string): string {
  const head = `${prefix}ruvllm ${cmd.name}`;
  const words = [...cmd.options.map(optUsage), ...(cmd.positional ? [`${cmd.positional}...`] : [])];
  return wrap(head, words) + (cmd.about ? `\n${' '.repeat(head.length + 1)}(${cmd.about})` : '');
}

/** The usage of `cmd`, or of every command. */
function usage(cmd?: Command): string {
  const synopses = cmd
    ? synopsis(cmd, 'usage: ')
    : ['usage: ruvllm COMMAND ... (ruvllm COMMAND --help: its usage; the wasm engine, in Node)', ...COMMANDS.map((c) => synopsis(c, '  '))].join('\n');
  return `${synopses}\n${wrap('Every command also takes', [...COMMON.map(optUsage), '[--help]'])}\n${NOTES}`;
}

/**
 * `--name value`, `--name=value`, `--flag` and positionals, checked against the command's table (as the native
 * CLI's args.rs). `--` ends the options: everything after it is positional, even if it begins with `-`.
 */
class Args {
  readonly options = new Map<string, string[]>();
  readonly positional: string[] = [];
  /** `--help` or `-h` came before `--`: it wins over the errors, so a wrong command line can ask for the right one. */
  readonly help: boolean = false;

  constructor(cmd: Command, argv: string[]) {
    const known = [...cmd.options, ...COMMON];
    let error: string | undefined;
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i];
      if (arg === '--') {
        this.positional.push(...argv.slice(i + 1));
        break;
      }
      if (arg === '--help' || arg === '-h') {
        this.help = true;
        return;
      }
      // A lone `-` or `-5 apples` is text, as it always was here: only `--` starts an option.
      if (!arg.startsWith('--')) {
        this.positional.push(arg);
        continue;
      }
      const eq = arg.indexOf('=');
      const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
      const inline = eq < 0 ? undefined : arg.slice(eq + 1);
      const opt = known.find((o) => o.name === name);
      let v: string | undefined;
      if (!opt) error ??= `unknown option --${name} for '${cmd.name}'`;
      else if (opt.value === undefined) {
        if (inline === undefined) v = '';
        else error ??= `--${name} takes no value`;
      } else {
        // The next argument is the value whatever it looks like, so `--prompt -5` works.
        v = inline ?? (i + 1 < argv.length ? argv[++i] : undefined);
        if (v === undefined) error ??= `--${name} needs a value`;
      }
      if (v !== undefined) this.options.set(name, [...(this.options.get(name) ?? []), v]);
    }
    if (error !== undefined) throw new Error(error);
    const missing = known.find((o) => o.required && !this.options.has(o.name));
    if (missing) throw new Error(`--${missing.name} is required`);
    if (cmd.positional && this.positional.length === 0) throw new Error(`missing ${cmd.positional}`);
    if (!cmd.positional && this.positional.length > 0) throw new Error(`unexpected argument '${this.positional[0]}': '${cmd.name}' takes none`);
  }

  flag(name: string): boolean {
    return this.options.has(name);
  }

  opt(name: string): string | undefined {
    return this.options.get(name)?.at(-1);
  }

  /** A required option's value: the constructor has checked that it is there. */
  required(name: string): string {
    const v = this.opt(name);
    if (v === undefined) throw new Error(`--${name} is not declared required`);
    return v;
  }

  all(name: string): string[] {
    return this.options.get(name) ?? [];
  }

  num(name: string, fallback: number): number {
    const v = this.opt(name);
    if (v === undefined) return fallback;
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n)) throw new Error(`--${name}: '${v}' is not a valid number`);
    return n;
  }
}

/** One line of JSON, the keys in the order given, as the native CLI's serde_json prints them (llguidance turns on
 * serde_json's `preserve_order`: its JSON Schemas' properties keep their order). */
function printJson(value: Record<string, unknown>): void {
  console.log(JSON.stringify(value));
}

/** `--model`, else $RUVLLM_MODEL. */
function modelPath(args: Args): string {
  const path = args.opt('model') ?? process.env.RUVLLM_MODEL;
  if (!path) throw new Error('--model is required (or set RUVLLM_MODEL)');
  return path;
}

async function load(args: Args): Promise<{ llm: LLM; loadMs: number }> {
  const path = modelPath(args);
  const backend = args.opt('backend') ?? 'auto';
  if (!['auto', 'cpu', 'webgpu', 'gpu'].includes(backend)) throw new Error(`backend '${backend}' is not one of auto, webgpu, cpu`);
  const threads = args.num('threads', 0);
  const cold = args.opt('kv-cold') ?? 'f16';
  if (args.opt('kv-hot') !== undefined && cold === 'f16') throw new Error('--kv-hot needs --kv-cold q8_0 or q4_0');
  const kvCache = { cold: cold as KvCacheType, ...(args.opt('kv-hot') !== undefined && { hotTokens: args.num('kv-hot', 128) }) };
  const t0 = performance.now();
  try {
    const llm = await LLM.load(path, { contextSize: args.num('ctx', 0), threads: threads || undefined, backend: backend as Backend, kvCache });
    return { llm, loadMs: performance.now() - t0 };
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`, { cause: e });
  }
}

/** The adapters of each `--lora FILE[:SCALE]`, loaded into `llm`, for the `adapters` option. */
async function adapters(args: Args, llm: LLM): Promise<Array<{ id: number; scale: number }>> {
  const set = [];
  for (const spec of args.all('lora')) {
    // FILE:SCALE where what follows the last ':' is a number, else the whole of it is the file (as natively).
    const colon = spec.lastIndexOf(':');
    const tail = colon < 0 ? '' : spec.slice(colon + 1);
    const numeric = tail.trim() !== '' && Number.isFinite(Number(tail));
    const [path, scale] = numeric ? [spec.slice(0, colon), Number(tail)] : [spec, 1];
    try {
      set.push({ id: await llm.loadAdapter(path), scale });
    } catch (e) {
      const message = (e as Error).message;
      throw new Error(message.includes(path) ? message : `${path}: ${message}`, { cause: e });
    }
  }
  return set;
}

/** The grammar of \`--json-schema FILE\`, \`--grammar FILE\` or \`--regex RX\` (at most one), as natively. */
function grammar(args: Args): Grammar | undefined {
  const read = (path: string) => readFileSync(path, 'utf8');
  const [schema, file, pattern] = [args.opt('json-schema'), args.opt('grammar'), args.opt('regex')];
  if ([schema, file, pattern].filter((v) => v !== undefined).length > 1) throw new Error('give one of --json-schema, --grammar and --regex');
  if (schema !== undefined) {
    let parsed;
    try {
      parsed = JSON.parse(read(schema));
    } catch (e) {
      throw new Error(`${schema}: ${(e as Error).message}`, { cause: e });
    }
    return { type: 'json_schema', schema: parsed };
  }
  if (file !== undefined) return file.endsWith('.lark') ? { type: 'lark', grammar: read(file) } : { type: 'gbnf', grammar: read(file) };
  return pattern === undefined ? undefined : { type: 'regex', pattern };
}

/** Sampling flags with the native CLI's defaults. */
function sampling(args: Args): GenerateOptions {
  return {
    maxTokens: args.num('max-tokens', 256),
    temperature: args.num('temperature', 0.8),
    topK: args.num('top-k', 40),
    topP: args.num('top-p', 0.95),
    minP: args.num('min-p', 0.05),
    repeatPenalty: args.num('repeat-penalty', 1.0),
    seed: args.opt('seed') === undefined ? undefined : args.num('seed', 0),
    stop: args.all('stop'),
    ignoreEos: args.flag('ignore-eos'),
  };
}

function statsLine(r: GenerateResult, loadMs?: number): string {
  const u = r.usage;
  const t = r.timings;
  const cached = u.cachedTokens ? ` (${u.cachedTokens} cached)` : '';
  const load = loadMs === undefined ? '' : `, load ${loadMs.toFixed(0)} ms`;
  return `[${u.promptTokens} prompt tokens${cached}, ${u.completionTokens} generated; prefill ${t.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${t.decodeTokensPerSecond.toFixed(1)} tok/s${load}]\n`;
}

/** Stream a generation's text to stdout (unless `quiet`) and return its result. */
async function stream(llm: LLM, prompt: string | number[], options: GenerateOptions, quiet: boolean): Promise<GenerateResult> {
  const it = llm.generate(prompt, options);
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
    if (!quiet) process.stdout.write(r.value.text);
  }
}

async function tokenize(args: Args): Promise<void> {
  // The header alone: counting tokens reads no weights (a vocabulary-only GGUF is enough).
  const path = modelPath(args);
  const tokenizer = await Tokenizer.load(path).catch((e) => {
    throw new Error(`${path}: ${(e as Error).message}`, { cause: e });
  });
  try {
    printJson({ ids: tokenizer.tokenize(args.positional.join(' '), { special: args.flag('special') }) });
  } finally {
    tokenizer.dispose();
  }
}

async function generate(args: Args): Promise<void> {
  const { llm, loadMs } = await load(args);
  const prompt = args.required('prompt');
  const promptIds = args.flag('chat') ? llm.tokenizeChat([{ role: 'user', content: prompt }]) : llm.tokenize(prompt, { prompt: true });
  const json = args.flag('json');
  const r = await stream(llm, promptIds, { ...sampling(args), adapters: await adapters(args, llm), grammar: grammar(args) }, json);
  if (json) {
    const t = r.timings;
    printJson({
      prompt_ids: promptIds, ids: r.ids, text: r.text, finish_reason: r.finishReason,
      seed: r.seed, load_ms: loadMs, prefill_tok_s: t.prefillTokensPerSecond, decode_tok_s: t.decodeTokensPerSecond,
    });
  } else {
    console.log();
    process.stderr.write(statsLine(r, loadMs));
  }
}

/** An interactive conversation: the whole history is rendered each turn, and the session reuses
 * the KV cache of the prefix it shares with the previous turn. */
async function chat(args: Args): Promise<void> {
  const { llm } = await load(args);
  const options = sampling(args);
  const json = args.flag('json');
  const system = args.opt('system');
  const initial: ChatMessage[] = system === undefined ? [] : [{ role: 'system', content: system }];
  let messages = [...initial];
  const tty = Boolean(process.stdin.isTTY);
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: tty, prompt: '> ' });
  let turn: AbortController | null = null;
  const interrupt = () => (turn ? turn.abort() : rl.close());
  rl.on('SIGINT', interrupt);
  process.on('SIGINT', interrupt);
  if (tty) process.stderr.write('ruvllm chat: /reset forgets the conversation, /exit (or Ctrl+D) ends it\n');
  rl.prompt();
  for await (const line of rl) {
    const input = line.trim();
    if (input === '/exit') break;
    if (input === '/reset') {
      messages = [...initial];
    } else if (input) {
      messages.push({ role: 'user', content: input });
      turn = new AbortController();
      try {
        const r = await stream(llm, llm.tokenizeChat(messages), { ...options, signal: turn.signal }, json);
        messages.push({ role: 'assistant', content: r.text });
        if (json) printJson({ text: r.text, ids: r.ids, finish_reason: r.finishReason, prompt_tokens: r.usage.promptTokens, cached_tokens: r.usage.cachedTokens });
        else process.stdout.write('\n');
        if (!json) process.stderr.write(statsLine(r));
      } catch (e) {
        if (!(e instanceof RuvllmError && e.code === 'E_ABORTED')) throw e;
        messages.pop(); // the interrupted question is dropped with its partial answer
        process.stdout.write('\n[interrupted]\n');
      } finally {
        turn = null;
      }
    }
    rl.prompt();
  }
  rl.close();
  process.off('SIGINT', interrupt);
}

async function score(args: Args): Promise<void> {
  const { llm } = await load(args);
  const ids = args.required('ids').split(',').map((s) => {
    const t = s.trim();
    if (!/^\d+$/.test(t)) throw new Error(`bad token id '${s}'`);
    return Number(t);
  });
  const positions = await llm.score(ids, { topK: args.num('top-k', 5) });
  printJson({ positions });
}

async function bench(args: Args): Promise<void> {
  const { llm, loadMs } = await load(args);
  const nPrompt = args.num('prompt-tokens', 128);
  const nGen = args.num('gen-tokens', 64);
  // The native bench's fixed, real-text prompt (over 100 tokens), repeated past nPrompt tokens and cut there.
  const text = readFileSync(new URL('./bench_prompt.txt', import.meta.url), 'utf8').repeat(Math.max(8, Math.floor(nPrompt / 64) + 1));
  const ids = llm.tokenize(text).slice(0, nPrompt);
  const set = await adapters(args, llm);
  // Warm-up, not measured (as the native bench), then forget it so the prompt is evaluated in full.
  await llm.complete(ids.slice(0, Math.min(16, ids.length)), { maxTokens: 1, temperature: 0, adapters: set });
  await llm.reset();
  await llm.clearPrefixCache();
  const r = await llm.complete(ids, { maxTokens: nGen + 1, temperature: 0, ignoreEos: true, adapters: set });
  const info = llm.info();
  printJson({
    engine: 'ruvllm-wasm', backend: info.backend, threads: info.threads, prompt_tokens: r.usage.promptTokens, gen_tokens: r.usage.completionTokens,
    load_ms: loadMs, prefill_tok_s: r.timings.prefillTokensPerSecond, decode_tok_s: r.timings.decodeTokensPerSecond,
    peak_rss_mb: (process.resourceUsage().maxRSS / 1024) * 1.048576, model_mb: info.fileBytes / 1e6, kv_cache_mb: info.kvCacheBytes / 1e6,
    kv_cache: info.kvCache.cold, adapters: set.length,
  });
}

/** \`ruvllm serve\`: serve the model (and --embed-model) over HTTP until SIGINT or SIGTERM. */
async function serveModel(args: Args): Promise<void> {
  const port = args.num('port', 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: ${port} is not a port (0 to 65535)`);
  const maxQueue = args.num('max-queue', 8);
  if (!Number.isInteger(maxQueue) || maxQueue < 1) throw new Error(`--max-queue: ${maxQueue} is not an integer >= 1`);
  const apiKey = args.opt('api-key') ?? process.env.RUVLLM_API_KEY;
  if (apiKey !== undefined && apiKey.trim() === '') throw new Error('--api-key is empty');
  const { llm } = await load(args);
  const embedPath = args.opt('embed-model');
  let embed;
  if (embedPath !== undefined) {
    const embedLlm = await LLM.load(embedPath, { threads: args.num('threads', 0) || undefined }).catch((e) => {
      throw new Error(`${embedPath}: ${(e as Error).message}`, { cause: e });
    });
    embed = { llm: embedLlm, id: basename(embedPath) };
  }
  const server = await serve({
    model: { llm, id: basename(modelPath(args)) }, embed,
    host: args.opt('host') ?? '127.0.0.1', port, apiKey, cors: args.opt('cors'), maxQueue,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(`listening on ${server.url}`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  llm.dispose();
  embed?.llm.dispose();
  process.stderr.write('closed\n');
}

/** Exit status of a command line that is wrong (as opposed to one that fails while it runs: 1). */
const USAGE_ERROR = 2;

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    process.stderr.write(`${usage()}\n`);
    return USAGE_ERROR;
  }
  if (name === '-h' || name === '--help' || name === 'help') {
    // `ruvllm help generate` is `ruvllm generate --help`.
    console.log(usage(COMMANDS.find((c) => c.name === rest[0])));
    return 0;
  }
  const cmd = COMMANDS.find((c) => c.name === name);
  if (!cmd) {
    process.stderr.write(`error: unknown command '${name}' (ruvllm --help lists them)\n`);
    return USAGE_ERROR;
  }
  let args: Args;
  try {
    args = new Args(cmd, rest);
  } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n${synopsis(cmd, 'usage: ')}\n`);
    return USAGE_ERROR;
  }
  if (args.help) {
    console.log(usage(cmd));
    return 0;
  }
  try {
    await cmd.run(args);
    return 0;
  } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
