"""Metric math, with vLLM's definitions (benchmarks/serve.py calculate_metrics)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from loadtest.client import Result

METRICS = ("ttft", "tpot", "itl", "e2el")
GOODPUT_KEYS = ("ttft", "tpot", "e2el")


def tpot(r: Result) -> float | None:
    """(E2EL - TTFT) / (out - 1); undefined for one-token answers (vLLM leaves them out)."""
    if r.output_tokens > 1:
        return (r.latency - r.ttft) / (r.output_tokens - 1)
    return None


def p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def distribution(name: str, values: Sequence[float], percentiles: Sequence[float]
                 ) -> dict[str, float]:
    """mean/median/std/pXX in ms, keyed like vLLM; an empty list gives zeros, as vLLM's `or 0`."""
    arr = np.asarray(values if len(values) else [0.0], dtype=float) * 1000
    d = {f"mean_{name}_ms": float(arr.mean()), f"median_{name}_ms": float(np.median(arr)),
         f"std_{name}_ms": float(arr.std())}
    for p in percentiles:
        d[f"p{p_word(p)}_{name}_ms"] = float(np.percentile(arr, p))
    return d


def samples(results: Sequence[Result]) -> dict[str, list[float]]:
    ok = [r for r in results if r.success]
    tpots = [t for r in ok if (t := tpot(r)) is not None]
    return {"ttft": [r.ttft for r in ok], "tpot": tpots,
            "itl": [x for r in ok for x in r.itl], "e2el": [r.latency for r in ok]}


def goodput_count(results: Sequence[Result], slo_ms: dict[str, float]) -> int:
    """Successful requests within every --goodput SLO, TTFT and E2EL counted from the
    scheduled arrival (`queue_stats`' arrival_ttft, arrival_e2el: the wait for a
    --max-concurrency slot included), as the sweep judges its SLO. Until 2026-11-28 from the
    send (vLLM's definition): under a concurrency cap a request held back past the SLO was
    "good" here and a miss in the sweep. Without a cap the two are the same (no wait)."""
    good = 0
    for r in results:
        if not r.success:
            continue
        got = {"ttft": r.queue_time + r.ttft, "tpot": tpot(r) or 0.0,
               "e2el": r.queue_time + r.latency}
        if all(got[k] <= v / 1000 for k, v in slo_ms.items()):
            good += 1
    return good


def peaks(results: Sequence[Result]) -> tuple[float, int]:
    """Peak output tokens in any 1 s bucket and peak concurrent requests (vLLM's bucketing)."""
    ok = [r for r in results if r.success]
    if not ok:
        return 0.0, 0
    t_min = min(r.start for r in ok)
    n = math.ceil(max(r.start + r.latency for r in ok) - t_min) + 1
    tokens, conc = np.zeros(n), np.zeros(n)
    for r in ok:
        t = r.start + r.ttft
        times = [t]
        for gap in r.itl:
            t += gap
            times.append(t)
        for tt in times:
            b = int(tt - t_min)
            if 0 <= b < n:
                tokens[b] += 1
        conc[int(r.start - t_min): int(r.start + r.latency - t_min) + 1] += 1
    return float(tokens.max()), int(conc.max())


def arrival(r: Result) -> float:
    """When the request arrived: its scheduled time, or its send where it has none."""
    return r.scheduled if r.scheduled else r.start


def paces(ok: Sequence[Result]) -> tuple[float, float] | None:
    """Seconds per request of the requests' arrivals and of their answers, each the
    least-squares slope of those times against the order the requests arrived in; None for
    fewer than two requests or answers that did not come later down the order."""
    order = sorted(ok, key=lambda r: (arrival(r), r.index))
    if len(order) < 2:
        return None
    rank = np.arange(len(order), dtype=float)
    rank -= rank.mean()
    scale = float(rank @ rank)

    def slope(times: list[float]) -> float:
        return float(rank @ (np.asarray(times) - np.mean(times))) / scale

    answers = slope([r.start + r.latency for r in order])
    return (slope([arrival(r) for r in order]), answers) if answers > 0 else None


def completion_rate(ok: Sequence[Result]) -> float | None:
    """Answers per second, taken in the order the requests arrived: one over the slope of the
    answer times against that order. A server that keeps up answers at the rate it was sent,
    however long and however varied the answers (each answer is its arrival plus a latency that
    does not grow down the order); one that is behind at its own capacity. Until 2026-11-28 it
    was (n - 1) completions over their span, which runs on past the window by the spread of
    the answers' lengths: ShareGPT-like answers (exponential, mean 4 s) in a 60 s window read
    0.79 of the rate of a server that kept up, and the rate sweep called it behind. Nor the
    answers counted inside the window (`window_completion_rate`, the concurrency ladder's):
    without a ramp-up at least as long as the answers the window opens with none in, and 1 s
    answers in a 2 s window read half the rate. (vLLM's request_throughput divides by the
    whole run, so the last answer's own latency reads as falling behind.)"""
    p = paces(ok)
    return 1.0 / p[1] if p is not None else None


def arrival_rate(ok: Sequence[Result]) -> float | None:
    """The same requests' arrivals per second, fitted as `completion_rate` fits the answers:
    the two differ only where the answers fell behind the arrivals (Poisson's own noise, which
    both share, cancels between them)."""
    p = paces(ok)
    return 1.0 / p[0] if p is not None and p[0] > 0 else None


