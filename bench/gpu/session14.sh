#!/usr/bin/env bash
# The GPU runs of 2026-11-27 (session 14, one H100, one machine session), a record of what ran
# after `bash bench/gpu/slim_tree.sh hide` here (the tracked tree is ~190 MB, a run carries 64 MiB)
# and the vLLM parts were unpacked:
#   issue 14: the study model retrained with a quarter of its rows teaching the code_edit task
#   (`train-model --copy-frac 0.25`, same seed, steps and corpus as before), padded 8x wide,
#   then phase S of bench/study_gpu.sh: baseline vs spec-ngram (3 and 5 draft tokens),
#   code_edit at concurrency 1 and 4, 3 repeats.
set -u
export PYTHONPATH=/root/vllm-site:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res14}
mkdir -p "$R"
(python3 -m deploy train-model /root/model --steps 2400 --max-minutes 4.5 --corpus-mb 120 \
   --seed 0 --copy-frac 0.25; echo done) > /root/train.log 2>&1
RESULTS=$R/study bash bench/study_gpu.sh S > "$R/study.log" 2>&1
for f in /root/pids/*; do kill -- -"$(cat "$f")" 2> /dev/null; rm -f "$f"; done
cp /root/logs/*.log "$R/study/" 2> /dev/null
touch "$R/done"
