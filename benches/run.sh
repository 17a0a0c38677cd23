#!/usr/bin/env bash
# Speed and memory of the default model: native CLI (1 and 2 threads) and wasm32 in Node (the single-thread build
# on 1 thread, the threaded build on 2). Prints one JSON line per run, then the wasm 2T/1T ratios.
# Usage: benches/run.sh [--prompt-tokens 128] [--gen-tokens 64]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch-model.sh)"
cargo build --release --locked -p ruvllm-cli >&2
scripts/build-wasm.sh >&2
(cd npm && npm run build) >&2   # npm/dist/node-workers.js starts the threaded build's workers in Node
for t in 1 2; do
  target/release/ruvllm bench --model "$model" --threads "$t" "$@"
done
one=$(node benches/bench_node.mjs --pkg npm/wasm --threads 1 --model "$model" "$@")
two=$(node benches/bench_node.mjs --pkg npm/wasm-mt --threads 2 --model "$model" "$@")
printf '%s\n%s\n' "$one" "$two"
node -e 'const [a, b] = process.argv.slice(1).map(JSON.parse);
console.log(`wasm32 in Node, 2T / 1T: prefill ${(b.prefill_tok_s / a.prefill_tok_s).toFixed(2)}x, decode ${(b.decode_tok_s / a.decode_tok_s).toFixed(2)}x`);' "$one" "$two"
