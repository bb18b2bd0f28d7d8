#!/usr/bin/env bash
# The GPU runs of 2026-11-26 (session 11, one H100, one machine session), a record of what ran
# in the background after the vLLM parts were unpacked, `python -m deploy train-model` started
# (log /root/train.log), the random 3B model made at /root/model3b and .gpuw installed:
#   1. issue 14: phase P of bench/study_gpu.sh: baseline vs spec-ngram on the trained model
#      padded 4x wide (decode memory-bound), code_edit at concurrency 1 and 4, 3 repeats;
#   2. issue 13: the KV-bound fp8 pair (2 GB KV) at the rig's 60 s windows x 3 repeats, rate 20
#      (random 3B model);
#   3. (started by hand afterwards, see docs/cache.md) the judge sweeps.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res11}
mkdir -p "$R"
RESULTS=$R/study bash bench/study_gpu.sh P > "$R/study.log" 2>&1
for f in /root/pids/*; do kill -- -"$(cat "$f")" 2> /dev/null; rm -f "$f"; done
while nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q .; do sleep 1; done
cp /root/logs/*.log "$R/study/" 2> /dev/null
touch "$R/done-study"
python3 -m bench.gpu_matrix --model /root/model3b --results "$R/flags" \
  --steps kvbound-baseline,kvbound-fp8 --duration 60 \
  --warmup-seconds 8 --repeats 3 --rate 20 > "$R/flags.log" 2>&1
touch "$R/done"
