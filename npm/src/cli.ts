#!/usr/bin/env node
// `ruvllm` for Node: the native CLI's commands, flags and JSON output (cli/src/main.rs), on the wasm engine.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { LLM, RuvllmError, type Backend, type ChatMessage, type GenerateOptions, type GenerateResult } from './node.js';

const USAGE = `ruvllm (wasm engine, Node)
  ruvllm tokenize --model M [--special] TEXT
  ruvllm generate --model M --prompt TEXT [--chat] [--max-tokens N] [--temperature T] [--top-k K]
                  [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--stop S]... [--ignore-eos] [--json]
  ruvllm chat --model M [--system TEXT] [sampling flags as generate] [--json]
                  (an interactive conversation; one line per message, /reset forgets it, /exit or EOF ends)
  ruvllm score --model M --ids 1,2,3 [--top-k K]
  ruvllm bench --model M [--prompt-tokens 128] [--gen-tokens 64]
Common: --ctx N (context window). --threads N (default: the cores, at most 8; 1 = the single-thread build).
--backend auto|webgpu|cpu (default auto: WebGPU when navigator.gpu offers an adapter, e.g. the npm \`webgpu\`
package in Node, see the README; else the CPU).
--model defaults to $RUVLLM_MODEL.`;

const FLAGS = new Set(['special', 'chat', 'json', 'ignore-eos']);

/** `--name value` / `--flag` / positional, exactly as the native CLI's args.rs. */
class Args {
  readonly options = new Map<string, string[]>();
  readonly positional: string[] = [];

  constructor(argv: string[]) {
    for (let i = 0; i < argv.length; i++) {
      const a = argv[i];
      if (!a.startsWith('--')) {
        this.positional.push(a);
        continue;
      }
      const name = a.slice(2);
      if (!FLAGS.has(name) && i + 1 >= argv.length) throw new UsageError(`--${name} needs a value`);
      const values = this.options.get(name) ?? [];
      values.push(FLAGS.has(name) ? '' : argv[++i]);
      this.options.set(name, values);
    }
  }

  flag(name: string): boolean {
    return this.options.has(name);
  }

  opt(name: string): string | undefined {
    return this.options.get(name)?.at(-1);
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

class UsageError extends Error {}

/** One line of JSON with the keys sorted, as the native CLI's serde_json prints them. */
function printJson(value: Record<string, unknown>): void {
  const sorted = Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  console.log(JSON.stringify(sorted));
}

async function load(args: Args): Promise<{ llm: LLM; loadMs: number }> {
  const path = args.opt('model') ?? process.env.RUVLLM_MODEL;
  if (!path) throw new Error('--model is required (or set RUVLLM_MODEL)');
  const backend = args.opt('backend') ?? 'auto';
  if (!['auto', 'cpu', 'webgpu', 'gpu'].includes(backend)) throw new Error(`backend '${backend}' is not one of auto, webgpu, cpu`);
  const threads = args.num('threads', 0);
  const t0 = performance.now();
  try {
    const llm = await LLM.load(path, { contextSize: args.num('ctx', 0), threads: threads || undefined, backend: backend as Backend });
    return { llm, loadMs: performance.now() - t0 };
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`, { cause: e });
  }
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
    seed: args.num('seed', 0),
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
  const { llm } = await load(args);
  const ids = llm.tokenize(args.positional.join(' '), { special: args.flag('special') });
  printJson({ ids });
}

async function generate(args: Args): Promise<void> {
  const { llm, loadMs } = await load(args);
  const prompt = args.opt('prompt');
  if (prompt === undefined) throw new Error('--prompt is required');
  const text = args.flag('chat') ? llm.applyChatTemplate([{ role: 'user', content: prompt }]) : prompt;
  const promptIds = llm.tokenize(text, { prompt: true });
  const json = args.flag('json');
  const r = await stream(llm, promptIds, sampling(args), json);
  if (json) {
    const t = r.timings;
    printJson({
      prompt_ids: promptIds, ids: r.ids, text: r.text, finish_reason: r.finishReason,
      load_ms: loadMs, prefill_tok_s: t.prefillTokensPerSecond, decode_tok_s: t.decodeTokensPerSecond,
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
        const r = await stream(llm, llm.applyChatTemplate(messages), { ...options, signal: turn.signal }, json);
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
  const list = args.opt('ids');
  if (list === undefined) throw new Error('--ids is required');
  const ids = list.split(',').map((s) => {
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
  // The native bench's fixed, real-text prompt, cut to exactly nPrompt tokens.
  const text = readFileSync(new URL('./bench_prompt.txt', import.meta.url), 'utf8').repeat(8);
  const ids = llm.tokenize(text).slice(0, nPrompt);
  // Warm-up, not measured (as the native bench), then forget it so the prompt is evaluated in full.
  await llm.complete(ids.slice(0, Math.min(16, ids.length)), { maxTokens: 1, temperature: 0 });
  await llm.reset();
  const r = await llm.complete(ids, { maxTokens: nGen + 1, temperature: 0, ignoreEos: true });
  const info = llm.info();
  printJson({
    engine: 'ruvllm-wasm', backend: info.backend, threads: info.threads, prompt_tokens: r.usage.promptTokens, gen_tokens: r.usage.completionTokens,
    load_ms: loadMs, prefill_tok_s: r.timings.prefillTokensPerSecond, decode_tok_s: r.timings.decodeTokensPerSecond,
    peak_rss_mb: (process.resourceUsage().maxRSS / 1024) * 1.048576, model_mb: info.fileBytes / 1e6, kv_cache_mb: info.kvCacheBytes / 1e6,
  });
}

const COMMANDS: Record<string, (args: Args) => Promise<void>> = { tokenize, generate, chat, score, bench };

async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined) {
    process.stderr.write('usage: ruvllm <chat|generate|tokenize|score|bench> --model M ... (see --help)\n');
    return 2;
  }
  if (cmd === '-h' || cmd === '--help' || cmd === 'help') {
    console.log(USAGE);
    return 0;
  }
  let args: Args;
  try {
    args = new Args(rest);
  } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n`);
    return 2;
  }
  const run = COMMANDS[cmd];
  try {
    if (!run) throw new Error(`unknown command '${cmd}'`);
    await run(args);
    return 0;
  } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
