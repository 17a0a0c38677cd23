#!/usr/bin/env bash
# How long a newcomer waits for the demo's first answer on a fresh machine, emulated on this one where it can be: the
# demo runs in a fresh clone of HEAD with a fresh CARGO_HOME (crates downloaded, wasm-bindgen-cli compiled), cargo
# target folder, npm cache and model cache, on a PATH without the wasm-bindgen installed here.
# Not emulated: rustup's toolchains and targets (Rust stable and a nightly with rust-src come with the machine; a wasm32
# target takes seconds, ../shared/TOOLCHAIN.md) and Debian's packages (the demo installs none).
# Prints the demo's progress lines with the seconds since the start, then when the answer's first text came (and, for
# the Node chat, the CPU time it took).
# Usage: benches/demo_cold.sh          scripts/demo.sh: the Node chat
#        benches/demo_cold.sh web      scripts/demo.sh web: until `vite preview` serves the page, then the page's first
#                                      answer in headless Chromium (benches/demo_cold_page.mjs; needs scripts/setup.sh)
# The clone and its caches (a few GB) are deleted at the end; KEEP=1 keeps them.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-node}
cold=$(mktemp -d /tmp/ruvllm-demo-cold.XXXXXX)
demo_pid=""
cleanup() {
  [ -z "$demo_pid" ] || kill "$demo_pid" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$cold"
}
trap cleanup EXIT
git clone --quiet . "$cold/repo"

# rustup's proxies alone on the PATH (the wasm-bindgen installed beside them here would be found otherwise); what
# `cargo install` puts in the fresh CARGO_HOME comes first.
mkdir -p "$cold/bin"
for tool in cargo rustc rustup; do ln -s "$(command -v "$tool")" "$cold/bin/$tool"; done
installed=$(dirname "$(command -v wasm-bindgen || echo /nonexistent/x)")
path=$(printf '%s\n' "$PATH" | tr ':' '\n' | grep -vxF "$installed" | paste -sd:)
export PATH="$cold/cargo/bin:$cold/bin:$path" CARGO_HOME="$cold/cargo" npm_config_cache="$cold/npm" \
  RUVLLM_CACHE="$cold/models" PIP_NO_CACHE_DIR=1
unset CARGO_TARGET_DIR RUVLLM_MODEL

# Each line of the demo's stderr with the seconds since the start.
stamp() { while IFS= read -r line; do printf '[%4d s] %s\n' "$SECONDS" "$line"; done; }
SECONDS=0
echo "[   0 s] $mode demo in a fresh clone: $cold/repo ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
if [ "$mode" = node ]; then
  # Its CPU time too (every process it waited for): unlike the seconds, it hardly depends on what else runs here.
  TIMEFORMAT='CPU time: %U s user, %S s system'
  time {
    "$cold/repo/scripts/demo.sh" 2> >(stamp >&2) | {
      IFS= read -r -n 1 first
      printf '[%4d s] the first text of the answer\n' "$SECONDS" >&2
      printf '%s' "$first"
      cat
    }
    sleep 0.2 # the last stamped lines
    printf '[%4d s] done\n' "$SECONDS"
  }
elif [ "$mode" = web ]; then
  port=4199
  "$cold/repo/scripts/demo.sh" web --port "$port" 2> >(stamp >&2) &
  demo_pid=$!
  until curl -sf -o /dev/null "http://localhost:$port/"; do
    kill -0 "$demo_pid" 2>/dev/null || { echo "scripts/demo.sh web ended before serving" >&2; exit 1; }
    sleep 1
  done
  printf '[%4d s] the page is served: opening it in headless Chromium\n' "$SECONDS"
  node benches/demo_cold_page.mjs "http://localhost:$port/" | stamp
else
  echo "usage: $0 [web]" >&2
  exit 2
fi
