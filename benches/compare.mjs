// Runs every engine on every model, one after another on this machine, then prints the results and our ratio to
// each peer as markdown tables. Each engine runs in its own process (engines/*.mjs, bench_node.mjs) and prints one
// JSON line; those lines are also saved to target/bench/compare-<time>.jsonl. Use benches/compare.sh, which builds
// everything and makes the models first; see benches/README.md.
//
// Usage: node benches/compare.mjs --base-model PATH.Q4_1.gguf [--models q4_1,q8_0,q4_0,q4_k_m,1b,OTHER.gguf] [--reps 3]
//          [--rounds 1] [--prompt-tokens 128] [--gen-tokens 64] [--ctx 1024] [--threads 1,2] [--wasm-threads 1,2]
//          [--simd auto|simd128] [--wasm-pkg npm/wasm] [--wasm-mt-pkg npm/wasm-mt] [--wasm-relaxed-pkg npm/wasm-relaxed]
//          [--wasm-mt-relaxed-pkg npm/wasm-mt-relaxed] [--nodes NODE,...] [--only ENGINE_SUBSTRING]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { readGgufFileInfo, GgmlType, GgufFileType } from 'node-llama-cpp';
import { BENCHES, ROOT, parseArgs, loadavg1m, median } from './lib/common.mjs';

