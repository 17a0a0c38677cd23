// This machine's memory bandwidth as a copy measures it, for the decode ceiling in compare.mjs: a decode step reads
// every weight once (the 1B model's 0.8 GB cannot stay in any cache), so bytes of weights per token over this
// bandwidth bounds decode tok/s from above.
//
// Usage: node benches/membw.mjs [--threads 1,2] [--mb 256] [--reps 8]
// Each thread copies its own buffer of --mb MB (10^6 bytes, far above the caches) into another with Buffer.copy
// (memmove), --reps times; threads start together and the best rep's wall time counts. Counted as STREAM's Copy
// counts it: bytes read plus bytes written, per second. Prints one JSON line: { copy_gb_s: { "1": x, "2": y }, ... }.
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { parseArgs, round } from './lib/common.mjs';

if (!isMainThread) {
  const { mb, reps, barrier, index } = workerData;
  const src = Buffer.alloc(mb * 1e6, 1);
  const dst = Buffer.alloc(mb * 1e6);
  const sync = new Int32Array(barrier);
  const times = [];
  for (let r = 0; r < reps; r++) {
    // Every thread waits here until all have arrived, so that the copies overlap.
    const arrived = Atomics.add(sync, 0, 1) + 1;
    while (Atomics.load(sync, 0) < (r + 1) * sync[1]) Atomics.wait(sync, 0, arrived, 1);
    const t = performance.now();
    src.copy(dst);
    times.push(performance.now() - t);
  }
  parentPort.postMessage({ index, times });
} else {
  const args = parseArgs({ threads: '1,2', mb: '256', reps: '8' });
  const mb = Number(args.mb);
  const reps = Number(args.reps);
  const out = { copy_gb_s: {}, mb_per_thread: mb, reps, counted: 'bytes read + bytes written' };
  for (const n of String(args.threads).split(',').map(Number)) {
    const barrier = new SharedArrayBuffer(8);
    new Int32Array(barrier)[1] = n;
    const results = await Promise.all(Array.from({ length: n }, (_, index) => new Promise((resolve, reject) => {
      const w = new Worker(new URL(import.meta.url), { workerData: { mb, reps, barrier, index } });
      w.once('message', resolve);
      w.once('error', reject);
    })));
    // A rep's wall time is its slowest thread's; the best rep counts.
    const wall = Math.min(...Array.from({ length: reps }, (_, r) => Math.max(...results.map((x) => x.times[r]))));
    out.copy_gb_s[n] = round((2 * n * mb * 1e6) / (wall * 1e6), 1);
  }
  console.log(JSON.stringify(out));
}
