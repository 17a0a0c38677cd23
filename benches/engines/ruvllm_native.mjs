// Our native build: runs `ruvllm bench` once per repetition (each a fresh process, so load time and peak RSS are
// measured every time) and prints one JSON result line with the medians.
//
// Usage: node benches/engines/ruvllm_native.mjs --model M [--bin target/release/ruvllm] [--threads 1]
//          [--prompt-tokens 128] [--gen-tokens 64] [--reps 3] [--ctx 1024]
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { ROOT, parseArgs, loadavg1m, median, round, result, log } from '../lib/common.mjs';

const args = parseArgs({ bin: 'target/release/ruvllm', threads: '1', 'prompt-tokens': '128', 'gen-tokens': '64', reps: '3', ctx: '1024' });
const loadavgStart = loadavg1m();
const bin = path.resolve(ROOT, args.bin);
const cliArgs = ['bench', '--model', args.model, '--threads', args.threads, '--ctx', args.ctx,
  '--prompt-tokens', args['prompt-tokens'], '--gen-tokens', args['gen-tokens']];

const outs = [];
for (let r = 0; r < Number(args.reps); r++) {
  const stdout = execFileSync(bin, cliArgs, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const out = JSON.parse(stdout.trim().split('\n').pop());
  log(`rep ${r}: prefill ${out.prefill_tok_s.toFixed(1)} tok/s, decode ${out.decode_tok_s.toFixed(1)} tok/s`);
  outs.push(out);
}

console.log(JSON.stringify(result({
  engine: 'ruvllm',
  runtime: 'native',
  threads: outs[0].threads,
  model: args.model,
  promptTokens: outs[0].prompt_tokens,
  genTokens: outs[0].gen_tokens - 1, // the CLI counts the first token too; decode speed is over the steps after it
  loadMs: median(outs.map((o) => o.load_ms)),
  peakRssMb: Math.max(...outs.map((o) => o.peak_rss_mb)),
  runs: outs.map((o) => ({ prefill_tok_s: o.prefill_tok_s, decode_tok_s: o.decode_tok_s, load_ms: o.load_ms })),
  loadavgStart,
  extra: { kv_cache_mb: round(outs[0].kv_cache_mb, 1) },
})));
