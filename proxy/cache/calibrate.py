"""Error-rate bounds for the judge's acceptance threshold (no SciPy; numpy, imported lazily).

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
    rate 1: no evidence).

    The pairs are sorted once: a threshold's hits are the pairs from its place in the sorted
    scores on (a NaN score passes none), its false hits a suffix sum; thresholds that pass the
    same pairs share one bound and one bootstrap column. The numbers are those of testing
    every pair at every threshold, and of `upper_bound` (`_upper_bounds` runs its bisection
    for all rows at once, with the same float operations)."""
    import numpy as np

    ordered = sorted(thresholds, reverse=True)
    if len(scores) != len(same) or (families is not None and len(families) != len(scores)):
        raise ValueError("table needs as many labels (and families) as scores")
    if not ordered:
        return []
    s = np.asarray(scores, dtype=np.float64)
    wrong = ~np.asarray(same, dtype=bool)
    kept = ~np.isnan(s)
    order = np.argsort(s[kept], kind="stable")
    ascending, wrong_sorted = s[kept][order], wrong[kept][order]
    # false_from[j]: false pairs among ascending[j:]; a threshold passes ascending[at:]
    false_from = np.append(np.cumsum(wrong_sorted[::-1])[::-1], 0)
    at = np.searchsorted(ascending, np.asarray(ordered, dtype=np.float64), side="left")
    hits = (len(ascending) - at).tolist()
    false = false_from[at].tolist()
    upper = _upper_bounds(sorted(set(zip(false, hits, strict=True))), confidence)
    rows = [Row(t, h, f, upper[f, h]) for t, h, f in zip(ordered, hits, false, strict=True)]
    if families is None:
        return rows
    cluster = _cluster_bounds(at, order, np.flatnonzero(kept), wrong, families, confidence,
                              resamples, seed)
    return [Row(r.threshold, r.hits, r.false_hits, max(r.upper, c))
            for r, c in zip(rows, cluster, strict=True)]


# math.exp of a log-term below this is 0.0 (the smallest double is exp(-744.4)): adding it
# changes no sum, so _upper_bounds skips it
_UNDERFLOW = -750.0


def _upper_bounds(pairs: Sequence[tuple[int, int]], confidence: float,
                  cells: int = 1 << 20) -> dict[tuple[int, int], float]:
    """`upper_bound(k, n, confidence)` for each (k, n), equal to the last bit: the same
    bisection, run for a batch of rows at once, each step's binomial CDF summed term by term
    in the same order (a cumulative sum) from the same math.lgamma / math.log / math.exp values
    and the same float operations. Rows are batched by k, about `cells` terms at a time."""
    import numpy as np

    out = {(k, n): 1.0 for k, n in pairs if n == 0 or k >= n}
    todo = sorted((k, n) for k, n in pairs if (k, n) not in out)
    if not todo:
        return out
    lgamma = np.array([math.nan, *map(math.lgamma, range(1, max(n for _, n in todo) + 2))])
    start = 0
    while start < len(todo):
        end = start + 1  # todo is sorted by k: the batch's widest row is its last
        while end < len(todo) and (end + 1 - start) * (todo[end][0] + 1) <= cells:
            end += 1
        batch = todo[start:end]
        k = np.array([r[0] for r in batch])
        n = np.array([r[1] for r in batch])
        i = np.arange(k[-1] + 1)
        term = i[None, :] <= k[:, None]  # the terms i = 0..k of each row
        rest = np.where(term, n[:, None] - i[None, :], 0)
        # lgamma(n + 1) - lgamma(i + 1) - lgamma(n - i + 1): binom_cdf's left-to-right order
        base = np.where(term, lgamma[n + 1][:, None] - lgamma[i + 1][None, :]
                        - lgamma[rest + 1], -math.inf)
        lo, hi = k / n, np.ones(len(batch))
        for _ in range(60):
            mid = (lo + hi) / 2
            below = _cdf_batch(base, i, rest, mid) > 1 - confidence
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out.update(zip(batch, hi.tolist(), strict=True))
        start = end
    return out


def _cdf_batch(base: np.ndarray, i: np.ndarray, rest: np.ndarray, p: np.ndarray) -> np.ndarray:
    """binom_cdf(k, n, p) of each row of `_upper_bounds`' batch (k < n), p one per row."""
    import numpy as np

    ps = p.tolist()
    inside = [0.0 < x < 1.0 for x in ps]
    lp = np.array([math.log(x) if ok else 0.0 for x, ok in zip(ps, inside, strict=True)])
    lq = np.array([math.log1p(-x) if ok else 0.0 for x, ok in zip(ps, inside, strict=True)])
    log_term = base + i[None, :] * lp[:, None] + rest * lq[:, None]
    live = log_term > _UNDERFLOW
    term = np.zeros_like(log_term)
    term[live] = np.fromiter(map(math.exp, log_term[live].tolist()), dtype=np.float64,
                             count=int(live.sum()))
    total = np.minimum(1.0, np.cumsum(term, axis=1)[:, -1])  # += from i = 0, as binom_cdf
    return np.where(p <= 0.0, 1.0, np.where(p >= 1.0, 0.0, total))


def _cluster_bounds(at: np.ndarray, order: np.ndarray, kept: np.ndarray, wrong: np.ndarray,
                    families: Sequence[str], confidence: float, resamples: int,
                    seed: int) -> list[float]:
    """The family bootstrap's bound per threshold: `at` is where each threshold's hits start
    in the sorted scores (kept[order] are the pairs' indices, in that order)."""
    import numpy as np

    names = sorted(set(families))
    index = {f: i for i, f in enumerate(names)}
    fam = np.array([index[f] for f in families], dtype=np.int64)
    cuts, column = np.unique(at, return_inverse=True)
    # each pair counts in every column whose cut is at or below its place in the sorted scores
    pairs = kept[order]
    last = np.searchsorted(cuts, np.arange(len(pairs)), side="right") - 1
    served = last >= 0
    cell = fam[pairs[served]] * len(cuts) + last[served]
    size = len(names) * len(cuts)
    counts = [np.bincount(cell, weights=w, minlength=size).astype(np.float64)
              .reshape(len(names), len(cuts)) for w in (None, wrong[pairs[served]])]
    hits, false = (np.cumsum(c[:, ::-1], axis=1)[:, ::-1] for c in counts)
    rate = _family_rates(hits, false, len(names), resamples, seed)
    bound = np.quantile(rate, confidence, axis=0)[column.reshape(-1)]
    return [float(x) for x in bound]


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
    return _family_rates(hits, false, len(names), resamples, seed)


def _family_rates(hits: np.ndarray, false: np.ndarray, families: int, resamples: int,
                  seed: int) -> np.ndarray:
    """`_resampled_rates` from the hits and false hits of each family (sorted by name) and
    column: the draws depend on the number of families and the seed only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = rng.multinomial(families, [1 / families] * families, size=resamples)
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
