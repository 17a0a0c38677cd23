#!/usr/bin/env bash
# The comparison benchmark in one command: ruvllm (native 1/2 threads, wasm32 in Node, wasm in headless Chromium)
# against llama.cpp (node-llama-cpp, native 1/2 threads) and wllama (Chromium, 1/2 threads), on the default model
# and its Q8_0 / Q4_0 / Q4_K_M copies (`1b`: the 1B-shaped Q4_K_M model, random weights; slow, not by default).
# Our wasm rows run the relaxed-SIMD builds where the runtime has relaxed SIMD, as the npm package does (--simd
# simd128: the plain builds everywhere). Prints a markdown table of prefill/decode tok/s, load ms and peak memory per
# engine, each model's tensor types, then our ratio to each peer. Everything after the script name goes to
# compare.mjs, e.g.
#   benches/compare.sh --models q4_1 --reps 1
#   benches/compare.sh --models 1b --prompt-tokens 64 --gen-tokens 32 --reps 2
# Options: --models q4_1,q8_0,q4_0,q4_k_m  --reps 3  --rounds 1  --prompt-tokens 128  --gen-tokens 64  --ctx 1024
#          --threads 1,2  --wasm-threads 1,2  --simd auto  --wasm-pkg npm/wasm  --wasm-mt-pkg npm/wasm-mt
#          --wasm-relaxed-pkg npm/wasm-relaxed  --wasm-mt-relaxed-pkg npm/wasm-mt-relaxed  --nodes NODE,...
#          --only "wllama"  (see benches/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh   # Rust targets, wasm-bindgen, Python venv with gguf, the default model
benches/setup.sh   # Chromium, the pinned npm packages

cargo build --release --locked -p ruvllm-cli >&2
cargo build --release --locked --target wasm32-unknown-unknown -p ruvllm >&2
wasm=target/wasm32-unknown-unknown/release/ruvllm.wasm
wasm-bindgen --target nodejs --out-dir target/wasm-node "$wasm" >&2
# Our wasm rows: the npm package's builds (npm/wasm single-thread, npm/wasm-mt threaded, each again with relaxed SIMD)
# and its Node shims.
scripts/build-wasm.sh >&2
(cd npm && npm run build) >&2

# The default model, and the same weights re-quantized to Q8_0, Q4_0 and Q4_K_M next to it (made once); the
# 1B-shaped model beside them only where --models asks for it (0.8 GB of random weights, minutes to write).
base="$(scripts/fetch-model.sh)"
for quant in q8_0 q4_0; do
  out="${base/Q4_1.gguf/${quant^^}.gguf}"
  [ -f "$out" ] || .venv/bin/python benches/requantize.py "$base" "$quant" "$out"
done
out="${base/Q4_1.gguf/Q4_K_M.gguf}"
[ -f "$out" ] || cargo bench --locked -p ruvllm --bench requantize_k -- --from "$base" --out "$out" >&2
out="$(dirname "$base")/Llama-3.2-1B-shape.random.Q4_K_M.gguf"
if [[ " $* " =~ --models[=\ ]([^ ]*,)?1b(,|\ ) && ! -f "$out" ]]; then
  cargo bench --locked -p ruvllm --bench random_model -- --tokenizer-from "$base" --out "$out" >&2
fi

# Our Node rows run on the machine's Node and, where benches/setup.sh installed it, on Node 24.
nodes=$(command -v node)
[ -x benches/.node24/bin/node ] && nodes+=",benches/.node24/bin/node"
node benches/compare.mjs --base-model "$base" --nodes "$nodes" "$@"
