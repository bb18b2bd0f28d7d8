from __future__ import annotations

import math

import pytest

from proxy.cache.calibrate import Row, binom_cdf, interval, pick, start_hits, table, upper_bound


def test_binomial_cdf() -> None:
    assert binom_cdf(0, 3, 0.5) == pytest.approx(1 / 8)
    assert binom_cdf(1, 3, 0.5) == pytest.approx(4 / 8)
    assert binom_cdf(3, 3, 0.5) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [10, 300, 2000])
def test_upper_bound_with_no_events_has_a_closed_form(n: int) -> None:
    # P(X = 0 | p) = (1 - p)^n = 0.05  =>  p = 1 - 0.05^(1/n)
    assert upper_bound(0, n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-9)


def test_bounds_bracket_the_observed_rate() -> None:
    # reference values: scipy.stats.beta.ppf(0.95, k + 1, n - k) and the two-sided interval
    assert upper_bound(3, 800) == pytest.approx(0.0096633, abs=1e-6)
    low, high = interval(10, 100)
    assert low == pytest.approx(0.0490047, abs=1e-6)
    assert high == pytest.approx(0.1762226, abs=1e-6)
    assert interval(0, 50)[0] == 0.0
    assert upper_bound(5, 5) == 1.0 and upper_bound(0, 0) == 1.0


def test_table_counts_hits_and_false_hits() -> None:
    rows = table([0.9, 0.8, 0.7, 0.2], [True, True, False, True], [0.75, 0.5, 0.1])
    assert [(r.threshold, r.hits, r.false_hits) for r in rows] == [
        (0.75, 2, 0), (0.5, 3, 1), (0.1, 4, 1)]


def test_pick_tests_thresholds_from_the_top_and_stops_at_the_first_failure() -> None:
    rows = [Row(3.0, 600, 0, 0.005), Row(2.0, 1100, 0, 0.003), Row(1.0, 1300, 5, 0.009),
            Row(0.0, 1500, 20, 0.02), Row(-1.0, 1700, 8, 0.008)]
    # at 1 %, 3.0's 600 hits are too few for the test to have power (1049 needed): the
    # sequence starts at 2.0; -1.0 is under the rate again, but 0.0 above it failed
    assert pick(rows, 0.01) == 1.0
    assert pick(rows, 0.05) == -1.0  # 208 hits needed: all are tested, all pass
    assert pick([Row(2.0, 1100, 30, 0.04), *rows[2:]], 0.01) == math.inf  # the first fails
    assert pick([Row(5.0, 0, 0, 1.0), *rows[1:3]], 0.01) == 1.0  # no hits: no evidence
    assert pick(rows[:1], 0.01) == math.inf  # never enough hits


def test_the_sequence_starts_where_the_test_has_power() -> None:
    assert [start_hits(r) for r in (0.01, 0.1, 0.25)] == [1049, 103, 34]
    for rate in (0.01, 0.1, 0.25):  # from there on, half the rate's share of false hits passes
        n = start_hits(rate)
        assert all(upper_bound(math.floor(m * rate / 2), m) <= rate for m in range(n, n + 50))
        assert upper_bound(math.floor((n - 1) * rate / 2), n - 1) > rate
    # a handful of most confident pairs with one false hit no longer ends the sequence
    rows = [Row(5.0, 11, 1, 0.36), Row(4.0, 40, 2, 0.15), Row(3.0, 100, 10, 0.2)]
    assert pick(rows, 0.25) == 3.0


def test_a_family_that_errs_together_widens_the_bound() -> None:
    # 10 families of 10 pairs, every pair passes; one family is wrong throughout
    families = [f"f{i // 10}" for i in range(100)]
    same = [f != "f0" for f in families]
    scores = [1.0] * 100
    by_pair = table(scores, same, [0.5])[0]
    by_family = table(scores, same, [0.5], families=families)[0]
    assert (by_family.hits, by_family.false_hits) == (100, 10)
    assert by_pair.upper == pytest.approx(upper_bound(10, 100))  # ~0.16: pairs as trials
    # resampling families: drawing the bad one 3 times in 10 is within the 95 % quantile
    assert by_family.upper == pytest.approx(0.3)
    assert table(scores, same, [0.5], families=families) == [by_family]  # seeded


def test_family_bound_never_below_the_pair_bound() -> None:
    families = [f"f{i}" for i in range(200)]  # one pair per family: independent trials
    same = [i % 25 != 0 for i in range(200)]
    scores = [i / 200 for i in range(200)]
    rows = table(scores, same, [0.0, 0.5], families=families)
    plain = table(scores, same, [0.0, 0.5])
    for r, p in zip(rows, plain, strict=True):
        assert (r.hits, r.false_hits) == (p.hits, p.false_hits)
        assert r.upper >= p.upper


