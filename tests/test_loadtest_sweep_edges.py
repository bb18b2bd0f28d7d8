"""`loadtest sweep` at the edges of its evidence: a point whose window drew no arrival (no
data: no saturation, no SLO verdict, no knee) and the TTFT baseline the later points are
judged against (the first point with answers)."""

from __future__ import annotations

import argparse
from typing import Any

from loadtest.sweep import sweep
from tests.test_loadtest_sweep import args, modelled, queueing


def empty_window(p: argparse.Namespace) -> dict[str, Any]:
    """A point whose window drew no arrival (Poisson: 0.2 req/s for 3 s, e^-0.6 = 55 % of the
    time): nothing offered, nothing sent, every latency statistic a zero of no request."""
    return {"completed": 0, "failed": 0, "request_throughput": 0.0, "mean_ttft_ms": 0.0,
            "p99_ttft_ms": 0.0, "p99_tpot_ms": 0.0, "completion_rate": None,
            "arrival_rate": None, "scheduled_in_window": 0}


def test_a_point_with_no_arrivals_in_its_window_is_no_data_not_saturated(tmp_path,
                                                                       capsys) -> None:
    """Before, 0 completed read as 'behind': the sweep stopped at 0.2 req/s ('saturated at the
    first point') on a server that had been offered nothing."""
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        return empty_window(p) if p.request_rate < 1 else modelled(p)

    s = sweep(args("--rates", "0.2,5,10", "--point-duration", "3", "--out", str(tmp_path)),
              measure)
    empty = s["points"][0]
    assert empty["no_data"] is True and not empty["saturated"] and not empty["behind"]
    assert empty["mean_ttft_ms"] is None and empty["p99_ttft_ms"] is None
    assert [p["no_data"] for p in s["points"]] == [True, False, False]
    assert [p["offered_rate"] for p in s["points"]] == [0.2, 5, 10]
    assert s["saturation_rate"] is None and s["knee_rate"] is None
    assert "NO DATA (no arrivals in the 3 s window)" in capsys.readouterr().out


def test_a_no_data_point_is_no_knee_and_no_slo_verdict(tmp_path) -> None:
    """Below the first saturated rate, a point without arrivals is not the knee (nothing was
    measured there); with an SLO it neither meets nor misses it, so it bounds no goodput."""
    def behind_at_5(p: argparse.Namespace) -> dict[str, Any]:  # every request failed
        res = modelled(p)
        return empty_window(p) if p.request_rate < 1 else {**res, "completed": 0,
                                                            "failed": res["completed"]}

    s = sweep(args("--rates", "0.2,5", "--point-duration", "3", "--out", str(tmp_path)),
              behind_at_5)
    assert s["saturation_rate"] == 5 and s["knee_rate"] is None
    with_slo = sweep(args("--rates", "0.2,5,10", "--point-duration", "3", "--slo",
                          "ttft_p99:5000", "--out", str(tmp_path)),
                     lambda p: empty_window(p) if p.request_rate < 1 else modelled(p))
    assert with_slo["points"][0]["meets_slo"] is None
    assert with_slo["goodput_rate"] == 10 and with_slo["goodput_bounded"] is False


def test_brackets_ignore_points_without_data() -> None:
    from loadtest.sweep import bracketed, slo_bracket

    pts = [{"offered_rate": 5.0, "meets_slo": True}, {"offered_rate": 8.0, "meets_slo": None},
           {"offered_rate": 10.0, "meets_slo": False}]
    assert slo_bracket(pts, "offered_rate") == (5.0, 10.0)
    assert not bracketed(pts[:2], 5.0)


