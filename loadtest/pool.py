"""--repeats: the statistics pooled over every run's requests.

`ci.merge` averages the headline metrics over the runs (each with its 95 % interval) and sums
the counts. Every other distribution (the percentiles --metric-percentiles adds beyond the
headline's, the spreads, the client's queue, TTFT and E2EL from the scheduled arrival) is
computed here from all runs' steady-window requests together, and the rate answered inside the
window from all runs' answers over all runs' window seconds; the ramp-up's and drain's counts,
the cache's and the peaks are over every run too: before, they were the first run's. So are the
servers' /metrics (`server`: counters summed, the summary recomputed from them) and the client
processes (`workers`: each run's); until 2026-11-28 they were the first run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadtest import cachestats, metrics_scrape, stats
from loadtest.ci import HEADLINE
from loadtest.client import Result
from loadtest.runner import RunOutput


def distributions(steady: Sequence[Sequence[Result]], percentiles: Sequence[float],
                  capped: bool) -> dict[str, float]:
    """Each run's steady-window requests, pooled: every distribution key but the headline's
    (`capped`: the client-queue and from-arrival ones, which only a capped run reports)."""
    every = [r for run in steady for r in run]
    out: dict[str, float] = {}
    for name, values in stats.samples(every).items():
        out.update(stats.distribution(name, values, percentiles))
    if capped:
        out.update(stats.queue_stats(every, percentiles))
    return {k: v for k, v in out.items() if k not in HEADLINE}


def window_rate(runs: Sequence[tuple[RunOutput, tuple[float, float]]]) -> float | None:
    """Answers inside each run's window [start, end) over the windows' seconds together."""
    seconds = sum(end - start for _, (start, end) in runs)
    if not seconds > 0:
        return None
    return sum(stats.answered_in(o.results, o.t0, start, end)
               for o, (start, end) in runs) / seconds


Split = tuple[list[Result], float, dict[str, list[Result]]]  # session.steady's


def counts(runs: Sequence[tuple[RunOutput, Split]], percentiles: Sequence[float],
           windows: dict[str, Any] | None) -> dict[str, Any]:
    """The cache's statistics over every run's steady-window requests (each hit judged against
    every run's answers), the peaks the highest of any run's, and (where the runs had a
    ramp-up or drain, `windows`: the first run's) those apart, over every run's."""
    every = [r for _, (steady, _, _) in runs for r in steady]
    span = sum(s for _, (_, s, _) in runs)
    out: dict[str, Any] = {
        "cache": cachestats.cache_summary(every, reference=[r for o, _ in runs
                                                             for r in o.results]),
        "by_cache": cachestats.split(every, span, percentiles)}
    peaks = [stats.peaks(steady) for _, (steady, _, _) in runs]
    out["max_output_tokens_per_s"] = max(p[0] for p in peaks)
    out["max_concurrent_requests"] = max(p[1] for p in peaks)
    if windows:
        out["windows"] = {**windows, "steady_s": span}
        for part in ("ramp", "drain"):
            reqs = [r for _, (_, _, apart) in runs for r in apart[part]]
            seconds = float(windows[f"{part}_s"]) * len(runs)
            out["windows"][part] = {**stats.summarize(reqs, seconds, percentiles),
                                    "error_counts": stats.error_counts(reqs)}
    return out


def server(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each run's `server_metrics` (metrics_scrape.Scraper.stop), pooled per scraped /metrics:
    the counters' deltas summed over the runs, each gauge's peak the highest of any run, and
    the summary recomputed from those (its means over every run's requests); "runs" says how
    many runs it was scraped in (a scrape that failed in a run has nothing of that run)."""
    out: dict[str, Any] = {}
    for who in dict.fromkeys(w for r in runs for w in r):
        got = [r[who] for r in runs if who in r]
        deltas: dict[str, float] = {}
        peak: dict[str, float] = {}
        for g in got:
            for k, v in g["deltas"].items():
                deltas[k] = deltas.get(k, 0.0) + v
            for k, v in g.get("peak", {}).items():
                peak[k] = max(peak.get(k, 0.0), v)
        # summary() reads the engine's rows when vLLM's counters were there after the run
        engine = any("Server requests finished" in g["summary"] for g in got)
        after = {"vllm:prompt_tokens_total": 0.0} if engine else {}
        out[who] = {"url": got[0]["url"], "deltas": deltas, "peak": peak, "runs": len(got),
                    "summary": metrics_scrape.summary(deltas, after, peak)}
    return out


def workers(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The client processes each run used (`client_workers_runs`; --workers auto sizes each
    run by its own sample) and, as `client_workers`, the most any run used."""
    each = [int(r.get("client_workers") or 1) for r in runs]
    return {"client_workers": max(each), "client_workers_runs": each}
