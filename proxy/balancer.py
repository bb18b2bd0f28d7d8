"""Several vLLM base URLs: pick the healthy one with the fewest in-flight requests.

Health is passive: a connect error marks an upstream down for a back-off; the next success
(or a /ready probe that answers) marks it up again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Backend:
    url: str
    inflight: int = 0
    down_until: float = 0.0
    failures: int = 0
    last_error: str | None = None

    def is_up(self, now: float) -> bool:
        return self.down_until <= now


class Balancer:
    def __init__(self, urls: tuple[str, ...], backoff: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backends = [Backend(url) for url in urls]
        self.backoff = backoff
        self.clock = clock

    def pick(self, exclude: tuple[Backend, ...] = ()) -> Backend | None:
        """Fewest in-flight among the healthy ones; if none is healthy, the one whose back-off
        ends first (so a recovered upstream is found without waiting); None if all excluded."""
        now = self.clock()
        best: Backend | None = None
        for b in self.backends:
            if b in exclude or not b.is_up(now):
                continue
            if best is None or b.inflight < best.inflight:
                best = b
        if best is None:
            rest = [b for b in self.backends if b not in exclude]
            best = min(rest, key=lambda b: b.down_until, default=None)
        return best

    def mark_down(self, backend: Backend, error: str) -> None:
        backend.down_until = self.clock() + self.backoff
        backend.failures += 1
        backend.last_error = error

    def mark_up(self, backend: Backend) -> None:
        if backend.down_until:
            backend.down_until = 0.0
            backend.last_error = None

    def state(self) -> list[dict[str, object]]:
        now = self.clock()
        return [{"url": b.url, "state": "up" if b.is_up(now) else "down", "inflight": b.inflight,
                 "failures": b.failures, "last_error": b.last_error} for b in self.backends]
