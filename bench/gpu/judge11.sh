#!/usr/bin/env bash
# The judge sweeps of 2026-11-26 (session 11, the H100 after phase P), a record of what ran:
# the shipped recipe (5 epochs, lr 8e-5, mean pooling, batch 32) on the MiniLM base with
# seeds 11 and 12, and the same head on all-mpnet-base-v2 (the registry's parts, carried in
# half precision) at lr 3e-5 and 2e-5, seed 11; train = the corpus with g12-g15, dev only.
# Four processes share the GPU (timing is not measured here).
set -u
export PYTHONPATH=/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/judge11}
mkdir -p "$R"
B=/root/jb
python3 -m tools.judge.sweep --base $B/minilm16 --out $R/minilm-s11 --variants 5/8e-5/mean/11/32 > $R/minilm-s11.log 2>&1 &
python3 -m tools.judge.sweep --base $B/minilm16 --out $R/minilm-s12 --variants 5/8e-5/mean/12/32 > $R/minilm-s12.log 2>&1 &
python3 -m tools.judge.sweep --base $B/mpnet16 --out $R/mpnet-3e5 --variants 5/3e-5/mean/11/32 > $R/mpnet-3e5.log 2>&1 &
python3 -m tools.judge.sweep --base $B/mpnet16 --out $R/mpnet-2e5 --variants 5/2e-5/mean/11/32 > $R/mpnet-2e5.log 2>&1 &
wait
touch "$R/done"
