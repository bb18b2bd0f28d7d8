"""`loadtest sweep --concurrencies`: the closed-loop ladder stops where throughput stops
growing; the knee and the goodput concurrency are found — against a modelled server and the
mock's capacity model."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from loadtest.cli import main, parser
from loadtest.sweep import levels
from loadtest.sweep_concurrency import sweep_concurrency
from tests.test_loadtest_mock import mock_server

SLOTS = 8  # the modelled server answers 8 at once, each in 100 ms


def modelled(p: argparse.Namespace) -> dict[str, Any]:
    assert math.isinf(p.request_rate)
    c = p.max_concurrency
    waits = max(0, c - SLOTS) / SLOTS * 100.0  # queueing beyond the slots
    return {"completed": 10 * c, "failed": 0, "request_throughput": min(c, SLOTS) * 10.0,
            "mean_ttft_ms": 20.0 + waits, "p99_ttft_ms": 40.0 + 2 * waits, "p99_tpot_ms": 5.0}


def args(*extra: str) -> argparse.Namespace:
    a = parser().parse_args(["sweep", "--target", "http://x", *extra])
    a.num_prompts = None
    return a


def test_ladder_stops_when_throughput_stops_growing_and_bisects_the_slo(tmp_path):
    seen: list[int] = []

    def measure(p: argparse.Namespace) -> dict[str, Any]:
        seen.append(p.max_concurrency)
        return modelled(p)

    s = sweep_concurrency(args("--concurrencies", "1,2,4,8,16,32,64", "--slo", "ttft_p99:100",
                               "--out", str(tmp_path)), measure)
    assert s["knee_concurrency"] == 8 and s["saturation_concurrency"] == 16
    assert seen[:5] == [1, 2, 4, 8, 16]                 # stopped at the first saturated level
    # p99 TTFT = 40 + 2 * (c - 8) * 12.5 <= 100  <=>  c <= 10
    assert s["goodput_concurrency"] == 10
    assert json.loads((tmp_path / "sweep.json").read_text())["mode"] == "concurrency"
    assert (tmp_path / "sweep.png").exists()


def test_bad_ladders_are_refused(capsys):
    with pytest.raises(ValueError, match="increasing integers"):
        levels("4,2")
    with pytest.raises(SystemExit):
        main(["sweep", "--target", "http://x", "--concurrencies", "0,1"])
    assert "--concurrencies" in capsys.readouterr().err
    # every point a closed loop for a duration: before, each died on --workers 2 after starting
    with pytest.raises(SystemExit):
        main(["sweep", "--target", "http://x", "--concurrencies", "1,2", "--workers", "2"])
    assert "cannot shard" in capsys.readouterr().err


@pytest.mark.flaky(reruns=2)  # this VM can stall for seconds, inflating a light point
def test_finds_the_mocks_known_batch_limit(tmp_path):
    """Mock: 2 answers at once, 20 ms + 7 x 5 ms each: full at concurrency 2."""
    with mock_server("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "8",
                     "--max-batch", "2") as url:
        assert main(["sweep", "--target", url, "--model", "mock", "--concurrencies", "1,2,4,8",
                     "--point-duration", "2", "--output-len", "8", "--no-progress",
                     "--no-scrape", "--out", str(tmp_path)]) == 0
    s = json.loads((tmp_path / "sweep.json").read_text())
    assert s["knee_concurrency"] == 2 and s["saturation_concurrency"] == 4
    point = json.loads(next(tmp_path.glob("point-01-*.json")).read_text())
    assert point["window_completion_rate"] == s["points"][0]["achieved_rate"] > 0


def test_with_an_slo_the_ladder_goes_past_saturation_until_the_slo_is_missed(tmp_path, capsys):
    """Full at 8; queueing beyond it still meets a loose SLO up to 46: p99 TTFT
    40 + 25 (c - 8) <= 1000. Before: the ladder stopped at 16 and printed 16 as the highest
    concurrency meeting the SLO, though 32 met it too."""
    s = sweep_concurrency(args("--concurrencies", "1,2,4,8,16,32,64,128", "--slo",
                               "ttft_p99:1000", "--out", str(tmp_path)), modelled)
    assert s["knee_concurrency"] == 8 and s["saturation_concurrency"] == 16
    assert [p["concurrency"] for p in s["points"] if p["phase"] == "ladder"] == \
        [1, 2, 4, 8, 16, 32, 64]
    assert s["goodput_concurrency"] == 46 and s["goodput_bounded"] is True
    # no level tried missed it: the goodput is only a lower bound, and said so
    s = sweep_concurrency(args("--concurrencies", "1,2,4,8,16", "--slo", "ttft_p99:1000",
                               "--out", str(tmp_path)), modelled)
    assert s["goodput_concurrency"] == 16 and s["goodput_bounded"] is False
    assert "a lower bound" in capsys.readouterr().out


# A simulated closed loop (8 seeds averaged): a 64-slot server, answers of 20 s on average
# (lognormal, sigma 1.2), 60 s windows. Per level: the whole run's request_throughput and the
# rate answered inside the window. The server is full at 64.
DRAINED = {16: (0.393, 0.933), 24: (0.480, 1.396), 32: (0.623, 1.837), 40: (0.781, 2.254),
           48: (0.727, 2.733), 56: (0.862, 3.217), 64: (1.019, 3.700), 80: (1.049, 3.700),
           96: (1.084, 3.700)}


def drained(p: argparse.Namespace) -> dict[str, Any]:
    run, window = DRAINED[p.max_concurrency]
    return {"completed": round(run * 100), "failed": 0, "request_throughput": run,
            "completion_rate": run * 1.01, "window_completion_rate": window,
            "mean_ttft_ms": 50.0, "p99_ttft_ms": 80.0, "p99_tpot_ms": 20.0}


def test_the_gain_is_counted_inside_the_window_not_over_the_drain(tmp_path: Path) -> None:
    """The drain after the last send holds fewer and fewer requests; with long answers of
    varied lengths it is long, and longer the more are in flight: over the whole run, 40 -> 48
    read as 0.93x (before: saturated at 48, knee 40) where the window shows 1.21x. Counted in
    the window, the ladder stops where the server is full: knee 64, saturated at 80."""
    s = sweep_concurrency(args("--concurrencies", ",".join(map(str, DRAINED)), "--out",
                               str(tmp_path)), drained)
    assert (s["knee_concurrency"], s["saturation_concurrency"]) == (64, 80)
    assert [p["achieved_rate"] for p in s["points"]] == [DRAINED[c][1] for c in
                                                        (16, 24, 32, 40, 48, 56, 64, 80)]
    assert s["points"][0]["request_throughput"] == 0.393  # kept beside it


def test_a_result_without_a_window_falls_back_to_the_runs_throughput(tmp_path: Path
                                                                      ) -> None:
    def measure(p: argparse.Namespace) -> dict[str, Any]:
        return {k: v for k, v in drained(p).items() if k != "window_completion_rate"}

    s = sweep_concurrency(args("--concurrencies", "16,24", "--out", str(tmp_path)), measure)
    assert [p["achieved_rate"] for p in s["points"]] == [0.393, 0.480]
