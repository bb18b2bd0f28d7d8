#!/usr/bin/env bash
# The GPU runs of 2026-11-24 (one GPU: no 2-GPU host was lent), a record of what ran, started in
# the background after the vLLM parts were unpacked, the random 3B model made and .gpuw installed):
#   1. issue 13: the stored-stream GC fix re-measured: vLLM direct vs the proxy with the cache
#      off vs the proxy with the answer cache on and a workload that never repeats (every lookup
#      a miss), 60 s steady windows, 3 repeats each, one vLLM, the targets' order rotated.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res}
mkdir -p "$R"
python3 -m bench.gpu_remeasure --model /root/model --results "$R/remeasure" \
  --targets direct,proxy-1w,proxy-cache-miss --window-s 60 --repeats 3 --gpus 1 > "$R/remeasure.log" 2>&1
touch "$R/done"
