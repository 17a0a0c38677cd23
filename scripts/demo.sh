#!/usr/bin/env bash
# Set up what the demo needs on a fresh machine (scripts/setup.sh demo: not the test tools), build the npm package
# (@ruvector/ruvllm, the wasm engine), then either
# - chat with the default model in Node: the reply streams token by token, then tok/s are printed; or
# - `web`: build the in-browser chat demo (www/) and serve it cross-origin isolated with `vite preview`
#   (`web --dev`: the Vite dev server instead), with the default model served from the local model cache.
# Usage: scripts/demo.sh ["your question"]      (interactive: node npm/dist/cli.js chat --model M)
#        scripts/demo.sh web [--dev] [--port N] (then open the URL it prints)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo
model="$(scripts/fetch-model.sh)"
echo "== building the npm package (wasm engine + TypeScript)" >&2
if [ "${1:-}" = web ]; then
  shift
  dev=0
  port=4173
  while [ $# -gt 0 ]; do
    case "$1" in
      --dev) dev=1 ;;
      --port) port="$2"; shift ;;
      *) echo "usage: scripts/demo.sh web [--dev] [--port N]" >&2; exit 2 ;;
    esac
    shift
  done
  # A page loads any of the three builds: one thread, threads (cross-origin isolated pages), WebGPU.
  scripts/build-wasm.sh all >&2
  (cd npm && npm run build >&2)
  export RUVLLM_MODEL="$model"
  if [ "$dev" = 1 ]; then
    echo "== the chat demo (Vite dev server): open http://localhost:$port/" >&2
    exec scripts/www.sh dev --port "$port" --strictPort
  fi
  scripts/www.sh build >&2
  echo "== the chat demo (www/dist/, vite preview): open http://localhost:$port/" >&2
  exec scripts/www.sh preview --port "$port" --strictPort
fi
# Only the build Node runs this chat on (npm/src/builds.ts, chooseBuild: the threaded one where there is more than
# one core), so the chat starts minutes sooner; loads that need another build fail naming its missing file.
# TypeScript's type check (--noCheck skips it; the JavaScript it writes is the same) needs every build's glue:
# scripts/test.sh and `scripts/demo.sh web` build all three and check.
build=mt
[ "$(nproc)" -gt 1 ] || build=st
scripts/build-wasm.sh "$build" >&2
(cd npm && npm run build -- --noCheck >&2)
node npm/dist/cli.js generate --model "$model" --chat --max-tokens 200 --prompt "${1:-Why is the sky blue?}"
