#!/usr/bin/env bash
# The GPU runs of 2026-11-28 (session 16, a 2-GPU host, one machine session), a record of what
# ran in the background after `bash bench/gpu/slim_tree.sh hide` here, the vLLM parts unpacked,
# .gpuw installed, .gpuredis carried (bench/gpu/redis_carry.sh) and the random 3B model made:
# issue 14's full stack as a 2 x 2 at 60 % exact repeats: {vLLM alone, proxy (4 workers, one
# Redis-shared exact cache) + vLLM} x {baseline, tuned = prefix caching + chunked prefill
# (2048-token steps)}. GPU 0 serves baseline, GPU 1 tuned; round 1 puts vLLM alone on GPU 0
# and the full stack on GPU 1, round 2 the other way; round 3 repeats round 1 (new prompts).
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res16}
mkdir -p "$R"
LD_LIBRARY_PATH=$PWD/.gpuredis/lib .gpuredis/redis-server --port 6379 --save '' \
  --appendonly no --daemonize yes --logfile "$R/redis.log"
python3 -m bench.fullstack_gpu --model /root/model --results "$R/fullstack" \
  --ratios 0.6,0.6,0.6 --profiles baseline,prefix-caching \
  --set 1:enable-chunked-prefill=true --set 1:max-num-batched-tokens=2048 \
  --proxy-workers 4 --redis-url redis://127.0.0.1:6379/0 \
  --slo ttft_p99:1000,tpot_p99:50 --start-rate 18 --point-s 30 --warm-s 5 \
  --bisect-steps 2 > "$R/fullstack.log" 2>&1
touch "$R/done"
