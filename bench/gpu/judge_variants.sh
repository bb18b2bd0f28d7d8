#!/usr/bin/env bash
# Judge training variants side by side, one GPU each (dev only: test.jsonl is not read). On the
# GPU host, from the repo root:
#   DEVICES="cuda:0 cuda:1 cuda:2 cuda:3" bash bench/gpu/judge_variants.sh R NAME=SPEC ...
# SPEC is tools.judge.sweep's E/LR/POOL/SEED/B[/S] (S: label smoothing), trained from the base
# at $MPNET (all-mpnet-base-v2 in fp16: tools/judge/get_mpnet.sh DIR --half) on the corpus in
# $DATA as launched (copied to R/data). The Nth variant runs on the Nth of $DEVICES (round
# robin), all at once; R/status gets "NAME rc N" per run, then R/summary.md
# (tools.judge.summary) and R/carry/ for the trip back (bench/gpu/judge_carry.sh: every run's
# dev logits and logs; its half-precision weights in parts, only if WEIGHTS=1: 14 parts of an
# mpnet each), and R/done. Session 23: label smoothing and fewer epochs against the shipped
# recipe (docs/cache.md "Why the top cannot be cut finer").
set -u
export PYTHONPATH=/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:?usage: bash bench/gpu/judge_variants.sh R NAME=SPEC ...}
shift
MPNET=${MPNET:-/root/jb/mpnet16}
PY=${PYTHON:-python3}
DATA=${DATA:-tests/data/judge}
read -r -a DEVS <<< "${DEVICES:-cuda}"
for need in "$MPNET/config.json" "$DATA/train.jsonl" "$DATA/dev.jsonl"; do
  [ -e "$need" ] || { echo "judge_variants: $need is missing" >&2; exit 2; }
done
mkdir -p "$R/data"
rm -f "$R/status" "$R/done"
cp "$DATA/train.jsonl" "$DATA/dev.jsonl" "$R/data/"
i=0
for item in "$@"; do
  name=${item%%=*}
  device=${DEVS[$((i % ${#DEVS[@]}))]}
  ( "$PY" -m tools.judge.sweep --data "$R/data" --out "$R/$name" --device "$device" \
      --base "$MPNET" --variants "${item#*=}" > "$R/$name.log" 2>&1
    echo "$name rc $?" >> "$R/status" ) &
  i=$((i + 1))
done
wait
"$PY" -m tools.judge.summary "$R"
if [ "${WEIGHTS:-0}" = 1 ]; then
  bash bench/gpu/judge_carry.sh "$R" "$R"/*/best.pt
else
  bash bench/gpu/judge_carry.sh "$R"
fi
touch "$R/done"
