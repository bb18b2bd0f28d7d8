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


async def _pending(task: asyncio.Future[None]) -> bool:
    for _ in range(5):
        await asyncio.sleep(0)
    return not task.done()


async def test_a_tenant_holds_no_more_than_its_share_and_others_pass_it():
    adm = Admission(limit=4, max_waiting=10, timeout=30, metrics=Metrics(), tenant_share=0.5)
    await adm.acquire("b")
    await adm.acquire("b")
    b3 = asyncio.ensure_future(adm.acquire("b"))  # over b's share of 2: waits
    assert await _pending(b3)
    await adm.acquire("a")  # a is served although b queued first
    assert adm.held == {"a": 1, "b": 2}
    adm.release("b")
    await b3
    assert adm.held == {"a": 1, "b": 2} and adm.inflight == 3


async def test_a_waiting_tenant_over_its_share_does_not_block_the_queue():
    adm = Admission(limit=2, max_waiting=10, timeout=30, metrics=Metrics(), tenant_share=0.5)
    await adm.acquire("b")
    await adm.acquire("a")
    b2 = asyncio.ensure_future(adm.acquire("b"))
    a2 = asyncio.ensure_future(adm.acquire("a"))
    assert await _pending(b2) and await _pending(a2)
    adm.release("a")  # the free slot goes to a (b is at its share), past b's earlier request
    await a2
    assert await _pending(b2)
    adm.release("b")
    await b2
    assert adm.held == {"a": 1, "b": 1}


async def test_a_batch_weighs_its_prompts_up_to_the_share():
    adm = Admission(limit=8, max_waiting=10, timeout=30, metrics=Metrics(), tenant_share=0.5)
    await adm.acquire("a", weight=3)
    assert adm.inflight == 3
    await adm.acquire("b", weight=100)  # capped at the share: 4
    assert adm.inflight == 7
    late = asyncio.ensure_future(adm.acquire("c", weight=2))
    assert await _pending(late)
    adm.release("a", weight=3)
    await late
    assert adm.held == {"b": 4, "c": 2}


async def test_a_cancelled_waiter_leaves_no_slot_behind():
    adm = Admission(limit=1, max_waiting=10, timeout=30, metrics=Metrics())
    await adm.acquire()
    waiter = asyncio.ensure_future(adm.acquire())
    assert await _pending(waiter)
    waiter.cancel()
    adm.release()  # before the cancelled task has run again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert adm.inflight == 0 and adm.held == {}
    await adm.acquire()
    assert adm.inflight == 1


async def test_one_key_fills_no_more_than_its_share_of_the_queue():
    # found by a review: a key at its share could queue max_waiting requests, and every other
    # key was then refused at once, holding no slot at all
    adm = Admission(limit=4, max_waiting=8, timeout=30, metrics=Metrics(), tenant_share=0.5)
    for _ in range(2):
        await adm.acquire("b")
    for _ in range(2):
        await adm.acquire("c")
    queued = [asyncio.ensure_future(adm.acquire("b")) for _ in range(4)]  # b's 4 of 8
    for q in queued:
        assert await _pending(q)
    with pytest.raises(TooManyRequests, match="this key has 4 requests waiting"):
        await adm.acquire("b")
    a = asyncio.ensure_future(adm.acquire("a"))  # a holds nothing: it may wait
    assert await _pending(a)
    adm.release("c")
    await a
    assert adm.held["a"] == 1
    for q in queued:
        q.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert adm.queued == {}


async def test_the_refusal_says_how_many_slots_are_in_use():
    adm = Admission(limit=4, max_waiting=0, timeout=30, metrics=Metrics(), tenant_share=0.5)
    await adm.acquire("b")
    await adm.acquire("b")
    with pytest.raises(TooManyRequests, match=r"2 of 4 slots in use"):
        await adm.acquire("b")
