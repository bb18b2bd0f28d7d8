#!/usr/bin/env bash
# The GPU runs of 2026-11-25 (one H100 per machine session), a record of what ran, in the
# background after the vLLM parts were unpacked, the random 3B model made and .gpuw installed.
#   J: the judge's training variants (tools.judge.sweep, dev only), before any vLLM starts
#      (stopped after 300 s, four variants, to leave the machine session time for B);
#   A, B: issue 13, the backend flags with the steady-state rig (60 s windows after 8 s of
#      ramp-up, 3 repeats, vLLM's histograms as referee), each flag against the baseline
#      profile in the same machine session and workload:
#   A: prefix caching on the shared-prefix workload (8 prefixes x 1,024 tokens), 30 req/s;
#   B: chunked prefill on the reference workload, 20 req/s (n-gram speculation was dropped to
#      fit the 30-minute machine session: on random weights it drafts nothing).
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD
R=${R:-/root/res4}
mkdir -p "$R"
for PART in "$@"; do
  case $PART in
    J) timeout 300 python3 -m tools.judge.sweep --base /root/jbase --out "$R/judge" > "$R/judge.log" 2>&1
       touch "$R/done-J"; continue ;;
    A) STEPS=baseline-prefix-wl,prefix-caching RATE=30 ;;
    B) STEPS=baseline-ref,chunked-prefill RATE=20 ;;
  esac
  mkdir -p "$R/flags-$PART"
  python3 -m bench.gpu_matrix --model /root/model --results "$R/flags-$PART" --steps "$STEPS" \
    --duration 60 --warmup-seconds 8 --repeats 3 --rate "$RATE" > "$R/flags-$PART/run.log" 2>&1
  touch "$R/done-$PART"
done
