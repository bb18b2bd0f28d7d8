#!/usr/bin/env bash
# Pack a GPU results folder for the trip back (at most 8 files of 16 MB): per-request files
# without texts, times rounded to 10 us and inter-token gaps to 0.1 ms, gzipped; logs gzipped;
# all in one tar under $OUT.
set -u
SRC=$1 NAME=$2
python3 - "$SRC" <<'PY'
import gzip, json, pathlib, sys
for p in pathlib.Path(sys.argv[1]).rglob("*.requests.jsonl"):
    rows = [json.loads(x) for x in p.read_text().splitlines() if x]
    for r in rows:  # no generated text (noise on random weights, ~75 % of the bytes)
        r.pop("text", None)
        for k, v in list(r.items()):
            if isinstance(v, float):
                r[k] = round(v, 5)
        r["itl"] = [round(x, 4) for x in r.get("itl", [])]  # 0.1 ms
    p.with_suffix(".jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()))
    p.unlink()
PY
find "$SRC" \( -name 'vllm-*.log' -o -name 'proxy-*.log' \) -exec gzip -f {} \;
tar -C "$(dirname "$SRC")" -cf "$OUT/$NAME.tar" "$(basename "$SRC")"
ls -la "$OUT"
