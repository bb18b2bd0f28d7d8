import itertools
import math

import numpy as np
import pytest

from loadtest import schedule


def test_poisson_offsets_are_seeded_and_rescaled_to_the_rate():
    a = list(schedule.offsets(10.0, 1.0, seed=3, count=200))
    b = list(schedule.offsets(10.0, 1.0, seed=3, count=200))
    c = list(schedule.offsets(10.0, 1.0, seed=4, count=200))
    assert a == b and a != c
    assert a[-1] == pytest.approx(20.0)  # count / rate, as vLLM normalises
    assert all(x < y for x, y in itertools.pairwise(a))


def test_burstiness_changes_the_spread_not_the_mean():
    def cv(burst: float) -> float:
        g = np.diff([0.0, *itertools.islice(schedule.offsets(5.0, burst, seed=1), 5000)])
        assert g.mean() == pytest.approx(0.2, rel=0.08)
        return float(g.std() / g.mean())

    assert cv(1.0) == pytest.approx(1.0, rel=0.1)         # Poisson: CV 1
    assert cv(0.25) == pytest.approx(2.0, rel=0.15)       # gamma: CV = 1/sqrt(shape)
    assert cv(math.inf) == pytest.approx(0.0, abs=1e-9)   # constant gaps


def test_infinite_rate_sends_everything_at_once():
    assert list(schedule.offsets(math.inf, count=3)) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_bad_rate_or_burstiness(rate, burst):
    with pytest.raises(ValueError, match="must be > 0"):
        next(schedule.offsets(rate, burst))
