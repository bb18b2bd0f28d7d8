#!/usr/bin/env bash
# The study model as sessions 17-19 made it, once per machine: trained (seeded; a quarter of its
# rows teach the code_edit task) to /root/model, then padded 8x wide to /root/wide8 (3.3 B
# parameters' weight reads per step). Logs and the training report land in results folder $1.
# STUDY_DRAFT=1: also the 7.6M draft of the same tokenizer at /root/draft (for spec-draft).
# Sourced by bench/gpu/fullstack_code.sh and bench/gpu/flags_goodput.sh.
if [ ! -d /root/wide8 ]; then
  python3 -m deploy train-model /root/model --steps 2400 --max-minutes 4.5 --corpus-mb 120 \
    --seed 0 --copy-frac 0.25 $([ "${STUDY_DRAFT:-0}" = 1 ] && echo --draft-dir /root/draft) \
    > "$1/train.log" 2>&1
  cp /root/model/train_report.json "$1/"
  python3 -m deploy pad-model /root/model /root/wide8 --width 8 > "$1/pad8.json"
fi
