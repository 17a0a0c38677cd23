#!/usr/bin/env bash
# Build the wasm engine for the npm package, as five builds of the same crate:
#   npm/wasm/      single-thread CPU engine (stable Rust, simd128; kept small: no wgpu): for every page, and the fallback
#   npm/wasm-mt/   threaded (feature `threads`: rayon on Web Workers over shared memory; nightly Rust with
#                  build-std, since std itself must be compiled with atomics): for Node, and for pages that are
#                  cross-origin isolated (COOP/COEP), where SharedArrayBuffer is allowed
#   npm/wasm-relaxed/, npm/wasm-mt-relaxed/
#                  the same two with relaxed SIMD (`+relaxed-simd`: the quantized kernels' one-instruction byte dots),
#                  for runtimes that validate it (Chromium 114+, Node 22+); the plain ones everywhere else
#   npm/wasm-gpu/  single-thread CPU engine plus the WebGPU engine (feature `gpu`), loaded only for backend
#                  "webgpu"/"auto" where the browser has a GPU adapter
# npm/src/backend.ts and builds.ts pick one at run time. Each: cargo (release) -> wasm-bindgen 0.2.130 --target web ->
# wasm-opt (npm binaryen@132; -O3, and -O2 for the threaded build, see below). wasm-pack is not used: it would only
# run these same steps (and costs ~400 s to install in CI). `scripts/build-wasm.sh st|mt|st-relaxed|mt-relaxed|gpu`
# builds only one of them; `cpu` the four CPU builds; `mt-bench` builds the threaded one with the `bench` feature into
# target/bench/wasm-mt-bench (benches/matmul_scaling.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
wasm_opt=npm/node_modules/.bin/wasm-opt
[ -x "$wasm_opt" ] || { echo "build-wasm: $wasm_opt missing (run: cd npm && npm ci)" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-target}
# No debug info in these builds (the release profile's `debug = 1` is for native profiling): wasm-bindgen drops the
# DWARF sections anyway, and generating them only slows every compile.
export CARGO_PROFILE_RELEASE_DEBUG=false
# The nightly the threaded build was made with (rustc 1.97.0-nightly e50aa6fba 2026-05-19); any recent one works.
NIGHTLY=${RUVLLM_NIGHTLY:-nightly}

