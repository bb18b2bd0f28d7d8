"""session: the requests of one session (the session header, else the body's `user`) go to a
replica that already served it. A new session's home is the replica rendezvous hashing ranks
first for it, so every proxy agrees without shared state and a replica that leaves moves only its
own sessions. Each home scores the whole affinity gain (1) minus its load penalty (load.py), any
other replica minus its penalty alone; the best score wins, ties by the ranking. So a session
spills only when its home carries about twice the idlest replica's load, and the replica it
spilled to becomes a second home: a hot session then spreads over both by load instead of
piling onto one (the hot-spot case), while most sessions keep one home. A session's homes are
the replicas among its last RECENT picks, so a home it stopped using (its KV cache long gone)
drops out and a session that spilled once returns to one home (a review: homes only grew, and
under long imbalance a session ended up homed everywhere, with no affinity left). The sessions
are a bounded LRU. No session: least-loaded."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from hashlib import blake2b

from proxy.routing.backend import Backend
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.load import LoadGuard
from proxy.routing.protocol import Choice, RouteRequest
from proxy.routing.rendezvous import rank

RECENT = 8  # a session's homes: the replicas among its last RECENT picks


class Session:
    name = "session"
    wants_tokens = False

    def __init__(self, guard: LoadGuard, clock: Callable[[], float] = time.monotonic,
                 capacity: int = 65536) -> None:
        self.guard = guard
        self.clock = clock
        self.capacity = capacity
        self.homes: OrderedDict[str, deque[str]] = OrderedDict()
        self.fallback = LeastLoaded(clock)

    async def key(self, request: RouteRequest | None) -> object:
        """A digest of the session, not its text: the homes keep their keys, and a session is
        a header or the body's `user`, megabytes if a client likes (found by a review: 64 MiB
        kept for 64 requests); hashed once here, not per candidate at every pick."""
        if request is None or request.session is None:
            return None
        return blake2b(request.session.encode("utf-8", "surrogatepass"),
                       digest_size=16).hexdigest()

    def choose(self, candidates: Sequence[Backend], key: object) -> Choice:
        if not isinstance(key, str):
            return self.fallback.choose(candidates, None)
        places = rank(key, candidates)
        owner = min(range(len(candidates)), key=lambda i: places[i])
        known = self.homes.get(key) or deque(maxlen=RECENT)
        homes = {i for i, b in enumerate(candidates) if b.url in known} or {owner}
        penalties = self.guard.penalties(self.guard.loads(candidates, self.clock()))
        best = max(range(len(candidates)), key=lambda i: (
            (i in homes) - penalties[i], -places[i]))
        chosen = candidates[best]
        self._remember(key, known, chosen.url)
        first = min(homes, key=lambda i: places[i])
        return Choice(chosen, affinity=best in homes,
                      spilled_from=None if best in homes else candidates[first])

    def refused(self, choice: Choice, key: object) -> None:
        """The pick did not take: not a home (a review: a replica that refused the connection
        was kept as one)."""
        recent = self.homes.get(key) if isinstance(key, str) else None
        if recent and recent[-1] == choice.backend.url:
            recent.pop()

    def _remember(self, key: str, recent: deque[str], url: str) -> None:
        recent.append(url)
        self.homes[key] = recent
        self.homes.move_to_end(key)
        while len(self.homes) > self.capacity:
            self.homes.popitem(last=False)