def test_a_bisection_point_without_arrivals_gives_no_verdict(tmp_path) -> None:
    """The bisection stops at a point that drew no arrival (no evidence either way) instead of
    reading it as a miss and closing the bracket below it."""
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        return empty_window(p) if p.request_rate == 15 else queueing(p)

    # p99 = 2 (10 + r^2 / 10): 40 ms at 10 req/s (met), 100 at 20 and 340 at 40 (missed);
    # the bisection between 10 and 20 tries 15, which drew no arrival
    s = sweep(args("--rates", "10,20,40", "--point-duration", "3", "--slo", "ttft_p99:60",
                   "--bisect-steps", "4", "--out", str(tmp_path)), measure)
    assert [p["offered_rate"] for p in s["points"] if p["phase"] == "bisect"] == [15]
    assert s["goodput_rate"] == 10 and s["goodput_bounded"] is True


def test_ttft_growth_is_judged_against_the_first_point_with_answers(tmp_path) -> None:
    """The lightest point drew no arrival: the baseline is the next one's TTFT (12.5 ms at 5
    req/s), and 20 req/s (50 ms, 4x) is saturated. Before, the first point's TTFT was the
    baseline whatever it had measured: its 0 made every later point 'grown past 3x', its None
    (no data) switched the growth test off for the whole sweep."""
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        return empty_window(p) if p.request_rate < 1 else queueing(p)

    s = sweep(args("--rates", "0.2,5,10,20,40", "--point-duration", "3", "--out",
                   str(tmp_path)), measure)
    assert [p["saturated"] for p in s["points"]] == [False, False, False, True]
    assert s["knee_rate"] == 10 and s["saturation_rate"] == 20


def test_a_point_without_answers_is_no_baseline() -> None:
    from loadtest.verdict import baseline_ttft

    assert baseline_ttft([]) is None
    points = [{"completed": 0, "mean_ttft_ms": 0.0}, {"completed": 0, "mean_ttft_ms": None},
              {"completed": 12, "mean_ttft_ms": 25.0}, {"completed": 30, "mean_ttft_ms": 90.0}]
    assert baseline_ttft(points) == 25.0
    assert baseline_ttft(points[:2]) is None


def drawn(monkeypatch) -> list[Any]:
    """The figures the sweep's plot saves (loadtest.plots.save replaced), kept open to read."""
    from loadtest import plots

    figs: list[Any] = []
    monkeypatch.setattr(plots, "save", lambda fig, path, plt: figs.append(fig) or str(path))
    return figs


def lines_of(ax: Any) -> dict[str, list[tuple[float, float]]]:
    return {line.get_label(): list(zip(line.get_xdata(), line.get_ydata(), strict=True))
            for line in ax.get_lines()}


def test_the_plot_leaves_points_without_data_or_answers_out_of_its_lines(tmp_path,
                                                                         monkeypatch) -> None:
    """0.2 req/s drew no arrival (NO DATA) and at 20 req/s every request failed (no answer,
    no latency): before, the plot drew 0.2's achieved rate and latencies and 20's latencies as
    measured zeros (`or 0`). Now the no-data rate is no point of any line (a dotted 'no data'
    mark instead), and the failed rate is a measured 0 of throughput but no latency point."""
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        res = modelled(p)
        if p.request_rate < 1:
            return empty_window(p)
        if p.request_rate == 20:
            return {**res, "completed": 0, "failed": res["completed"], "mean_ttft_ms": 0.0,
                    "p99_ttft_ms": 0.0, "p99_tpot_ms": 0.0, "scheduled_in_window": 60}
        return res

    figs = drawn(monkeypatch)
    sweep(args("--rates", "0.2,5,10,20", "--point-duration", "3", "--out", str(tmp_path)),
          measure)
    throughput, latency = figs[0].axes
    got = lines_of(throughput)
    assert [x for x, _ in got["achieved"]] == [5, 10, 20]
    assert got["achieved"][-1] == (20, 0.0)  # answered nothing: a measured 0
    for label in ("TTFT p99", "TTFT mean", "TPOT p99"):
        points = lines_of(latency)[label]
        assert [x for x, _ in points] == [5, 10] and all(y > 0 for _, y in points)
    for ax in (throughput, latency):
        assert {x for x, _ in lines_of(ax)["no data"]} == {0.2}
