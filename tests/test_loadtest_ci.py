"""loadtest/ci.py: intervals, Welch's test, merging repeats; and `compare` marking n.s."""

from __future__ import annotations

import math

import pytest

from loadtest import ci
from loadtest.compare import table


def test_interval_matches_the_t_distribution() -> None:
    iv = ci.interval([10.0, 12.0, 11.0, 13.0, 9.0])
    # mean 11, s = 1.5811, t(4) = 2.776: half-width 1.963
    assert iv["mean"] == pytest.approx(11.0)
    assert iv["half"] == pytest.approx(2.776 * 1.5811 / math.sqrt(5), rel=1e-3)
    assert ci.interval([5.0])["half"] == math.inf


def test_t_quantiles() -> None:
    assert ci.t975(1) == pytest.approx(12.706)
    assert ci.t975(10) == pytest.approx(2.228)
    assert ci.t975(60) == pytest.approx(2.000, abs=0.003)
    assert ci.t975(1000) == pytest.approx(1.962, abs=0.003)


def test_welch_separates_real_differences_from_noise() -> None:
    a = ci.interval([100.0, 101.0, 99.0, 100.5, 99.5])
    far = ci.interval([110.0, 111.0, 109.0, 110.5, 109.5])
    near = ci.interval([100.4, 101.6, 98.9, 100.2, 99.8])
    assert ci.significant(a, far) and not ci.significant(a, near)
    assert not ci.significant(a, ci.interval([300.0]))  # one run proves nothing


def run(rps: float, ttft: float) -> dict[str, object]:
    return {"request_throughput": rps, "mean_ttft_ms": ttft, "completed": 10,
            "selfcheck": {"warnings": []}}


def test_merge_and_compare_mark_not_significant() -> None:
    base = ci.merge([run(10.0, 50.0), run(10.2, 52.0), run(9.9, 49.0)])
    noise = ci.merge([run(10.1, 51.0), run(9.8, 50.5), run(10.05, 49.5)])
    faster = ci.merge([run(20.0, 25.0), run(20.3, 24.0), run(19.8, 26.0)])
    assert base["request_throughput"] == pytest.approx(10.0333, rel=1e-3)
    assert len(base["runs"]) == 3 and base["repeats"]["mean_ttft_ms"]["n"] == 3
    rows = {r[0]: r for r in table([("a", base), ("b", noise), ("c", faster)], [99])}
    assert "n.s." in rows["Request throughput (req/s)"][2]
    assert "n.s." not in rows["Request throughput (req/s)"][3]
    assert "±" in rows["Mean TTFT (ms)"][1]


def test_merged_repeats_count_every_runs_requests() -> None:
    """Three runs, the second with 3 failed requests: the merged result (printed, saved,
    compared) says so; its rates are means, its goodput too (before: the first run's counts and
    goodput: 'Failed requests: 0' above the errors of run 2)."""
    runs = [{**run(10.0, 50.0), "failed": f, "total_output_tokens": 100, "duration": 1.0,
             "request_goodput": g, "total_token_throughput": 200.0 + g}
            for f, g in ((0, 9.0), (3, 6.0), (0, 9.0))]
    m = ci.merge(runs)
    assert m["failed"] == 3 and m["completed"] == 30
    assert m["total_output_tokens"] == 300 and m["duration"] == pytest.approx(3.0)
    assert m["request_goodput"] == pytest.approx(8.0)
    assert m["total_token_throughput"] == pytest.approx(208.0)


def test_merged_repeats_count_every_runs_scheduled_arrivals_and_errors() -> None:
    """Two --duration runs of 100 scheduled arrivals each; a capped client left 10 of the
    second's unsent, and it failed 2 with a 502. The merged counts are sums, so the scheduled
    arrivals and the errors must be too (before: the first run's 100 arrivals against 190
    requests sent, so 'never sent' read -90 and was not printed, and its errors were the first
    run's: none)."""
    from loadtest.report import block

    runs = [{**run(10.0, 50.0), "completed": c, "failed": f, "scheduled_in_window": 100,
             "error_counts": e, "total_input_tokens": 0, "total_output_tokens": 0,
             "duration": 10.0, "output_throughput": 0.0, "max_output_tokens_per_s": 0.0,
             "max_concurrent_requests": 0, "total_token_throughput": 0.0}
            for c, f, e in ((100, 0, {}), (88, 2, {"502 HTTP 502: bad gateway": 2}))]
    m = ci.merge(runs)
    assert m["scheduled_in_window"] == 200 and m["completed"] + m["failed"] == 190
    assert m["error_counts"] == {"502 HTTP 502: bad gateway": 2}
    text = block({**m, "selfcheck": None}, [], [99])
    assert "Scheduled in window, never sent:" in text and "bad gateway" in text
    # a run cut short by Ctrl-C counts no arrivals: the merged result claims none
    cut = {**runs[1], "interrupted": True}
    del cut["scheduled_in_window"]
    assert "scheduled_in_window" not in ci.merge([runs[0], cut])
