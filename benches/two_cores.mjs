// What this machine's two cores give our code with no threading at all: the single-thread wasm build in Node
// alone, then two copies of it at once (each pinned to its own core with taskset where there is one). The ratio
// (sum of the pair) / (alone) is the ceiling for any 2-thread speed-up here: on a VM whose two vCPUs share a
// physical core or are oversubscribed it is well under 2, and the wasm 2T/1T goal should be read against it.
//
// Usage: node benches/two_cores.mjs --model M [--pkg npm/wasm] [--reps 3]
// (npm/wasm is scripts/build-wasm.sh's single-thread build; the model is the default Q4_1 GGUF.)
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { BENCHES, parseArgs, median, round } from './lib/common.mjs';

const args = parseArgs({ pkg: 'npm/wasm', reps: '3' });
if (!args.model) throw new Error('--model PATH is required');
const pinned = spawnSync('taskset', ['-c', '0', 'true']).status === 0;

/** One bench_node.mjs run (on `core` when taskset is there): its prefill and decode tok/s, the medians of --reps. */
function bench(core) {
  const argv = ['bench_node.mjs', '--pkg', path.resolve(args.pkg), '--model', args.model, '--threads', '1', '--reps', args.reps];
  const [cmd, cmdArgs] = pinned ? ['taskset', ['-c', String(core), process.execPath, ...argv]] : [process.execPath, argv];
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, cmdArgs, { cwd: BENCHES, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('close', (status) => {
      if (status !== 0) return reject(new Error(`bench_node.mjs exited with ${status}`));
      const r = JSON.parse(out.trim().split('\n').pop());
      resolve({ prefill: r.prefill_tok_s, decode: r.decode_tok_s });
    });
  });
}

const alone = [await bench(0), await bench(1)];
const pair = await Promise.all([bench(0), bench(1)]);
const solo = { prefill: median(alone.map((r) => r.prefill)), decode: median(alone.map((r) => r.decode)) };
const factor = (k) => round((pair[0][k] + pair[1][k]) / solo[k], 2);
console.log(JSON.stringify({
  pinned,
  alone: alone.map((r) => ({ prefill_tok_s: round(r.prefill, 1), decode_tok_s: round(r.decode, 1) })),
  pair: pair.map((r) => ({ prefill_tok_s: round(r.prefill, 1), decode_tok_s: round(r.decode, 1) })),
  two_core_factor: { prefill: factor('prefill'), decode: factor('decode') },
}));
