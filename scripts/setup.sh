#!/usr/bin/env bash
# Idempotent set-up of everything the build, tests and benches need on a fresh Debian 12 machine.
# Each step is skipped when its result is already present.
set -euo pipefail
cd "$(dirname "$0")/.."
WASM_BINDGEN_VERSION=0.2.130

step() { echo "== setup: $*" >&2; }

# The threaded wasm build (scripts/build-wasm.sh) needs a nightly with rust-src: it rebuilds std with atomics.
# Made with nightly 2026-05-19 (rustc 1.97.0-nightly e50aa6fba); RUVLLM_NIGHTLY names another toolchain.
NIGHTLY=${RUVLLM_NIGHTLY:-nightly}
if ! rustup toolchain list | grep -q "^$NIGHTLY"; then
  step "rustup toolchain install $NIGHTLY (for the threaded wasm build)"
  rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src >&2
fi
if ! rustup +"$NIGHTLY" component list --installed | grep -q '^rust-src'; then
  step "rustup component add rust-src ($NIGHTLY)"
  rustup +"$NIGHTLY" component add rust-src >&2
fi

for tc in stable "$NIGHTLY"; do
  if ! rustup +$tc target list --installed | grep -q wasm32-unknown-unknown; then
    step "rustup target add wasm32-unknown-unknown ($tc)"
    rustup +$tc target add wasm32-unknown-unknown >&2
  fi
done

if ! rustup target list --installed | grep -q aarch64-unknown-linux-gnu; then
  step "rustup target add aarch64-unknown-linux-gnu (NEON tests)"
  rustup target add aarch64-unknown-linux-gnu >&2
fi

# The NEON tests run under qemu-user: a cross linker and libc, and qemu (both set in .cargo/config.toml).
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  step "apt-get install gcc-aarch64-linux-gnu qemu-user (NEON tests under qemu)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >&2
fi

if ! wasm-bindgen-test-runner --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
  step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (about 5 minutes)"
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" >&2
fi

# Mesa's lavapipe: a software Vulkan driver, so the WebGPU backend's tests run without a GPU.
if ! dpkg -s mesa-vulkan-drivers >/dev/null 2>&1; then
  step "apt-get install mesa-vulkan-drivers (lavapipe, for the WebGPU tests)"
  apt-get update >&2 && apt-get install -y mesa-vulkan-drivers >&2
fi

# Python tools that write the small test models (llama.cpp's own `gguf` writer, real tokenizer trainers).
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import gguf, numpy, sentencepiece, tokenizers" 2>/dev/null; then
  step "python venv with gguf, numpy, sentencepiece, tokenizers"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check gguf==0.17.1 numpy sentencepiece tokenizers >&2
fi

# The npm package's toolchain (TypeScript, binaryen's wasm-opt, playwright-core), pinned in npm/package-lock.json.
if [ ! -x npm/node_modules/.bin/tsc ] || [ npm/package-lock.json -nt npm/node_modules/.package-lock.json ]; then
  step "npm ci in npm/ (typescript, binaryen, playwright-core)"
  (cd npm && npm ci --no-audit --no-fund) >&2
fi

# Chromium for the browser tests (driven by playwright-core; it cannot download its own browser here), and
# chromedriver for the Rust suites that run in it (wasm-bindgen-test-runner, tests/browser/webdriver.json).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  step "apt-get install chromium chromium-driver (about a minute)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >&2
fi

scripts/fetch-model.sh >/dev/null
