#!/usr/bin/env bash
# The GPU runs of 2026-11-27 (session 15, a 2-GPU host, one machine session), a record of what
# ran in the background after `bash bench/gpu/slim_tree.sh hide` here, the vLLM parts unpacked,
# .gpuw installed and the random 3B model made (../shared/gpu/random_model.py):
#   1. issue 15: the hot-spot case (80 % of requests on one tenant's prompt) with repeats,
#      least-loaded vs prefix vs session (session now spreads a hot session over the replicas
#      it spilled to), 60 req/s, 20 s of arrivals per run, 3 repeats, cut by a time budget;
#   2. issue 13: the KV-bound fp8 pair with the full rig (60 s windows after 8 s of ramp-up,
#      3 repeats, 20 req/s, KV cache 2 GB): bf16 on GPU 0 and fp8 on GPU 1 at the same time;
#   3. (started by hand as each GPU came free, recorded here) max-num-seqs=64 on GPU 0 beside
#      the unbound baseline on GPU 1, the same rig.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res15}
mkdir -p "$R"
python3 -m bench.routing_gpu --model /root/model --results "$R/routing" --rate 60 \
  --duration 20 --repeats 3 --budget-s "${ROUTING_BUDGET_S:-600}" --cases hotspot \
  --policies least-loaded,prefix,session --vllm-set max-model-len=8192 > "$R/routing.log" 2>&1
rm -f "$R"/routing/dataset-*.json  # 50 MB; the same command writes it again from its seed
touch "$R/done-routing"
FLAGS="--model /root/model --duration 60 --warmup-seconds 8 --repeats 3 --rate 20"
python3 -m bench.gpu_matrix $FLAGS --results "$R/flags-g0" --steps kvbound-baseline \
  --gpu 0 --vllm-port 8100 --proxy-port 8000 > "$R/flags-gpu0.log" 2>&1 &
python3 -m bench.gpu_matrix $FLAGS --results "$R/flags-g1" --steps kvbound-fp8 \
  --gpu 1 --vllm-port 8200 --proxy-port 8010 > "$R/flags-gpu1.log" 2>&1 &
wait
touch "$R/done"
# step 3, as it ran: each GPU's run started when that GPU's step 2 had ended
python3 -m bench.gpu_matrix $FLAGS --results "$R/flags-mns-g0" --steps max-num-seqs-64 \
  --gpu 0 --vllm-port 8100 --proxy-port 8000 > "$R/flags-mns-gpu0.log" 2>&1 &
python3 -m bench.gpu_matrix $FLAGS --results "$R/flags-mns-g1" --steps baseline-ref \
  --gpu 1 --vllm-port 8200 --proxy-port 8010 > "$R/flags-mns-gpu1.log" 2>&1 &
wait
touch "$R/done3"
