from __future__ import annotations

import gzip
import json
from pathlib import Path

from bench.study_table import collect, table


def _run(d: Path, tag: str, tpot: float, drafts: int, draft_tokens: int, accepted: int,
         packed: bool) -> None:
    (d / f"{tag}.json").write_text(json.dumps({
        "mean_tpot_ms": tpot, "median_ttft_ms": 20.0, "p99_ttft_ms": 30.0,
        "output_throughput": 1000.0 / tpot, "request_throughput": 1.0}))
    for side, scale in (("a", 0), ("b", 1)):
        text = (f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {100 + scale * drafts}\n'
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} '
                f"{300 + scale * draft_tokens}\n"
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} '
                f"{50 + scale * accepted}\n")
        path = d / f"m_{tag}_{side}.txt"
        if packed:
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)


def test_reads_gzipped_counters_and_pairs_with_the_baseline(tmp_path: Path) -> None:
    _run(tmp_path, "sbase_edit1c_1", 2.8, 0, 0, 0, packed=True)
    _run(tmp_path, "sngram_edit1c_1", 1.4, 10, 30, 24, packed=True)
    _run(tmp_path, "sngram_edit1c_2", 1.4, 10, 30, 24, packed=False)
    runs = collect(tmp_path)
    assert len(runs["sngram_edit1c"]) == 2
    assert runs["sngram_edit1c"][0]["spec_decode_num_accepted_tokens_total"] == 24
    row = next(line for line in table(runs).splitlines() if "sngram_edit1c" in line)
    assert "0.50×, 2.00×" in row  # TPOT and tok/s against sbase_edit1c
    assert "80% / 3.40" in row  # 24 of 30 drafted accepted; 1 + 24 / 10 tokens a step
