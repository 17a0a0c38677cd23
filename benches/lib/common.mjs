// Shared by the benchmark drivers: arguments, statistics, machine load, the common result shape.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCHES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT = path.resolve(BENCHES, '..');

/** `--key value` / `--key=value` / `--flag` into an object; keys keep their dashes. */
export function parseArgs(defaults) {
  const out = { ...defaults };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument '${a}'`);
    const eq = a.indexOf('=');
    if (eq > 0) out[a.slice(2, eq)] = a.slice(eq + 1);
    else if (argv[i + 1] === undefined || argv[i + 1].startsWith('--')) out[a.slice(2)] = true;
    else out[a.slice(2)] = argv[++i];
  }
  return out;
}

export const nowMs = () => performance.now();
export const loadavg1m = () => round(os.loadavg()[0]);

export function median(xs) {
  const s = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function round(x, digits = 2) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return x ?? null;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/**
 * The prompt every engine prefills, written by compare.mjs: `{ ids, text }`, where `text` tokenizes to `ids`.
 * Engines that take ids use them; wllama takes only text (and reports how many tokens it made of it).
 */
export function readPrompt(file) {
  const p = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (!Array.isArray(p.ids) || !p.ids.every(Number.isInteger) || typeof p.text !== 'string') {
    throw new Error(`${file}: expected {"ids": [token ids], "text": "..."}`);
  }
  return p;
}

/** Peak and current RSS of a process from /proc, in MB (10^6 bytes). */
export function procMemMb(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key) => Number((status.match(new RegExp(`^${key}:\\s+(\\d+)`, 'm')) || [])[1] ?? NaN);
  return { peak_rss_mb: round((kb('VmHWM') * 1024) / 1e6, 1), rss_mb: round((kb('VmRSS') * 1024) / 1e6, 1) };
}

/**
 * One engine's result, the shape compare.mjs tabulates. `runs` holds one {prefill_tok_s, decode_tok_s, ...} per
 * measured repetition; the headline numbers are their medians.
 */
export function result({ engine, runtime, threads, model, promptTokens, genTokens, loadMs, peakRssMb, runs, loadavgStart, extra }) {
  return {
    engine,
    runtime,
    threads,
    model: path.basename(model),
    prompt_tokens: promptTokens,
    gen_tokens: genTokens,
    load_ms: round(loadMs, 1),
    prefill_tok_s: round(median(runs.map((r) => r.prefill_tok_s))),
    decode_tok_s: round(median(runs.map((r) => r.decode_tok_s))),
    // ruvllm wasm only (lib/engine_bench.js): decode timed in JS around each step, hand-offs included.
    ...(runs.every((r) => r.decode_wall_tok_s !== undefined) && {
      decode_wall_tok_s: round(median(runs.map((r) => r.decode_wall_tok_s))),
    }),
    peak_rss_mb: round(peakRssMb, 1),
    runs: runs.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, round(v)]))),
    loadavg_start: loadavgStart,
    loadavg_end: loadavg1m(),
    ...extra,
  };
}

/** Progress goes to stderr; stdout carries only the one JSON result line. */
export const log = (...a) => console.error(`[${path.basename(process.argv[1])}]`, ...a);
