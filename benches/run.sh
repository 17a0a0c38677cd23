#!/usr/bin/env bash
# Speed and memory of the default model: native CLI (1 and 2 threads) and wasm32 in Node.
# Prints one JSON line per run. Usage: benches/run.sh [--prompt-tokens 128] [--gen-tokens 64]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch-model.sh)"
cargo build --release --locked -p ruvllm-cli >&2
cargo build --release --locked --target wasm32-unknown-unknown -p ruvllm >&2
wasm-bindgen --target nodejs --out-dir target/wasm-node target/wasm32-unknown-unknown/release/ruvllm.wasm >&2
for t in 1 2; do
  target/release/ruvllm bench --model "$model" --threads "$t" "$@"
done
node benches/bench_node.mjs --pkg target/wasm-node --model "$model" "$@"