# wasm-bindgen, where it is missing (a fresh machine's `scripts/demo.sh`), compiles from source for minutes, as the
# engine does: one such cargo run leaves much of a 2-core machine idle (measured: both at once took as long as either
# alone), so scripts/setup.sh installs it while cargo builds the engine (a no-op where it is there), and the first glue
# step waits for it. Its "== setup" lines show; the rest goes to a log, printed if it fails. Job control (set -m)
# gives the install a process group of its own, which is stopped with its cargo if this script ends first.
installing_log=$(mktemp -t ruvllm-setup-wasm-bindgen.XXXXXX)
set -m
scripts/setup.sh wasm-bindgen 2> >(tee "$installing_log" | grep --line-buffered '^== setup' >&2) &
installing=$!
set +m
# wasm-opt is about 45 s of one core per build: each runs in the background while the next build compiles, and
# the script waits for them all at its end (finish_opts).
opt_pids=()
stop_installing() {
  [ -z "$installing" ] || kill -- -"$installing" 2>/dev/null || true
  [ ${#opt_pids[@]} -eq 0 ] || kill "${opt_pids[@]}" 2>/dev/null || true
  rm -f "$installing_log"
}
trap stop_installing EXIT
wait_for_wasm_bindgen() {
  [ -n "$installing" ] || return 0
  if kill -0 "$installing" 2>/dev/null; then
    echo "build-wasm: waiting for scripts/setup.sh wasm-bindgen (cargo's output: $installing_log)" >&2
  fi
  if ! wait "$installing"; then
    installing=""
    cat "$installing_log" >&2
    echo "build-wasm: scripts/setup.sh wasm-bindgen failed (above)" >&2
    exit 1
  fi
  installing=""
}

# The features rustc enables for wasm32 by default, plus simd128; wasm-opt must not emit anything beyond them.
WASM_OPT_FEATURES=(--enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --enable-multivalue --enable-reference-types)

# bindgen_and_opt WASM OUT_DIR [wasm-opt flags]
# --low-memory-unused lets wasm-opt fold a constant added to an address into the load's offset (V8 then folds it
# into the x86 address; an i32.add before the load is an instruction of its own): it assumes no access below 1 KiB,
# which holds where Rust lays the stack first (the main thread's stack grows down from 1 MiB towards 0; data
# sits above it), and the fold changes only an address that wraps past 4 GiB.
bindgen_and_opt() {
  local wasm=$1 out=$2
  shift 2
  wait_for_wasm_bindgen
  rm -rf "$out" && mkdir -p "$out"
  wasm-bindgen --target web --out-dir "$out" --out-name ruvllm "$wasm"
  rm -f "$out/ruvllm_bg.wasm.d.ts"
  {
    "$wasm_opt" "${WASM_OPT_FEATURES[@]}" --low-memory-unused "$@" "$out/ruvllm_bg.wasm" -o "$out/ruvllm_bg.wasm"
    echo "build-wasm: $out/ruvllm_bg.wasm $(stat -c %s "$out/ruvllm_bg.wasm") bytes" >&2
  } &
  opt_pids+=($!)
}

finish_opts() {
  local pid failed=0
  for pid in "${opt_pids[@]}"; do wait "$pid" || failed=1; done
  opt_pids=()
  [ $failed -eq 0 ] || { echo "build-wasm: wasm-opt failed (above)" >&2; exit 1; }
}

# The relaxed builds compile our crate alone with relaxed SIMD (`cargo rustc`'s flags reach only the crate it builds):
# the dependencies, and the threaded build's std, are the plain builds' own, already compiled in the same target
# folders, and nothing in them uses relaxed instructions.
RELAXED=(-- -C target-feature=+relaxed-simd)

# build_single_thread [relaxed]
build_single_thread() {
  if [ "${1:-}" = relaxed ]; then
    cargo rustc --locked --release --target wasm32-unknown-unknown -p ruvllm --lib "${RELAXED[@]}"
    bindgen_and_opt "$target_dir/wasm32-unknown-unknown/release/ruvllm.wasm" npm/wasm-relaxed -O3 --enable-relaxed-simd
  else
    cargo build --locked --release --target wasm32-unknown-unknown -p ruvllm
    bindgen_and_opt "$target_dir/wasm32-unknown-unknown/release/ruvllm.wasm" npm/wasm -O3
  fi
}

# build_threaded [FEATURES OUT_DIR [relaxed]]: the npm package's threaded build, or (mt-bench) the same with other
# features, or (relaxed) with relaxed SIMD.
build_threaded() {
  local features=${1:-threads} out=${2:-npm/wasm-mt} relaxed=${3:-} dir=$target_dir/wasm-threads
  local command=(build) relaxed_flags=() opt_relaxed=()
  if [ "$relaxed" = relaxed ]; then
    command=(rustc --lib)
    relaxed_flags=("${RELAXED[@]}")
    opt_relaxed=(--enable-relaxed-simd)
  fi
  # Set here, not in .cargo/config.toml, so the stable build and the tests stay as they are. Current
  # nightlies no longer make memory shared from +atomics alone: the link args ask for shared, imported
  # memory (up to wasm32's 4 GiB) and export the TLS symbols wasm-bindgen's thread glue uses.
  local flags="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128"
  for arg in --shared-memory --max-memory=4294967296 --import-memory --export=__wasm_init_tls \
    --export=__tls_size --export=__tls_align --export=__tls_base; do
    flags+=" -C link-arg=$arg"
  done
  RUSTFLAGS="$flags" cargo "+$NIGHTLY" "${command[@]}" --locked --release --target wasm32-unknown-unknown -p ruvllm \
    --features "$features" -Z build-std=panic_abort,std --target-dir "$dir" "${relaxed_flags[@]}"
  # -O2, not -O3: binaryen 132's -O3 output deadlocks in Node 20 while the pool starts (rayon's workers never
  # get going; the same file runs in Chromium, and -O1/-O2 output runs in both).
  bindgen_and_opt "$dir/wasm32-unknown-unknown/release/ruvllm.wasm" "$out" -O2 --enable-threads "${opt_relaxed[@]}"
  # The glue imports wasm-bindgen-rayon's worker start-up from its snippet; ours (npm/threads/workerHelpers.js)
  # takes its place: it starts workers from a real URL under bundlers' dev servers and fails instead of hanging
  # when a worker cannot start. The glue must still import exactly `startWorkers` from it.
  local helper
  helper=$(ls "$out"/snippets/wasm-bindgen-rayon-*/src/workerHelpers.no-bundler.js)
  grep -q "^import { startWorkers } from './snippets/wasm-bindgen-rayon-[0-9a-f]*/src/workerHelpers.no-bundler.js';$" "$out/ruvllm.js" ||
    { echo "build-wasm: $out/ruvllm.js imports something else from wasm-bindgen-rayon's helper; check npm/threads/workerHelpers.js" >&2; exit 1; }
  cp npm/threads/workerHelpers.js "$helper"
}

build_gpu() {
  cargo build --locked --release --target wasm32-unknown-unknown -p ruvllm --features gpu
  bindgen_and_opt "$target_dir/wasm32-unknown-unknown/release/ruvllm.wasm" npm/wasm-gpu -O3
}

case "${1:-all}" in
  st) build_single_thread ;;
  mt) build_threaded ;;
  st-relaxed) build_single_thread relaxed ;;
  mt-relaxed) build_threaded threads npm/wasm-mt-relaxed relaxed ;;
  mt-bench) build_threaded threads,bench "$target_dir/bench/wasm-mt-bench" ;;
  gpu) build_gpu ;;
  cpu) build_single_thread && build_threaded && build_single_thread relaxed && build_threaded threads npm/wasm-mt-relaxed relaxed ;;
  all) build_single_thread && build_threaded && build_single_thread relaxed && build_threaded threads npm/wasm-mt-relaxed relaxed &&
    build_gpu ;;
  *) echo "usage: $0 [st|mt|st-relaxed|mt-relaxed|gpu|cpu|all|mt-bench]" >&2; exit 2 ;;
esac
finish_opts
