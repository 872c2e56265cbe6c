#!/usr/bin/env bash
# One-command device check (fits in 10 minutes on one GPU):
#   1. target/draft step time for 1 token vs a tree of N nodes, projected end-to-end speed-up
#      (benchmarks/device_decode.py -> reports/device_decode.{md,json});
#   2. the torch verifier benchmark of the torch-backend issue, when present (benchmarks/device_verify.*).
# Usage: bash benchmarks/device_decode.sh [extra args for device_decode.py]   (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
# No bare `python` (absent unless a venv is active): $PYTHON, else this checkout's .venv, else python3.
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
export PYTHON="$PY" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # a fresh clone runs without installing the package
DEVICE=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
echo "device: $DEVICE"
if [ "$DEVICE" = cpu ]; then EXTRA=(--dtype float32 --nodes 1 4 16 --repeats 2 --prefix 64); else EXTRA=(); fi
timeout 420 "$PY" benchmarks/device_decode.py --device "$DEVICE" "${EXTRA[@]}" "$@"
if [ "$DEVICE" = cpu ]; then
  echo "device_verify: skipped (it checks the torch backend on CUDA; this machine has none)"
elif [ -f benchmarks/device_verify.sh ]; then
  timeout 150 bash benchmarks/device_verify.sh || echo "device_verify.sh failed or timed out"
elif [ -f benchmarks/device_verify.py ]; then
  timeout 150 "$PY" benchmarks/device_verify.py || echo "device_verify.py failed or timed out"
fi
