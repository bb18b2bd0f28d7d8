import numpy as np

from tools.judge.kindbound import fixed_sequence, served, worst_kind_bounds


def pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """40 families of 10 pairs: 5 equal (score 5), 4 'entity' near misses the judge rejects
    (score -5) and 1 'direction' near miss it accepts (score 4)."""
    same, kind, score, fam = [], [], [], []
    for f in range(40):
        for i in range(10):
            equal, direction = i < 5, i == 9
            same.append(equal)
            kind.append("paraphrase" if equal else "direction" if direction else "entity")
            score.append(5.0 if equal else 4.0 if direction else -5.0)
            fam.append(f"f{f}")
    return np.array(score), np.array(same), np.array(kind), np.array(fam)


def test_a_kind_rare_in_the_mix_decides_the_worst_kind_rate() -> None:
    s, same, kind, _ = pairs()
    natural, worst, recall = served(s, same, kind, 3.0)
    # dev's mix: 1 false hit in 6 hits; all 5 near misses of the direction kind: 5 in 10
    assert (round(natural, 3), round(worst, 3), recall) == (0.167, 0.5, 1.0)
    assert served(s, same, kind, 4.5) == (0.0, 0.0, 1.0)


def test_the_worst_kind_bound_refuses_a_threshold_that_passes_one_kind() -> None:
    s, same, kind, fam = pairs()
    grid = np.array([4.5, 3.0])
    bounds = worst_kind_bounds(s, same, kind, fam, grid, resamples=200, seed=0)
    assert bounds[0] == 0.0 and bounds[1] >= 0.5
    hits = np.array([(s >= t).sum() for t in grid])
    assert fixed_sequence(grid, bounds, hits, 0.25) == 4.5  # 3.0's bound stops the sequence
    assert fixed_sequence(grid, bounds, np.array([0, 0]), 0.25) == float("inf")  # no power
