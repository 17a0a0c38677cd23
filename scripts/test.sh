#!/usr/bin/env bash
# Run every test: native (x86_64) and wasm32 (Node) Rust suites, the aarch64 (NEON) compile check.
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

echo "== aarch64 (NEON) compile check"
cargo check --locked --target aarch64-unknown-linux-gnu -p ruvllm
echo "== all tests passed"
