"""--workers: one schedule dealt over client processes, merged into one result."""

import json
import math

import pytest

from loadtest.cli import main
from loadtest.client import ClientConfig
from loadtest.request import Request
from loadtest.runner import RunConfig
from loadtest.workers import materialise, resolve, shards
from tests.test_loadtest_mock import mock_server


def reqs(n: int) -> list[Request]:
    return [Request(i, f"prompt {i}", 4) for i in range(n)]


def test_auto_follows_the_expected_chunk_rate_and_the_cores():
    assert resolve("3", math.inf, None, 64) == 3
    assert resolve("auto", 10, None, 64, cores=16) == 1           # 640 chunks/s
    assert resolve("auto", 100, None, 400, cores=16) == 7         # 40k chunks/s
    assert resolve("auto", 1000, None, 400, cores=16) == 8        # half the cores at most
    assert resolve("auto", math.inf, 250, 400, cores=16) == 5     # closed loop: ~100/s a slot
    assert resolve("auto", 1000, None, 400, cores=1) == 1


def test_shards_deal_round_robin_and_split_the_concurrency_cap():
    cfg = RunConfig(num_prompts=10, max_concurrency=7, warmup=3, progress=True)
    parts = shards(reqs(10), [i / 10 for i in range(10)], cfg,
                   ClientConfig(base_url="http://x", model="m"), None, 3)
    assert [[r.index for r in s.requests] for s in parts] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [s.offsets for s in parts][1] == [0.1, 0.4, 0.7]
    assert [s.run.max_concurrency for s in parts] == [3, 2, 2]
    assert all(s.run.warmup == 0 and not s.run.progress for s in parts)
    assert [s.run.num_prompts for s in parts] == [4, 3, 3]
    # never more processes than slots or requests
    assert len(shards(reqs(10), [0.0] * 10, RunConfig(max_concurrency=2),
                      ClientConfig(base_url="http://x", model="m"), None, 8)) == 2
    assert len(shards(reqs(2), [0.0] * 2, RunConfig(),
                      ClientConfig(base_url="http://x", model="m"), None, 8)) == 2


def test_the_schedule_is_drawn_once_and_cut_at_the_duration():
    cfg = RunConfig(num_prompts=None, duration=2.0, request_rate=50.0, seed=1)
    got, offs = materialise(iter(reqs(1000)), cfg)
    assert 60 < len(got) < 140 and max(offs) < 2.0 and offs == sorted(offs)
    assert materialise(iter(reqs(1000)), cfg)[1] == offs                 # seeded
    with pytest.raises(ValueError, match="finite --request-rate"):
        materialise(iter(reqs(10)), RunConfig(num_prompts=None, duration=2.0))


def test_cli_refuses_a_closed_loop_duration_run_over_workers(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--target", "http://x", "--workers", "2", "--duration", "5",
              "--max-concurrency", "4"])
    assert "finite --request-rate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--target", "http://x", "--workers", "0"])


