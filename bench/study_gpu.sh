#!/bin/bash
# The reference study's GPU runs (issue 14), on the device machine, from a copy of the repo.
# Usage: bash bench/study_gpu.sh PHASE  (vLLM unpacked at /root/vllm-site, models at
# /root/model and /root/draft from `python -m deploy train-model`). Servers start through the
# project's own profiles (`python -m deploy backend`), several at once on one GPU with a fixed
# KV budget each; load runs go one at a time, vLLM's /metrics read before and after each.
set -u
export PYTHONPATH=/root/vllm-site:$PWD PYTHONUNBUFFERED=1
R=${RESULTS:-/root/results}; mkdir -p $R /root/logs /root/pids
bench_cli() { python3 -c "from vllm.entrypoints.cli.main import main; import sys; sys.argv=['vllm','bench','serve']+sys.argv[1:]; main()" "$@"; }
start() {  # NAME PORT PROFILE [--set K=V ...]
  local name=$1 port=$2 profile=$3; shift 3
  setsid python3 -m deploy backend --profile "$profile" --port "$port" --no-validate \
    --set gpu-memory-utilization=0.15 --set max-model-len=8192 "$@" \
    > /root/logs/$name.log 2>&1 < /dev/null &
  echo $! > /root/pids/$name
}
wait_up() {  # PORT...
  for p in "$@"; do
    for _ in $(seq 400); do curl -sf localhost:$p/health > /dev/null && break; sleep 1; done
    curl -sf localhost:$p/health > /dev/null || echo "port $p not up"
  done
}
stop_all() {  # the process groups this script started, by id
  for f in /root/pids/*; do kill -- -"$(cat "$f")" 2> /dev/null; rm -f "$f"; done
  while nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q .; do sleep 1; done
}
run() {  # TAG PORT WORKLOAD CONCURRENCY NUM [extra bench args]
  local tag=$1 port=$2 wl=$3 conc=$4 num=$5; shift 5
  export -f bench_cli
  curl -s localhost:$port/metrics > $R/m_${tag}_a.txt
  timeout 150 bash -c 'bench_cli "$@"' _ --backend vllm --base-url http://127.0.0.1:$port --endpoint /v1/completions \
    --model model --tokenizer /root/model --dataset-name custom \
    --dataset-path /root/wl/$wl.jsonl --skip-chat-template --num-prompts $num \
    --max-concurrency $conc --request-rate inf --ignore-eos --seed 0 --save-result \
    --result-dir $R --result-filename $tag.json "$@" > /root/logs/bench_$tag.log 2>&1 \
    || tail -5 /root/logs/bench_$tag.log
  curl -s localhost:$port/metrics > $R/m_${tag}_b.txt
  grep -h "Mean TPOT\|Output token throughput" /root/logs/bench_$tag.log | tr '\n' ' '; echo " <- $tag"
}

trained() {  # wait for train-model (its log ends in "done"), keep the log, write the workloads
  until grep -q '^done' /root/train.log; do sleep 2; done
  cp /root/train.log $R/
  python3 -m bench.study_workloads /root/model/held_out_files.txt /root/wl -n 256
}
interleaved() {  # NAME:PORT...: 3 repeats, each server at concurrency 1 (16 requests), then 4 (48)
  for rep in 1 2 3; do
    for np in "$@"; do run "${np%%:*}_edit1c_$rep" "${np##*:}" code_edit 1 16; done
    for np in "$@"; do run "${np%%:*}_edit_$rep" "${np##*:}" code_edit 4 48; done
  done
}
wide8() {  # the trained model padded 8x wide; W: the flags its servers share
  python3 -m deploy pad-model /root/model /root/wide8 --width 8 > $R/pad8.json
  W=(--model /root/wide8 --set kv-cache-memory-bytes=4G --set gpu-memory-utilization=0.28)
}
up() {  # PORT...: wait for each, then a few requests each so compile and graphs are not measured
  wait_up "$@"
  for p in "$@"; do run warm_$p $p code_edit 4 8 > /dev/null; done
}

case "$1" in
  A)  # train is done; workloads; spec decoding at low load on code
    trained
    cat /root/model/train_report.json /root/draft/train_report.json > $R/train_reports.json
    start base 8001 baseline --set kv-cache-memory-bytes=6G
    start ngram 8002 spec-ngram --set kv-cache-memory-bytes=6G
    start draft 8003 spec-draft --set kv-cache-memory-bytes=6G
    up 8001 8002 8003
    for rep in 1 2 3; do
      run base_edit_$rep 8001 code_edit 4 48
      run ngram_edit_$rep 8002 code_edit 4 48
      run draft_edit_$rep 8003 code_edit 4 48
    done
    run base_cont_1 8001 code_continue 4 48
    run ngram_cont_1 8002 code_continue 4 48
    run draft_cont_1 8003 code_continue 4 48
    run base_edit_hi 8001 code_edit 64 256
    run ngram_edit_hi 8002 code_edit 64 256
    ;;
  B)  # fp8 KV under a small KV budget; prefix caching on shared prefixes (base of A on 8001)
    [ -f /root/pids/draft ] && kill -- -"$(cat /root/pids/draft)" && rm /root/pids/draft
    start base_kv 8004 baseline --set kv-cache-memory-bytes=1G
    start fp8_kv 8005 fp8-kv --set kv-cache-memory-bytes=1G
    start prefix 8006 prefix-caching --set kv-cache-memory-bytes=6G
    wait_up 8004 8005 8006
    for rep in 1 2; do
      run prefix_shared_$rep 8006 shared_prefix 16 256
      run base_shared_$rep 8001 shared_prefix 16 256
      run base_long_$rep 8004 long_context 64 128
      run fp8_long_$rep 8005 long_context 64 128
    done
    for rep in 2 3; do
      run base_edit_$rep 8001 code_edit 4 48
      run ngram_edit_$rep 8002 code_edit 4 48
    done
    ;;
  C)  # a second session: draft-model speculation measured, n-gram at concurrency 1 too
    trained
    start base 8001 baseline --set kv-cache-memory-bytes=6G
    start ngram 8002 spec-ngram --set kv-cache-memory-bytes=6G
    start draft 8003 spec-draft --set kv-cache-memory-bytes=6G
    up 8001 8002 8003
    for rep in 1 2 3; do
      run draft_edit_$rep 8003 code_edit 4 48
      run base_edit_$rep 8001 code_edit 4 48
      run ngram_edit_$rep 8002 code_edit 4 48
      run base_edit1c_$rep 8001 code_edit 1 16
      run ngram_edit1c_$rep 8002 code_edit 1 16
    done
    ;;
  P)  # spec decoding where decode is memory-bound: the trained model padded 4x wide
      # (`python -m deploy pad-model`, same tokens, ~16x the weights to read per step)
    trained
    python3 -m deploy pad-model /root/model /root/wide --width 4 > $R/pad.json
    start wbase 8011 baseline --model /root/wide --set kv-cache-memory-bytes=6G
    start wngram 8012 spec-ngram --model /root/wide --set kv-cache-memory-bytes=6G
    up 8011 8012
    interleaved wbase:8011 wngram:8012
    ;;
  P2)  # n-gram drafting on the GPU (method ngram_gpu: async scheduling stays on, where the
      # CPU n-gram turns it off) vs the CPU n-gram vs no speculation, on the trained model padded
      # 8x wide (~3.3 B parameters' weight reads per step, same tokens)
    trained
    wide8
    start xbase 8021 baseline "${W[@]}"
    start xngram 8022 spec-ngram "${W[@]}"
    start xngpu 8023 spec-ngram "${W[@]}" --set speculative-config.method=ngram_gpu
    up 8021 8022 8023
    interleaved xbase:8021 xngram:8022 xngpu:8023
    ;;
  S)  # spec decoding on a model taught the code_edit task (`train-model --copy-frac`: a share of
      # the training rows are chunk, marker, chunk from training files), padded 8x wide as in P2;
      # n-gram with 3 and with 5 draft tokens
    trained
    cp /root/model/train_report.json $R/train_report.json
    wide8
    start sbase 8031 baseline "${W[@]}"
    start sngram 8032 spec-ngram "${W[@]}"
    start sngram5 8033 spec-ngram "${W[@]}" --set speculative-config.num_speculative_tokens=5
    up 8031 8032 8033
    interleaved sbase:8031 sngram:8032 sngram5:8033
    ;;
esac
