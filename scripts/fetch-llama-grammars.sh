#!/usr/bin/env bash
# Fetch llama.cpp's example GBNF grammars (its grammars/*.gbnf) once into ~/.cache/ruvllm, from the source
# distribution of llama-cpp-python on PyPI, which vendors llama.cpp; print the directory holding them on stdout
# (progress on stderr). tests/rust/grammar.rs reads them from $RUVLLM_LLAMA_GRAMMARS.
# Uses the repo's .venv from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
dir="$cache/llama-cpp-python-$version-grammars"
if [ ! -d "$dir" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching llama-cpp-python==$version (source distribution, 77 MB) from PyPI for llama.cpp's grammars ..." >&2
  # The sdist of this package only: `--no-binary :all:` would also build its build tools (cmake, ninja) from
  # source, which pip installs to read the sdist's metadata.
  .venv/bin/python -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$tmp" \
    "llama-cpp-python==$version" >&2
  sdist="$tmp/llama_cpp_python-$version.tar.gz"
  echo "$sha  $sdist" | sha256sum -c --quiet - >&2
  tar -xzf "$sdist" -C "$tmp" --wildcards "llama_cpp_python-$version/vendor/llama.cpp/grammars/*.gbnf"
  # Renamed into place whole, so the directory exists only complete.
  mv "$tmp/llama_cpp_python-$version/vendor/llama.cpp/grammars" "$dir"
fi
echo "$dir"
