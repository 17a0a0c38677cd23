#!/usr/bin/env bash
# Run wasm32 test binaries in headless Chromium, JOBS at a time: each page runs its tests on one thread, so on a
# machine of two cores two pages side by side take about half the time of one after another.
# Usage: tests/browser/run-suites.sh JOBS WASM...   (each WASM a test binary that `cargo test --no-run` built; run
# under with-file-server.mjs, with WASM_BINDGEN_USE_BROWSER=1 and the runner's other variables set)
# Each suite's output is printed whole when it ends (not interleaved), headed by its binary. Fails if any suite
# failed or did not run in Chromium.
set -euo pipefail
jobs=$1
shift
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run_one() {
  local wasm=$1 log=$2/$(basename "$1").log status=0
  wasm-bindgen-test-runner "$wasm" >"$log" 2>&1 || status=$?
  grep -q '^Running headless tests in Chrome' "$log" || { echo "(not run in headless Chromium)" >>"$log"; status=1; }
  { echo "     Running $wasm"; cat "$log"; } | flock "$2/print.lock" cat
  return $status
}
export -f run_one

printf '%s\n' "$@" | xargs -P "$jobs" -I {} bash -c 'run_one "$1" "$2"' _ {} "$logs" ||
  { echo "a wasm32 test suite failed in headless Chromium (above)" >&2; exit 1; }
