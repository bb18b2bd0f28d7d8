"""Kept: an async value asked once at a time and kept a while. Every caller meanwhile shares
the one call in flight (its failure too, which is not kept); a caller that leaves does not
cancel it; the answer is served again for `kept` seconds after it came. The open routes whose
every request was an upstream call (GET /version, GET /ready) use it, so a flood of them costs
one call at a time. Built by the app's lifespan, closed at its end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    def __init__(self, ask: Callable[[], Awaitable[T]], kept: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask  # the call (an upstream one)
        self._kept = kept
        self._clock = clock
        self._held: tuple[T, float] | None = None  # the last answer, when it came
        self._asking: asyncio.Task[T] | None = None  # the one call in flight

    async def get(self) -> T:
        """The answer kept, else the call in flight (started when there is none)."""
        held = self._held
        if held is not None and self._clock() - held[1] <= self._kept:
            return held[0]
        if self._asking is None:
            self._asking = asyncio.create_task(self._call())
            # a failure every caller left before is read here, not reported as never retrieved
            self._asking.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(self._asking)  # a caller that leaves does not cancel it

    async def _call(self) -> T:
        # The call itself, not its waiters, keeps its answer and clears itself when it ends:
        # an answer nobody stayed for is kept from when it came, never served later as new.
        try:
            value = await self._ask()
        finally:
            if self._asking is asyncio.current_task():
                self._asking = None
        self._held = (value, self._clock())
        return value

    async def aclose(self) -> None:
        """At shutdown: the call in flight, if any, cancelled and awaited."""
        asking, self._asking = self._asking, None
        if asking is not None:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
