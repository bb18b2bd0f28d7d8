import json

import pytest

from loadtest import compare
from loadtest.cli import main
from tests.test_loadtest_mock import mock_server


def test_compare_two_targets_table_plots_and_report(tmp_path, capsys):
    with mock_server("--ttft-ms", "30", "--itl-ms", "2") as plain, \
            mock_server("--ttft-ms", "30", "--itl-ms", "2", "--cache", "exact") as cached:
        assert main(["compare", "--target", f"off={plain}", "--target", f"on={cached}",
                     "--workload", "cache", "--num-prompts", "24", "--max-concurrency", "1",
                     "--output-len", "4", "--seed", "5", "--no-progress",
                     "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Metric" in out and "off (baseline)" in out and "x)" in out
    for f in ("off.json", "on.json", "off.requests.jsonl", "throughput.png", "latency.png",
              "cache.png", "report.md"):
        assert (tmp_path / f).stat().st_size > 0, f
    off, on = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("off", "on"))
    # same seeded workload: the same questions went to both
    assert off["total_input_tokens"] == on["total_input_tokens"]
    assert on["cache"]["hits"] > 0 and off["cache"]["hits"] == 0
    md = (tmp_path / "report.md").read_text()
    assert "| Cache hit rate (%) |" in md and "![cache](cache.png)" in md

    # saved results can be compared again, against a chosen baseline
    assert main(["compare", "--results", f"A={tmp_path / 'off.json'}",
                 "--results", f"B={tmp_path / 'on.json'}", "--baseline", "B",
                 "--out", str(tmp_path / "again")]) == 0
    assert "B (baseline)" in capsys.readouterr().out


def test_ratio_table():
    a = {"completed": 10, "request_throughput": 2.0, "mean_ttft_ms": 100.0}
    b = {"completed": 10, "request_throughput": 3.0, "mean_ttft_ms": 50.0}
    t = compare.table([("a", a), ("b", b)], [99])
    rows = {r[0]: r[1:] for r in t[1:]}
    assert rows["Request throughput (req/s)"] == ["2", "3 (1.50x)"]
    assert rows["Mean TTFT (ms)"] == ["100", "50 (0.50x)"]
    assert "Cache hit rate (%)" not in rows


def test_missing_results_file(capsys):
    assert main(["compare", "--results", "/nope.json", "--results", "/nope2.json",
                 "--out", "/tmp/x"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["nourl", "x=localhost:1"])
def test_bad_compare_target(bad, capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--target", bad, "--target", "b=http://x:1"])
    assert "expected NAME=http" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "message"), [
    (b"{\n", "not JSON"), (b"[1, 2]", "not a result"), (b"{}", "not a result")])
def test_a_bad_results_file_is_named(tmp_path, capsys, content, message):
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_bytes(content)
    good.write_bytes(b'{"completed": 3}')
    assert main(["compare", "--results", str(good), "--results", str(bad),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err


def test_a_bad_baseline_is_refused_before_any_target_runs(tmp_path, capsys):
    # the target does not exist: had it been run first, the error would be about it
    assert main(["compare", "--target", "a=http://127.0.0.1:1", "--target",
                 "b=http://127.0.0.1:1", "--baseline", "zz", "--no-progress",
                 "--out", str(tmp_path / "out")]) == 2
    assert "--baseline 'zz' is not one of ['a', 'b']" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("x")
    good = tmp_path / "good.json"
    good.write_bytes(b'{"completed": 3}')
    assert main(["compare", "--results", str(good), "--results", str(good),
                 "--out", str(f)]) == 2
    assert "is not a folder" in capsys.readouterr().err