def test_family_interval_is_wider_when_a_family_errs_together() -> None:
    from proxy.cache.calibrate import family_interval, interval

    families = [f"f{i // 10}" for i in range(100)]  # ten families of ten pairs
    hit = [True] * 100
    wrong = [f == "f0" for f in families]  # one whole family wrong: 10 of 100
    low, high = family_interval(hit, wrong, families)
    plow, phigh = interval(10, 100)
    assert low < plow and high > phigh  # wider than treating pairs as trials
    assert low <= 0.1 <= high
    assert low == 0.0  # a resample without the bad family has no false hit
    assert family_interval(hit, wrong, families) == (low, high)  # seeded
    assert family_interval([False] * 100, wrong, families) == (0.0, 1.0)  # no hits: no evidence
    clean = family_interval(hit, [False] * 100, families)
    assert clean[0] == 0.0 and clean[1] == interval(0, 100)[1] > 0  # never narrower than pairs
    with pytest.raises(ValueError, match="non-empty"):
        family_interval([], [], [])


def reference_table(scores: list[float], same: list[bool], thresholds: list[float],
                    families: list[str] | None = None, resamples: int = 2000,
                    confidence: float = 0.95) -> list[Row]:
    """`table` written out: every pair tested at every threshold, one bisection per row, and
    the family bootstrap over a pairs x thresholds matrix (the implementation before it was
    vectorised)."""
    import functools

    import numpy as np

    bound = functools.cache(upper_bound)  # the same bisection, once per (k, n)
    ordered = sorted(thresholds, reverse=True)
    rows = []
    for t in ordered:
        hits = [y for s, y in zip(scores, same, strict=True) if s >= t]
        false = hits.count(False)
        rows.append(Row(t, len(hits), false, bound(false, len(hits), confidence)))
    if families is None:
        return rows
    passes = np.asarray(scores)[:, None] >= np.asarray(ordered)[None, :]
    bad = passes & ~np.asarray(same)[:, None]
    names = sorted(set(families))
    fam = np.array([names.index(f) for f in families])
    hits, false = np.zeros((len(names), len(ordered))), np.zeros((len(names), len(ordered)))
    np.add.at(hits, fam, passes)
    np.add.at(false, fam, bad)
    weights = np.random.default_rng(0).multinomial(
        len(names), [1 / len(names)] * len(names), size=resamples)
    h, f = weights @ hits, weights @ false
    rate = np.where(h > 0, f / np.maximum(h, 1), 1.0)
    cluster = [float(x) for x in np.quantile(rate, confidence, axis=0)]
    return [Row(r.threshold, r.hits, r.false_hits, max(r.upper, c))
            for r, c in zip(rows, cluster, strict=True)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_table_equals_the_reference_to_the_last_bit(seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 400
    same = (rng.random(n) < 0.55).tolist()
    # scores on a coarse grid (many ties, some at a threshold exactly), a few off the scale
    raw = np.round(rng.normal(np.where(same, 0.6, -0.4), 1.0), 1)
    raw[rng.choice(n, 6, replace=False)] = [math.inf, -math.inf, math.nan, math.nan, 9.0, -9.0]
    scores = raw.tolist()
    families = [f"f{int(x)}" for x in rng.integers(0, 23, n)]  # uneven families
    finite = raw[np.isfinite(raw)]
    grids = {
        "ensemble-like": np.round(np.arange(-4.0, 4.0, 0.05), 2).tolist(),
        "every score": sorted(set(finite.tolist())),
        "random, repeated": [*rng.uniform(-3, 3, 40).tolist(), 0.5, 0.5, -0.0, 0.0, 0.3,
                             math.inf, -math.inf, 100.0, -100.0],
        "one": [0.0],
    }
    for name, grid in grids.items():
        for fam, resamples, confidence in ((None, 0, 0.95), (families, 300, 0.95),
                                           (families, 2000, 0.9)):
            got = table(scores, same, grid, confidence=confidence, families=fam,
                        resamples=resamples)
            want = reference_table(scores, same, grid, fam, resamples, confidence)
            bad = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
            assert len(got) == len(want) and not bad, (name, fam is not None, bad[:3])
            assert all(type(r.hits) is int and type(r.false_hits) is int
                       and type(r.upper) is float for r in got), name


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 2), (0, 5000), (37, 1000), (2000, 5000),
                                      (4489, 8666), (99, 100), (3, 3), (0, 0)])
def test_the_batched_bisection_is_upper_bound_to_the_last_bit(k: int, n: int) -> None:
    from proxy.cache.calibrate import _upper_bounds

    pairs = [(k, n), (0, 7), (5, 300)]
    for confidence in (0.95, 0.975, 0.5):
        got = _upper_bounds(pairs, confidence, cells=4000)  # several batches
        assert got == {p: upper_bound(*p, confidence) for p in pairs}
