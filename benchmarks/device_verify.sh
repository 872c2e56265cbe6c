#!/usr/bin/env bash
# GPU check of the torch backend (see benchmarks/device_verify.py): exact law on CUDA float32,
# decision parity with numpy, and `resispec bench-verify --device cuda --dtype float32`.
# Usage (repository root, CUDA machine):  bash benchmarks/device_verify.sh [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" benchmarks/device_verify.py "$@"  # no bare `python`: absent unless a venv is active
