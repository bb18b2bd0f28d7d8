import numpy as np

from tools.judge.sweep import auc, metrics


def test_auc_counts_ties_half_and_matches_the_definition() -> None:
    scores = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
    y = np.array([True, True, False, False, True])
    pairs = [(p, n) for p in scores[y] for n in scores[~y]]
    expected = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert auc(scores, y) == expected


def test_recall_at_precision_takes_the_deepest_cut_that_keeps_it() -> None:
    # ranked: T T F T F -> precision 1, 1, .67, .75, .6; 3 positives in all
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    y = np.array([True, True, False, True, False])
    got = metrics(scores, y)
    assert got["recall_at_p0.99"] == 2 / 3
    assert got["recall_at_p0.9"] == 2 / 3
    assert metrics(scores, np.array([False, True, True, True, True]))["recall_at_p0.95"] == 0.0
