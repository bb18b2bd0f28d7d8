"""vLLM's GET /version answer, asked once at a time and kept a while: the route is open (no
key, no admission, no key limits), and each request was an upstream call, so anyone could keep
the upstream connection pool busy (found by a review). Built by the app's lifespan."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

VERSION_KEPT = 60.0  # seconds an answer of vLLM's GET /version is served again


class VersionCache:
    def __init__(self, ask: Callable[[], Coroutine[Any, Any, bytes]], kept: float = VERSION_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask  # the upstream call
        self._kept = kept
        self._clock = clock
        self._body: bytes | None = None
        self._at = 0.0
        self._asking: asyncio.Task[bytes] | None = None  # the one upstream call in flight

    async def get(self) -> bytes:
        """vLLM's answer: one upstream call at a time, shared by every request meanwhile (its
        failure too), kept `kept` seconds."""
        if self._body is not None and self._clock() - self._at <= self._kept:
            return self._body
        if self._asking is None:
            self._asking = asyncio.create_task(self._ask())
        asking = self._asking
        try:
            body = await asyncio.shield(asking)  # a client that leaves does not cancel it
        finally:
            if asking.done() and self._asking is asking:
                self._asking = None
        self._body, self._at = body, self._clock()
        return body

    async def aclose(self) -> None:
        """At shutdown: the call in flight, if any, cancelled and awaited."""
        asking, self._asking = self._asking, None
        if asking is not None:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
