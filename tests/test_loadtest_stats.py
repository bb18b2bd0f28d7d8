import itertools
import math

import pytest

from loadtest import cachestats, stats
from loadtest.client import Result


def res(i, ttft, itl, out, start=0.0, ok=True, prompt=10, cache="none", cid=None, text=""):
    latency = ttft + sum(itl)
    return Result(i, success=ok, start=start, ttft=ttft, itl=list(itl), latency=latency,
                  prompt_tokens=prompt, output_tokens=out, cache=cache, canonical_id=cid,
                  text=text)


def test_tpot_is_vllms_definition():
    r = res(0, 0.1, [0.02, 0.03, 0.05], out=4)
    assert stats.tpot(r) == pytest.approx((0.2 - 0.1) / 3)
    assert stats.tpot(res(1, 0.1, [], out=1)) is None


def test_summary_matches_hand_computation():
    rs = [res(0, 0.100, [0.010, 0.010], 3, start=0.0),
          res(1, 0.300, [0.020, 0.040], 3, start=0.5),
          res(2, 0.0, [], 0, ok=False)]
    d = stats.summarize(rs, duration=2.0, percentiles=[50, 99])
    assert d["completed"] == 2 and d["failed"] == 1
    assert d["total_input_tokens"] == 20 and d["total_output_tokens"] == 6
    assert d["request_throughput"] == pytest.approx(1.0)
    assert d["output_throughput"] == pytest.approx(3.0)
    assert d["total_token_throughput"] == pytest.approx(13.0)
    assert d["mean_ttft_ms"] == pytest.approx(200.0)
    assert d["median_ttft_ms"] == pytest.approx(200.0)
    assert d["std_ttft_ms"] == pytest.approx(100.0)
    assert d["mean_tpot_ms"] == pytest.approx((10.0 + 30.0) / 2)
    assert d["mean_itl_ms"] == pytest.approx(20.0)
    assert d["p99_itl_ms"] == pytest.approx(40.0 - 0.03 * 20, rel=1e-3)
    assert d["mean_e2el_ms"] == pytest.approx((120.0 + 360.0) / 2)
    assert d["p50_e2el_ms"] == pytest.approx(240.0)
    assert d["request_goodput"] is None
    assert d["max_concurrent_requests"] == 2
    assert d["max_output_tokens_per_s"] == 6


def test_goodput_counts_requests_meeting_every_slo():
    rs = [res(0, 0.1, [0.01], 2), res(1, 0.5, [0.01], 2)]
    d = stats.summarize(rs, 1.0, [99], goodput={"ttft": 200, "tpot": 50})
    assert d["request_goodput"] == pytest.approx(1.0)


def test_goodput_judges_ttft_and_e2el_from_the_scheduled_arrival():
    """As the sweep's SLO does (`p99_arrival_ttft_ms`): a request a --max-concurrency client
    held back 0.4 s had waited 0.5 s for its first token. Before, goodput counted from the send
    (0.1 s) and called it good, while the sweep judged the same request a miss."""
    rs = [res(0, 0.1, [0.01], 2), res(1, 0.1, [0.01], 2)]
    rs[1].queue_time = 0.4
    d = stats.summarize(rs, 1.0, [99], goodput={"ttft": 200})
    assert d["request_goodput"] == pytest.approx(1.0) and d["goodput_from"] == "arrival"
    late = stats.queue_stats(rs, [100])["p100_arrival_ttft_ms"]
    assert late == pytest.approx(500.0)  # the one the sweep's SLO misses
    assert stats.summarize(rs, 1.0, [99], goodput={"e2el": 300})["request_goodput"] == \
        pytest.approx(1.0)
    # TPOT has no wait in it; an uncapped run's requests wait 0: the same as from the send
    assert stats.summarize(rs, 1.0, [99], goodput={"tpot": 50})["request_goodput"] == \
        pytest.approx(2.0)
    assert "goodput_from" not in stats.summarize(rs, 1.0, [99])  # no --goodput


def test_no_success_gives_zeros_not_errors():
    d = stats.summarize([res(0, 0, [], 0, ok=False)], 1.0, [99])
    assert d["completed"] == 0 and d["mean_ttft_ms"] == 0 and d["p99_tpot_ms"] == 0
    assert not math.isnan(d["request_throughput"])


def test_cache_split_hit_rate_and_tokens_avoided():
    rs = [res(0, 0.2, [0.01] * 3, 4, cache="miss", prompt=50),
          res(1, 0.01, [0.001] * 3, 4, cache="hit", prompt=50),
          res(2, 0.01, [0.001] * 3, 4, cache="hit", prompt=40),
          res(3, 0.2, [0.01] * 3, 4, cache="bypass")]
    c = cachestats.cache_summary(rs)
    assert (c["hits"], c["misses"], c["bypassed"]) == (2, 1, 1)
    assert c["hit_rate"] == pytest.approx(2 / 3)
    assert c["upstream_prompt_tokens_avoided"] == 90
    assert c["upstream_output_tokens_avoided"] == 8
    split = cachestats.split(rs, 1.0, [99])
    assert set(split) == {"hit", "miss", "bypass"}
    assert split["hit"]["mean_ttft_ms"] == pytest.approx(10.0)
    assert split["miss"]["mean_ttft_ms"] == pytest.approx(200.0)


