#!/usr/bin/env bash
# The before/after A/B of the GC fix (docs/gpu-benchmarks.md). BEFORE and AFTER are checkouts
# of cad30d4 (before) and the commit that stores streams as bytes (after), each with .venv;
# the mock upstream runs first:  python -m loadtest mock --port 8331 --ttft-ms 50 --itl-ms 6
set -eu
for side in before:8344:$BEFORE after:8343:$AFTER; do
  IFS=: read -r name port tree <<<"$side"
  (cd "$tree" && PROXY_UPSTREAM=http://127.0.0.1:8331 PROXY_PORT=$port PROXY_CACHE=exact \
    PROXY_TOKENIZER=$AFTER/.models/tiny PROXY_MAX_OUTPUT_TOKENS=1024 PROXY_LOG_LEVEL=warning \
    PYTHONPATH=$tree .venv/bin/python -m proxy serve > /tmp/px-$name.log 2>&1 &)
done
sleep 25
for rep in 1 2 3; do for pair in before:8344 after:8343; do
  name=${pair%%:*}; port=${pair##*:}
  .venv/bin/python -m loadtest run --target http://127.0.0.1:$port --model mock \
    --workload random --input-len 384 --output-len 384 --range-ratio 0.33 --ignore-eos \
    --request-rate 15 --duration 30 --warmup 4 --seed $rep --no-progress --no-scrape \
    --label $name --json docs/results/cache-gc-ab/$name-$rep.json
done; done
