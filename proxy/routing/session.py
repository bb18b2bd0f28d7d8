"""session: the requests of one session (the session header, else the body's `user`) go to the
replica rendezvous hashing ranks first for it, so every proxy agrees without shared state and a
replica that leaves moves only its own sessions. When that replica's load penalty (load.py)
exceeds the whole affinity gain (1), the session spills to the next in its ranking that does
not, so a spilled session still lands on one place. No session: least-loaded."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from proxy.routing.backend import Backend
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.load import LoadGuard
from proxy.routing.protocol import Choice, RouteRequest
from proxy.routing.rendezvous import rank


class Session:
    name = "session"
    wants_tokens = False

    def __init__(self, guard: LoadGuard, clock: Callable[[], float] = time.monotonic) -> None:
        self.guard = guard
        self.clock = clock
        self.fallback = LeastLoaded(clock)

    async def key(self, request: RouteRequest | None) -> object:
        return None if request is None else request.session

    def choose(self, candidates: Sequence[Backend], key: object) -> Choice:
        if not isinstance(key, str):
            return self.fallback.choose(candidates, None)
        places = rank(key, candidates)
        order = sorted(range(len(candidates)), key=lambda i: places[i])
        penalties = self.guard.penalties(self.guard.loads(candidates, self.clock()))
        owner = candidates[order[0]]
        # the least loaded one has no penalty, so some candidate always qualifies
        chosen = candidates[next(i for i in order if penalties[i] <= 1.0)]
        return Choice(chosen, affinity=chosen is owner,
                      spilled_from=None if chosen is owner else owner)
