#!/usr/bin/env bash
# Distilling the mpnet judge into a MiniLM-sized student (ran in session 21: no student came near
# the teacher; docs/cache.md "Distilling the judge"). Dev only: test.jsonl is not read. On the GPU
# host, from the repo root:
#   bash bench/gpu/judge20.sh [R=/root/judge20]
# 1. mpnet (all-mpnet-base-v2 fp16 at $MPNET), the shipped recipe 5/2e-5/mean/11/32, on the
#    corpus as it is in the tree; it writes its logits of every train and dev pair, both
#    orders, to $R/teacher.json (tools.judge.sweep --teacher-out). Beside it, on the same GPU:
#    plain MiniLM ($MINILM, the embedder's MiniLM-L6 in fp16), 5/8e-5/mean/11/32.
# 2. then MiniLM students of that teacher, the same recipe and seed as the plain one (the same
#    batches; only the loss differs): one per alpha/temperature in $STUDENTS (default 0.5/2,
#    the tools' default; 1/2, the teacher alone; 0.5/1).
# 3. $R/summary.md (every run's dev AUC, recall at precision 0.99/0.95/0.90, a student's
#    correlation with the teacher's dev logits), and $R/carry/ for the trip back (the device
#    returns at most 8 files of 16 MB, ~64 MB, a call): summary.tar.gz (every log, sweep.json,
#    dev_scores.json, teacher.json, summary.md: well under 16 MB), SHA256SUMS, and each run's
#    half-precision best.pt split into 15 MiB parts, NAME.pt.part00.. (a MiniLM: 3 parts of
#    ~45 MB in all; mpnet and mpnet-s12: 14 parts each, 218 MB, wanted only to ship a retrained
#    mpnet; session 21 split mpnet-s12's by hand, as this loop now does).
# OOF_DEVICE (e.g. cuda:1; unset: off) also makes an out-of-fold teacher there
# (tools/judge/folds.py): two mpnets, each trained on half of train's families and scoring the
# other half, merged with the full teacher's dev logits into $R/teacher-oof.json; beside them an
# mpnet of seed 12 on all of train (the teacher's seed spread); then students of the out-of-fold
# teacher, one per alpha/temperature in $OOF_STUDENTS (default 0.5/2 1/2), on OOF_DEVICE.
# Timing is a guess: on session 11's H100, sharing it four ways, mpnet took 8 min and a MiniLM
# 4 min; alone on an H200 expect ~10 min for all of it. Start it in the background and wait in
# calls under 10 min (docs/cache.md has the calls); $R/status gets "NAME rc N" per run, $R/done
# at the end ($R/failed if the teacher did not train).
set -u
export PYTHONPATH=/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/judge20}
MPNET=${MPNET:-/root/jb/mpnet16}
MINILM=${MINILM:-/root/jb/minilm16}
TEACHER_RECIPE=${TEACHER_RECIPE:-5/2e-5/mean/11/32}
STUDENT_RECIPE=${STUDENT_RECIPE:-5/8e-5/mean/11/32}
STUDENTS=${STUDENTS:-0.5/2 1/2 0.5/1}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
OOF_DEVICE=${OOF_DEVICE:-}
OOF_STUDENTS=${OOF_STUDENTS:-0.5/2 1/2}
DATA=${DATA:-tests/data/judge}
for need in "$MPNET/config.json" "$MINILM/config.json" "$DATA/train.jsonl" "$DATA/dev.jsonl"; do
  [ -e "$need" ] || { echo "judge20: $need is missing" >&2; exit 2; }
done
mkdir -p "$R/data"
rm -rf "$R/status" "$R/done" "$R/failed" "$R/folds" "$R/teacher.json" "$R/teacher-oof.json"
cp "$DATA/train.jsonl" "$DATA/dev.jsonl" "$R/data/"  # the corpus as launched

run() {  # NAME, then tools.judge.sweep's arguments (a later --data or --device wins)
  local name=$1
  shift
  "$PY" -m tools.judge.sweep --data "$R/data" --out "$R/$name" --device "$DEVICE" "$@" \
    > "$R/$name.log" 2>&1
  echo "$name rc $?" >> "$R/status"
}

FOLDS=()
if [ -n "$OOF_DEVICE" ]; then
  "$PY" -m tools.judge.folds split "$R/data" "$R/folds" --k 2 --seed 0 > "$R/folds.log" 2>&1
  for i in 0 1; do
    run "mpnet-fold$i" --base "$MPNET" --variants "$TEACHER_RECIPE" --data "$R/folds/fold$i" \
      --device "$OOF_DEVICE" --teacher-out "$R/folds/fold$i/teacher.json" &
    FOLDS+=($!)
  done
  run mpnet-s12 --base "$MPNET" --variants "${TEACHER_RECIPE%/*/*}/12/${TEACHER_RECIPE##*/}" \
    --device "$OOF_DEVICE" &
fi

run mpnet --base "$MPNET" --variants "$TEACHER_RECIPE" --teacher-out "$R/teacher.json" &
TEACHER=$!
run minilm-plain --base "$MINILM" --variants "$STUDENT_RECIPE" &
wait $TEACHER
if [ ! -s "$R/teacher.json" ]; then
  echo "judge20: no teacher logits, see $R/mpnet.log" >&2
  wait
  touch "$R/failed"
  exit 1
fi
for s in $STUDENTS; do
  run "minilm-a${s%/*}-t${s#*/}" --base "$MINILM" --variants "$STUDENT_RECIPE" \
    --teacher "$R/teacher.json" --alpha "${s%/*}" --temperature "${s#*/}" &
done
if [ -n "$OOF_DEVICE" ]; then
  wait "${FOLDS[@]}"
  if grep -qx "mpnet-fold0 rc 0" "$R/status" && grep -qx "mpnet-fold1 rc 0" "$R/status" &&
     "$PY" -m tools.judge.folds merge "$R/data" "$R/folds" --dev-teacher "$R/teacher.json" \
       --out "$R/teacher-oof.json" >> "$R/folds.log" 2>&1; then
    for s in $OOF_STUDENTS; do
      run "minilm-oof-a${s%/*}-t${s#*/}" --base "$MINILM" --variants "$STUDENT_RECIPE" \
        --device "$OOF_DEVICE" --teacher "$R/teacher-oof.json" --alpha "${s%/*}" \
        --temperature "${s#*/}" &
    done
  else
    echo "oof-merge failed" >> "$R/status"
  fi
fi
wait

"$PY" -m tools.judge.summary "$R"

# not the folds' weights
bash bench/gpu/judge_carry.sh "$R" "$R"/minilm*/best.pt "$R"/mpnet/best.pt "$R"/mpnet-s12/best.pt
touch "$R/done"
