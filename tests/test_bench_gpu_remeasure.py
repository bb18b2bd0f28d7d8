"""bench/gpu_remeasure.py's pure parts: the steady window and the summary."""

import argparse
import json

from bench.gpu_remeasure import SLOTS, TARGETS, report, window


def args(tmp_path):
    return argparse.Namespace(results=tmp_path, warm_s=2.0, window_s=4.0, rate=10.0)


def write(tmp_path, target, repeat, ttft):
    rows = [{"start": t / 2, "success": True, "ttft": ttft, "latency": ttft + 0.9,
             "output_tokens": 10, "itl": [0.1] * 9} for t in range(14)]  # sent at 0 .. 6.5 s
    (tmp_path / f"{target}-{repeat}.requests.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows))
    (tmp_path / f"{target}-{repeat}.json").write_text(json.dumps(
        {"selfcheck": {"warnings": []}, "client_workers": 2,
         "server_metrics": {"backend": {"mean_ttft_ms": ttft * 1000}}}))


def test_only_requests_sent_inside_the_window_count(tmp_path):
    write(tmp_path, "direct", 0, 0.05)
    w = window(args(tmp_path), tmp_path / "direct-0.json")
    assert (w["ramp_requests"], w["requests"], w["drain_requests"]) == (4, 8, 2)
    assert w["request_throughput"] == 2.0 and w["output_throughput"] == 20.0
    assert abs(w["mean_tpot_ms"] - 100.0) < 1e-9 and abs(w["mean_ttft_ms"] - 50.0) < 1e-9


def test_summary_gives_intervals_and_ratios_against_direct(tmp_path):
    for r, (d, p) in enumerate(((0.050, 0.060), (0.052, 0.061), (0.051, 0.059))):
        write(tmp_path, "direct", r, d)
        write(tmp_path, "proxy-1w", r, p)
    text = report(args(tmp_path))
    assert "| direct | 3 | 51.0 ± 2.5 |" in text
    assert "| proxy-1w | 3 | 60.0 ± 2.5 (1.176×) |" in text     # significant: no n.s.
    assert "request_throughput" in text and "(1.000× n.s.)" in text
    assert json.loads((tmp_path / "summary.json").read_text())["proxy-1w"]["referee"][0][
        "workers"] == 2


def test_every_target_runs_on_both_gpus_over_three_repeats():
    for t in range(len(TARGETS)):
        gpus = {g for slots in SLOTS for pair in slots for g, x in enumerate(pair) if x == t}
        assert gpus == {0, 1}
        assert all(sum(x == t for pair in slots for x in pair) == 1 for slots in SLOTS)
