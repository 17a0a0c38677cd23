// How far a second thread can speed up decode's matrix products on this machine, apart from the rest of a forward
// pass: the threaded wasm build's `matmulChain` (crate/src/kernels/matmul.rs, feature `bench`) runs the default
// model's four per-layer products of one row over N sets of distinct Q4_1 weights (2.2 MB each), on 1 and then
// 2 threads, each in its own Node process (a pool's size is fixed per process), alternating per round. With a few
// sets the weights stay in the caches (this VM: 2 MB L2 per core, 32 MB L3); with 30, as in the model, every pass
// reads them from memory, as decode does (which also reads the 30 MB output layer). Prints one JSON line per size
// and a table: microseconds per layer, and 2T/1T (median of the rounds' ratios); then what an empty parallel loop
// costs on two threads (`emptyLoops`, crate/src/parallel.rs).
//
// Usage: scripts/build-wasm.sh mt-bench && node benches/matmul_scaling.mjs [--layers 4,12,30] [--rounds 3]
//          [--pkg target/bench/wasm-mt-bench]
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ROOT, parseArgs, median, round } from './lib/common.mjs';

const args = parseArgs({ layers: '4,12,30', rounds: '3', pkg: 'target/bench/wasm-mt-bench' });
const pkg = path.resolve(ROOT, args.pkg);

if (args.child) {
  // One measurement: --threads T --layers L; prints microseconds per layer.
  const keepAlive = setInterval(() => {}, 1 << 30);
  let glue;
  const { withWebWorkers } = await import(pathToFileURL(path.join(ROOT, 'npm/dist/node-workers.js')).href);
  await withWebWorkers(async () => {
    glue = await import(pathToFileURL(path.join(pkg, 'ruvllm.js')).href);
    await glue.default({ module_or_path: readFileSync(path.join(pkg, 'ruvllm_bg.wasm')) });
    await glue.initThreadPool(Number(args.threads));
  });
  if (typeof glue.matmulChain !== 'function') throw new Error(`${pkg} has no matmulChain: build it with scripts/build-wasm.sh mt-bench`);
  const layers = Number(args.layers);
  console.log(layers === 0 ? glue.emptyLoops(20000, 36) : glue.matmulChain(layers, Math.max(20, Math.round(6000 / layers))));
  clearInterval(keepAlive);
  process.exit(0);
}

const measure = (threads, layers) => {
  const p = spawnSync(process.execPath, [fileURLToPath(import.meta.url), '--child', '--threads', String(threads), '--layers', String(layers), '--pkg', pkg],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (p.status !== 0) throw new Error(`matmul_scaling child (${threads} threads, ${layers} layers) exited with ${p.status}`);
  return Number(p.stdout.trim().split('\n').pop());
};

const rows = [];
for (const layers of String(args.layers).split(',').map(Number)) {
  const runs = [];
  for (let r = 0; r < Number(args.rounds); r++) {
    // Which thread count goes first alternates, so the machine's drift hits both alike.
    const us = Object.fromEntries((r % 2 ? [2, 1] : [1, 2]).map((t) => [t, measure(t, layers)]));
    runs.push({ one: us[1], two: us[2] });
  }
  const result = {
    layers,
    weights_mb: round(layers * 2.2, 1),
    us_per_layer_1t: round(median(runs.map((x) => x.one)), 1),
    us_per_layer_2t: round(median(runs.map((x) => x.two)), 1),
    speedup_2t: round(median(runs.map((x) => x.one / x.two)), 2),
    rounds: runs.map((x) => round(x.one / x.two, 2)),
  };
  console.log(JSON.stringify(result));
  rows.push(result);
}
// The loops' own cost: 20000 loops of 36 empty chunks (decode's o-projection has 36) on two threads, once per
// round. It swings with how far apart the VM's two cores are at the time (here ~0.6 us most of the time, ~1.3 us
// in phases lasting seconds), and decode runs ~150 loops per token.
const empty = Array.from({ length: Number(args.rounds) }, () => measure(2, 0));
console.log(JSON.stringify({ empty_loop_us_2t: round(median(empty), 2), rounds: empty.map((x) => round(x, 2)) }));
console.log('\n| layers | Q4_1 weights MB | 1 thread us/layer | 2 threads us/layer | 2T/1T (each round) |\n|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.layers} | ${r.weights_mb} | ${r.us_per_layer_1t} | ${r.us_per_layer_2t} | ${r.speedup_2t}× (${r.rounds.join(', ')}) |`);
console.log(`\nAn empty loop of 36 chunks on 2 threads: ${round(median(empty), 2)} us (each round: ${empty.map((x) => round(x, 2)).join(', ')})`);
