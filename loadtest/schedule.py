"""When to send: arrival offsets (seconds from the run's start). Nothing else."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np


def gaps(rate: float, burstiness: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """Inter-arrival gaps: gamma(shape=burstiness, scale=1/(rate*burstiness)); 1 = Poisson."""
    if math.isinf(burstiness):
        return np.full(n, 1.0 / rate)
    return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


def offsets(rate: float, burstiness: float = 1.0, seed: int = 0,
            count: int | None = None) -> Iterator[float]:
    """Send times from 0. With a known count the total is rescaled to count/rate, as vLLM does,
    so different seeds give the same mean rate; without one, gaps are drawn in blocks forever."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if math.isinf(rate):
        yield from itertools.repeat(0.0, count) if count is not None else itertools.repeat(0.0)
        return
    rng = np.random.default_rng(seed)
    if count is not None:
        cum = np.cumsum(gaps(rate, burstiness, rng, count))
        if count and cum[-1] > 0:
            cum *= (count / rate) / cum[-1]
        yield from (float(x) for x in cum)
        return
    t = 0.0
    while True:
        for g in gaps(rate, burstiness, rng, 1024):
            t += float(g)
            yield t
