"""vLLM's GET /version answer, asked once at a time and kept a while: the route is open (no
key, no admission, no key limits), and each request was an upstream call, so anyone could keep
the upstream connection pool busy (found by a review). Built by the app's lifespan."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from proxy.kept import Kept

VERSION_KEPT = 60.0  # seconds an answer of vLLM's GET /version is served again


class VersionCache(Kept[bytes]):
    """vLLM's answer (the body): one upstream call at a time, shared by every request meanwhile
    (its failure too, not kept), kept `kept` seconds."""

    def __init__(self, ask: Callable[[], Awaitable[bytes]], kept: float = VERSION_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ask, kept, clock)
