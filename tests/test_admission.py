import asyncio

import pytest

from proxy.admission import Admission
from proxy.errors import TooManyRequests
from proxy.metrics import Metrics


async def test_waits_for_a_slot_then_gets_it():
    adm = Admission(limit=1, max_waiting=1, timeout=30, metrics=Metrics())
    await adm.acquire()
    waiter = asyncio.ensure_future(adm.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    adm.release()
    await waiter
    assert adm.inflight == 1


async def test_too_many_waiting_is_429_with_retry_after():
    adm = Admission(limit=1, max_waiting=1, timeout=30, metrics=Metrics())
    await adm.acquire()
    waiter = asyncio.ensure_future(adm.acquire())
    await asyncio.sleep(0)
    with pytest.raises(TooManyRequests) as info:
        await adm.acquire()
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "30"
    waiter.cancel()


async def test_the_wait_is_bounded():
    adm = Admission(limit=1, max_waiting=5, timeout=0.01, metrics=Metrics())
    async with adm.slot():
        with pytest.raises(TooManyRequests, match="no slot within"):
            await adm.acquire()
    assert adm.inflight == 0
    async with adm.slot():
        assert adm.inflight == 1


async def test_no_waiting_at_all():
    adm = Admission(limit=2, max_waiting=0, timeout=5, metrics=Metrics())
    await adm.acquire()
    await adm.acquire()
    with pytest.raises(TooManyRequests):
        await adm.acquire()
