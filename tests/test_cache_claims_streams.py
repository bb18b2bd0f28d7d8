"""Single flight across replicas (claims.py), streams and JSON apart as within one replica
(lookup.py): a JSON answer does not answer a stream (serve.py: answered), so a stream never
waits for another replica's JSON leader; a JSON request still waits for another replica's
stream leader, whose answer answers it."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis as RawRedis

from proxy.cache.lookup import SemanticCache
from tests.cache_support import chat, completion
from tests.support.procs import Redis
from tests.test_cache_claims import Q, replica, still_waiting

pytestmark = pytest.mark.redis
REMOTE_WAITS = "proxy_cache_single_flight_remote_waits_total"


async def replicas(redis: Redis, n: int) -> tuple[list[SemanticCache], list[CollectorRegistry]]:
    registries = [CollectorRegistry() for _ in range(n)]
    return [await replica(redis, r) for r in registries], registries


async def test_a_stream_does_not_wait_for_another_replicas_json_leader(redis: Redis) -> None:
    # found by a review: the claim was one for both, so the stream waited for the JSON
    # leader's answer (up to PROXY_CACHE_WAIT_S), found it no answer for a stream, and went
    # upstream all the same
    (one, two, three), (_, reg_two, _) = await replicas(redis, 3)
    try:
        lead = await one.lookup(chat(Q))  # a JSON leader on replica one
        assert lead.status == "miss" and lead.ticket is not None
        stream = await asyncio.wait_for(two.lookup(chat(Q, stream=True)), 5)
        assert stream.status == "miss" and stream.ticket is not None  # it leads the streams
        assert (reg_two.get_sample_value(REMOTE_WAITS) or 0) == 0
        twin = asyncio.create_task(one.lookup(chat(Q, stream=True)))  # follows replica two's
        waiter = asyncio.create_task(three.lookup(chat(Q)))  # follows replica one's
        assert await still_waiting(twin) and await still_waiting(waiter)
        await one.store(lead.ticket, completion("git reset --soft HEAD~1"))
        hit = await asyncio.wait_for(waiter, 5)
        assert (hit.status, hit.tier) == ("hit", "exact") and hit.events is None
        assert not twin.done()  # the JSON answer does not answer it
        await two.store(stream.ticket, completion("git reset --soft HEAD~1", streamed=True))
        replayed = await asyncio.wait_for(twin, 5)
        assert (replayed.status, replayed.tier) == ("hit", "exact") and replayed.events
    finally:
        for cache in (one, two, three):
            await cache.aclose()


async def test_json_still_waits_for_another_replicas_stream_leader(redis: Redis) -> None:
    (one, two), (_, reg_two) = await replicas(redis, 2)
    try:
        lead = await one.lookup(chat(Q, stream=True))  # a stream leader on replica one
        assert lead.status == "miss" and lead.ticket is not None
        waiter = asyncio.create_task(two.lookup(chat(Q)))
        twin = asyncio.create_task(two.lookup(chat(Q, stream=True)))
        assert await still_waiting(waiter) and await still_waiting(twin)
        await one.store(lead.ticket, completion("git reset --soft HEAD~1", streamed=True))
        hit, replayed = await asyncio.wait_for(asyncio.gather(waiter, twin), 5)
        assert (hit.status, hit.tier) == ("hit", "exact")
        assert (replayed.status, replayed.tier) == ("hit", "exact") and replayed.events
        # each waited for replica one's leader, not upstream (the stream not for its local
        # JSON twin, as within a replica)
        assert reg_two.get_sample_value(REMOTE_WAITS) == 2
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_streams_claims_are_all_released(redis: Redis) -> None:
    """A stream leader holds the streams' claim and the JSON twins' one: its end, abandoned
    or stored, frees both."""
    (one,), _ = await replicas(redis, 1)
    raw = RawRedis.from_url(redis.url)
    try:
        for end in ("abandon", "store"):
            before = set(await raw.keys("*:f:*"))
            lead = await one.lookup(chat(Q + end, stream=True))
            assert lead.status == "miss"
            assert len(set(await raw.keys("*:f:*")) - before) == 2
            if end == "abandon":
                await one.abandon(lead.ticket)
            else:
                await one.store(lead.ticket, completion("git revert HEAD", streamed=True))
            assert set(await raw.keys("*:f:*")) == before
    finally:
        await one.aclose()
        await raw.aclose()
