"""least-loaded: the replica with the least load (load.py); ties go round in turn, so an idle
pool still spreads requests instead of sending every one to the first replica."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from proxy.routing.backend import Backend
from proxy.routing.load import load
from proxy.routing.protocol import Choice, RouteRequest


class LeastLoaded:
    name = "least-loaded"
    wants_tokens = False

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.turn = 0

    async def key(self, request: RouteRequest | None) -> object:
        return None

    def choose(self, candidates: Sequence[Backend], key: object) -> Choice:
        return Choice(self.pick(candidates))

    def refused(self, choice: Choice, key: object) -> None:
        pass  # nothing recorded

    def pick(self, candidates: Sequence[Backend]) -> Backend:
        now = self.clock()
        loads = [load(b, now) for b in candidates]
        least = min(loads)
        tied = [b for b, x in zip(candidates, loads, strict=True) if x == least]
        chosen = tied[self.turn % len(tied)]
        self.turn += 1
        return chosen
