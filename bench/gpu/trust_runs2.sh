#!/usr/bin/env bash
# The second GPU session of 2026-11-24 (one H100), a record of what ran, in the background after
# the vLLM parts were unpacked, the random 3B model made and .gpuw installed:
#   1. issue 13: how many chunks/s the load tester times truthfully, now offered > 30k/s
#      (400 streams), on cores 8-15 while the replicas start on the others;
#   2. issue 15: kv-events vs prefix vs least-loaded routing with real vLLM KV-cache events,
#      two replicas sharing the one GPU (no 2-GPU host was lent), the tenants workload,
#      24 req/s, 25 s of arrivals per run, 2 repeats.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${1:-/root/res2}
mkdir -p "$R"
python3 -m bench.events_rate --concurrency 400 --workers 1,4,8 --mock-processes 6 \
  --num-prompts 4000 --cores 8-15 --json "$R/events-rate.json" > "$R/events-rate.log" 2>&1 &
python3 -m bench.routing_gpu --model /root/model --results "$R/routing" --gpus 1 --rate 24 \
  --duration 25 --repeats 2 --cases tenants --policies least-loaded,prefix,kv-events \
  > "$R/routing.log" 2>&1
wait
touch "$R/done"
