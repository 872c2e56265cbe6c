#!/usr/bin/env bash
# Build llama-cpp-python (and the llama.cpp copy inside it) from source for the engine audit
# (exactness/engines/llamacpp.py, resispec audit llama-cpp-python).
#
# What it does: downloads the sdist (llama_cpp_python-$VERSION.tar.gz, ~77 MB, it carries vendor/llama.cpp) and
# builds the native library with cmake + ninja, CPU only, -DGGML_NATIVE=ON (this CPU's instruction set), without
# llama.cpp's tests, examples and server; then installs its one missing light dependency (diskcache).
# --no-deps: the resolver must not move numpy / torch / transformers (llama-cpp-python needs numpy>=1.20,
# typing-extensions>=4.5, jinja2>=2.11.3, diskcache>=5.6.1; the first three are already in the venv).
#
# Measured on this 2-core CPU (shared with other jobs), llama-cpp-python 0.3.36: 193 compile steps,
# 825 s (13.8 min) with CMAKE_BUILD_PARALLEL_LEVEL=2 from the downloaded sdist (pip install --no-deps -v
# /tmp/llama_cpp_python-0.3.36.tar.gz with the same CMAKE_ARGS).
# Needs: gcc/g++, cmake >= 3.21, ninja (or make), ~1.5 GB in /tmp.
#
# Usage: bash benchmarks/build_llamacpp.sh            (PYTHON=... picks the interpreter; VERSION=... the release)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
VERSION=${VERSION:-0.3.36}
JOBS=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF" \
  "$PY" -m pip install --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION"
"$PY" -m pip install --no-deps "diskcache>=5.6.1"
"$PY" - <<'EOF'
import llama_cpp
from importlib.metadata import version
print("llama-cpp-python", version("llama-cpp-python"), "imports; llama.cpp system info:",
      llama_cpp.llama_print_system_info().decode().strip())
EOF
echo "build_llamacpp: $(( $(date +%s) - start )) s with $JOBS parallel compile jobs"
