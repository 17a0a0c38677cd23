#!/usr/bin/env python3
"""Check that the crate's parts import one way: each part of crate/src (a folder or a file at its root) may use only
parts on its own layer or below (LAYERS), but for the arrows ALLOWED names, each with its reason (ARCHITECTURE.md
names them too). Prints the import graph between parts with `--graph`.

    scripts/check-layers.py [--graph]

Reads `crate::PART` in the code (comments and doc comments left out), so a path written out in full counts as
an import too. Exits 1 on an arrow that runs up or a circle between parts.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, 'crate', 'src')

# Bottom first. A part may use the parts of its own layer and of the layers below.
LAYERS = [
    ['error', 'clock', 'parallel', 'splitmix', 'test_support'],  # what every part may use
    ['simd', 'record', 'quant'],  # f32 vector primitives, the persisted-record frame, weight formats and dot products
    ['gguf', 'kernels'],  # the file (header, bytes, model id); the CPU ops of the forward pass
    ['tokenizer', 'kv'],  # text <-> ids; keys and values (the cache, pages, prefix cache, saved states)
    ['chat_template', 'constraint'],  # prompts; grammars over the vocabulary
    ['model'],  # config, weights, adapters, the forward pass
    ['gpu', 'embed'],  # the WebGPU backend; embeddings
    ['engine', 'index', 'training'],  # requests from prompt ids to tokens; the vector index; MicroLoRA training
    ['wasm'],  # the JavaScript bindings
]

# Arrows that run up, each with its reason.
ALLOWED = {
    # Error is the crate's one error type; the index's own (IndexError) carries its record keys, so it is defined
    # with them and wrapped here.
    ('error', 'index'),
}


def part_of(path):
    rel = os.path.relpath(path, SRC)
    head = rel.split(os.sep)[0]
    return head[:-3] if head.endswith('.rs') else head


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return re.sub(r'//.*', '', text)


def graph():
    arrows = {}
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith('.rs'):
                continue
            path = os.path.join(dirpath, f)
            src = part_of(path)
            if src in ('lib', 'main'):
                continue
            code = strip_comments(open(path, encoding='utf-8').read())
            # `use crate::{a::X, b::Y}` names several parts at once.
            names = set(re.findall(r'\bcrate::([a-z_][a-z0-9_]*)', code))
            for group in re.findall(r'\bcrate::\{([^}]*)\}', code):
                names |= set(re.findall(r'(?:^|,)\s*([a-z_][a-z0-9_]*)', group))
            for dst in names:
                if dst != src and (os.path.isdir(os.path.join(SRC, dst)) or os.path.exists(os.path.join(SRC, dst + '.rs'))):
                    arrows.setdefault((src, dst), set()).add(os.path.relpath(path, ROOT))
    return arrows


def layer(part):
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    return None


def circles(arrows):
    nodes = {a for a, _ in arrows} | {b for _, b in arrows}
    out = {n: {b for a, b in arrows if a == n} for n in nodes}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in out[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return found


def main():
    arrows = graph()
    problems = []
    for (src, dst), files in sorted(arrows.items()):
        ls, ld = layer(src), layer(dst)
        if ls is None or ld is None:
            problems.append(f'{src} -> {dst}: {src if ls is None else dst} is on no layer (add it to LAYERS)')
        elif ld > ls and (src, dst) not in ALLOWED:
            problems.append(f'{src} -> {dst} runs up (layer {ls} -> {ld}), in {", ".join(sorted(files))}')
    for comp in circles({a: f for a, f in arrows.items() if a not in ALLOWED}):
        problems.append('a circle between parts: ' + ' -> '.join(comp))
    if '--graph' in sys.argv:
        for (src, dst), files in sorted(arrows.items()):
            mark = '  (up: allowed)' if (src, dst) in ALLOWED else ''
            print(f'{src} -> {dst}{mark}')
        print(f'{len(arrows)} arrows between {len({a for a, _ in arrows} | {b for _, b in arrows})} parts')
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    if '--graph' not in sys.argv:
        print(f'{len(arrows)} arrows between parts, none running up but the {len(ALLOWED)} allowed, no circle')


if __name__ == '__main__':
    main()
