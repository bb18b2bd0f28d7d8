"""Several vLLM base URLs: the healthy ones, and a routing policy (proxy/routing/) that picks.

Health is passive: a connect error marks an upstream down for a back-off; the next success
(or a /ready probe that answers) marks it up again. The policy sees only the healthy ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from proxy.routing.backend import Backend
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.protocol import Choice, Policy


class Balancer:
    def __init__(self, urls: tuple[str, ...], backoff: float, policy: Policy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backends = [Backend(url) for url in urls]
        self.backoff = backoff
        self.clock = clock
        self.policy: Policy = policy or LeastLoaded(clock)

    def choose(self, key: object = None, exclude: Collection[Backend] = ()) -> Choice | None:
        """The policy's pick among the healthy ones; if none is healthy, the one whose back-off
        ends first (so a recovered upstream is found without waiting); None if all excluded."""
        now = self.clock()
        healthy = [b for b in self.backends if b not in exclude and b.is_up(now)]
        if healthy:
            return self.policy.choose(healthy, key)
        rest = [b for b in self.backends if b not in exclude]
        first = min(rest, key=lambda b: b.down_until, default=None)
        return None if first is None else Choice(first)

    def mark_down(self, backend: Backend, error: str) -> None:
        backend.down_until = self.clock() + self.backoff
        backend.failures += 1
        backend.last_error = error

    def hold(self, backend: Backend, seconds: float) -> None:
        """A replica marked down stays down `seconds` from now at least (routing/health.py)."""
        now = self.clock()
        if not backend.is_up(now):
            backend.down_until = max(backend.down_until, now + seconds)

    def mark_up(self, backend: Backend) -> None:
        backend.lost = 0
        if backend.down_until:
            backend.down_until = 0.0
            backend.last_error = None

    def state(self) -> list[dict[str, object]]:
        now = self.clock()
        return [{"url": b.url, "state": "up" if b.is_up(now) else "down", "inflight": b.inflight,
                 "failures": b.failures, "last_error": b.last_error} for b in self.backends]
