#!/usr/bin/env bash
# Fetch one part of llama.cpp's test data once into ~/.cache/ruvllm, from the source distribution of llama-cpp-python
# on PyPI, which vendors llama.cpp; print the directory holding it on stdout (progress on stderr).
# Usage: scripts/fetch-llama-cpp.sh grammars|vocabs|server
#   grammars: its example GBNF grammars (grammars/*.gbnf), for tests/rust/grammar.rs ($RUVLLM_LLAMA_GRAMMARS)
#   vocabs:   its tokenizer tests (models/ggml-vocab-*.gguf, vocab-only GGUFs, each with the .inp cases and .out ids
#             of test-tokenizer-0), for tests/rust/llama_vocabs.rs ($RUVLLM_LLAMA_VOCABS)
#   server:   llama.cpp's llama-server, built from those sources (CPU only; cmake and ninja from PyPI into the venv;
#             minutes, once), for npm/test/llama-server.test.mjs ($RUVLLM_LLAMA_SERVER: the directory holding it)
# The sdist (77 MB) is downloaded once and kept beside the parts, so each part is extracted from the same file.
# Uses the repo's .venv from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
root="llama_cpp_python-$version/vendor/llama.cpp"
case "${1:-}" in
  grammars) from="$root/grammars" patterns=("$root/grammars/*.gbnf") ;;
  vocabs) from="$root/models" patterns=("$root/models/ggml-vocab-*.gguf" "$root/models/ggml-vocab-*.gguf.inp"
    "$root/models/ggml-vocab-*.gguf.out") ;;
  server) from="$root/build/bin" patterns=("$root") ;;
  *)
    echo "usage: $0 grammars|vocabs|server" >&2
    exit 2
    ;;
esac
dir="$cache/llama-cpp-python-$version-$1"
sdist="$cache/llama_cpp_python-$version.tar.gz"
if [ ! -d "$dir" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if [ ! -f "$sdist" ]; then
    echo "fetching llama-cpp-python==$version (source distribution, 77 MB) from PyPI for llama.cpp's test data ..." >&2
    # The sdist of this package only: `--no-binary :all:` would also build its build tools (cmake, ninja) from
    # source, which pip installs to read the sdist's metadata.
    .venv/bin/python -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$tmp" \
      "llama-cpp-python==$version" >&2
    echo "$sha  $tmp/$(basename "$sdist")" | sha256sum -c --quiet - >&2
    # Renamed into place once checked, so the cached sdist is always the pinned one.
    mv "$tmp/$(basename "$sdist")" "$sdist"
  fi
  tar -xzf "$sdist" -C "$tmp" --wildcards "${patterns[@]}"
  if [ "$1" = server ]; then
    echo "building llama.cpp's llama-server (from llama-cpp-python==$version's sources; minutes, once) ..." >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check cmake==4.2.0 ninja==1.13.0 >&2
    # Portable x86-64/aarch64 code (GGML_NATIVE off): the cache may be read on another CPU of the same kind. No
    # libcurl (models are local files), no OpenSSL (it serves plain HTTP on 127.0.0.1), no tests or examples.
    .venv/bin/cmake -S "$tmp/$root" -B "$tmp/$root/build" -G Ninja -DCMAKE_MAKE_PROGRAM="$PWD/.venv/bin/ninja" \
      -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
    .venv/bin/cmake --build "$tmp/$root/build" --target llama-server >&2
  fi
  # Renamed into place whole, so the directory exists only complete.
  mv "$tmp/$from" "$dir"
fi
echo "$dir"