const args = parseArgs({
  models: 'q4_1,q8_0,q4_0,q4_k_m', reps: '3', rounds: '1', 'prompt-tokens': '128', 'gen-tokens': '64', ctx: '1024', threads: '1,2',
  // Threads for our wasm (Node and Chromium): 1 runs the single-thread build (--wasm-pkg), more the threaded
  // one (--wasm-mt-pkg, which starts that many workers). With --simd auto, as the npm package does by default, a
  // runtime that validates relaxed SIMD runs the relaxed builds instead (--wasm-relaxed-pkg,
  // --wasm-mt-relaxed-pkg); --simd simd128 runs the plain ones everywhere. All are scripts/build-wasm.sh's output.
  'wasm-threads': '1,2', 'wasm-pkg': 'npm/wasm', 'wasm-mt-pkg': 'npm/wasm-mt', 'wasm-relaxed-pkg': 'npm/wasm-relaxed',
  'wasm-mt-relaxed-pkg': 'npm/wasm-mt-relaxed', simd: 'auto', 'node-pkg': 'target/wasm-node', only: '',
  // Node binaries for the "wasm32 in Node N" rows (each its own rows); the first one also runs everything else.
  nodes: process.execPath,
});
const list = (s) => String(s).split(',').filter(Boolean);
const threads = list(args.threads);
const outDir = path.join(ROOT, 'target/bench');
fs.mkdirSync(outDir, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
const jsonl = path.join(outDir, `compare-${stamp}.jsonl`);

/**
 * The model file for an entry of --models: a quant name is the base model's copy in that type (the Q8_0 / Q4_0
 * copies sit next to the Q4_1 file, see requantize.py, the Q4_K_M one too, see requantize_k.rs); `1b` is the
 * 1B-shaped Q4_K_M model with random weights beside them (random_model.rs); an entry ending in .gguf is a model
 * file of its own. compare.sh makes the files that are missing.
 */
const modelPath = (quant) => quant.endsWith('.gguf')
  ? path.resolve(quant.replace(/^~(?=\/)/, os.homedir()))
  : quant === '1b' ? path.join(path.dirname(args['base-model']), 'Llama-3.2-1B-shape.random.Q4_K_M.gguf')
  : args['base-model'].replace(/Q4_1(?=\.gguf$)/, quant.toUpperCase());

/** Elements per block and bytes per block of the tensor types these models hold (ggml's). */
const BLOCKS = {
  F32: [1, 4], F16: [1, 2], BF16: [1, 2], Q4_0: [32, 18], Q4_1: [32, 20], Q5_0: [32, 22], Q5_1: [32, 24], Q8_0: [32, 34],
  Q2_K: [256, 84], Q3_K: [256, 110], Q4_K: [256, 144], Q5_K: [256, 176], Q6_K: [256, 210], IQ4_NL: [32, 18], IQ4_XS: [256, 136],
};

/**
 * A model's file type and its tensors per type from the GGUF header ("Q4_K_M: Q5_0 x 166, Q4_K x 16, ..."), and the
 * bytes of weights one decode step reads: every tensor but the token embedding, which it reads whole only where it
 * is the output head too (no `output.weight`), else one row.
 */
async function modelInfo(model) {
  const { metadata, tensorInfo } = await readGgufFileInfo(model, { logWarnings: false });
  const counts = new Map();
  let stepBytes = 0;
  const tied = !tensorInfo.some((t) => t.name === 'output.weight');
  for (const t of tensorInfo) {
    const ty = GgmlType[t.ggmlType];
    counts.set(ty, (counts.get(ty) ?? 0) + 1);
    if (!(ty in BLOCKS)) throw new Error(`${model}: ${t.name} has type ${ty}, which BLOCKS lacks`);
    const [elements, bytes] = BLOCKS[ty];
    const dims = t.dimensions.map(Number);
    const size = (dims.reduce((a, b) => a * b, 1) / elements) * bytes;
    stepBytes += t.name === 'token_embd.weight' && !tied ? size / dims[1] : size;
  }
  const fileType = GgufFileType[metadata.general?.file_type]?.replace(/^MOSTLY_/, '') ?? 'file type unknown';
  const mix = `${fileType}: ${[...counts].sort((a, b) => b[1] - a[1]).map(([ty, n]) => `${ty} x ${n}`).join(', ')}`;
  return { mix, stepBytes };
}

/**
 * The benchmark prompt: the CLI bench's text cut to prompt-tokens tokens by our tokenizer (what `ruvllm bench`
 * prefills), with its text. Every engine prefills these ids; wllama, which takes only text, gets the text.
 */
function writePrompt(model) {
  const { Engine } = createRequire(import.meta.url)(path.resolve(ROOT, args['node-pkg'], 'ruvllm.js'));
  const engine = new Engine(fs.readFileSync(model), 0);
  // As the CLI's bench cuts it (cli/src/main.rs): the text (over 100 tokens) repeated past the prompt's length.
  const copies = Math.max(8, Math.floor(Number(args['prompt-tokens']) / 64) + 1);
  const source = fs.readFileSync(path.join(ROOT, 'cli/src/bench_prompt.txt'), 'utf8').repeat(copies);
  const ids = Array.from(engine.tokenize(source, false)).slice(0, Number(args['prompt-tokens']));
  if (ids.length < Number(args['prompt-tokens'])) throw new Error(`the bench text gives only ${ids.length} tokens`);
  const text = engine.detokenize(Uint32Array.from(ids));
  if (JSON.stringify(Array.from(engine.tokenize(text, false))) !== JSON.stringify(ids)) {
    throw new Error('the cut prompt does not tokenize back to the same ids');
  }
  engine.free();
  const file = path.join(outDir, `prompt-${path.basename(model, '.gguf')}.json`);
  fs.writeFileSync(file, JSON.stringify({ ids, text }));
  return file;
}

if (!['auto', 'simd128'].includes(args.simd)) throw new Error('--simd must be auto or simd128');
/** Our wasm build for `t` threads, with relaxed SIMD or without. */
const wasmPkg = (t, relaxed) => args[`wasm${Number(t) > 1 ? '-mt' : ''}${relaxed ? '-relaxed' : ''}-pkg`];
/** A wasm runtime's label: the relaxed builds' rows say so, so that no table mixes them with the plain builds'. */
const wasmRuntime = (name, relaxed) => (relaxed ? `${name}, relaxed SIMD` : name);
// Whether a Node validates relaxed SIMD, asked of the package's own probe (npm/src/builds.ts) in that Node: Node 22+
// does, Node 20 does not. Chromium 114+ does, so its rows take the relaxed builds under --simd auto.
const nodes = list(args.nodes).map((given) => {
  const bin = given.includes('/') ? path.resolve(given) : given; // the engines run with benches/ as their directory
  const builds = pathToFileURL(path.join(ROOT, 'npm/dist/builds.js')).href;
  const p = spawnSync(bin, ['--input-type=module', '-e',
    `const { hasRelaxedSimd } = await import(${JSON.stringify(builds)});
     console.log(JSON.stringify({ major: process.versions.node.split('.')[0], relaxed: hasRelaxedSimd() }));`],
  { encoding: 'utf8' });
  if (p.status !== 0) throw new Error(`--nodes: ${bin} does not run the relaxed-SIMD probe: ${p.stderr.trim()}`);
  const { major, relaxed } = JSON.parse(p.stdout);
  return { bin, major, relaxed: relaxed && args.simd === 'auto' };
});
const chromiumRelaxed = args.simd === 'auto';

function runs(model, prompt) {
  const common = ['--model', model, '--gen-tokens', args['gen-tokens'], '--reps', args.reps, '--ctx', args.ctx];
  const label = (engine, runtime, t) => ({ engine, runtime, threads: Number(t) });
  return [
    ...threads.map((t) => [label('ruvllm', 'native', t),
      ['engines/ruvllm_native.mjs', ...common, '--threads', t, '--prompt-tokens', args['prompt-tokens']]]),
    ...nodes.flatMap((node) => list(args['wasm-threads']).map((t) => [
      label('ruvllm', wasmRuntime(`wasm32 in Node ${node.major}`, node.relaxed), t),
      ['bench_node.mjs', ...common, '--threads', t, '--pkg', path.resolve(ROOT, wasmPkg(t, node.relaxed)), '--prompt', prompt],
      node.bin])),
    ...list(args['wasm-threads']).map((t) => [
      label('ruvllm', wasmRuntime('wasm in Chromium', chromiumRelaxed), t),
      ['engines/browser.mjs', '--engine', 'ruvllm', ...common, '--threads', t, '--prompt', prompt,
        '--ruvllm-pkg', wasmPkg(t, chromiumRelaxed)]]),
    ...threads.map((t) => [label('llama.cpp', 'native (node-llama-cpp)', t),
      ['engines/llama_node.mjs', ...common, '--threads', t, '--prompt', prompt]]),
    ...threads.map((t) => [label('wllama', 'wasm in Chromium', t),
      ['engines/browser.mjs', '--engine', 'wllama', ...common, '--threads', t, '--prompt', prompt]]),
  ].filter(([l]) => `${l.engine} ${l.runtime}`.includes(args.only));
}

/** Our native CLI's greedy answer to the ChatML France prompt: shows that each (converted) model still works. */
function franceAnswer(model) {
  const chat = '<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n';
  const p = spawnSync(path.join(ROOT, 'target/release/ruvllm'),
    ['generate', '--model', model, '--prompt', chat, '--max-tokens', '24', '--temperature', '0', '--threads', '1', '--json'],
    { encoding: 'utf8' });
  return p.status === 0 ? JSON.parse(p.stdout).text : `failed: ${p.stderr.trim()}`;
}

// --rounds R runs the whole list of engines R times over (each run with --reps reps) and reports the median over
// the rounds. This machine's speed drifts by 10-20% within minutes, and a round runs an engine's 1- and 2-thread
// rows back to back, so the thread-scaling ratios are taken per round (then the median) to compare like with like.
const rounds = Number(args.rounds);
const raw = [];
const ceilings = [];
const answers = [];
const mixes = [];
const stepBytes = new Map(); // model -> bytes of weights a decode step reads
// The machine's copy bandwidth at 1 and 2 threads (membw.mjs), before the engines run: the decode ceiling's divisor.
const membw = (() => {
  const p = spawnSync(nodes[0].bin, ['membw.mjs', '--threads', [...new Set(threads.concat(list(args['wasm-threads'])))].join(',')],
    { cwd: BENCHES, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (p.status !== 0) return null;
  const line = JSON.parse(p.stdout.trim().split('\n').pop());
  fs.appendFileSync(jsonl, JSON.stringify({ engine: 'membw', ...line }) + '\n');
  return line;
})();
for (const entry of list(args.models)) {
  const model = modelPath(entry);
  const quant = entry.endsWith('.gguf') ? path.basename(model, '.gguf') : entry;
  const prompt = writePrompt(model);
  const info = await modelInfo(model);
  stepBytes.set(quant, info.stepBytes);
  mixes.push([quant, path.basename(model), info.mix, (info.stepBytes / 1e6).toFixed(1)]);
  answers.push([quant, path.basename(model), JSON.stringify(franceAnswer(model))]);
  console.error(`\n== ${quant}: ${path.basename(model)}, ${mixes.at(-1)[2]}; answers ${answers.at(-1)[2]}`);
  for (let round = 0; round < rounds; round++) for (const [label, argv, node = nodes[0].bin] of runs(model, prompt)) {
    console.error(`\n== ${quant}: ${label.engine}, ${label.runtime}, ${label.threads} thread(s), round ${round + 1} of ${rounds} (load average ${loadavg1m()})`);
    const p = spawnSync(node, argv, {
      cwd: BENCHES,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' },
    });
    let r;
    try {
      if (p.status !== 0) throw new Error(`exit status ${p.status}`);
      r = JSON.parse(p.stdout.trim().split('\n').pop());
      // The drivers name the runtime from the engine's own report (our wasm: relaxed SIMD or not): it must be the row's.
      if (r.runtime !== label.runtime) throw new Error(`the engine ran as "${r.runtime}", the row is "${label.runtime}"`);
    } catch (e) {
      r = { ...label, model: path.basename(model), error: `${e.message} (its stderr is above)` };
    }
    r.quant = quant;
    r.round = round;
    raw.push(r);
    fs.appendFileSync(jsonl, JSON.stringify(r) + '\n');
    console.error(JSON.stringify(r).slice(0, 300));
    // After a round's multi-thread wasm rows: what the machine's two cores give at that time (two_cores.mjs, two
    // single-thread runs at once against one alone), the ceiling to read those rows' thread scaling against.
    if (label.runtime.startsWith('wasm32 in Node') && label.threads > 1 && !ceilings.some((c) => c.quant === quant && c.round === round)) {
      console.error(`\n== ${quant}: two single-thread runs at once, round ${round + 1} of ${rounds}`);
      const c = spawnSync(nodes[0].bin, ['two_cores.mjs', '--model', model, '--pkg', path.resolve(ROOT, wasmPkg(1, nodes[0].relaxed)), '--reps', '2'],
        { cwd: BENCHES, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
      if (c.status === 0) {
        const line = { engine: 'two cores', quant, round, ...JSON.parse(c.stdout.trim().split('\n').pop()) };
        ceilings.push(line);
        fs.appendFileSync(jsonl, JSON.stringify(line) + '\n');
        console.error(JSON.stringify(line));
      }
    }
  }
}

// One result per (model, engine, runtime, threads): the median of each measure over its rounds.
const keyOf = (r) => [r.quant, r.engine, r.runtime, r.threads].join('|');
const results = [...new Set(raw.map(keyOf))].map((key) => {
  const all = raw.filter((r) => keyOf(r) === key);
  const ok = all.filter((r) => !r.error);
  if (!ok.length) return all[0];
  const merged = { ...ok[0], rounds: ok.length };
  for (const k of ['prefill_tok_s', 'decode_tok_s', 'load_ms', 'peak_rss_mb']) merged[k] = median(ok.map((r) => r[k]));
  merged.loadavg_start = Math.min(...ok.map((r) => r.loadavg_start));
  merged.loadavg_end = Math.max(...ok.map((r) => r.loadavg_end));
  return merged;
});

// ---- tables ----
const fmt = (x, d = 1) => (typeof x === 'number' && Number.isFinite(x) ? x.toFixed(d) : '–');
const name = (r) => `${r.engine}, ${r.runtime}, ${r.threads}T`;
const table = (head, rows) => [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');

const resultRows = results.map((r) => r.error
  ? [r.quant, name(r), 'failed', '', '', '', '', r.error]
  : [r.quant, name(r), fmt(r.prefill_tok_s), fmt(r.decode_tok_s), fmt(r.load_ms, 0), fmt(r.peak_rss_mb, 0),
    `${fmt(r.loadavg_start, 2)}→${fmt(r.loadavg_end, 2)}`, r.prompt_tokens === Number(args['prompt-tokens']) ? '' : `prompt ${r.prompt_tokens} tokens!`]);

// Our ratio to the peer of the same kind: native to llama.cpp native, our wasm (Node or Chromium) to wllama, at the
// same thread count. Speed ratios > 1 and load/memory ratios < 1 mean we are better.
// Our wasm rows are also set against native llama.cpp (the issue's goals for the browser are in both).
const peersOf = (r) => results.filter((p) => !p.error && p.quant === r.quant && p.threads === r.threads &&
  (p.engine === 'llama.cpp' || (p.engine === 'wllama' && r.runtime !== 'native')));
const ratio = (a, b) => (typeof a === 'number' && typeof b === 'number' && b > 0 ? `${(a / b).toFixed(2)}×` : '–');
const ratioRows = results.filter((r) => r.engine === 'ruvllm' && !r.error).flatMap((r) => peersOf(r).map((p) =>
  [r.quant, name(r), name(p), ratio(r.prefill_tok_s, p.prefill_tok_s), ratio(r.decode_tok_s, p.decode_tok_s),
    ratio(r.load_ms, p.load_ms), ratio(r.peak_rss_mb, p.peak_rss_mb)]));

// Decode against the memory's limit: the copy bandwidth at the row's thread count over the bytes of weights a step
// reads is the most steps per second that memory can feed; each row's decode as a share of it.
const ceilingRows = membw ? results.filter((r) => !r.error && membw.copy_gb_s[r.threads]).map((r) => {
  const ceiling = (membw.copy_gb_s[r.threads] * 1e9) / stepBytes.get(r.quant);
  return [r.quant, name(r), fmt(stepBytes.get(r.quant) / 1e6), fmt(membw.copy_gb_s[r.threads]), fmt(ceiling), fmt(r.decode_tok_s),
    `${fmt((100 * r.decode_tok_s) / ceiling, 0)}%`];
}) : [];

// Our wasm's thread scaling: each multi-thread row over the 1-thread row of the same runtime and model, round by
// round (the median of the rounds' ratios).
const scalingRows = results.filter((r) => r.engine === 'ruvllm' && r.runtime !== 'native' && r.threads > 1 && !r.error).flatMap((r) => {
  const pairs = raw.filter((m) => keyOf(m) === keyOf(r) && !m.error).flatMap((m) => {
    const one = raw.find((o) => keyOf(o) === keyOf({ ...m, threads: 1 }) && o.round === m.round && !o.error);
    return one ? [[m.prefill_tok_s / one.prefill_tok_s, m.decode_tok_s / one.decode_tok_s]] : [];
  });
  const times = (x) => (x == null ? '–' : `${x.toFixed(2)}×`);
  // The two-core factors of the same rounds (r.threads == 2 only: the ceiling is measured for two).
  const ceiling = (k) => {
    const f = ceilings.filter((c) => c.quant === r.quant).map((c) => c.two_core_factor[k]);
    return r.threads === 2 && f.length ? `${median(f).toFixed(2)}×` : '–';
  };
  return pairs.length ? [[r.quant, r.runtime, `${r.threads}T / 1T`, times(median(pairs.map((p) => p[0]))), times(median(pairs.map((p) => p[1]))),
    pairs.map((p) => `${p[0].toFixed(2)}/${p[1].toFixed(2)}`).join(', '), `${ceiling('prefill')} / ${ceiling('decode')}`]] : [];
});

const report = [
  `Comparison benchmark, ${new Date().toISOString()}, ${os.cpus()[0]?.model}, ${os.cpus().length} logical CPUs.`,
  `Prompt ${args['prompt-tokens']} tokens (prefill), then ${args['gen-tokens']} greedy decode steps; median of ${args.reps} reps` +
    (rounds > 1 ? ` in each of ${rounds} rounds, then the median over the rounds.` : '.'),
  'Peak RSS: whole process for native and Node engines, the Chromium renderer process for browser engines.',
  '',
  'The models: their file type and tensors per type (GGUF header).',
  '',
  table(['model', 'file', 'types', 'weights read per decode step, MB'], mixes),
  '',
  table(['model', 'engine, runtime, threads', 'prefill tok/s', 'decode tok/s', 'load ms', 'peak RSS MB', 'load avg (1 min)', 'note'], resultRows),
  '',
  'Our ratio to each peer (ours / peer): speed > 1 = we are faster; load and memory < 1 = we are lighter.',
  '',
  table(['model', 'ours', 'peer', 'prefill', 'decode', 'load ms', 'peak RSS'], ratioRows),
  '',
  'Decode against memory bandwidth: copy bandwidth (membw.mjs: read + written bytes per second, that many threads',
  'copying at once) over the weights a decode step reads = the most tok/s memory can feed.',
  '',
  membw ? table(['model', 'engine, runtime, threads', 'MB per step', 'copy GB/s', 'ceiling tok/s', 'decode tok/s', 'of ceiling'], ceilingRows)
    : 'membw.mjs failed (its stderr is above).',
  '',
  'Our wasm with threads (threaded build) over one thread (single-thread build), per round (2T and 1T run back to back).',
  'The last column is the ceiling at the same time: two single-thread runs at once (two_cores.mjs) over one alone.',
  '',
  table(['model', 'runtime', 'threads', 'prefill', 'decode', 'each round (prefill/decode)', 'two cores, same rounds (prefill / decode)'], scalingRows),
  '',
  'Our native CLI on the ChatML prompt "What is the capital of France?" (greedy, 24 tokens at most):',
  '',
  table(['model', 'file', 'answer'], answers),
  '',
  `Raw results: ${path.relative(ROOT, jsonl)}`,
].join('\n');
fs.writeFileSync(jsonl.replace(/\.jsonl$/, '.md'), report + '\n');
console.log(report);
