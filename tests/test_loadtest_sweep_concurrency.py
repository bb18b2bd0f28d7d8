"""`loadtest sweep --concurrencies`: the closed-loop ladder stops where throughput stops
growing; the knee and the goodput concurrency are found — against a modelled server and the
mock's capacity model."""

from __future__ import annotations

import argparse
import json
import math
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