def test_one_and_three_workers_send_the_same_schedule_and_merge_every_record(tmp_path):
    runs = {}
    with mock_server("--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "8") as url:
        for n in (1, 3):
            out = tmp_path / f"w{n}.json"
            assert main(["run", "--target", url, "--model", "mock", "--num-prompts", "30",
                         "--request-rate", "40", "--output-len", "8", "--max-concurrency", "9",
                         "--workers", str(n), "--warmup", "2", "--seed", "3", "--no-progress",
                         "--no-scrape", "--json", str(out)]) == 0
            res = json.loads(out.read_text())
            rows = [json.loads(x) for x in
                    (tmp_path / f"w{n}.requests.jsonl").read_text().splitlines()]
            runs[n] = (res, rows)
    (one, rows1), (three, rows3) = runs[1], runs[3]
    assert one["client_workers"] == 1 and three["client_workers"] == 3
    assert one["completed"] == three["completed"] == 30 and three["failed"] == 0
    assert [r["index"] for r in rows3] == list(range(30))
    # the same arrival times, to the microsecond: one schedule, dealt out
    assert [round(r["scheduled"], 6) for r in rows1] == [round(r["scheduled"], 6) for r in rows3]
    assert sum(r["output_tokens"] for r in rows3) == 30 * 8
    check = three["selfcheck"]
    assert check["client_processes"] == 3 and 0 < check["client_cpu_util"] <= 1.0
    assert check["client_cpu_total"] >= check["client_cpu_util"]


def test_ramp_up_and_drain_are_reported_apart_from_the_steady_window(tmp_path, capsys):
    out = tmp_path / "w.json"
    with mock_server("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4") as url:
        assert main(["run", "--target", url, "--model", "mock", "--request-rate", "40",
                     "--duration", "3", "--warmup-seconds", "1", "--cooldown-seconds", "0.5",
                     "--output-len", "4", "--seed", "2", "--workers", "2", "--no-progress",
                     "--no-scrape", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    rows = [json.loads(x) for x in (tmp_path / "w.requests.jsonl").read_text().splitlines()]
    sent = [r["scheduled"] for r in rows]
    win = res["windows"]
    assert win["steady_s"] == 1.5
    assert win["ramp"]["completed"] == sum(t < 1.0 for t in sent)
    assert win["drain"]["completed"] == sum(t >= 2.5 for t in sent)
    assert res["completed"] == sum(1.0 <= t < 2.5 for t in sent) > 0
    assert abs(res["request_throughput"] - res["completed"] / 1.5) < 1e-9
    assert "Steady window (s):" in capsys.readouterr().out


def test_one_process_makes_every_prompt_before_the_first_send(tmp_path, monkeypatch):
    # Prompt making (tokenizer encode/decode loops) on the event loop between sends delayed
    # them: send lag p99 31 ms at 30 req/s of 1,152-token prompts on the mock, 1.2 ms made first.
    import time

    from loadtest import client as client_mod
    from loadtest import workload

    made: list[float] = []
    sent: list[float] = []
    real_stream, real_send = workload.stream, client_mod.Client.send

    def stream(cfg, tok):
        for req in real_stream(cfg, tok):
            made.append(time.perf_counter())
            yield req

    async def send(self, req):
        sent.append(time.perf_counter())
        return await real_send(self, req)

    monkeypatch.setattr(workload, "stream", stream)
    monkeypatch.setattr(client_mod.Client, "send", send)
    with mock_server("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4") as url:
        assert main(["run", "--target", url, "--model", "mock", "--request-rate", "40",
                     "--duration", "1", "--output-len", "4", "--seed", "2", "--workers", "1",
                     "--warmup", "0", "--no-progress", "--no-scrape",
                     "--json", str(tmp_path / "r.json")]) == 0
    assert len(sent) > 10 and len(made) >= len(sent)
    assert max(made) < min(sent)


def test_the_merged_run_is_interrupted_when_any_shard_was():
    from loadtest.client import Result
    from loadtest.runner import RunOutput
    from loadtest.workers import merge

    whole = RunOutput([Result(0, success=True)], 2.0, 100.0)
    cut = RunOutput([Result(1, success=True)], 1.0, 100.0, interrupted=True)
    assert merge([whole, cut], 100.0, False).interrupted  # before: False, the cut one dropped
    assert not merge([whole, whole], 100.0, False).interrupted


@pytest.mark.parametrize("who", ["terminal", "parent"])
def test_ctrl_c_of_a_sharded_run_saves_what_finished_and_says_interrupted(tmp_path, who):
    """A terminal's Ctrl-C reaches the whole process group; `kill -INT` the parent alone.
    Before, either way the parent's collecting was cancelled: no result, no JSON, only
    'interrupted' and exit 130."""
    import os
    import signal
    import subprocess
    import sys

    from tests.support.procs import REPO, ctrl_c_reaches_children
    from tests.support.waiting import wait_for
    from tests.test_loadtest_runner import served

    with mock_server("--ttft-ms", "5", "--itl-ms", "2") as url:
        out = tmp_path / "r.json"
        with ctrl_c_reaches_children():
            proc = subprocess.Popen(
                [sys.executable, "-m", "loadtest", "run", "--target", url, "--duration", "300",
                 "--request-rate", "20", "--workers", "2", "--no-scrape", "--json", str(out),
                 "--no-progress", "--output-len", "4", "--input-len", "8"],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
        try:  # Ctrl-C once the mock has answered 25 requests
            wait_for(lambda: proc.poll() is not None or served(url) >= 25,
                     "the mock answered 25 requests", 60, every=0.1)
            if who == "terminal":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    res = json.loads(out.read_text())
    assert res["interrupted"] is True and res["client_workers"] == 2 and res["completed"] > 20
    rows = out.with_suffix(".requests.jsonl").read_text().splitlines()
    assert len(rows) >= res["completed"]


def test_auto_keeps_a_closed_loop_duration_run_in_one_process(tmp_path, monkeypatch):
    """A closed loop for a duration has no schedule to shard (the CLI refuses --workers N for
    it), so --workers auto must not pick several processes for it. Before, auto counted ~100
    chunks/s a slot: 70 slots on 16 cores made 2 workers, and the run (each level of sweep
    --concurrencies past 60 with --workers auto) died on materialise's ValueError."""
    from loadtest import workers

    monkeypatch.setattr(workers.os, "cpu_count", lambda: 16)
    out = tmp_path / "c.json"
    with mock_server("--ttft-ms", "5", "--itl-ms", "1", "--output-tokens", "4") as url:
        assert main(["run", "--target", url, "--model", "mock", "--duration", "1",
                     "--max-concurrency", "70", "--output-len", "4", "--workers", "auto",
                     "--no-progress", "--no-scrape", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["client_workers"] == 1 and res["completed"] > 70


def test_auto_counts_the_chunks_of_the_workloads_own_answer_lengths(tmp_path, monkeypatch):
    """--workers auto sizes the client by the chunks per second it will stream: the rate times
    the answers' length. A dataset's rows (custom, repeat over --dataset-path; ShareGPT's
    answers) carry their own lengths; before, auto read --output-len (32 by default, unused by
    those rows; 0 for ShareGPT): 100 req/s of 400-token rows (40k chunks/s) ran in one
    process, where 6k/s is what one keeps up with."""
    import asyncio

    from loadtest import session, workers
    from loadtest.cli import parser
    from loadtest.runner import RunOutput

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"def f{i}(): pass", "output_tokens": 400})
                            + "\n" for i in range(20)))
    dealt = []

    async def run_sharded(parts, cfg):
        dealt.append(parts)
        return RunOutput([], 1.0, 0.0)

    monkeypatch.setattr(workers.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(workers, "run_sharded", run_sharded)
    for wl in ("custom", "repeat"):
        a = parser().parse_args(["run", "--target", "http://127.0.0.1:9", "--model", "m",
                                 "--workload", wl, "--dataset-path", str(data),
                                 "--request-rate", "100", "--num-prompts", "200",
                                 "--workers", "auto", "--no-scrape", "--no-progress"])
        _, res = asyncio.run(session.measure_once(a, a.target, None))
        assert res["client_workers"] == 7 and len(dealt[-1]) == 7  # ceil(40000 / 6000)
