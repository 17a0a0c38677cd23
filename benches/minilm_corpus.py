#!/usr/bin/env python3
"""MiniLM embeddings of a real text corpus, for the HNSW benches (benches/hnsw.rs --data FILE).

The corpus: sentences written by people, on many subjects, split at sentence ends, 30 to 300 characters,
deduplicated, shuffled with a fixed seed. Sources (--sources, in this order before the shuffle):
- python: the docstrings of the modules under Python's standard library path on this machine (site-packages
  included: ~79k sentences with this VM's Python 3.11);
- rust: the doc comments of Rust's standard library (`rustc +nightly --print sysroot`'s rust-src) and of this
  workspace's dependencies (`cargo metadata`, the Cargo.lock's crates): ~41k more.
They are embedded by our native CLI (`target/release/ruvllm embed`, all-MiniLM-L6-v2 F16 from
scripts/fetch-embed-model.sh, mean pooling, normalized) and written as rows (u32 count, u32 dims, f32 rows), with the
sentences beside them (OUT.txt, one per line).

    python3 benches/minilm_corpus.py COUNT OUT.f32 [--sources python,rust] [--model M.gguf] [--threads N] [--jobs J]
    python3 benches/minilm_corpus.py COUNT OUT.f32 --sentences LISTING.txt ...   (embed a listing made elsewhere)

--jobs runs J CLI processes side by side on slices of the listing (each with --threads N): the embeddings do not
depend on how the work is split.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def split_sentences(text, code):
    """The sentences of a paragraph that read as prose: 30-300 characters, a capital first, none that `code`
    (a regex) finds code or a link in."""
    for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
        if 30 <= len(s) <= 300 and re.match(r"[A-Z]", s) and not re.search(code, s):
            yield s


def python_paragraphs():
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "test" in path.parts or "idlelib" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield doc


def rust_roots():
    sysroot = subprocess.run(["rustc", "+nightly", "--print", "sysroot"], check=True, capture_output=True, text=True)
    library = Path(sysroot.stdout.strip()) / "lib/rustlib/src/rust/library"
    roots = [library / name for name in ("core", "alloc", "std", "proc_macro", "test")]
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)
    members = set(meta["workspace_members"])
    deps = sorted({Path(p["manifest_path"]).parent for p in meta["packages"] if p["id"] not in members})
    return roots + deps


def rust_paragraphs():
    """The prose of `///` and `//!` comments: paragraphs without code blocks, headings, tables or list markers,
    markdown links reduced to their text."""
    for root in rust_roots():
        for path in sorted(root.rglob("*.rs")):
            if {"tests", "benches", "examples"} & set(path.relative_to(root).parts):
                continue
            paragraph, fenced = [], False
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines() + [""]:
                m = re.match(r"\s*//[/!](.*)$", line)
                text = m.group(1).strip() if m else ""
                if m and text.startswith("```"):
                    fenced = not fenced
                elif m and not fenced and text and not text.startswith(("#", "|", "[", "<")):
                    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
                    paragraph.append(re.sub(r"\[`?([^\]`]+)`?\]", r"\1", text).replace("`", "").lstrip("-* "))
                    if not text.startswith(("-", "*")):
                        continue
                if paragraph:
                    yield " ".join(paragraph)
                    paragraph = []
                if not m:
                    fenced = False


# Each source's paragraphs and what marks a sentence of code in them (Rust's doc comments keep more code inline).
SOURCES = {"python": (python_paragraphs, r">>>|::|\bhttps?:"), "rust": (rust_paragraphs, r">>>|::|\bhttps?:|[{};]|=>")}


def sentences(sources):
    seen = set()
    for name in sources:
        paragraphs, code = SOURCES[name]
        for paragraph in paragraphs():
            for s in split_sentences(paragraph, code):
                if s not in seen:
                    seen.add(s)
                    yield s


def embed(cli, model, listing, threads):
    run = subprocess.run([str(cli), "embed", "--model", model, "--file", str(listing), "--threads", threads],
                         check=True, capture_output=True)
    return json.loads(run.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("count", type=int)
    p.add_argument("out")
    p.add_argument("--sources", default="python", help="comma-separated: python, rust")
    p.add_argument("--sentences", help="a listing (one sentence a line) to embed instead of gathering one")
    p.add_argument("--model", default=str(Path.home() / ".cache/ruvllm/all-MiniLM-L6-v2.F16.gguf"))
    p.add_argument("--threads", default="1")
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args()
    if a.sentences:
        texts = Path(a.sentences).read_text(encoding="utf-8").split("\n")[:-1]
    else:
        texts = list(sentences(a.sources.split(",")))
        random.Random(1).shuffle(texts)
    if len(texts) < a.count:
        sys.exit(f"only {len(texts)} sentences in the corpus")
    texts = texts[: a.count]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    slices = []
    for j in range(a.jobs):
        part = texts[j * len(texts) // a.jobs:(j + 1) * len(texts) // a.jobs]
        listing = out.with_suffix(f".part{j}.txt")
        listing.write_text("\n".join(part) + "\n", encoding="utf-8")
        slices.append(listing)
    cli = ROOT / "target/release/ruvllm"
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda s: embed(cli, a.model, s, a.threads), slices))
    for listing in slices:
        listing.unlink()
    rows = [row for r in results for row in r["embeddings"]]
    dims = len(rows[0])
    with open(out, "wb") as f:
        f.write(struct.pack("<II", len(rows), dims))
        for row in rows:
            f.write(struct.pack(f"<{dims}f", *row))
    tokens = sum(r["tokens"] for r in results)
    seconds = max(r["embed_ms"] for r in results) / 1e3
    print(f"{len(rows)} sentences, {tokens} tokens, {dims} dims, embedded in {seconds:.1f} s ({a.jobs} jobs) -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