def test_wrong_cached_answers():
    rs = [res(0, .1, [], 1, cache="miss", cid="q1", text="Paris"),
          res(1, .1, [], 1, cache="miss", cid="q2", text="Vienna"),
          res(2, .1, [], 1, cache="hit", cid="q1", text="Paris"),       # right
          res(3, .1, [], 1, cache="hit", cid="q2", text="Paris"),       # near-miss served q1
          res(4, .1, [], 1, cache="hit", cid="q3", text="Canberra"),    # no reference
          res(5, .1, [], 1, cache="hit", cid="q3b", text="Vienna")]     # another's answer
    j = cachestats.judge_hits(rs)
    assert j == {"correct": 1, "wrong": 2, "unverified": 1}
    assert cachestats.cache_summary(rs)["wrong_cached_answers"] == 2


def test_completion_rate_is_measured_over_the_completions():
    # keeps up: one request every 0.1 s for 2 s, each takes 1 s: 10 req/s complete
    kept = [res(i, 0.5, [0.5], 2, start=0.1 * i) for i in range(20)]
    d = stats.summarize(kept, duration=3.0, percentiles=[99])
    assert d["request_throughput"] == pytest.approx(20 / 3)  # vLLM's: over the whole run
    assert d["completion_rate"] == pytest.approx(10.0)  # 19 gaps in 1.9 s (20 / 1.9 before)
    # behind: sent at 10 req/s, served one at a time every 0.25 s (4 req/s), even when the
    # duration given is the send window (a steady window's length)
    behind = [res(i, 0.25 * (i + 1) - 0.1 * i, [], 1, start=0.1 * i) for i in range(20)]
    d = stats.summarize(behind, duration=2.0, percentiles=[99])
    assert d["request_throughput"] == pytest.approx(10.0)
    assert d["completion_rate"] == pytest.approx(4.0)


def test_cache_statistics_cover_the_steady_window_and_judge_against_every_answer():
    """--warmup-seconds 1 of a 4 s run at 10 req/s: the headline counts the 30 requests sent
    after the first second. Before, the cache statistics counted all 40 (mock, repeat workload,
    --warmup-seconds 3: 'completed 33', hits + misses 43). A window hit is still judged against
    a miss answered during ramp-up, and a wrong hit sent during ramp-up is not counted."""
    from loadtest import session
    from loadtest.cli import parser
    from loadtest.runner import RunOutput

    a = parser().parse_args(["run", "--target", "http://x", "--duration", "4",
                             "--request-rate", "10", "--warmup-seconds", "1"])
    t0, results = 100.0, []
    for i in range(40):
        at = t0 + round(0.1 * i + 0.05, 6)
        if i < 10:  # ramp-up: misses p0..p8 (the answers), and one wrong hit
            cache, cid, text = ("miss", f"p{i}", f"answer {i}") if i < 9 else ("hit", "p0", "x")
        elif i < 19:  # the window: a hit for each ramp-up question, right
            cache, cid, text = "hit", f"p{i - 10}", f"answer {i - 10}"
        else:  # and fresh misses
            cache, cid, text = "miss", f"p{i}", f"answer {i}"
        results.append(Result(i, success=True, start=at, scheduled=at, ttft=0.01, latency=0.02,
                              output_tokens=2, prompt_tokens=8, text=text, cache=cache,
                              canonical_id=cid, kind="repeat" if cache == "hit" else "new"))
    res = session.result_dict(a, "http://x", "mock", session.plan(a),
                              RunOutput(results, 4.0, t0))
    c = res["cache"]
    assert res["completed"] == 30 and c["hits"] + c["misses"] == 30
    assert (c["hits"], c["misses"]) == (9, 21) and c["hit_rate"] == pytest.approx(0.3)
    assert (c["correct_cached_answers"], c["wrong_cached_answers"]) == (9, 0)
    assert c["unverified_cached_answers"] == 0
    assert c["by_kind"] == {"repeat": {"requests": 9, "hits": 9},
                            "new": {"requests": 21, "hits": 0}}
    assert {k: v["completed"] for k, v in res["by_cache"].items()} == {"hit": 9, "miss": 21}
    assert res["by_cache"]["hit"]["request_throughput"] == pytest.approx(9 / 3)


