#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 machine, by need. Each step is skipped when its result is already present.
# Usage: scripts/setup.sh [demo|test|wasm-bindgen]      (default: test)
#   demo:  what scripts/demo.sh needs, for the Node chat and the web demo alike: the wasm32 targets (a nightly with
#          rust-src for the threaded build), the npm package's tools (npm ci in npm/), the default model; and
#          wasm-bindgen, which scripts/build-wasm.sh installs (`wasm-bindgen` below) while cargo builds the engine.
#          (The web demo adds only www/'s npm packages, which scripts/www.sh installs itself.)
#   test:  demo and wasm-bindgen, plus what only the tests, benches and fuzzing need: the aarch64 target, its cross
#          linker and qemu, Mesa's lavapipe, the Python venv that writes the test models, Chromium and chromedriver.
#   wasm-bindgen: only wasm-bindgen-cli (wasm-bindgen and the wasm32 tests' runner).
set -euo pipefail
cd "$(dirname "$0")/.."
WASM_BINDGEN_VERSION=0.2.130
# The nightly the threaded wasm build was made with: 2026-05-19 (rustc 1.97.0-nightly e50aa6fba); RUVLLM_NIGHTLY
# names another toolchain.
NIGHTLY=${RUVLLM_NIGHTLY:-nightly}

step() { echo "== setup: $*" >&2; }

# apt_install PACKAGE...: Debian's packages, with one `apt-get update` per run (a fresh machine has no package lists).
apt_updated=0
apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  if [ "$apt_updated" = 0 ]; then
    $sudo apt-get update -qq >&2
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

# rust_target TOOLCHAIN TARGET WHY
rust_target() {
  if ! rustup +"$1" target list --installed | grep -q "^$2\$"; then
    step "rustup target add $2 ($1; $3)"
    rustup +"$1" target add "$2" >&2
  fi
}

# The threaded wasm build (scripts/build-wasm.sh mt, the one Node uses) needs a nightly with rust-src: it rebuilds
# std with atomics.
nightly_with_rust_src() {
  if ! rustup toolchain list | grep -q "^$NIGHTLY"; then
    step "rustup toolchain install $NIGHTLY (for the threaded wasm build)"
    rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src >&2
  fi
  if ! rustup +"$NIGHTLY" component list --installed | grep -q '^rust-src'; then
    step "rustup component add rust-src ($NIGHTLY)"
    rustup +"$NIGHTLY" component add rust-src >&2
  fi
}

# wasm-bindgen (the builds' glue) and wasm-bindgen-test-runner (the wasm32 tests' runner) come from one crate, which
# must be the crate's `wasm-bindgen = "=0.2.130"`. Without --locked: its lockfile pins a crate the registry lacks.
# Built from source (the largest step of the demo's set-up): its prebuilt releases are not reachable from here. In
# cargo's own temporary folder, not $CARGO_TARGET_DIR, which would make it wait for (or hold up) the engine's build.
wasm_bindgen_cli() {
  if ! wasm-bindgen-test-runner --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
    step "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (about 5 minutes)"
    env -u CARGO_TARGET_DIR cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" >&2
  fi
}

# The npm package's toolchain (TypeScript, binaryen's wasm-opt, playwright-core), pinned in npm/package-lock.json.
npm_tools() {
  if [ ! -x npm/node_modules/.bin/tsc ] || [ npm/package-lock.json -nt npm/node_modules/.package-lock.json ]; then
    step "npm ci in npm/ (typescript, binaryen, playwright-core)"
    (cd npm && npm ci --no-audit --no-fund) >&2
  fi
}

# The NEON tests run under qemu-user: a cross linker and libc, and qemu (both set in .cargo/config.toml).
aarch64_cross() {
  rust_target stable aarch64-unknown-linux-gnu "NEON tests"
  if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    step "apt-get install gcc-aarch64-linux-gnu qemu-user (NEON tests under qemu)"
    apt_install gcc-aarch64-linux-gnu qemu-user
  fi
}

# Mesa's lavapipe: a software Vulkan driver, so the WebGPU backend's tests run without a GPU.
lavapipe() {
  if ! dpkg -s mesa-vulkan-drivers >/dev/null 2>&1; then
    step "apt-get install mesa-vulkan-drivers (lavapipe, for the WebGPU tests)"
    apt_install mesa-vulkan-drivers
  fi
}

# Python tools that write the small test models (llama.cpp's own `gguf` writer, real tokenizer trainers), and
# OpenAI's official Python client, which npm/test/serve.test.mjs drives `ruvllm serve` with (tests/python/).
python_venv() {
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import gguf, numpy, sentencepiece, tokenizers, openai" 2>/dev/null; then
    step "python venv with gguf, numpy, sentencepiece, tokenizers, openai"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check gguf==0.17.1 numpy sentencepiece tokenizers openai==3.57.0 >&2
  fi
}

# Chromium for the browser tests (driven by playwright-core; it cannot download its own browser here), and
# chromedriver for the Rust suites that run in it (wasm-bindgen-test-runner, tests/browser/webdriver.json).
chromium() {
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    step "apt-get install chromium chromium-driver (about a minute)"
    apt_install chromium chromium-driver
  fi
}

demo() {
  nightly_with_rust_src
  # Both toolchains: nightly for the threaded build, stable for the one-thread and WebGPU builds.
  rust_target stable wasm32-unknown-unknown "the wasm builds"
  rust_target "$NIGHTLY" wasm32-unknown-unknown "the threaded wasm build"
  npm_tools
  scripts/fetch-model.sh >/dev/null
}

case "${1:-test}" in
  demo) demo ;;
  wasm-bindgen) wasm_bindgen_cli ;;
  test)
    # Up front, not left to scripts/build-wasm.sh: the wasm32 test suites run in its test runner before any build.
    # Its minutes of compiling run while the other steps download (a fresh machine's toolchains, packages, model).
    wasm_bindgen_cli &
    installing=$!
    demo
    aarch64_cross
    lavapipe
    python_venv
    chromium
    wait "$installing"
    ;;
  *) echo "usage: $0 [demo|test|wasm-bindgen]" >&2; exit 2 ;;
esac
