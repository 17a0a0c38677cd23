#!/usr/bin/env bash
# Our HNSW index (benches/hnsw.rs) and hnswlib from PyPI (benches/hnsw_vs_hnswlib.py) on the same vectors, the
# same brute-force truth and the same settings, one thread each. Extra arguments go to both (--n, --dims, --metric,
# --data, --m, --ef-construction, --ef; --n, --dims, --data and --queries only matter to the Rust side, which makes
# the vectors).
# Usage: benches/hnsw_vs_hnswlib.sh [--n 10000] [--dims 384] [--metric cosine] [--data random|clustered|FILE.f32] ...
# (FILE.f32: rows from benches/minilm_corpus.py, MiniLM embeddings of real sentences)
# Needs hnswlib and numpy in .venv (`.venv/bin/pip install hnswlib numpy`).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$PWD/target/hnsw-bench
py_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i += 2)); do
  case ${args[i]} in
    --metric | --m | --ef-construction | --ef) py_args+=("${args[i]}" "${args[i + 1]}") ;;
  esac
done
echo "== ours (cargo bench -p ruvllm --bench hnsw)"
cargo bench -q -p ruvllm --bench hnsw -- --out "$dir" "$@"
echo "== hnswlib"
.venv/bin/python benches/hnsw_vs_hnswlib.py "$dir" "${py_args[@]}"
