"""The built-in cross-check, short: vLLM's benchmark and ours against the mock's known truth."""

import json

import pytest

from bench.crosscheck import main
from tests.support.procs import ensure_tiny_model


@pytest.mark.flaky(reruns=2)  # this VM can stall for seconds; the full run is bench/crosscheck.py
def test_both_tools_read_the_mocks_truth_and_ours_stays_close(tmp_path, capsys):
    out = tmp_path / "cc.json"
    assert main(["--tokenizer", str(ensure_tiny_model()), "--repeats", "1", "--num-prompts",
                 "24", "--concurrency", "8", "--output-len", "16", "--input-len", "16",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["summary"]) == {"vllm bench serve", "loadtest"}
    ours, theirs = res["summary"]["loadtest"], res["summary"]["vllm bench serve"]
    # both measured the same stream: TPOT is 10 ms by construction of the mock
    assert abs(ours["mean_tpot_ms"]["error"]) < 0.10
    assert abs(theirs["mean_tpot_ms"]["error"]) < 0.25
    assert abs(ours["mean_ttft_ms"]["error"]) < 0.30
    assert "| loadtest |" in capsys.readouterr().out
