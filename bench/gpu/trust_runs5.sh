#!/usr/bin/env bash
# The GPU runs of 2026-11-26 (two H200s or H100s, one machine session), a record of what ran,
# in the background after the vLLM parts were unpacked, the random 3B model made and .gpuw
# installed:
#   1. issue 13: vLLM direct vs the proxy (cache off, 1 and 4 workers; cache on, all misses) at
#      60 s steady windows after 8 s of ramp-up, Poisson 20 req/s, 3 repeats, as pairs on the
#      two GPUs (each target on both GPUs across the repeats);
#   2. issue 15: least-loaded vs prefix vs kv-events routing over two replicas (one per GPU),
#      the tenants workload at 60 req/s (the KV cache binding), 20 s of arrivals per run,
#      3 repeats, cut by a time budget (every policy once, then the repeats, order rotated).
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res5}
mkdir -p "$R"
python3 -m bench.gpu_remeasure --model /root/model --results "$R/remeasure" --rate 20 \
  --window-s 60 --repeats 3 --gpus 2 > "$R/remeasure.log" 2>&1
touch "$R/done-remeasure"
python3 -m bench.routing_gpu --model /root/model --results "$R/routing" --rate 60 \
  --duration 20 --repeats 3 --budget-s "${ROUTING_BUDGET_S:-420}" --cases tenants \
  --policies least-loaded,prefix,kv-events --vllm-set max-model-len=8192 \
  > "$R/routing.log" 2>&1
touch "$R/done"
