#!/usr/bin/env bash
# The whole test suite: environment check, import boundaries, a size report, ruff, mypy, pytest.
# Sets the environment up first if needed (tools/setup.sh --no-demo), so it works
# on a fresh clone. Extra arguments go to pytest. Slow tests run with EMBER_SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --no-demo
VPY="${EMBER_VENV:-.venv}/bin/python"
echo "[test] import boundaries"
"$VPY" tools/check_imports.py
"$VPY" tools/size_report.py  # growth, visible in every run (no limit enforced)
echo "[test] ruff"
"$VPY" -m ruff check packages integration_tests tools
echo "[test] mypy"
targets=()
for p in ir guards dynamo aotgrad inductor minifier; do
    d=packages/$p/src/ember/$p
    [ -f "$d/__init__.py" ] && targets+=("$d")
done
targets+=(tools/check_imports.py)
"$VPY" -m mypy "${targets[@]}"
MYPYPATH=tools "$VPY" -m mypy tools/bench tools/fuzz tools/release.py tools/compat.py tools/compat_program.py tools/bench_interleaved.py tools/call_walk.py
echo "[test] pytest"
# ember.inductor's Triton tests run Triton kernels on CPU tensors in Triton's interpreter,
# which needs this before triton is first imported (ADR 0012).
export TRITON_INTERPRET=1
marker="not slow"
[ "${EMBER_SLOW:-0}" = 1 ] && marker=""
"$VPY" -m pytest -n "${EMBER_TEST_WORKERS:-2}" -m "$marker" "$@"
