#!/usr/bin/env bash
# The GPU runs of 2026-11-24 (second session; one H100), a record of what ran. Started in the
# background after the vLLM parts were unpacked, the random 3B model made and .gpuw installed:
#   1. issue 13: the answer cache's GC fix re-measured: vLLM direct vs the proxy with the cache
#      off vs the proxy with the exact cache on and a workload that never repeats (every lookup
#      a miss), rate 20 req/s, 40 s steady windows after 8 s of ramp-up, 3 repeats each, one
#      vLLM, the targets' order rotated every repeat;
#   2. issue 13: a backend flag with the new rig: fp8 KV cache vs bf16 where the KV cache binds
#      (--kv-cache-memory-bytes 2G), the reference workload at 20 req/s, 40 s windows after
#      10 s of warm-up, 2 repeats, the multi-process client, vLLM's histograms as referee.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res}
mkdir -p "$R"
python3 -m bench.gpu_remeasure --model /root/model --results "$R/remeasure" --rate 20 \
  --targets direct,proxy-1w,proxy-cache-miss --window-s 40 --repeats 3 --gpus 1 \
  > "$R/remeasure.log" 2>&1
touch "$R/remeasure.done"
python3 -m bench.gpu_matrix --model /root/model --results "$R/flags" \
  --steps kvbound-baseline,kvbound-fp8 --duration 40 --warmup-seconds 10 --repeats 2 --rate 20 \
  > "$R/flags.log" 2>&1
touch "$R/done"
