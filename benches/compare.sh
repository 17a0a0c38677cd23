#!/usr/bin/env bash
# The comparison benchmark in one command: ruvllm (native 1/2 threads, wasm32 in Node, wasm in headless Chromium)
# against llama.cpp (node-llama-cpp, native 1/2 threads) and wllama (Chromium, 1/2 threads), on the default model
# and its Q8_0 / Q4_0 copies. Prints a markdown table of prefill/decode tok/s, load ms and peak memory per engine,
# then our ratio to each peer. Everything after the script name goes to compare.mjs, e.g.
#   benches/compare.sh --models q4_1 --reps 1
# Options: --models q4_1,q8_0,q4_0  --reps 3  --rounds 1  --prompt-tokens 128  --gen-tokens 64  --ctx 1024  --threads 1,2
#          --wasm-threads 1,2  --wasm-pkg npm/wasm  --wasm-mt-pkg npm/wasm-mt  --nodes NODE,...  --only "wllama"
#          (see benches/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh   # Rust targets, wasm-bindgen, Python venv with gguf, the default model
benches/setup.sh   # Chromium, the pinned npm packages

cargo build --release --locked -p ruvllm-cli >&2
cargo build --release --locked --target wasm32-unknown-unknown -p ruvllm >&2
wasm=target/wasm32-unknown-unknown/release/ruvllm.wasm
wasm-bindgen --target nodejs --out-dir target/wasm-node "$wasm" >&2
# Our wasm rows: the npm package's two builds (npm/wasm single-thread, npm/wasm-mt threaded) and its Node shims.
scripts/build-wasm.sh >&2
(cd npm && npm run build) >&2

# The default model, and the same weights re-quantized to Q8_0 and Q4_0 next to it (made once).
base="$(scripts/fetch-model.sh)"
for quant in q8_0 q4_0; do
  out="${base/Q4_1.gguf/${quant^^}.gguf}"
  [ -f "$out" ] || .venv/bin/python benches/requantize.py "$base" "$quant" "$out"
done

# Our Node rows run on the machine's Node and, where benches/setup.sh installed it, on Node 24.
nodes=$(command -v node)
[ -x benches/.node24/bin/node ] && nodes+=",benches/.node24/bin/node"
node benches/compare.mjs --base-model "$base" --nodes "$nodes" "$@"
