#!/usr/bin/env bash
# Issue 14's last item on a 2-GPU host (docs/gpu-benchmarks.md, "Next on a GPU"): for each vLLM
# flag, goodput under the SLO (TTFT p99 <= 1 s from arrival, TPOT p99 <= 50 ms) and the most
# req/s answered, against baseline, on the workload where the flag's bottleneck binds:
# fp8-kv vs baseline with the same 8 GiB KV on long_context, prefix-caching vs baseline on
# shared_prefix (16 shared ~3.4k-token prefixes), chunked-prefill vs baseline on long_context
# (16 GiB KV each). The study model trained as in sessions 17-19 (a quarter of its rows teach
# the code_edit task), padded 8x wide (3.3 B parameters' weight reads per step). All ten
# servers start once, five per GPU; each flag's sweep runs on one GPU beside its baseline's on
# the other, then the GPUs swap (bench/flags_gpu.py). Run it in the background after the vLLM
# parts are unpacked and .gpuw installed (as for bench/gpu/fullstack_code.sh); `touch`es
# $R/trained and $R/done mark its progress. Arguments after the results folder go to
# bench.flags_gpu (e.g. --bisect-steps 2: ~3 min more; --flags ...,spec-ngram: its pair on
# code_edit, one more server a GPU). Device time: setup ~2 min, training ~4 min, pad and
# workloads ~1 min, then the estimate bench.flags_gpu prints first (~16 min: servers ~4, sweeps
# ~12; a hard stop 18 min after the servers start skips what is left), collection ~1 min.
# spec-suffix needs arctic-inference beside vLLM: build its wheel here with
# `bash bench/gpu/arctic/build_wheel.sh` (python3.12, writes .gpuarc/) and carry .gpuarc; when
# .gpuarc/ holds a wheel it is installed into /root/pw and smoke-tested first (log
# $R/arctic.log), and a failure stops the run if --flags names spec-suffix.
# Afterwards: `bash bench/gpu/collect.sh $R NAME` packs it.
set -u
export PYTHONPATH=/root/vllm-site:/root/pw:$PWD PYTHONUNBUFFERED=1
R=${1:-/root/res-flags}
shift || true
mkdir -p "$R"
if ls .gpuarc/arctic_inference-*.whl > /dev/null 2>&1; then
  if ! bash .gpuarc/install.sh python3 /root/pw > "$R/arctic.log" 2>&1; then
    echo "arctic-inference: install or smoke test failed, see $R/arctic.log" >&2
    case " $* " in *spec-suffix*) exit 1 ;; esac
  fi
fi
. bench/gpu/study_model.sh "$R"
python3 -m bench.study_workloads /root/model/held_out_files.txt /root/wl -n 2000 \
  --only code_edit,long_context,shared_prefix --groups 16 > "$R/workloads.log" 2>&1
touch "$R/trained"
python3 -m bench.flags_gpu --model /root/wide8 --workloads /root/wl --results "$R/flags" \
  --title "2 GPUs, trained 60M padded 8x (3.3 B)" "$@" > "$R/flags.log" 2>&1
touch "$R/done"
