#!/usr/bin/env python3
"""MiniLM embeddings of a real text corpus, for the HNSW benches (benches/hnsw.rs --data FILE).

The corpus: sentences of the docstrings of Python's standard library on this machine (English prose written by
people, on many subjects), split at sentence ends, 30 to 300 characters, deduplicated, shuffled with a fixed seed.
They are embedded by our native CLI (`target/release/ruvllm embed`, all-MiniLM-L6-v2 F16 from
scripts/fetch-embed-model.sh, mean pooling, normalized) and written as rows (u32 count, u32 dims, f32 rows), with the
sentences beside them (one per line).

    python3 benches/minilm_corpus.py COUNT OUT.f32 [--model M.gguf] [--threads N]
"""
import argparse
import ast
import json
import random
import re
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sentences():
    seen = set()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "test" in path.parts or "idlelib" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                if 30 <= len(s) <= 300 and re.match(r"[A-Z]", s) and s not in seen and not re.search(r">>>|::|\bhttps?:", s):
                    seen.add(s)
                    yield s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("count", type=int)
    p.add_argument("out")
    p.add_argument("--model", default=str(Path.home() / ".cache/ruvllm/all-MiniLM-L6-v2.F16.gguf"))
    p.add_argument("--threads", default="1")
    a = p.parse_args()
    texts = list(sentences())
    random.Random(1).shuffle(texts)
    if len(texts) < a.count:
        sys.exit(f"only {len(texts)} sentences in the corpus")
    texts = texts[: a.count]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    listing = out.with_suffix(".txt")
    listing.write_text("\n".join(texts) + "\n", encoding="utf-8")
    cli = ROOT / "target/release/ruvllm"
    run = subprocess.run([str(cli), "embed", "--model", a.model, "--file", str(listing), "--threads", a.threads],
                         check=True, capture_output=True)
    result = json.loads(run.stdout)
    rows = result["embeddings"]
    dims = len(rows[0])
    with open(out, "wb") as f:
        f.write(struct.pack("<II", len(rows), dims))
        for row in rows:
            f.write(struct.pack(f"<{dims}f", *row))
    print(f"{len(rows)} sentences, {result['tokens']} tokens, {dims} dims, embedded in {result['embed_ms'] / 1e3:.1f} s -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
