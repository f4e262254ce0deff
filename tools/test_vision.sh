#!/usr/bin/env bash
# The vision-and-diffusion zoo's tests (integration_tests/models/test_vision_zoo.py) and
# the vision constructs' unit tests, in the vision environment (set up first if needed:
# tools/setup_vision.sh). Extra arguments go to pytest. The larger models run with
# EMBER_SLOW=1 (pytest marker `slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
export EMBER_VENV="${EMBER_VENV:-.venv-vision}"
bash tools/setup_vision.sh
marker="not slow"
[ "${EMBER_SLOW:-0}" = 1 ] && marker=""
"$EMBER_VENV/bin/python" -m pytest -n "${EMBER_TEST_WORKERS:-2}" -m "$marker" \
    integration_tests/models/test_vision_zoo.py packages/dynamo/tests/test_vision_constructs.py "$@"