def test_window_completion_rate_counts_the_answers_inside_the_window() -> None:
    """A closed loop of 2 requests in flight for a 4 s window (t0 = 100), answers of 0.5 s:
    2 answered a second inside it. The last two sent, at 3.9 s, take 6 s: the drain after the
    window. The whole run's rate and the completions' span both run on to its end."""
    t0 = 100.0

    def sent(i: int, at: float, latency: float, ok: bool = True) -> Result:
        return Result(i, success=ok, start=t0 + at, ttft=latency, latency=latency,
                      output_tokens=1)

    loop = [sent(i, i // 2, 0.5) for i in range(8)]  # end at 0.5 s ... 3.5 s
    drain = [sent(8 + i, 3.9, 6.0) for i in range(2)]  # end at 9.9 s
    rs = [*loop, *drain, sent(10, 1.0, 0.5, ok=False)]
    assert stats.window_completion_rate(rs, t0, 0.0, 4.0) == pytest.approx(2.0)
    assert stats.window_completion_rate(rs, t0, 1.0, 3.0) == pytest.approx(2.0)  # a ramp
    assert stats.window_completion_rate(rs, t0, 2.0, 2.0) is None  # no window
    d = stats.summarize(rs, duration=9.9, percentiles=[99])
    assert d["request_throughput"] == pytest.approx(10 / 9.9)
    # answers down the order of sending: the drain's two 6 s answers pull it down as well
    # (9 / 9.4 over the completions' span until 2026-11-28; that rate's own test is above)
    assert d["completion_rate"] == pytest.approx(0.9916, abs=1e-4)


def test_offered_load_errors_and_ttft_from_arrival() -> None:
    from loadtest import schedule
    from loadtest.client import Result
    from loadtest.stats import due_in, error_counts, queue_stats

    offs = list(itertools.islice(schedule.offsets(50.0, 1.0, 3, None), 2000))
    assert due_in(iter(offs), 2.0, 10.0) == sum(2.0 <= o < 10.0 for o in offs)
    assert 300 < due_in(iter(offs), 2.0, 10.0) < 500
    rs = [Result(0, success=True, ttft=0.1, latency=3.0, queue_time=2.0),
          Result(1, success=False, status=502, error="upstream went away"),
          Result(2, success=False, status=502, error="upstream went away"),
          Result(3, success=False, error="timeout")]
    assert error_counts(rs) == {"502 upstream went away": 2, "timeout": 1}
    q = queue_stats(rs, [99])
    assert q["p99_client_queue_time_ms"] == pytest.approx(2000)
    assert q["p99_arrival_ttft_ms"] == pytest.approx(2100)
    assert q["p99_arrival_e2el_ms"] == pytest.approx(5000)


def test_the_window_counts_sent_and_scheduled_arrivals_alike_at_its_edges() -> None:
    """Deterministic arrivals (--burstiness inf) land on the window's edges up to rounding: an
    offset of 29.999999999999996 was counted as scheduled in a 30 s window (due_in compares the
    offset) but its request, stamped t0 + offset, read 30.0 s after t0 and fell outside (or
    the reverse): 81 scheduled, 80 sent and answered, and the sweep called a point that sent
    every request 'more than 1 % unsent'. Both now place a time by the same microsecond."""
    from loadtest import schedule, sweep
    from loadtest.client import Result
    from loadtest.stats import due_in, windows

    for t0 in (55.5, 3094.4855, 12345.678, 987654.321):
        for rate, ramp, point in ((2.7, 0.0, 30.0), (3.0, 5.0, 60.0), (9.0, 2.0, 20.0),
                                  (11.0, 5.0, 60.0), (1.2, 5.0, 30.0), (0.7, 10.0, 30.0)):
            end = ramp + point
            offs = list(itertools.takewhile(lambda o, end=end: o < end,
                                            schedule.offsets(rate, math.inf, 0)))
            sent = [Result(i, success=True, scheduled=t0 + o, start=t0 + o, ttft=0.01,
                           latency=0.02, output_tokens=2) for i, o in enumerate(offs)]
            steady, _, _ = windows(sent, t0, end, ramp, 0.0)
            due = due_in(iter(offs), ramp, end)
            assert len(steady) == due, (t0, rate, ramp, point)
            res = {"scheduled_in_window": due, "completed": len(steady), "failed": 0,
                   "p99_ttft_ms": 10.0}
            assert sweep.meets(res, {"p99_ttft_ms": 100.0})


def test_error_counts_are_the_windows_as_failed_requests_is() -> None:
    """A 4 s run, 1 s of ramp-up: two failures during ramp-up, one in the window. Before, the
    block printed 'Failed requests: 1' above three errors."""
    from loadtest import session
    from loadtest.cli import parser
    from loadtest.runner import RunOutput

    a = parser().parse_args(["run", "--target", "http://x", "--duration", "4",
                             "--request-rate", "10", "--warmup-seconds", "1"])
    t0, results = 100.0, []
    for i in range(40):
        at = t0 + round(0.1 * i + 0.05, 6)
        ok = i not in (2, 3, 20)
        results.append(Result(i, success=ok, start=at, scheduled=at, ttft=0.01, latency=0.02,
                              output_tokens=2, prompt_tokens=8, status=0 if ok else 503,
                              error="" if ok else ("busy" if i < 10 else "gone")))
    res = session.result_dict(a, "http://x", "mock", session.plan(a),
                              RunOutput(results, 4.0, t0))
    assert res["failed"] == 1 and res["error_counts"] == {"503 gone": 1}
    assert res["windows"]["ramp"]["error_counts"] == {"503 busy": 2}
    assert res["windows"]["drain"]["error_counts"] == {}
