"""Error-rate bounds for the judge's acceptance threshold (pure Python, no SciPy).

A false hit is an accepted pair whose questions need different answers; its rate is
false hits / hits. On labelled pairs, `table()` lists for each candidate threshold how many
pairs pass and how many of those are false, with the one-sided Clopper-Pearson upper bound
on the false-hit rate. `pick()` takes the lowest threshold whose bound, and the bound of every
threshold above it, stays within the operator's rate (as vCache bounds a semantic cache's
error rate); with the bound at 95% confidence, the true rate exceeds it at most 5% of the
time the calibration set is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Row:
    threshold: float
    hits: int
    false_hits: int
    upper: float  # one-sided upper confidence bound on false_hits / hits


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                          + i * lp + (n - i) * lq)
    return min(1.0, total)


def upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on p after k events in n trials."""
    if n == 0 or k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):  # bisection: P(X <= k | p) falls as p rises
        mid = (lo + hi) / 2
        if binom_cdf(k, n, mid) > 1 - confidence:
            lo = mid
        else:
            hi = mid
    return hi


def lower_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower bound (0 when k == 0)."""
    if k == 0 or n == 0:
        return 0.0
    return 1.0 - upper_bound(n - k, n, confidence)


def interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval."""
    tail = (1 + confidence) / 2
    return lower_bound(k, n, tail), upper_bound(k, n, tail)


def table(scores: Sequence[float], same: Sequence[bool], thresholds: Sequence[float],
          confidence: float = 0.95, families: Sequence[str] | None = None,
          resamples: int = 2000, seed: int = 0) -> list[Row]:
    """One row per threshold, highest first.

    With `families` (which family each pair comes from) the bound is also taken over
    families: pairs of one family share a topic and template and err together, so they are
    not independent trials, and new questions come from new families. The row's bound is then
    the larger of Clopper-Pearson over pairs and the `confidence` quantile of the false-hit
    rate over a bootstrap that resamples whole families (a resample without hits counts as
    rate 1: no evidence)."""
    ordered = sorted(thresholds, reverse=True)
    rows = []
    for t in ordered:
        hits = [y for s, y in zip(scores, same, strict=True) if s >= t]
        false = hits.count(False)
        rows.append(Row(t, len(hits), false, upper_bound(false, len(hits), confidence)))
    if families is None:
        return rows
    cluster = _cluster_bounds(scores, same, ordered, families, confidence, resamples, seed)
    return [Row(r.threshold, r.hits, r.false_hits, max(r.upper, c))
            for r, c in zip(rows, cluster, strict=True)]


def _cluster_bounds(scores: Sequence[float], same: Sequence[bool], thresholds: Sequence[float],
                    families: Sequence[str], confidence: float, resamples: int,
                    seed: int) -> list[float]:
    import numpy as np

    s = np.asarray(scores, dtype=np.float64)
    wrong = ~np.asarray(same, dtype=bool)
    t = np.asarray(thresholds, dtype=np.float64)
    passes = s[:, None] >= t[None, :]  # pairs x thresholds
    rate = _resampled_rates(passes, passes & wrong[:, None], families, resamples, seed)
    return [float(x) for x in np.quantile(rate, confidence, axis=0)]


def _resampled_rates(served: np.ndarray, bad: np.ndarray, families: Sequence[str],
                     resamples: int, seed: int) -> np.ndarray:
    """The false-hit rate (bad / served, pairs x columns of booleans) in each of `resamples`
    seeded bootstrap draws of whole families: resamples x columns; a draw without hits in a
    column counts as rate 1 (no evidence)."""
    import numpy as np

    names = sorted(set(families))
    index = {f: i for i, f in enumerate(names)}
    fam = np.array([index[f] for f in families])
    hits = np.zeros((len(names), served.shape[1]))
    false = np.zeros((len(names), served.shape[1]))
    np.add.at(hits, fam, served)
    np.add.at(false, fam, bad)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(names), [1 / len(names)] * len(names), size=resamples)
    h, f = weights @ hits, weights @ false
    return np.where(h > 0, f / np.maximum(h, 1), 1.0)


def family_interval(hit: Sequence[bool], wrong: Sequence[bool], families: Sequence[str],
                    confidence: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float]:
    """Two-sided interval of the false-hit rate (wrong hits / hits) when pairs of one family err
    together: the percentile interval over a bootstrap that resamples whole families (a
    resample without hits counts as rate 1, no evidence, as in `table`), widened to contain
    the Clopper-Pearson interval over pairs, so it is never the narrower of the two."""
    import numpy as np

    if not (len(hit) == len(wrong) == len(families)) or not len(hit):
        raise ValueError("family_interval needs equally long, non-empty sequences")
    served = np.asarray(hit, dtype=bool)
    bad = served & np.asarray(wrong, dtype=bool)
    rate = _resampled_rates(served[:, None], bad[:, None], families, resamples, seed)[:, 0]
    tail = (1 - confidence) / 2
    low, high = interval(int(bad.sum()), int(served.sum()), confidence)
    return (min(low, float(np.quantile(rate, tail))),
            max(high, float(np.quantile(rate, 1 - tail))))


def start_hits(rate: float, confidence: float = 0.95, limit: int = 20000) -> int:
    """The fewest hits at which the bound can show `rate` for a judge that errs at half of it:
    from n on, floor(n * rate / 2) false hits in n keep the upper bound within `rate`."""
    last_fail, passes = 0, 0
    for n in range(1, limit):
        if upper_bound(math.floor(n * rate / 2), n, confidence) > rate:
            last_fail, passes = n, 0
        else:
            passes += 1
            if passes >= 200:
                break
    return last_fail + 1


def pick(rows: Sequence[Row], rate: float, confidence: float = 0.95) -> float:
    """The lowest threshold whose bound, and every higher tested threshold's, is within `rate`;
    +inf when none is (no threshold on the calibration set can promise that rate).

    Thresholds are tested from the highest down and the first failure stops the sequence
    (fixed-sequence testing: the order is fixed before the labels are looked at, so the 95 %
    holds for the threshold chosen). The sequence starts at the first threshold with enough
    hits for the test to have power: the bound would stay within `rate` with half that share of
    false hits (`start_hits`: 773 at 1 %, 76 at 10 %, 23 at 25 %). The hit counts depend on the
    scores only, not on the labels. (Starting where zero false hits would just pass, as first
    done, let the few most confident pairs decide: one false hit among them ended the sequence.)
    """
    need = start_hits(rate, confidence)
    chosen = math.inf
    for row in sorted(rows, key=lambda r: -r.threshold):
        if row.hits < need:
            continue
        if row.upper > rate:
            break
        chosen = row.threshold
    return chosen
