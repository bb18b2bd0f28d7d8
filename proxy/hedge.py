"""Hedged upstream calls: while the semantic tier embeds and searches the question (~10 ms of
CPU), the upstream call is already on its way. A hit cancels it (vLLM aborts the request after
a few milliseconds of prefill); a miss goes on with it and loses no time to the cache.
PROXY_CACHE_HEDGE=off makes every miss wait for the whole lookup first (bench/cache_cost.py
measures both)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from proxy.metrics import Metrics

T = TypeVar("T")


class Hedge(Generic[T]):
    def __init__(self, start: Callable[[], Coroutine[Any, Any, T]],
                 close: Callable[[T], Awaitable[None]] | None, metrics: Metrics) -> None:
        self._start = start
        self._close = close  # releases what a finished call holds (an open stream)
        self._metrics = metrics
        self._task: asyncio.Task[T] | None = None

    def __call__(self) -> None:
        """The cache's hook: the exact tier missed, the semantic search begins."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._start())

    def work(self) -> Awaitable[T]:
        """The upstream call to wait for: the hedged one if it started, else a new one."""
        if self._task is None:
            return self._start()
        self._metrics.hedged.labels("used").inc()
        return self._task

    async def cancel(self) -> None:
        """Not needed after all (a hit, or the lookup failed): stop the call, free its slot."""
        task = self._task
        if task is None:
            return
        self._metrics.hedged.labels("cancelled").inc()
        task.cancel()
        await asyncio.wait((task,))
        if task.cancelled() or task.exception() is not None:
            return
        if self._close is not None:
            await self._close(task.result())
