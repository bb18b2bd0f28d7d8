import asyncio

import pytest

from proxy.admission import Admission, CountGate
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


async def _ran() -> None:
    """Until the tasks made before this call have run up to their first wait: the loop starts
    tasks in the order they were made, so one made now ends after them (no sleep)."""
    async def nothing() -> None:
        return None
    await asyncio.ensure_future(nothing())


async def test_a_batch_held_back_by_the_total_alone_is_not_starved_by_singles():
    # found by a review: a waiter needing 2 slots, within its key's share, saw each freed slot
    # taken by a later single of another key; with two keys sending singles continuously it
    # waited until its timeout although it was first in line
    adm = Admission(limit=2, max_waiting=10, timeout=2, metrics=Metrics(), tenant_share=1.0)
    await adm.acquire("a")
    await adm.acquire("b")
    state: list[str] = []

    async def singles(key: str) -> None:  # frees its slot and sends its next single at once
        for _ in range(3):
            adm.release(key)
            await adm.acquire(key)
        state.append(key)

    clients = [asyncio.ensure_future(singles(k)) for k in ("a", "b")]
    await adm.acquire("c", weight=2)  # queued before either client runs; before: 429
    assert adm.held == {"c": 2} and state == []  # served once a and b had each freed a slot
    adm.release("c", weight=2)
    await asyncio.gather(*clients)
    assert adm.held == {"a": 1, "b": 1} and adm.queued == {}


@pytest.mark.parametrize("leaves", ["cancelled", "timed out"])
async def test_a_waiter_that_leaves_gives_the_slots_it_reserved_at_once(leaves: str):
    # the batch's reservation must not outlive it: whoever it held back is served when it
    # leaves, with no other release
    adm = Admission(limit=2, max_waiting=10, timeout=30, metrics=Metrics(), tenant_share=1.0)
    await adm.acquire("a")
    await adm.acquire("b")
    if leaves == "timed out":
        adm.timeout = 0.01  # the batch's wait only (read when its wait starts)
    batch = asyncio.ensure_future(adm.acquire("c", weight=2))
    await _ran()
    adm.timeout = 30
    single = asyncio.ensure_future(adm.acquire("d"))
    await _ran()
    adm.release("a")  # the batch reserves the freed slot: the single, queued after it, waits
    assert adm.held == {"b": 1} and not single.done()
    late = asyncio.ensure_future(adm.acquire("e"))  # nor does a request arriving now take it
    await _ran()
    assert adm.held == {"b": 1} and not late.done()
    if leaves == "cancelled":
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
    else:
        with pytest.raises(TooManyRequests, match="no slot within"):
            await batch
    assert adm.held == {"b": 1, "d": 1}  # the single got the slot as the batch left
    await single
    adm.release("b")
    await late
    assert adm.held == {"d": 1, "e": 1} and adm.queued == {}


async def test_a_batch_over_its_keys_share_reserves_nothing_until_within_it():
    # a key over its share waits while other keys pass it, even when the total is short too;
    # once within its share, only the total holds it back, and it reserves what frees up
    adm = Admission(limit=4, max_waiting=10, timeout=30, metrics=Metrics(), tenant_share=0.5)
    await adm.acquire("b")
    await adm.acquire("b")
    await adm.acquire("c")
    batch = asyncio.ensure_future(adm.acquire("c", weight=2))  # c would hold 3 of its 2
    await _ran()
    single = asyncio.ensure_future(adm.acquire("a"))
    await _ran()
    assert single.done() and adm.held == {"a": 1, "b": 2, "c": 1}  # a passed the batch
    adm.release("c")  # within c's share now; 2 slots needed, 1 free: it reserves
    late = asyncio.ensure_future(adm.acquire("a"))
    await _ran()
    assert not late.done() and adm.held == {"a": 1, "b": 2}
    adm.release("b")
    await batch
    assert adm.held == {"a": 1, "b": 1, "c": 2} and not late.done()
    adm.release("c", weight=2)
    await late
    assert adm.held == {"a": 2, "b": 1}


async def test_the_count_gate_gives_a_key_no_more_than_its_share_of_turns():
    # found by a review: one key could take every counting turn, and other keys' requests
    # (cache hits too, which need a count but no slot) waited behind it
    gate = CountGate(Admission(limit=2, max_waiting=2, timeout=30, metrics=Metrics(),
                               tenant_share=0.5))  # 4 turns, 2 a key
    inside: list[str] = []
    leave = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1")}

    async def count(name: str) -> None:
        async with gate.hold(name[0]):
            inside.append(name)
            await leave[name].wait()
            inside.remove(name)

    a = [asyncio.ensure_future(count(name)) for name in ("a1", "a2", "a3")]
    await _ran()
    assert inside == ["a1", "a2"]  # a's third waits, 2 turns still free
    b = asyncio.ensure_future(count("b1"))
    await _ran()
    assert inside == ["a1", "a2", "b1"]  # b passes a's third at once
    leave["a1"].set()
    await a[0]
    await _ran()
    assert inside == ["a2", "b1", "a3"]  # a's third served when one of a's turns ended
    for event in leave.values():
        event.set()
    await asyncio.gather(b, *a)
    assert gate.inflight == 0 and gate.held == {}


async def test_a_count_past_its_keys_share_is_refused_as_admission_refuses():
    adm = Admission(limit=1, max_waiting=1, timeout=0.01, metrics=Metrics(), tenant_share=0.5)
    gate = CountGate(adm)  # 2 turns, 1 a key
    async with gate.hold("a"):
        with pytest.raises(TooManyRequests, match="count tokens at vLLM") as info:
            async with gate.hold("a"):
                pass
        async with gate.hold("b"):
            assert gate.held == {"a": 1, "b": 1}
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    assert gate.inflight == 0 and gate.held == {}
