#!/usr/bin/env bash
# The chat demo in www/: install its pinned npm dependencies (only when www/node_modules is missing or older than
# www/package-lock.json), then build it with Vite into www/dist/ (or run another of its npm scripts).
# It uses the package from the repository (npm/, "file:../npm"): build that first (scripts/build-wasm.sh, then
# `npm run build` in npm/); scripts/demo.sh web does all of it.
# Usage: scripts/www.sh [build|dev|preview] [VITE ARGS...]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/../www"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== www: npm ci" >&2
  npm ci --no-audit --no-fund >&2
fi
# A page loads any of the three wasm builds (scripts/demo.sh builds only the one Node uses for its chat).
for file in dist/browser.js wasm/ruvllm_bg.wasm wasm-mt/ruvllm_bg.wasm wasm-gpu/ruvllm_bg.wasm; do
  if [ ! -f "../npm/$file" ]; then
    echo "www: the package is not built (no npm/$file): run scripts/build-wasm.sh, then (cd npm && npm run build)" >&2
    exit 1
  fi
done
command="${1:-build}"
shift || true
exec node node_modules/vite/bin/vite.js "$([ "$command" = dev ] && echo serve || echo "$command")" "$@"
