"""--repeats: the statistics pooled over every run's requests.

`ci.merge` averages the headline metrics over the runs (each with its 95 % interval) and sums
the counts. Every other distribution (the percentiles --metric-percentiles adds beyond the
headline's, the spreads, the client's queue, TTFT and E2EL from the scheduled arrival) is
computed here from all runs' steady-window requests together, and the rate answered inside the
window from all runs' answers over all runs' window seconds: before, they were the first run's.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadtest import stats
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
