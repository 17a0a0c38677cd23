#!/usr/bin/env python3
"""Check that a Markdown file names only what exists: every `path` in backticks is a file or folder of
the repository (or a build output), and every identifier in backticks occurs in the code.

    scripts/check-docs.py [FILE.md ...]     (default: ARCHITECTURE.md)

Prints each name it cannot find and exits 1 if there is any. Names are looked up as whole words
with `git grep`, so a name that only exists in the docs is reported.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Build outputs and other paths that exist only after a build or a run.
GENERATED = ('npm/wasm', 'npm/dist', 'dist/', 'wasm/', 'wasm-mt/', 'wasm-gpu/', 'target/', 'fuzz/artifacts', 'benches/node_modules', 'benches/.node24')
# Where code lives (identifiers are looked up here).
CODE = ['crate', 'cli', 'npm/src', 'npm/threads', 'npm/package.json', 'tests', 'fuzz', 'scripts', 'benches', 'www/src', 'www/vite.config.js', 'www/public']
# Folders a path may be written relative to.
BASES = ['', 'crate/src', 'crate/src/gpu', 'crate/src/gpu/ops', 'crate/src/quant', 'crate/src/tokenizer',
         'crate/src/model', 'crate/src/kv', 'crate/src/gguf', 'crate/src/engine', 'crate/src/wasm', 'crate/src/index', 'crate/src/training', 'crate/src/kernels', 'crate/src/parallel', 'crate/src/chat_template',
         'tests/rust', 'tests/browser', 'tests/fixtures', 'npm/src', 'crate/src/gpu/wgsl', 'scripts', 'benches']
EXT = re.compile(r'\.(rs|ts|js|mjs|wgsl|md|py|sh|json|toml|html)$')


def tracked_basenames():
    out = subprocess.run(['git', '-C', ROOT, 'ls-files'], capture_output=True, text=True, check=True).stdout
    return {os.path.basename(p) for p in out.split()}


def path_exists(p, basenames, here):
    p = p.rstrip('/')
    if os.path.exists(os.path.join(ROOT, here, p)):
        return True  # relative to the document's own folder
    if (p + '/').startswith(GENERATED) or p.startswith('.') and '/' not in p:
        return True  # a build output, or an extension (`.wgsl`)
    if '*' in p:
        import glob
        return any(glob.glob(os.path.join(ROOT, b, p)) for b in BASES)
    if any(os.path.exists(os.path.join(ROOT, b, p)) for b in BASES):
        return True
    return '/' not in p and p in basenames


def in_code(name):
    return subprocess.run(['git', '-C', ROOT, 'grep', '-q', '-w', '-F', name, '--'] + CODE).returncode == 0


def check(doc, basenames):
    problems = []
    for span in sorted(set(re.findall(r'`([^`\n]+)`', open(os.path.join(ROOT, doc)).read()))):
        if span.startswith('<0x'):
            continue  # a byte token, not a name
        words = re.split(r'[ ,]+', span)
        paths = [w for w in words if '<' not in w and (EXT.search(w) or ('/' in w and re.fullmatch(r'[\w.\-/*]+', w)))]
        for p in paths:
            if not path_exists(p, basenames, os.path.dirname(doc)):
                problems.append(f'{doc}: no such path {p!r} (in `{span}`)')
        if paths or '/' in span:
            continue
        for ident in re.findall(r'[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*', span):
            for name in ident.split('::'):
                if len(name) >= 3 and not in_code(name):
                    problems.append(f'{doc}: {name!r} occurs nowhere in the code (in `{span}`)')
    return problems


def main():
    basenames = tracked_basenames()
    problems = [p for doc in (sys.argv[1:] or ['ARCHITECTURE.md']) for p in check(doc, basenames)]
    print('\n'.join(problems) or 'every path and name exists')
    sys.exit(1 if problems else 0)


if __name__ == '__main__':
    main()
