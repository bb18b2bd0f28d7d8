"""A bound on in-flight upstream requests, with a bounded wait: never an unbounded queue."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from proxy.errors import TooManyRequests
from proxy.metrics import Metrics


class Admission:
    def __init__(self, limit: int, max_waiting: int, timeout: float, metrics: Metrics) -> None:
        self.limit = limit
        self.max_waiting = max_waiting
        self.timeout = timeout
        self.metrics = metrics
        self.inflight = 0
        self._waiters = 0
        self._sem = asyncio.Semaphore(limit)
        self.retry_after = str(max(1, math.ceil(timeout)))

    def _refuse(self, why: str) -> TooManyRequests:
        self.metrics.rejected.inc()
        return TooManyRequests(f"the proxy is at capacity ({self.limit} requests in flight, "
                               f"{why}); retry later", headers={"Retry-After": self.retry_after})

    async def acquire(self) -> None:
        if self._sem.locked():
            if self._waiters >= self.max_waiting:
                raise self._refuse(f"{self._waiters} waiting")
            self._waiters += 1
            self.metrics.waiting.inc()
            try:
                await asyncio.wait_for(self._sem.acquire(), self.timeout)
            except TimeoutError:
                raise self._refuse(f"no slot within {self.timeout:g} s") from None
            finally:
                self._waiters -= 1
                self.metrics.waiting.dec()
        else:
            await self._sem.acquire()
        self.inflight += 1
        self.metrics.inflight.inc()

    def release(self) -> None:
        self.inflight -= 1
        self.metrics.inflight.dec()
        self._sem.release()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()
