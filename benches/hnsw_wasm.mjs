// The HNSW index on wasm32 in Node, through the package (`VectorIndex`, one-thread build), on the vectors, queries
// and brute-force truth that `cargo bench --bench hnsw -- --out DIR` wrote (benches/hnsw_vs_hnswlib.sh writes them to
// target/hnsw-bench): build time, then recall@1, recall@10, queries/s and p50/p99 per query at each ef, as the native
// bench prints them. A query's time includes the package's checks and the JSON of its 10 results.
//   node benches/hnsw_wasm.mjs [DIR] [--ef 10,20,40,80,160]     (npm run build in npm/ first)
import { readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const args = process.argv.slice(2);
const efFlag = args.indexOf('--ef');
const efs = efFlag >= 0 ? args.splice(efFlag, 2)[1].split(',').map(Number) : [10, 20, 40, 80, 160];
const dir = args[0] ?? `${root}/target/hnsw-bench`;
const K = 10;

/** Rows as `write_rows` in benches/hnsw.rs writes them. */
function rows(file, Type) {
  const bytes = readFileSync(`${dir}/${file}`);
  const [count, width] = new Uint32Array(bytes.buffer, bytes.byteOffset, 2);
  const values = new Type(bytes.buffer.slice(bytes.byteOffset + 8, bytes.byteOffset + bytes.length));
  return Array.from({ length: count }, (_, i) => values.subarray(i * width, (i + 1) * width));
}
const vectors = rows('vectors.f32', Float32Array);
const queries = rows('queries.f32', Float32Array);
const truth = rows('truth.u32', Uint32Array);

const { VectorIndex } = await import(pathToFileURL(`${root}/npm/dist/node.js`).href);
const index = await VectorIndex.open({ dims: vectors[0].length });
let t = performance.now();
vectors.forEach((v) => index.add(v));
const buildS = (performance.now() - t) / 1e3;
console.log(JSON.stringify({ engine: 'ruvllm-wasm (VectorIndex, Node ' + process.version + ')', n: vectors.length, dims: vectors[0].length, build_s: +buildS.toFixed(2), inserts_per_s: Math.round(vectors.length / buildS), bytes_per_vector: Math.round(index.info().bytes / vectors.length) }));
for (const ef of efs) {
  index.search(queries[0], { k: K, ef }); // warm-up
  const times = [];
  let at1 = 0;
  let at10 = 0;
  queries.forEach((q, i) => {
    t = performance.now();
    const found = index.search(q, { k: K, ef });
    times.push((performance.now() - t) * 1e3);
    const ids = new Set(found.map((h) => h.id));
    at1 += found[0]?.id === truth[i][0] ? 1 : 0;
    at10 += [...truth[i]].filter((id) => ids.has(id)).length;
  });
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ ef, recall_at_1: +(at1 / queries.length).toFixed(4), recall_at_10: +(at10 / (K * queries.length)).toFixed(4), queries_per_s: Math.round(1e6 / mean), p50_us: +times[times.length >> 1].toFixed(1), p99_us: +times[Math.floor(times.length * 0.99)].toFixed(1) }));
}
await index.close();