def window_completion_rate(results: Sequence[Result], t0: float, start: float,
                           end: float) -> float | None:
    """Completed requests that ended inside [start, end) seconds after t0, per second of it.
    Over the window a closed loop (--max-concurrency, each request sent as a slot frees) kept
    its requests in flight, this is the rate it was answered at. request_throughput and
    completion_rate both run on to the last answers of the drain after the last send, when
    fewer and fewer requests are in flight: with answers long against the window, and of
    varied lengths, the drain is long and both read low (simulated, 20 s answers in 60 s:
    a third to a half of the rate)."""
    if not end > start:
        return None
    return answered_in(results, t0, start, end) / (end - start)


def answered_in(results: Sequence[Result], t0: float, start: float, end: float) -> int:
    """How many requests were answered (successfully) in [start, end) seconds after t0."""
    return sum(1 for r in results if r.success and start <= r.start + r.latency - t0 < end)


def summarize(results: Sequence[Result], duration: float, percentiles: Sequence[float] = (99,),
              goodput: dict[str, float] | None = None) -> dict[str, Any]:
    ok = [r for r in results if r.success]
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    dur = duration if duration > 0 else float("nan")
    peak_tok, peak_conc = peaks(results)
    d: dict[str, Any] = {
        "duration": duration, "completed": len(ok), "failed": len(results) - len(ok),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur,
        "completion_rate": completion_rate(ok), "arrival_rate": arrival_rate(ok),
        "request_goodput": goodput_count(results, goodput) / dur if goodput else None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_conc,
    }
    if goodput:  # TTFT and E2EL from the scheduled arrival (results before it: from the send)
        d["goodput_from"] = "arrival"
    for name, values in samples(results).items():
        d.update(distribution(name, values, percentiles))
    return d


def detail_lists(results: Sequence[Result]) -> dict[str, Any]:
    """vLLM's per-request arrays (failed requests included, output length 0)."""
    return {
        "input_lens": [r.prompt_tokens for r in results],
        "output_lens": [r.output_tokens if r.success else 0 for r in results],
        "ttfts": [r.ttft for r in results], "itls": [r.itl for r in results],
        "latencies": [r.latency for r in results],
        "start_times": [r.start for r in results],
        "queue_times": [r.queue_time for r in results],
        "generated_texts": [r.text for r in results], "errors": [r.error for r in results],
    }


def queue_stats(results: Sequence[Result], percentiles: Sequence[float]) -> dict[str, float]:
    """The wait for a --max-concurrency slot, and TTFT and E2EL counted from the request's
    scheduled arrival (the wait included): what a user arriving on that schedule waits for,
    where TTFT and E2EL alone start when the capped client finally sends."""
    ok = [r for r in results if r.success]
    return {**distribution("client_queue_time", [r.queue_time for r in ok], percentiles),
            **distribution("arrival_ttft", [r.queue_time + r.ttft for r in ok], percentiles),
            **distribution("arrival_e2el", [r.queue_time + r.latency for r in ok], percentiles)}


def error_counts(results: Sequence[Result], top: int = 10) -> dict[str, int]:
    """The failed requests' errors, the commonest first (status and message), at most `top`."""
    counts: dict[str, int] = {}
    for r in results:
        if not r.success:
            key = (f"{r.status} {r.error}" if r.status else r.error).strip()[:300] or "unknown"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:top])


def window_time(seconds: float) -> float:
    """A time from the run's start as the windows place it: to the microsecond. A request's
    time is its stamp (t0 + offset) less t0, which is the schedule's offset only up to rounding:
    an arrival that lands on an edge (deterministic arrivals do) must fall on the same side of
    it whether the schedule (`due_in`) or the requests (`windows`) are counted."""
    return round(seconds, 6)


def unsent(res: dict[str, Any]) -> int:
    """Arrivals scheduled in the window (`scheduled_in_window`) that a --max-concurrency client
    never sent before the run stopped sending; 0 where the result does not count them."""
    due = res.get("scheduled_in_window")
    return 0 if due is None else max(0, int(due) - res.get("completed", 0) - res.get("failed", 0))


def due_in(offsets: Iterable[float], start: float, end: float) -> int:
    """How many arrivals of a schedule fall in [start, end): the load offered to a window,
    whether or not a capped client managed to send them before the run ended."""
    n = 0
    for o in offsets:
        at = window_time(o)
        if at >= end:
            break
        n += at >= start
    return n


def windows(results: Sequence[Result], t0: float, duration: float, ramp_s: float,
            drain_s: float) -> tuple[list[Result], float, dict[str, list[Result]]]:
    """Split by send time: the ramp-up [0, ramp_s), the steady window, the drain (the last
    drain_s seconds of sending). Returns the steady requests, the window's length (the
    throughput denominator) and the other two, reported apart."""
    end = max(ramp_s, duration - drain_s)
    steady: list[Result] = []
    ramp: list[Result] = []
    drain: list[Result] = []
    for r in results:
        at = window_time(arrival(r) - t0)
        (ramp if at < ramp_s else steady if at < end else drain).append(r)
    return steady, end - ramp_s, {"ramp": ramp, "drain": drain}
