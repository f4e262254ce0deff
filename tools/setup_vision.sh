#!/usr/bin/env bash
# Sets up the vision environment (idempotent): tools/setup.sh with torch 2.14.1,
# torchvision 0.29.1, timm and diffusers (tools/vision-requirements.txt) and every ember
# package editable, in .venv-vision (EMBER_VENV overrides). tools/test_vision.sh runs the
# vision-and-diffusion zoo there.
set -euo pipefail
cd "$(dirname "$0")/.."
EMBER_VENV="${EMBER_VENV:-.venv-vision}" EMBER_TORCH="${EMBER_TORCH:-2.14.1}" EMBER_EXTRAS=vision \
    exec bash tools/setup.sh --no-demo
