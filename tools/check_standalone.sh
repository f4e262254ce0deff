#!/usr/bin/env bash
# Each package installs and works alone: for every package, a fresh virtualenv
# gets torch (the local CPU wheel), then `pip install packages/NAME` (not
# editable) with only the ember packages it declares, and runs the first
# ```python example of the package's README in a directory outside the repo.
#
#   bash tools/check_standalone.sh [NAME ...]     (default: all six)
#   bash tools/check_standalone.sh --wheels DIR [NAME ...]
#
# With --wheels, each package is installed from its built wheel in DIR
# (`python tools/release.py build --out DIR`), pip resolving the ember packages it
# declares from DIR and nothing else, so the wheels' metadata is what is tested.
#
# Slow (a virtualenv and a torch install per package), so it is not part of
# tools/test.sh; run it before a release or after changing dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="${PYTHON:-python3}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
WHEELS=""
if [ "${1:-}" = "--wheels" ]; then
    WHEELS=$(cd "$2" && pwd)
    shift 2
fi
pkgs=("$@")
[ ${#pkgs[@]} -eq 0 ] && pkgs=(ir guards dynamo aotgrad inductor minifier)

# the ember packages each one needs, in install order (mirrors the pyproject files)
declare -A needs=(
    [ir]="ir" [guards]="ir guards" [dynamo]="ir guards dynamo" [aotgrad]="ir aotgrad"
    [inductor]="ir inductor" [minifier]="ir minifier"
)
status=0
for name in "${pkgs[@]}"; do
    venv="$WORK/venv-$name"
    "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "torch==2.13.0" 2>&1 | grep -v "is ignored: it is neither" || true
    args=()
    if [ -n "$WHEELS" ]; then
        wheel=$(ls "$WHEELS"/ember_"$name"-*-py3-none-any.whl | sort -V | tail -1)
        args=(--find-links "$WHEELS" "$wheel")
    else
        for dep in ${needs[$name]}; do args+=("$ROOT/packages/$dep"); done
    fi
    "$venv/bin/python" -m pip install -q "${args[@]}" 2>&1 | grep -v "is ignored: it is neither" || true
    example="$WORK/example_$name.py"
    "$venv/bin/python" - "$ROOT/packages/$name/README.md" "$example" <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"```python\n(.*?)```", text, re.S)
if not m:
    sys.exit(f"{sys.argv[1]}: no ```python example")
open(sys.argv[2], "w").write(m.group(1))
PYEOF
    installed=$("$venv/bin/python" -m pip list 2>/dev/null | grep -E '^ember-' | awk '{print $1}' | tr '\n' ' ')
    if (cd "$WORK" && "$venv/bin/python" "$example" > "$WORK/out_$name.txt" 2>&1); then
        echo "ok    ember-$name alone (installed: $installed)"
    else
        echo "FAIL  ember-$name alone (installed: $installed); README example output:"
        tail -15 "$WORK/out_$name.txt"
        status=1
    fi
done
exit $status
