"""Runs against the mock, end to end through the CLI: what a review found wrong (a closed-loop
duration run that measured nothing, warm-up requests in the server's deltas, repeats whose
per-request files disagreed, Ctrl-C that lost everything)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from loadtest.cli import main
from tests.support.procs import REPO, ctrl_c_reaches_children
from tests.support.waiting import wait_for
from tests.test_loadtest_mock import mock_server

QUIET = ["--no-progress", "--output-len", "4", "--input-len", "8"]


def served(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return next(float(line.split()[1]) for line in text.splitlines()
                if line.startswith("mock_requests_total"))


def test_a_closed_loop_duration_run_measures_its_steady_window(tmp_path):
    with mock_server("--ttft-ms", "5", "--itl-ms", "2") as url:
        out = tmp_path / "r.json"
        assert main(["run", "--target", url, "--duration", "3", "--max-concurrency", "2",
                     "--warmup-seconds", "1", "--cooldown-seconds", "0.5", "--no-scrape",
                     "--json", str(out), *QUIET]) == 0
    res = json.loads(out.read_text())
    ramp = res["windows"]["ramp"]["completed"]
    assert res["completed"] > 10 and ramp > 5  # before: 0 steady, every request "ramp-up"
    assert res["request_throughput"] > 0


def test_warm_up_requests_stay_out_of_the_servers_deltas(tmp_path):
    with mock_server("--ttft-ms", "2", "--itl-ms", "1") as url:
        out = tmp_path / "r.json"
        assert main(["run", "--target", url, "--num-prompts", "10", "--warmup", "5",
                     "--max-concurrency", "2", "--json", str(out), *QUIET]) == 0
    deltas = json.loads(out.read_text())["server_metrics"]["target"]["deltas"]
    assert deltas["mock_requests_total"] == 10  # was 15 in one process, 10 with workers


def test_repeats_keep_every_runs_requests(tmp_path):
    with mock_server("--ttft-ms", "2", "--itl-ms", "1") as url:
        out = tmp_path / "r.json"
        assert main(["run", "--target", url, "--num-prompts", "6", "--repeats", "3",
                     "--max-concurrency", "2", "--save-detailed", "--no-scrape",
                     "--json", str(out), *QUIET]) == 0
    res = json.loads(out.read_text())
    assert len(res["ttfts"]) == 18 and res["detail_repeat"] == [0] * 6 + [1] * 6 + [2] * 6
    rows = [json.loads(x) for x in out.with_suffix(".requests.jsonl").read_text().splitlines()]
    assert [r["repeat"] for r in rows] == res["detail_repeat"]
    assert [r["text"] for r in rows] == res["generated_texts"]


def test_ctrl_c_saves_what_finished_and_exits_130(tmp_path):
    with mock_server("--ttft-ms", "5", "--itl-ms", "2") as url:
        out = tmp_path / "r.json"
        with ctrl_c_reaches_children():
            proc = subprocess.Popen(
                [sys.executable, "-m", "loadtest", "run", "--target", url, "--duration", "300",
                 "--request-rate", "20", "--no-scrape", "--json", str(out), *QUIET],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:  # Ctrl-C once the mock has answered 25 requests (the run lasts far longer than
            # the wait: under a full test suite it once ended by itself first, exit 0)
            wait_for(lambda: proc.poll() is not None or served(url) >= 25,
                     "the mock answered 25 requests", 60, every=0.1)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    res = json.loads(out.read_text())
    assert res["interrupted"] is True and res["completed"] > 20
    assert len(out.with_suffix(".requests.jsonl").read_text().splitlines()) >= res["completed"]


def test_with_num_prompts_the_drain_is_the_last_seconds_of_sending():
    """40 prompts at 10 req/s are sent over 4 s; each answer takes 1 s, so the run lasts 5 s.
    --cooldown-seconds 1 sets apart the requests sent in the last second of the 4 s of sending
    (before: the last second of the 5 s run, when nothing is sent: no drain at all, and a
    steady window 1 s longer than the sending in it)."""
    from loadtest import session
    from loadtest.cli import parser
    from loadtest.client import Result
    from loadtest.runner import RunOutput

    a = parser().parse_args(["run", "--target", "http://x", "--num-prompts", "40",
                             "--request-rate", "10", "--warmup-seconds", "1",
                             "--cooldown-seconds", "1"])
    t0 = 100.0
    results = [Result(i, success=True, start=t0 + round(0.1 * (i + 1), 6),
                      scheduled=t0 + round(0.1 * (i + 1), 6), ttft=0.5, latency=1.0,
                      output_tokens=2, prompt_tokens=8) for i in range(40)]
    res = session.result_dict(a, "http://x", "mock", session.plan(a),
                              RunOutput(results, 5.0, t0))
    w = res["windows"]
    assert w["steady_s"] == pytest.approx(2.0)
    assert res["completed"] == 20 and w["ramp"]["completed"] == 9
    assert w["drain"]["completed"] == 11
    assert res["request_throughput"] == pytest.approx(10.0)


def test_a_duration_run_lasts_its_duration_when_the_last_arrival_is_early():
    """Arrivals at 0 and 0.1 s of a 1 s window (the next falls past it): the run's duration,
    the throughput denominator, is the window, not the 0.1 s + one answer it took to send and
    answer both (before: ~0.12 s, a throughput 8x too high)."""
    import asyncio

    from loadtest import runner, stats
    from loadtest.client import Client, ClientConfig
    from loadtest.runner import RunConfig
    from loadtest.workload import WorkloadConfig, stream

    async def go(url: str) -> runner.RunOutput:
        client = Client(ClientConfig(url, "mock"), None)
        try:
            return await runner.run(client, stream(WorkloadConfig(output_len=2), None),
                                    RunConfig(num_prompts=None, duration=1.0, request_rate=2.0,
                                              progress=False), when=[0.0, 0.1, 5.0])
        finally:
            await client.aclose()

    with mock_server("--ttft-ms", "5", "--itl-ms", "1") as url:
        out = asyncio.run(go(url))
    assert len(out.results) == 2 and all(r.success for r in out.results)
    assert out.duration >= 1.0
    assert stats.summarize(out.results, out.duration)["request_throughput"] <= 2.0


def test_ttft_from_arrival_is_the_steady_windows_like_the_ttft_it_stands_for():
    """A sweep judges a TTFT SLO on TTFT from arrival in place of TTFT: both must describe the
    same requests, the steady window's. Here the ramp-up's requests waited 3 s for a slot (the
    server's start) and the window's none: before, the arrival percentiles ran over every
    request of the run (ramp-up and drain too), p99 3.1 s against a steady TTFT p99 of 0.1 s,
    and a point that met the SLO in its window missed it."""
    import itertools

    from loadtest import schedule, session, sweep
    from loadtest.cli import parser
    from loadtest.client import Result
    from loadtest.runner import RunOutput

    a = parser().parse_args(["run", "--target", "http://x", "--duration", "12",
                             "--request-rate", "10", "--max-concurrency", "50",
                             "--warmup-seconds", "2", "--cooldown-seconds", "1"])
    t0 = 100.0
    offs = list(itertools.takewhile(lambda o: o < 12.0, schedule.offsets(10.0, 1.0, 0)))
    results = [Result(i, success=True, start=t0 + o + (3.0 if o < 2.0 else 0.0),
                      scheduled=t0 + o, queue_time=3.0 if o < 2.0 else 0.0, ttft=0.1,
                      latency=0.2, output_tokens=2, prompt_tokens=8)
               for i, o in enumerate(offs)]
    res = session.result_dict(a, "http://x", "mock", session.plan(a),
                              RunOutput(results, 12.0, t0))
    assert res["windows"]["ramp"]["completed"] > 10
    assert res["completed"] == res["scheduled_in_window"] > 60
    assert res["p99_ttft_ms"] == pytest.approx(100.0)
    assert res["p99_arrival_ttft_ms"] == pytest.approx(100.0)
    assert res["p99_client_queue_time_ms"] == pytest.approx(0.0)
    assert sweep.meets(res, {"p99_ttft_ms": 500.0})
