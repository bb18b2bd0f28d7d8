"""wait_for: poll a condition until it holds (what a test waits on in another process or
thread, which has no event to await), failing with what never happened. wait_for_async is the
same for a test on the event loop (a condition read from Redis, a metric the loop's own tasks
count): its check is awaited and its pauses are the loop's, which the sync one would block."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_for(check: Callable[[], bool], what: str, deadline: float = 30.0,
             every: float = 0.05) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(every)


async def wait_for_async(check: Callable[[], Awaitable[bool]], what: str,
                         deadline: float = 30.0, every: float = 0.05) -> None:
    end = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(every)
