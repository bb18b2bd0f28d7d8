#!/usr/bin/env bash
# The GPU runs of 2026-11-24 on nvidia-h200-x2 (a record of what ran, started in the background
# after the vLLM parts were unpacked, the random 3B model made and .gpuw installed):
#   1. issue 13: the stored-stream GC fix re-measured: vLLM direct vs the proxy with the answer
#      cache on and a workload that never repeats (every lookup a miss), 60 s steady windows,
#      4 repeats, the two targets swapping GPUs every repeat;
#   2. issue 15: routing repeats on the multi-tenant case at 60 req/s, with kv-events.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res}
mkdir -p "$R"
python3 -m bench.gpu_remeasure --model /root/model --results "$R/remeasure" \
  --targets direct,proxy-cache-miss --window-s 60 --repeats 4 > "$R/remeasure.log" 2>&1
python3 -m bench.routing_gpu --model /root/model --results "$R/routing" --rate 60 --duration 20 \
  --repeats 3 --cases tenants --policies least-loaded,prefix,session,kv-events \
  --vllm-set max-model-len=8192 --budget-s 600 > "$R/routing.log" 2>&1
touch "$R/done"
