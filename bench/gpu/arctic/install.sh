#!/usr/bin/env bash
# Installs the arctic-inference wheel beside this script (from bench/gpu/arctic/build_wheel.sh)
# for the Python that runs vLLM, offline and without dependencies (numpy comes with vLLM), then
# runs smoke_test.py with that Python: exit 0 and "SMOKE OK" when vLLM's suffix decoding can
# import it. Never set ARCTIC_INFERENCE_ENABLED (the wheel's vLLM plugin is inert without it).
#   bash install.sh [PYTHON] [TARGET]
#     PYTHON: default python3. TARGET: a folder on that Python's PYTHONPATH (the GPU host's
#     /root/pw) to install into with --target; without it, into PYTHON's own site-packages.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${1:-python3}"
TARGET="${2:-}"
TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
WHL="$(ls "$HERE"/arctic_inference-*-"$TAG"-*.whl 2>/dev/null | tail -1 || true)"
if [ -z "$WHL" ]; then
  echo "no arctic_inference wheel for $TAG in $HERE; build one with" \
    "bash bench/gpu/arctic/build_wheel.sh PYTHON_${TAG}" >&2
  exit 1
fi
if [ -n "$TARGET" ]; then
  mkdir -p "$TARGET"
  rm -rf "$TARGET"/arctic_inference "$TARGET"/arctic_inference-*.dist-info
  if "$PY" -m pip --version > /dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --target "$TARGET" "$WHL"
  else  # no pip: a wheel of pure files is a zip to unpack where Python looks
    "$PY" -m zipfile -e "$WHL" "$TARGET"
  fi
  export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
else
  "$PY" -m pip install -q --no-index --no-deps --force-reinstall "$WHL"
fi
echo "installed $(basename "$WHL")${TARGET:+ into $TARGET}"
cd / && "$PY" "$HERE/smoke_test.py"
