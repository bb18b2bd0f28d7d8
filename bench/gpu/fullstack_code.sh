#!/usr/bin/env bash
# Ran as written in session 18 (2026-11-28): docs/gpu-benchmarks.md, "The same full stack without
# the bench's input cap", raw files in docs/results/gpu-fullstack-code-s18/; session 19 ran it
# again with `--profiles spec-ngram,baseline --set 0:speculative-config.num_speculative_tokens=5`
# (arguments after the results folder go to bench.fullstack_gpu and override its defaults).
# The next run of session 17's measurement (docs/gpu-benchmarks.md, "The full stack where the
# tuned backend works"), on a 2-GPU host after the vLLM parts, .gpuw and .gpuredis are in place
# (as in bench/gpu/session17.sh): now without the bench's input cap (the 20 refused prompts),
# with the sweep's fixed rule (TTFT from arrival, unsent arrivals, a drain of the TTFT SLO) and
# a finer ladder (x 1.25 from 36 req/s), so vLLM alone's goodput is resolved within a rung of
# 25 % and the full stack's is measured rather than read by latency. The servers' logs land in
# the results (bench.fullstack_gpu copies them); `bash bench/gpu/collect.sh DIR NAME` packs all.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res-code}
shift || true
mkdir -p "$R"
LD_LIBRARY_PATH=$PWD/.gpuredis/lib .gpuredis/redis-server --port 6379 --save '' \
  --appendonly no --daemonize yes --logfile "$R/redis.log"
. bench/gpu/study_model.sh "$R"
if [ ! -d /root/wl ]; then
  python3 -m bench.study_workloads /root/model/held_out_files.txt /root/wl -n 2000 \
    --only code_edit > "$R/workloads.log" 2>&1
fi
touch "$R/trained"
python3 -m bench.fullstack_gpu --model /root/wide8 --dataset /root/wl/code_edit.jsonl \
  --title "code_edit, 2 GPUs (trained 60M padded 8x: 3.3 B)" --results "$R/fullstack" \
  --ratios 0.6,0.6 --profiles baseline,spec-ngram \
  --proxy-workers 4 --redis-url redis://127.0.0.1:6379/0 \
  --slo ttft_p99:1000,tpot_p99:50 --start-rate 36 --fullstack-start-rate 56.25 --factor 1.25 \
  --point-s 30 --warm-s 5 \
  --bisect-steps 2 "$@" > "$R/fullstack.log" 2>&1
touch "$R/done"
