#!/usr/bin/env bash
# The trip back from a judge training on the GPU host (the device returns at most 8 files of
# 16 MB a call): bash bench/gpu/judge_carry.sh R [WEIGHTS.pt ...] fills R/carry/ with
# summary.tar.gz (every log, sweep.json, dev_scores.json, summary.md, teacher files: not the
# weights, the data or the corpus), each weights file split into 15 MiB parts NAME.pt.partNN
# (NAME: its run's folder) and their SHA256SUMS. Used by judge20.sh and judge_variants.sh.
set -eu
R=$1
shift
mkdir -p "$R/carry"
rm -f "$R"/carry/*
for pt in "$@"; do
  [ -e "$pt" ] || continue
  name=$(basename "$(dirname "$pt")")
  split -b 15M -d -a 2 "$pt" "$R/carry/$name.pt.part"
  echo "$(sha256sum < "$pt" | cut -d' ' -f1)  $name.pt" >> "$R/carry/SHA256SUMS"
done
tar -C "$R" -czf "$R/carry/summary.tar.gz" --exclude=carry --exclude=data --exclude='*.pt' \
  --exclude='*.jsonl' .
ls -la "$R/carry"
