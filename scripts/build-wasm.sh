#!/usr/bin/env bash
# Build the wasm engine for the npm package: one ESM build (wasm-bindgen --target web) per directory,
# which both entry points use (browsers fetch the .wasm, Node reads it from the package directory).
#   npm/wasm/      the CPU engine (the default; kept small: no wgpu)
#   npm/wasm-gpu/  the same plus the WebGPU engine (cargo feature `gpu`), loaded only for backend "webgpu"/"auto"
#   cargo (release, simd128 from .cargo/config.toml) -> wasm-bindgen 0.2.130 -> wasm-opt -O3 (npm binaryen@132)
# wasm-pack is not used: it would only run these same steps, and installing it costs ~400 s in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
wasm_opt=npm/node_modules/.bin/wasm-opt
[ -x "$wasm_opt" ] || { echo "build-wasm: $wasm_opt missing (run: cd npm && npm ci)" >&2; exit 1; }
built="${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/release/ruvllm.wasm"

# Bind and optimize the wasm cargo just built into directory $1.
package() {
  local out=$1
  rm -rf "$out" && mkdir -p "$out"
  wasm-bindgen --target web --out-dir "$out" --out-name ruvllm "$built"
  rm -f "$out/ruvllm_bg.wasm.d.ts"
  # The features rustc enables for wasm32 by default, plus simd128; wasm-opt must not emit anything beyond them.
  "$wasm_opt" -O3 --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-multivalue --enable-reference-types \
    "$out/ruvllm_bg.wasm" -o "$out/ruvllm_bg.wasm"
  echo "build-wasm: $out/ruvllm_bg.wasm $(stat -c %s "$out/ruvllm_bg.wasm") bytes" >&2
}

cargo build --locked --release --target wasm32-unknown-unknown -p ruvllm
package npm/wasm

cargo build --locked --release --target wasm32-unknown-unknown -p ruvllm --features gpu
package npm/wasm-gpu
