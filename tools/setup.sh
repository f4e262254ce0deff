#!/usr/bin/env bash
# Sets up a development environment (idempotent): a virtualenv in .venv with torch,
# every ember package installed editable, and the dev tools. Then runs the demo,
# unless --no-demo is given. Safe to run twice: a stamp over the pyproject files
# skips the installs when nothing changed.
#
# Other environments, beside the default one:
#   EMBER_VENV     the virtualenv's folder (default .venv)
#   PYTHON         the interpreter (default python3)
#   EMBER_TORCH    the torch release to install (default 2.13.0, the local CPU wheel;
#                  tools/test_pythons.sh installs 2.15.0 for Python 3.13; releases above this
#                  machine's pip cap need PIP_CONSTRAINT=/dev/null)
#   EMBER_EXTRAS   "vision": also torchvision, timm and diffusers (tools/vision-requirements.txt),
#                  for the vision-and-diffusion zoo; tools/setup_vision.sh sets all three.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${EMBER_VENV:-.venv}"
TORCH="${EMBER_TORCH:-2.13.0}"
EXTRAS="${EMBER_EXTRAS:-}"
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
want=$( (cat tools/setup.sh tools/dev-requirements.txt tools/vision-requirements.txt packages/*/pyproject.toml; echo "$TORCH $EXTRAS") | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # torch first: a range that 2.13 satisfies takes the local CPU wheel; never pull a CUDA build
    # unless asked (EMBER_TORCH: torchvision's wheels are built against one torch release).
    have=$("$VPY" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null || true)
    if [ "$have" != "${TORCH%%+*}" ]; then
        echo "[setup] installing torch $TORCH"
        pip_quiet "torch==$TORCH"
    fi
    echo "[setup] installing dev tools"
    pip_quiet -r tools/dev-requirements.txt
    echo "[setup] installing ember packages (editable)"
    args=()
    for p in ir guards dynamo aotgrad inductor minifier; do args+=(-e "packages/$p"); done
    pip_quiet "${args[@]}"
    if [ "$EXTRAS" = vision ]; then
        echo "[setup] installing torchvision, timm, diffusers"
        # torch stays the one installed above (the constraint keeps pip from replacing it)
        echo "torch==$TORCH" > "$VENV/.torch-constraint"
        pip_quiet -c "$VENV/.torch-constraint" -r tools/vision-requirements.txt
    fi
    echo "$want" > "$stamp"
else
    echo "[setup] environment up to date ($VENV)"
fi
if [ "$demo" = 1 ]; then
    exec "$VPY" tools/demo.py
fi
