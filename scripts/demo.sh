#!/usr/bin/env bash
# Set up everything on a fresh machine, build the npm package (@ruvector/ruvllm, the wasm engine), then
# chat with the default model in Node: the reply streams token by token, then tok/s are printed.
# Usage: scripts/demo.sh ["your question"]      (interactive: node npm/dist/cli.js chat --model M)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch-model.sh)"
echo "== building the npm package (wasm engine + TypeScript)" >&2
scripts/build-wasm.sh
(cd npm && npm run build >&2)
node npm/dist/cli.js generate --model "$model" --chat --max-tokens 200 --prompt "${1:-Why is the sky blue?}"
