#!/usr/bin/env bash
# Fetch real-world JSON Schemas (Kubernetes v1.37.0, draft 2020-12) from PyPI, once, into ~/.cache/ruvllm, each made
# standalone, and print the path of their directory on stdout (progress on stderr). Usage: scripts/fetch-schemas.sh
#   Source: the wheel `kubernetes-validate==1.37.0`, its kubernetes-json-schema/v1.37.0-local-strict/*.json. Those refer
#   to one shared /api/_definitions.json; each written file instead holds, under its own `$defs`, exactly the
#   definitions it reaches (transitively), with its `$ref`s rewritten to `#/$defs/NAME` and no `$id`.
set -euo pipefail
cache="${RUVLLM_CACHE:-$HOME/.cache/ruvllm}"
dir="$cache/schemas/kubernetes-v1.37.0"
package="kubernetes-validate==1.37.0"
sha=85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9
if [ ! -d "$dir" ]; then
  repo="$(cd "$(dirname "$0")/.." && pwd)"
  python="$repo/.venv/bin/python"
  [ -x "$python" ] || python=python3
  mkdir -p "$cache/schemas"
  tmp=$(mktemp -d "$cache/schemas/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $package from PyPI into $dir ..." >&2
  "$python" -m pip download --quiet --no-deps --only-binary=:all: "$package" -d "$tmp/wheel" >&2
  wheel=("$tmp"/wheel/*.whl)
  echo "$sha  ${wheel[0]}" | sha256sum -c --quiet - >&2
  python3 - "${wheel[0]}" "$tmp/out" <<'PY'
import json
import os
import sys
import zipfile

PREFIX = 'kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict/'
SHARED = '/api/_definitions.json#/$defs/'  # how the files refer to the shared definitions
LOCAL = '#/$defs/'  # how the definitions refer to each other, and how a standalone file refers to its own
wheel, out = sys.argv[1], sys.argv[2]


def unescape(token):
    return token.replace('~1', '/').replace('~0', '~')


def escape(name):
    return name.replace('~', '~0').replace('/', '~1')


def rewrite(node, found):
    """A copy of `node` whose $refs point into its own $defs; adds each definition name referred to to `found`."""
    if isinstance(node, list):
        return [rewrite(x, found) for x in node]
    if not isinstance(node, dict):
        return node
    copy = {}
    for key, value in node.items():
        if key == '$ref' and isinstance(value, str):
            for prefix in (SHARED, LOCAL):
                if value.startswith(prefix):
                    name = unescape(value[len(prefix):])
                    if '/' in value[len(prefix):]:
                        sys.exit(f'a $ref into a definition, not to one: {value}')
                    found.add(name)
                    value = LOCAL + escape(name)
                    break
            else:
                sys.exit(f'a $ref this script does not know: {value}')
            copy[key] = value
        else:
            copy[key] = rewrite(value, found)
    return copy


with zipfile.ZipFile(wheel) as z:
    names = sorted(n for n in z.namelist() if n.startswith(PREFIX) and n.endswith('.json') and '/' not in n[len(PREFIX):])
    defs = json.loads(z.read(PREFIX + '_definitions.json'))['$defs']
    # Each definition rewritten once, with the names it refers to directly.
    rewritten = {}
    for name, schema in defs.items():
        refs = set()
        rewritten[name] = (rewrite(schema, refs), refs)
    os.makedirs(out)
    written = 0
    for path in names:
        file = path[len(PREFIX):]
        if file in ('_definitions.json', 'all.json'):
            continue
        schema = json.loads(z.read(path))
        schema.pop('$id', None)
        refs = set()
        schema = rewrite(schema, refs)
        if '$defs' in schema:
            sys.exit(f'{file} has $defs of its own')
        # The definitions reachable from the file, by a walk over the direct references.
        reach, todo = set(), list(refs)
        while todo:
            name = todo.pop()
            if name in reach:
                continue
            if name not in rewritten:
                sys.exit(f'{file}: no definition {name}')
            reach.add(name)
            todo.extend(rewritten[name][1])
        if reach:
            schema['$defs'] = {name: rewritten[name][0] for name in sorted(reach)}
        with open(os.path.join(out, file), 'w') as f:
            json.dump(schema, f, ensure_ascii=False)
            f.write('\n')
        written += 1
print(f'wrote {written} standalone schemas', file=sys.stderr)
PY
  mv "$tmp/out" "$dir"
fi
echo "$dir"
