"""tests/support/waiting.py's wait_for_async: a poll on the event loop that lets the loop run
while it waits (the sync wait_for would block it, and with it what the test waits for)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.waiting import wait_for_async


async def test_it_returns_once_the_loop_has_made_the_check_hold() -> None:
    done: list[bool] = []
    checks = 0

    async def check() -> bool:
        nonlocal checks
        checks += 1
        return bool(done)

    asyncio.get_running_loop().call_soon(done.append, True)  # runs only if the loop runs
    async with asyncio.timeout(5):
        await wait_for_async(check, "the loop ran", deadline=5, every=0.01)
    assert checks >= 2  # it did wait: the first check came before the loop ran


async def test_past_its_deadline_it_fails_with_what_never_happened() -> None:
    async def never() -> bool:
        return False

    async with asyncio.timeout(5):
        with pytest.raises(AssertionError, match="never happened: the impossible"):
            await wait_for_async(never, "the impossible", deadline=0.05, every=0.01)
