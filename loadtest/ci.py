"""Repeats and intervals: one run of a load test is one sample of a noisy system.

`--repeats K` runs the workload K times (seeds --seed .. --seed+K-1); each headline metric is the
mean with a two-sided 95 % Student-t interval over the K runs, and `compare` marks a difference
from the baseline that Welch's t-test (5 %) does not support as not significant ("n.s.").
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from loadtest import selfcheck

HEADLINE = ("request_throughput", "request_goodput", "output_throughput",
            "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
            "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
            "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")
# counted over every run (a failure in any run is a failure of the merged result); the
# scheduled arrivals too, which the report and the sweep set against completed + failed
TOTALS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "duration",
          "scheduled_in_window")
# two-sided 95 %: the 0.975 quantile of Student's t for 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: float) -> float:
    if df < 1:
        return math.inf
    if df >= 30:
        return 1.96 + 2.4 / df  # within 0.3 % of the exact quantile past 30
    lo = int(df)
    frac = df - lo
    hi = min(lo + 1, 30)
    return _T975[lo - 1] * (1 - frac) + _T975[hi - 1] * frac


def interval(values: list[float]) -> dict[str, Any]:
    n = len(values)
    mean = statistics.fmean(values)
    half = t975(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else math.inf
    return {"mean": mean, "low": mean - half, "high": mean + half, "half": half, "n": n,
            "values": values}


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each headline metric present in every run -> its interval."""
    return {k: interval([float(r[k]) for r in runs]) for k in HEADLINE
            if all(isinstance(r.get(k), int | float) for r in runs)}


def significant(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Welch's t-test at 5 %: is the difference of the two means supported by the repeats?"""
    va: list[float] = a["values"]
    vb: list[float] = b["values"]
    if len(va) < 2 or len(vb) < 2:
        return False
    sa, sb = statistics.variance(va) / len(va), statistics.variance(vb) / len(vb)
    diff = abs(statistics.fmean(va) - statistics.fmean(vb))
    if sa + sb == 0:
        return diff > 0
    df = (sa + sb) ** 2 / (sa ** 2 / (len(va) - 1) + sb ** 2 / (len(vb) - 1)) \
        if sa and sb else float(len(va) + len(vb) - 2)
    return diff / math.sqrt(sa + sb) > t975(df)


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's result, its headline metrics replaced by the means over all runs and its
    counts (requests, failures, tokens, seconds) by the sums, with the intervals under
    "repeats" and each run's own headline numbers under "runs"; the client self-check the
    worst of every run's (`selfcheck.worst`)."""
    reps = summarize(runs)
    out = {**runs[0], **{k: v["mean"] for k, v in reps.items()}}
    for k in TOTALS:
        if all(isinstance(r.get(k), int | float) for r in runs):
            out[k] = sum(r[k] for r in runs)
        else:  # not counted in every run (one cut short by Ctrl-C): no total to give
            out.pop(k, None)
    errors: dict[str, int] = {}
    for r in runs:
        for msg, n in (r.get("error_counts") or {}).items():
            errors[msg] = errors.get(msg, 0) + n
    out["error_counts"] = dict(sorted(errors.items(), key=lambda kv: -kv[1]))
    out["repeats"] = reps
    out["runs"] = [{k: r.get(k) for k in HEADLINE} for r in runs]
    out["selfcheck"] = selfcheck.worst([r["selfcheck"] for r in runs])
    return out


def lines(res: dict[str, Any]) -> list[str]:
    reps = res.get("repeats") or {}
    if not reps:
        return []
    n = next(iter(reps.values()))["n"]
    out = [f"{'=' * 10} Over {n} repeats: mean [95% CI] {'=' * 10}"]
    out += [f"{k:28s} {v['mean']:12.2f}  [{v['low']:.2f}, {v['high']:.2f}]"
            for k, v in reps.items()]
    return out
