"""--repeats: what the merged result pools over every run's requests (session.measure)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
from typing import Any

import pytest

from loadtest import schedule, session
from loadtest.cli import parser
from loadtest.client import Result
from loadtest.runner import RunOutput

T0 = 100.0


def runs_of(queues: list[float], answer_s: list[float], *extra: str
            ) -> tuple[argparse.Namespace, Any]:
    """`measure_once` replaced: run k's requests arrive at 10 req/s for 10 s (a 1 s ramp-up
    apart), each waits queues[k] for a client slot and is answered in answer_s[k]."""
    a = parser().parse_args(["run", "--target", "http://x", "--duration", "10",
                             "--request-rate", "10", "--max-concurrency", "50",
                             "--warmup-seconds", "1", "--repeats", str(len(queues)),
                             "--no-scrape", *extra])

    async def once(p: argparse.Namespace, target: str, tok: object
                   ) -> tuple[RunOutput, dict[str, Any]]:
        k = p.seed - a.seed
        offs = list(itertools.takewhile(lambda o: o < 10.0,
                                        schedule.offsets(10.0, 1.0, p.seed)))
        q, lat = queues[k], answer_s[k]
        results = [Result(i, success=True, start=T0 + o + q, scheduled=T0 + o, queue_time=q,
                          ttft=0.1, latency=lat, output_tokens=2, prompt_tokens=8)
                   for i, o in enumerate(offs)]
        out = RunOutput(results, 10.0 + q + lat, T0)
        return out, session.result_dict(p, target, "mock", session.plan(p), out)

    return a, once


def test_repeats_pool_arrival_and_queue_percentiles_and_the_window_rate(monkeypatch) -> None:
    """Three runs: the first's requests never wait for a slot, the others' all wait 2 s, and
    their answers take 4 s (so in their 9 s windows fewer end than were sent). Before, the
    merged result kept the first run's TTFT from arrival (p99 0.1 s, as if no request had
    waited), its client queue (0), its window rate and its P50s."""
    a, once = runs_of([0.0, 2.0, 2.0], [0.2, 4.0, 4.0], "--metric-percentiles", "50,99",
                      "--percentile-metrics", "ttft,arrival_ttft,client_queue_time")
    monkeypatch.setattr(session, "measure_once", once)
    _, res = asyncio.run(session.measure(a, "http://x", None))
    per_run = [asyncio.run(once(session._seeded(a, a.seed + k), "http://x", None))[1]
               for k in range(3)]
    n = [r["completed"] for r in per_run]
    assert res["completed"] == sum(n)
    # two thirds of the requests (about) waited 2 s: the pooled p99 from arrival is 2.1 s
    assert res["p99_arrival_ttft_ms"] == pytest.approx(2100.0)
    assert res["p99_client_queue_time_ms"] == pytest.approx(2000.0)
    share = (n[1] + n[2]) / sum(n)
    assert res["mean_client_queue_time_ms"] == pytest.approx(2000.0 * share)
    assert res["mean_arrival_ttft_ms"] == pytest.approx(100.0 + 2000.0 * share)
    # answers counted inside every run's window over every run's window seconds
    rates = [r["window_completion_rate"] for r in per_run]
    assert rates[1] < rates[0]
    assert res["window_completion_rate"] == pytest.approx(sum(rates) / 3)
    # the percentiles the headline does not average are pooled too
    assert share > 0.6 and res["p50_arrival_ttft_ms"] == pytest.approx(2100.0)
    assert res["p50_client_queue_time_ms"] == pytest.approx(2000.0)
    assert res["p50_e2el_ms"] == pytest.approx(4000.0)  # run 1's: 200 ms


def test_repeats_count_every_runs_ramp_up_peaks_and_cache(monkeypatch) -> None:
    """The block under --repeats printed 'Successful requests' summed over the runs beside the
    first run's ramp-up count, peak concurrency and cache hits (here: the second and third
    runs' requests take 4 s, so more are in flight at once, and are cache hits)."""
    from loadtest.report import block

    a, once = runs_of([0.0, 2.0, 2.0], [0.2, 4.0, 4.0])

    async def cached(p: argparse.Namespace, target: str, tok: object
                     ) -> tuple[RunOutput, dict[str, Any]]:
        out, _ = await once(p, target, tok)
        for r in out.results:
            r.cache = "miss" if p.seed == a.seed else "hit"
        return out, session.result_dict(p, target, "mock", session.plan(p), out)

    monkeypatch.setattr(session, "measure_once", cached)
    _, res = asyncio.run(session.measure(a, "http://x", None))
    per_run = [asyncio.run(cached(session._seeded(a, a.seed + k), "http://x", None))[1]
               for k in range(3)]
    ramp = sum(r["windows"]["ramp"]["completed"] for r in per_run)
    assert res["windows"]["ramp"]["completed"] == ramp > per_run[0]["windows"]["ramp"][
        "completed"]
    assert res["windows"]["steady_s"] == pytest.approx(sum(r["windows"]["steady_s"]
                                                           for r in per_run))
    assert res["max_concurrent_requests"] == max(r["max_concurrent_requests"] for r in per_run)
    assert res["cache"]["hits"] == per_run[1]["completed"] + per_run[2]["completed"]
    assert res["cache"]["misses"] == per_run[0]["completed"]
    assert res["by_cache"]["hit"]["completed"] == res["cache"]["hits"]
    text = block({**res, "selfcheck": None}, [], [99])
    assert f"{'Ramp-up requests (apart):':<40} {ramp}" in text
