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


def scraped(requests: int, ttft_s: float, kv_peak: float) -> dict[str, Any]:
    """One run's scrape of vLLM's /metrics (Scraper.stop's shape): `requests` answered with
    a server-side mean TTFT of ttft_s, the KV cache at most kv_peak full."""
    from loadtest.metrics_scrape import summary

    d = {"vllm:e2e_request_latency_seconds_count": float(requests),
         "vllm:prompt_tokens_total": 8.0 * requests,
         "vllm:time_to_first_token_seconds_sum": ttft_s * requests,
         "vllm:time_to_first_token_seconds_count": float(requests)}
    peak = {"vllm:kv_cache_usage_perc": kv_peak}
    return {"backend": {"url": "http://b/metrics", "deltas": d, "peak": peak,
                        "summary": summary(d, d, peak)}}


def test_repeats_pool_the_server_counters_and_each_runs_client_processes(monkeypatch) -> None:
    """The merged result kept run 1's server_metrics (its 'Server requests finished' beside
    'Successful requests' summed over the runs, its server means the referee's only evidence)
    and run 1's client_workers. Now: the counters' deltas summed over the runs, the summary
    recomputed from them (peaks the highest of any run), each run's client processes."""
    from loadtest.metrics_scrape import referee
    from loadtest.report import block

    a, once = runs_of([0.0, 0.0, 0.0], [0.2, 0.2, 0.2])
    servers = [scraped(10, 0.05, 0.3), scraped(30, 0.1, 0.9), scraped(60, 0.1, 0.5)]

    async def measured(p: argparse.Namespace, target: str, tok: object
                       ) -> tuple[RunOutput, dict[str, Any]]:
        out, res = await once(p, target, tok)
        k = p.seed - a.seed
        res = {**res, "server_metrics": servers[k], "client_workers": [1, 2, 2][k]}
        return out, {**res, "referee": referee(res)}

    monkeypatch.setattr(session, "measure_once", measured)
    _, res = asyncio.run(session.measure(a, "http://x", None))
    backend = res["server_metrics"]["backend"]
    assert backend["runs"] == 3
    assert backend["deltas"]["vllm:e2e_request_latency_seconds_count"] == 100
    s = backend["summary"]
    assert s["Server requests finished"] == 100 and s["Server prompt tokens"] == 800
    assert s["Server mean TTFT (ms)"] == pytest.approx((0.5 + 3.0 + 6.0) / 100 * 1000)
    assert s["KV-cache usage peak (%)"] == pytest.approx(90.0)
    # the client's 100 ms against the pooled 95 ms: no warning (run 1's 50 ms gave one)
    assert res["referee"] == []
    assert res["client_workers_runs"] == [1, 2, 2] and res["client_workers"] == 2
    text = block({**res, "selfcheck": None}, [], [99])
    assert "Server metrics: backend, summed over 3 runs" in text
    assert f"{'Server requests finished:':<40} 100" in text
    assert f"{'Client processes, run 1:':<40} 1" in text
    assert f"{'Client processes, run 3:':<40} 2" in text


def test_repeats_self_check_is_the_worst_of_every_run_and_says_so(monkeypatch) -> None:
    """Three runs, the second one's client near a full core with a 150 ms event-loop stall:
    the merged self-check (printed, saved) reported run 1's figures (its CPU 20 %, no stall)
    beside run 2's warnings. Now each figure is the worst of any run's, "over" and the block's
    heading say so, and every run's own self-check is kept under "runs"."""
    from loadtest.report import block
    from loadtest.selfcheck import SelfCheck

    a, once = runs_of([0.0, 0.0, 0.0], [0.2, 0.2, 0.2])
    checks = [SelfCheck(send_lags=[0.001], loop_lags=[0.002], cpu_s=2.0, wall_s=10.0),
              SelfCheck(send_lags=[0.003], loop_lags=[0.001, 0.150], cpu_s=9.5, wall_s=10.0),
              SelfCheck(send_lags=[0.020], loop_lags=[0.004], cpu_s=3.0, wall_s=10.0)]

    async def checked(p: argparse.Namespace, target: str, tok: object
                      ) -> tuple[RunOutput, dict[str, Any]]:
        out, _ = await once(p, target, tok)
        out.selfcheck = checks[p.seed - a.seed]
        return out, session.result_dict(p, target, "mock", session.plan(p), out)

    monkeypatch.setattr(session, "measure_once", checked)
    _, res = asyncio.run(session.measure(a, "http://x", None))
    s = res["selfcheck"]
    each = [c.summary() for c in checks]
    assert s["client_cpu_util"] == pytest.approx(0.95)  # run 2's, not run 1's 0.20
    assert s["loop_lag_max_ms"] == pytest.approx(150.0) and s["loop_stalls"] == 1
    assert s["send_lag_p99_ms"] == pytest.approx(20.0)  # run 3's
    assert s["over"] == "worst of 3 runs"
    assert [r["client_cpu_util"] for r in s["runs"]] == [e["client_cpu_util"] for e in each]
    assert any(w.startswith("run 2: ") and "stall" in w for w in s["warnings"])
    assert any(w.startswith("run 3: ") and "lag the schedule" in w for w in s["warnings"])
    assert not any(w.startswith("run 1: ") for w in s["warnings"])
    text = block(res, [], [99])
    assert "Client self-check (worst of 3 runs)" in text
    assert f"{'Client CPU use (%):':<40} 95.00" in text
    assert f"{'Event-loop stalls:':<40} 1" in text
