#!/usr/bin/env bash
# The tests that depend on the Python version, on every other CPython ember supports:
# ember.dynamo's tests (bytecode interpreter, resume functions, generated-code
# verification, guards, the PEP 523 frame hook) and the integration tests, on 3.12 and
# 3.13. `bash tools/test.sh` runs everything on 3.11; `.ci/run` runs both scripts.
# By default only ember.dynamo's tests run on 3.12/3.13 (the version-dependent code),
# so CI's default run stays well under 30 minutes on 2 cores; EMBER_PYTHONS_FULL=1 runs
# the whole default suite (every package, the integration tests, tools' tests).
#
# Each version gets its own environment (.venv312, .venv313; tools/setup.sh with
# PYTHON and EMBER_VENV): torch for these versions comes from the package registry
# through pip (the CUDA build, which runs on CPU; ~2 minutes the first time).
# EMBER_PYTHONS picks the versions ("3.12 3.13" by default); an interpreter is found
# as pythonX.Y on PATH or under ~/.pyenv/versions. A version that cannot be found is
# an error. Extra arguments go to pytest; slow tests run with EMBER_SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    local v=$1 p
    # A pyenv shim is on PATH for every installed version but fails for one that is
    # not selected (`pyenv: python3.12: command not found`): an interpreter counts only
    # if it runs and reports the asked-for version.
    for p in $(command -v "python$v" 2>/dev/null) "$HOME"/.pyenv/versions/"$v".*/bin/python; do
        if [ -x "$p" ] && [ "$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$v" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

marker="not slow"
[ "${EMBER_SLOW:-0}" = 1 ] && marker=""
export TRITON_INTERPRET=1  # as in tools/test.sh (ADR 0012)
status=0
for v in ${EMBER_PYTHONS:-3.12 3.13}; do
    if ! py=$(find_python "$v"); then
        echo "[test_pythons] no Python $v found (pythonX.Y on PATH or ~/.pyenv/versions/$v.*)" >&2
        exit 2
    fi
    venv=".venv${v/./}"
    echo "[test_pythons] Python $v ($py) in $venv"
    PYTHON="$py" EMBER_VENV="$venv" bash tools/setup.sh --no-demo
    paths=(packages/dynamo/tests)
    # the whole default suite (pyproject's testpaths), as tools/test.sh runs it on 3.11
    [ "${EMBER_PYTHONS_FULL:-0}" = 1 ] && paths=()
    if ! "$venv/bin/python" -m pytest -n "${EMBER_TEST_WORKERS:-2}" -m "$marker" \
        ${paths[@]+"${paths[@]}"} "$@"; then
        status=1
    fi
done
exit $status
