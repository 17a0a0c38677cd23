#!/usr/bin/env bash
# Idempotent set-up for the comparison benchmark only (not needed by the build, the tests or CI):
# Debian's Chromium for the browser engines, and the pinned npm packages (benches/package-lock.json).
set -euo pipefail
cd "$(dirname "$0")"

step() { echo "== bench setup: $*" >&2; }

if [ ! -x /usr/bin/chromium ]; then
  step "apt-get install chromium"
  # Another apt/dpkg may hold the lock for a while; wait for it instead of failing.
  while fuser /var/lib/dpkg/lock-frontend >/dev/null 2>&1; do sleep 5; done
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

# node-llama-cpp: use its prebuilt CPU binary (@node-llama-cpp/linux-x64, a direct dependency) and never download,
# clone or build llama.cpp (NODE_LLAMA_CPP_SKIP_DOWNLOAD, --ignore-scripts). --omit=optional skips its ~640 MB of
# CUDA/Vulkan/ARM binaries. `npm ci` is not used: npm 11 calls the lock out of sync over those optional packages.
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  step "npm install (node-llama-cpp, wllama, playwright-core)"
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-audit --no-fund --ignore-scripts --omit=optional >&2
fi
