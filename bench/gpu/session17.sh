#!/usr/bin/env bash
# The GPU runs of 2026-11-28 (session 17, a 2-GPU host, one machine session), a record of what
# ran in the background after `bash bench/gpu/slim_tree.sh hide` here, the vLLM parts unpacked,
# .gpuw installed and .gpuredis carried (bench/gpu/redis_carry.sh):
# issue 14's full stack on text where the tuned backend's mechanism works. The study model
# retrained as in session 14 (a quarter of its rows teach the code_edit task), padded 8x wide
# (3.3 B parameters' weight reads per step, the 60M model's tokens), code_edit prompts from
# held-out files with 60 % exact repeats on /v1/completions; a 2 x 2 of {vLLM alone, proxy
# (4 workers, one Redis-shared exact cache) + vLLM} x {baseline, spec-ngram (the profile as
# written: 3 draft tokens)}. GPU 0 serves baseline, GPU 1 spec-ngram; round 1 puts vLLM alone
# on GPU 0 and the full stack on GPU 1 (the pairing: vLLM alone vs proxy + cache + tuned
# backend), round 2 the other way (spec-ngram alone, and the cache over baseline).
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res17}
mkdir -p "$R"
LD_LIBRARY_PATH=$PWD/.gpuredis/lib .gpuredis/redis-server --port 6379 --save '' \
  --appendonly no --daemonize yes --logfile "$R/redis.log"
python3 -m deploy train-model /root/model --steps 2400 --max-minutes 4.5 --corpus-mb 120 \
  --seed 0 --copy-frac 0.25 > "$R/train.log" 2>&1
cp /root/model/train_report.json "$R/"
python3 -m deploy pad-model /root/model /root/wide8 --width 8 > "$R/pad8.json"
python3 -m bench.study_workloads /root/model/held_out_files.txt /root/wl -n 2000 \
  --only code_edit > "$R/workloads.log" 2>&1
touch "$R/trained"
python3 -m bench.fullstack_gpu --model /root/wide8 --dataset /root/wl/code_edit.jsonl \
  --title "code_edit, 2 GPUs (trained 60M padded 8x: 3.3 B)" --results "$R/fullstack" \
  --ratios 0.6,0.6 --profiles baseline,spec-ngram \
  --proxy-workers 4 --redis-url redis://127.0.0.1:6379/0 \
  --slo ttft_p99:1000,tpot_p99:50 --start-rate 24 --point-s 30 --warm-s 5 \
  --bisect-steps 2 > "$R/fullstack.log" 2>&1
touch "$R/done"
