"""`loadtest sweep`: the ladder stops at saturation, the knee and the goodput rate are found —
against a model with a known capacity, and against the mock's capacity model."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from loadtest.cli import main, parser
from loadtest.sweep import sweep
from loadtest.verdict import parse_slo
from tests.test_loadtest_mock import mock_server

CAP = 40.0  # req/s the modelled server sustains


def modelled(p: argparse.Namespace) -> dict[str, Any]:
    """A server of capacity CAP: on time below it; beyond it, queues grow with the overload."""
    rate = p.request_rate
    ttft = 20.0 + 100.0 * max(0.0, rate / CAP - 0.5) ** 2
    sent = int(rate * p.point_duration)
    return {"completed": sent, "failed": 0, "request_throughput": min(rate, CAP),
            "mean_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft, "p99_tpot_ms": 10.0}


def args(*extra: str) -> argparse.Namespace:
    a = parser().parse_args(["sweep", "--target", "http://x", *extra])
    a.num_prompts = None
    return a


def test_ladder_stops_at_saturation_and_bisects_the_slo(tmp_path) -> None:
    seen: list[float] = []
    seeds: list[int] = []

    def measure(p: argparse.Namespace) -> dict[str, Any]:
        seen.append(p.request_rate)
        seeds.append(p.seed)
        # a drain as long as the TTFT SLO (0.1 s) after the 3 s window
        assert p.duration == pytest.approx(3.1) and p.cooldown_seconds == pytest.approx(0.1)
        assert p.num_prompts is None
        return modelled(p)

    a = args("--start-rate", "5", "--point-duration", "3", "--slo", "ttft_p99:100",
             "--bisect-steps", "5", "--out", str(tmp_path))
    s = sweep(a, measure)
    # 5, 10, 20, 40 on time; 80: achieved 40 < 0.9 * 80 -> saturated, ladder stops
    assert seen[:5] == [5, 10, 20, 40, 80] and s["saturation_rate"] == 80
    assert s["knee_rate"] == 40
    # p99 TTFT = 2 * (20 + 100 (r/40 - 0.5)^2) <= 100  <=>  r <= 40 (0.5 + sqrt(0.3)) = 41.9
    assert 40.0 <= s["goodput_rate"] <= 41.91
    assert seeds == list(range(len(seen)))  # no point replays an earlier one's prompts
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "sweep.json" in files and "sweep.png" in files
    assert len([f for f in files if f.startswith("point-")]) == len(seen)


def test_no_knee_is_named_when_nothing_saturated(tmp_path, capsys) -> None:
    a = args("--rates", "4,8,16", "--point-duration", "3", "--out", str(tmp_path))
    s = sweep(a, modelled)  # capacity 40: every rate is on time
    assert s["saturation_rate"] is None and s["knee_rate"] is None and s["highest_rate"] == 16
    assert "knee: not reached: no rate up to 16" in capsys.readouterr().out


def test_ctrl_c_keeps_the_points_measured(tmp_path) -> None:
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        if p.request_rate > 10:
            raise KeyboardInterrupt
        return modelled(p)

    with pytest.raises(KeyboardInterrupt):
        sweep(args("--rates", "5,10,20", "--point-duration", "3", "--out", str(tmp_path)),
              measure)
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["interrupted"] and [p["offered_rate"] for p in saved["points"]] == [5, 10]


def test_slo_parsing() -> None:
    assert parse_slo("ttft_p99:500,tpot_p99:50") == {"p99_ttft_ms": 500.0, "p99_tpot_ms": 50.0}
    with pytest.raises(ValueError, match="unknown metric"):
        parse_slo("ttft_p42:5")
    with pytest.raises(SystemExit):
        main(["sweep", "--target", "http://x", "--factor", "1"])
    with pytest.raises(SystemExit):  # each point is measured once, for --point-duration
        main(["sweep", "--target", "http://x", "--repeats", "3"])


def test_a_factor_just_above_1_is_refused_not_a_ladder_of_millions() -> None:
    # before: --factor 1.0000001 built a list of 69 million rates (minutes, gigabytes)
    from loadtest.sweep import check_args, ladder

    ap = parser()
    slow = ap.parse_args(["sweep", "--target", "http://x", "--factor", "1.0007"])  # 9,906
    assert any("9,906 rungs" in e and "at most 100" in e for e in check_args(slow))
    tiny = ap.parse_args(["sweep", "--target", "http://x", "--factor", "1.0000001"])
    with pytest.raises(ValueError, match="69,314,722 rungs"):
        ladder(tiny)
    with pytest.raises(SystemExit):
        main(["sweep", "--target", "http://x", "--factor", "1.0000001"])
    # a fine ladder that stays within the bound is kept, up to --max-rate
    fine = ap.parse_args(["sweep", "--target", "http://x", "--factor", "1.1", "--max-rate",
                          "2"])
    assert check_args(fine) == [] and len(ladder(fine)) == 8
    edge = ap.parse_args(["sweep", "--target", "http://x", "--start-rate", "1", "--factor",
                          "2", "--max-rate", str(2.0 ** 99)])
    assert check_args(edge) == [] and len(ladder(edge)) == 100


@pytest.mark.flaky(reruns=2)  # this VM can stall for seconds, inflating a light point's TTFT
def test_sweep_finds_the_mocks_known_capacity(tmp_path) -> None:
    """Mock: 2 answers at once, 20 ms + 7 x 5 ms each -> at most 2 / 0.055 = 36.4 req/s."""
    capacity = 2 / 0.055
    with mock_server("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "8",
                     "--max-batch", "2") as url:
        assert main(["sweep", "--target", url, "--model", "mock", "--rates", "5,10,20,40,80",
                     "--point-duration", "2", "--output-len", "8", "--no-progress",
                     "--no-scrape", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "sweep.json").read_text())
    assert s["knee_rate"] is not None and s["saturation_rate"] is not None
    assert s["knee_rate"] < capacity <= s["saturation_rate"]


def test_a_ramp_up_is_sent_around_the_window_and_not_counted_in_the_rate(tmp_path) -> None:
    durations: list[float] = []

    def measure(p: argparse.Namespace) -> dict[str, Any]:
        durations.append(p.duration)
        res = modelled(p)
        res["completed"] = int(p.request_rate * 4)  # only the 4 s window's requests count
        res["windows"] = {"steady_s": 4.0}
        return res

    s = sweep(args("--rates", "5,10", "--point-duration", "4", "--warmup-seconds", "2",
                   "--out", str(tmp_path)), measure)
    assert durations == [6.0, 6.0]
    assert [p["sent_rate"] for p in s["points"]] == [5.0, 10.0]
    assert not any(p["saturated"] for p in s["points"])


def queueing(p: argparse.Namespace) -> dict[str, Any]:
    """Keeps up with every rate tried, but its TTFT grows with the load (requests queue)."""
    ttft = 10.0 + p.request_rate ** 2 / 10
    return {"completed": int(p.request_rate * p.point_duration), "failed": 0,
            "request_throughput": p.request_rate, "mean_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft,
            "p99_tpot_ms": 10.0}


def test_with_an_slo_the_ladder_goes_past_ttft_growth_until_the_slo_is_missed(tmp_path) -> None:
    a = args("--rates", "5,10,20,40,80,160", "--point-duration", "3", "--slo", "ttft_p99:400",
             "--bisect-steps", "6", "--out", str(tmp_path))
    s = sweep(a, queueing)
    ladder = [p["offered_rate"] for p in s["points"] if p["phase"] == "ladder"]
    assert ladder == [5, 10, 20, 40, 80]  # 20: TTFT 4x the lightest point's, SLO still met
    assert s["knee_rate"] == 10 and s["saturation_rate"] == 20
    # p99 = 2 (10 + r^2 / 10) <= 400  <=>  r <= 43.6
    assert 42.5 <= s["goodput_rate"] <= 43.6 and s["goodput_bounded"] is True


def test_a_goodput_no_rate_bounds_is_reported_as_a_lower_bound(tmp_path, capsys) -> None:
    s = sweep(args("--rates", "5,10,20", "--point-duration", "3", "--slo", "ttft_p99:5000",
                   "--out", str(tmp_path)), queueing)
    assert s["goodput_rate"] == 20 and s["goodput_bounded"] is False
    assert "a lower bound" in capsys.readouterr().out
    assert sweep(args("--rates", "5,10,20", "--point-duration", "3", "--out", str(tmp_path)),
                 queueing)["goodput_bounded"] is None


def test_long_answers_on_a_server_that_keeps_up_are_not_saturated(tmp_path) -> None:
    """Mock with no capacity limit: answers of 200 tokens take ~1 s, the window is 2 s. The
    requests sent per second all complete per second; the run's duration (send window plus
    the last answer's second) is no measure of it (before: 'saturated at the first point')."""
    with mock_server("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "200") as url:
        assert main(["sweep", "--target", url, "--model", "mock", "--rates", "4,8",
                     "--point-duration", "2", "--output-len", "200", "--no-progress",
                     "--no-scrape", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "sweep.json").read_text())
    assert [p["offered_rate"] for p in s["points"]] == [4, 8]
    assert not any(p["behind"] or p["saturated"] for p in s["points"])
    assert s["saturation_rate"] is None


def test_a_miss_below_the_goodput_does_not_bracket_it(tmp_path, capsys) -> None:
    """5 req/s missed the SLO (one failed request), 10 and 20 met it: 20 is the goodput found,
    but no rate above it missed, so it is only a lower bound (before: reported as bracketed,
    since some rate had missed)."""
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        res = queueing(p)
        if p.request_rate == 5:
            res["failed"] = 1
        return res

    s = sweep(args("--rates", "5,10,20", "--point-duration", "3", "--slo", "ttft_p99:5000",
                   "--out", str(tmp_path)), measure)
    assert s["goodput_rate"] == 20 and s["goodput_bounded"] is False
    assert "a lower bound" in capsys.readouterr().out


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("extra", "message"), [
    (["--max-rate", "inf"], "--max-rate"),        # before: the ladder was built forever
    (["--start-rate", "nan"], "--start-rate"),
    (["--rates", "inf"], "--rates"),              # before: an uncapped closed loop per point
    (["--rates", "40,5,10"], "--rates"),          # before: TTFT growth judged against 40's
    (["--rates", "5,5"], "--rates"),
    (["--slo", "ttft_p99:nan"], "--slo"),
])
def test_bad_ladders_and_slos_are_refused(extra, message, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--target", "http://x", *extra])
    assert message in capsys.readouterr().err


def test_a_capped_client_that_falls_behind_meets_no_slo(tmp_path) -> None:
    """Mock capacity 36 req/s; a client capped at 4 in flight. At 80 req/s the server never
    queues more than 4, so TTFT from the send stays short while the client's own queue grows:
    until 2026-11-28 the point "met" a TTFT SLO (and a goodput of 81 req/s was reported for a
    GPU server that answered 36). The offered rate is now the schedule's, sent or not, and TTFT
    counts from the scheduled arrival."""
    with mock_server("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "8",
                     "--max-batch", "2") as url:
        assert main(["sweep", "--target", url, "--model", "mock", "--rates", "8,80",
                     "--point-duration", "3", "--output-len", "8", "--max-concurrency", "4",
                     "--slo", "ttft_p99:500", "--bisect-steps", "0", "--no-progress",
                     "--no-scrape", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "sweep.json").read_text())
    low, high = sorted(s["points"], key=lambda p: p["offered_rate"])
    assert low["meets_slo"] and not high["meets_slo"]
    assert high["behind"] and high["sent_rate"] > 60  # the schedule's rate, not the sends'
    res = json.loads(next(tmp_path.glob("point-02-*.json")).read_text())
    assert res["scheduled_in_window"] > res["completed"] + res["failed"]
    assert res["p99_arrival_ttft_ms"] > 500 >= res["p99_ttft_ms"]
    assert s["goodput_rate"] == 8


def test_ttft_and_e2el_slos_count_from_the_scheduled_arrival_where_measured() -> None:
    from loadtest.verdict import meets, slo_value

    res = {"completed": 10, "failed": 0, "p99_ttft_ms": 100.0, "p99_arrival_ttft_ms": 900.0,
           "p99_e2el_ms": 2000.0, "p99_arrival_e2el_ms": 6000.0, "p99_tpot_ms": 10.0}
    assert slo_value(res, "p99_ttft_ms") == 900.0 and slo_value(res, "p99_e2el_ms") == 6000.0
    assert slo_value(res, "p99_tpot_ms") == 10.0
    assert meets(res, {"p99_ttft_ms": 1000.0}) and not meets(res, {"p99_e2el_ms": 5000.0})
    assert meets({**res, "p99_arrival_e2el_ms": None}, {"p99_e2el_ms": 5000.0})  # older result


def served_by(slots: int, answers: list[float]) -> Any:
    """A measure for sweep(): the point's Poisson arrivals (its own seed) for its window, each
    answered by the first of `slots` free slots in answers[i % len] seconds, through the run's
    own result (session.result_dict)."""
    import heapq
    import itertools

    from loadtest import schedule, session
    from loadtest.client import Result
    from loadtest.runner import RunOutput

    def measure(p: argparse.Namespace) -> dict[str, Any]:
        t0, free = 100.0, [0.0] * slots
        results = []
        for i, o in enumerate(itertools.takewhile(lambda o: o < p.duration, schedule.offsets(
                p.request_rate, p.burstiness, p.seed))):
            begin = max(o, heapq.heappop(free))
            end = begin + answers[i % len(answers)]
            heapq.heappush(free, end)
            results.append(Result(i, success=True, start=t0 + o, scheduled=t0 + o,
                                  ttft=begin - o + 0.05, latency=end - o, output_tokens=20,
                                  prompt_tokens=8))
        out = RunOutput(results, max(r.start + r.latency for r in results) - t0, t0)
        return session.result_dict(p, "http://x", "mock", session.plan(p), out)

    return measure


def test_long_answers_of_varied_length_do_not_read_as_falling_behind(tmp_path) -> None:
    """ShareGPT-like answers (0.2 s to ~25 s, exponential, mean 4 s) at 10 req/s in a 60 s
    window, on a server with room for all of them: the last ones sent end up to 25 s past the
    window, so the completions' span was ~80 s for 60 s of arrivals, read 0.79 of the rate,
    and the point was called behind (saturated at the first point). On one with 35 slots
    (7 req/s at 5 s a request) 10 req/s is behind, and still reads so."""
    import numpy as np

    answers = (np.random.default_rng(5).exponential(4.0, 997) + 0.2).tolist()
    s = sweep(args("--rates", "10", "--point-duration", "60", "--out", str(tmp_path)),
              served_by(10_000, answers))
    (kept,) = s["points"]
    assert not kept["behind"] and 0.95 < kept["answered_rate"] / kept["sent_rate"] <= 1.0
    assert s["saturation_rate"] is None
    slow = [1.0 + 8.0 * ((i * 7) % 31) / 30 for i in range(31)]  # 1 to 9 s, mean 5 s
    (fell,) = sweep(args("--rates", "10", "--point-duration", "60", "--out", str(tmp_path)),
                    served_by(35, slow))["points"]
    assert fell["behind"] and fell["answered_rate"] == pytest.approx(7.0, rel=0.1)


def test_achieved_is_the_windows_answered_requests_over_the_window(tmp_path) -> None:
    """The point's 'achieved' (printed, plotted against the offered line) is its window's
    requests answered per second of the window, with or without a ramp-up. Before, without
    --warmup-seconds/--cooldown-seconds (the sweep's default) it was request_throughput over
    the whole run, drain of the last answers included: a server with room for every answer
    read 7.95 achieved against 9.30 sent, with a ramp-up the same server 9.3."""
    import numpy as np

    answers = (np.random.default_rng(5).exponential(4.0, 997) + 0.2).tolist()
    (pt,) = sweep(args("--rates", "10", "--point-duration", "60", "--out", str(tmp_path)),
                  served_by(10_000, answers))["points"]
    assert pt["achieved_rate"] == pytest.approx(pt["completed"] / 60)
    assert pt["achieved_rate"] == pytest.approx(pt["sent_rate"])
