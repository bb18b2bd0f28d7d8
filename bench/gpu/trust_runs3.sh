#!/usr/bin/env bash
# The GPU runs of 2026-11-24 (third session; two H200s), a record of what ran, in the background
# after the vLLM parts were unpacked, the random 3B model made and .gpuw installed:
#   1. issue 13: vLLM direct vs the proxy with 4 workers (cache off) at 60 s steady windows,
#      rate 20 req/s, 3 repeats, one target per GPU at a time, the GPUs swapped every repeat;
#   2. issue 14: the full stack (proxy + exact answer cache, 1 worker) vs vLLM alone, each swept
#      to saturation with an SLO (goodput), on the repeat workload at 30 % and 60 % exact
#      repeats, both sweeps at once, one per GPU, the GPUs swapped between the ratios.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res3}
mkdir -p "$R"
python3 -m bench.gpu_remeasure --model /root/model --results "$R/remeasure" --rate 20 \
  --targets direct,proxy-4w --window-s 60 --repeats 3 --gpus 2 > "$R/remeasure.log" 2>&1
touch "$R/remeasure.done"
python3 -m bench.fullstack_gpu --model /root/model --results "$R/fullstack" --ratios 0.3,0.6 \
  --slo ttft_p99:1000,tpot_p99:50 --start-rate 8 --point-s 30 --warm-s 5 --bisect-steps 2 \
  > "$R/fullstack.log" 2>&1
touch "$R/done"
