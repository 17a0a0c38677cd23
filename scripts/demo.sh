#!/usr/bin/env bash
# Set up everything on a fresh machine, then chat with the default model in Node (the wasm32 engine),
# streaming tokens and printing tok/s.   Usage: scripts/demo.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch-model.sh)"
echo "== building the wasm engine for Node" >&2
cargo build --release --locked --target wasm32-unknown-unknown -p ruvllm >&2
wasm-bindgen --target nodejs --out-dir target/wasm-node target/wasm32-unknown-unknown/release/ruvllm.wasm >&2
node scripts/demo-chat.mjs "$model" "${1:-What is the capital of France?}"
