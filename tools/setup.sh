#!/usr/bin/env bash
# Sets up a development environment (idempotent): a virtualenv in .venv with torch,
# every ember package installed editable, and the dev tools. Then runs the demo,
# unless --no-demo is given. Safe to run twice: a stamp over the pyproject files
# skips the installs when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${EMBER_VENV:-.venv}"
demo=1
# pip warns about every missing local index directory this machine configures; keep the rest
pip_quiet() { "$VPY" -m pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }
[ "${1:-}" = "--no-demo" ] && demo=0

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating virtualenv $VENV"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
stamp="$VENV/.setup-stamp"
want=$(cat tools/setup.sh tools/dev-requirements.txt packages/*/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # torch first: a range that 2.13 satisfies takes the local CPU wheel; never pull a CUDA build.
    if ! "$VPY" -c "import torch" 2>/dev/null; then
        echo "[setup] installing torch (CPU wheel)"
        pip_quiet "torch==2.13.0"
    fi
    echo "[setup] installing dev tools"
    pip_quiet -r tools/dev-requirements.txt
    echo "[setup] installing ember packages (editable)"
    args=()
    for p in ir guards dynamo aotgrad inductor minifier; do args+=(-e "packages/$p"); done
    pip_quiet "${args[@]}"
    echo "$want" > "$stamp"
else
    echo "[setup] environment up to date ($VENV)"
fi
if [ "$demo" = 1 ]; then
    exec "$VPY" tools/demo.py
fi
