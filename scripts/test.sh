#!/usr/bin/env bash
# Run every test: native (x86_64) and wasm32 (Node) Rust suites, the WebGPU backend on lavapipe, the aarch64 (NEON) compile check,
# then the npm package's suites (Node, the packed tarball, headless Chromium).
# Usage: scripts/test.sh        (does its own set-up first; safe to run on a fresh machine)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export RUVLLM_MODEL="$(scripts/fetch-model.sh)"
export RUVLLM_FIXTURES="$PWD/target/fixtures"

echo "== tiny test models (SentencePiece llama, qwen2) -> $RUVLLM_FIXTURES"
.venv/bin/python tests/fixtures/make_tiny_models.py "$RUVLLM_FIXTURES"

echo "== native tests"
cargo test --workspace --locked

echo "== wasm32 tests (Node)"
cargo test --locked --target wasm32-unknown-unknown -p ruvllm

echo "== WebGPU backend on Mesa lavapipe (wgpu/Vulkan): every shader against the CPU kernels, the model vs llama.cpp"
cargo test --locked -p ruvllm --features gpu --lib gpu::
cargo test --locked -p ruvllm --features gpu --test gpu
cargo check --locked --target wasm32-unknown-unknown -p ruvllm --features gpu

echo "== WebGPU backend in headless Chromium (SwiftShader): every shader against the CPU kernels, through the browser's WebGPU"
# (SwiftShader runs the shaders on the CPU: the runner's default limit of 20 s for the whole suite is too short.)
WASM_BINDGEN_TEST_TIMEOUT=900 cargo test --locked --target wasm32-unknown-unknown -p ruvllm --features gpu --test gpu_browser

echo "== aarch64 (NEON) compile check"
cargo check --locked --target aarch64-unknown-linux-gnu -p ruvllm

echo "== npm package: wasm build (cargo, wasm-bindgen, wasm-opt), TypeScript"
scripts/build-wasm.sh
(cd npm && npm run build)

echo "== npm package tests in Node (against the native CLI: release build)"
cargo build --locked --release -p ruvllm-cli
(cd npm && npm test)

echo "== browser tests (headless Chromium; webgpu.test.mjs: the package's WebGPU backend on SwiftShader, the CPU fallbacks)"
# webgpu.test.mjs is slow: SwiftShader runs the model's shaders on the CPU (about a minute per token on 2 busy cores).
node --test --test-timeout=300000 tests/browser/
echo "== all tests passed"
