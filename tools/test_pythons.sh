#!/usr/bin/env bash
# The suite on every other CPython and torch release ember supports. `bash tools/test.sh`
# runs everything on Python 3.11 with torch 2.13.0 (the local CPU wheel); `.ci/run` runs
# both scripts. By default this one runs the whole default suite on
#   Python 3.12 with torch 2.13.0, and
#   Python 3.13 with torch 2.15.0 (the newest release: package metadata accepts 2.11-2.15),
# so every supported Python and both ends of the tested torch range run in CI.
# EMBER_PYTHONS picks pairs ("3.12:2.13.0 3.13:2.15.0"; a version alone takes 2.13.0);
# EMBER_PYTHONS_DYNAMO=1 runs only ember.dynamo's tests (the code that depends on the
# Python version: bytecode interpreter, resume functions, the PEP 523 hook), for speed.
#
# Each pair gets its own environment (.venv312, .venv313: tools/setup.sh with PYTHON,
# EMBER_VENV and EMBER_TORCH); torch for these comes from the package registry through
# pip (the CUDA build, which runs on CPU; a few minutes the first time). This machine's
# pip caps torch at 2.14.1 through its constraints file: PIP_CONSTRAINT=/dev/null lifts
# that for these environments only. An interpreter is found as pythonX.Y on PATH or
# under ~/.pyenv/versions; one that cannot be found is an error. Extra arguments go to
# pytest; slow tests run with EMBER_SLOW=1 (ADR 0015).
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
for pair in ${EMBER_PYTHONS:-3.12:2.13.0 3.13:2.15.0}; do
    v=${pair%%:*}
    t=2.13.0
    [ "$pair" != "$v" ] && t=${pair#*:}
    if ! py=$(find_python "$v"); then
        echo "[test_pythons] no Python $v found (pythonX.Y on PATH or ~/.pyenv/versions/$v.*)" >&2
        exit 2
    fi
    venv=".venv${v/./}"
    echo "[test_pythons] Python $v ($py), torch $t, in $venv"
    PIP_CONSTRAINT=/dev/null PYTHON="$py" EMBER_VENV="$venv" EMBER_TORCH="$t" bash tools/setup.sh --no-demo
    paths=()
    [ "${EMBER_PYTHONS_DYNAMO:-0}" = 1 ] && paths=(packages/dynamo/tests)
    if ! "$venv/bin/python" -m pytest -n "${EMBER_TEST_WORKERS:-2}" -m "$marker" \
        ${paths[@]+"${paths[@]}"} "$@"; then
        status=1
    fi
done
exit $status
