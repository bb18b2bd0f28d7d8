from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis as RawRedis

from proxy.cache import open_cache
from proxy.cache.config import REDIS_FORMAT, CacheConfig
from proxy.cache.lookup import SemanticCache
from proxy.cache.redis_claims import RedisClaims
from tests.cache_support import chat, completion
from tests.support.procs import Redis
from tests.support.waiting import wait_for_async

pytestmark = pytest.mark.redis
Q = "How do I undo the last git commit?"


async def replica(redis: Redis, registry: CollectorRegistry) -> SemanticCache:
    cache = await open_cache(registry=registry,
                             config=CacheConfig(mode="exact", redis_url=redis.url,
                                                namespace="claims"))
    assert cache is not None
    return cache


async def still_waiting(task: asyncio.Task[object]) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(task), 0.3)
    except TimeoutError:
        return True
    return False


async def test_twin_misses_on_two_replicas_share_one_upstream_call(redis: Redis) -> None:
    reg_two = CollectorRegistry()
    one, two = await replica(redis, CollectorRegistry()), await replica(redis, reg_two)
    try:
        lead = await one.lookup(chat(Q))
        assert lead.status == "miss" and lead.ticket is not None
        twin = asyncio.create_task(two.lookup(chat(Q)))
        assert await still_waiting(twin)  # replica two holds its request back ...
        await one.store(lead.ticket, completion("git reset --soft HEAD~1"))
        got = await asyncio.wait_for(twin, 5)  # ... and serves the stored answer
        assert (got.status, got.tier) == ("hit", "exact")
        assert got.answer is not None
        assert got.answer["choices"][0]["message"]["content"] == "git reset --soft HEAD~1"
        assert reg_two.get_sample_value("proxy_cache_single_flight_remote_waits_total") == 1
        other = await two.lookup(chat("How do I undo the last git push?"))
        assert other.status == "miss"  # another question is another flight
        await two.abandon(other.ticket)
    finally:
        await one.aclose()
        await two.aclose()


async def test_an_abandoned_flight_hands_the_lead_over(redis: Redis) -> None:
    one, two = await replica(redis, CollectorRegistry()), await replica(redis, CollectorRegistry())
    try:
        lead = await one.lookup(chat(Q))
        twin = asyncio.create_task(two.lookup(chat(Q)))
        assert await still_waiting(twin)
        await one.abandon(lead.ticket)  # the upstream call failed: nothing stored
        took_over = await asyncio.wait_for(twin, 5)
        assert took_over.status == "miss" and took_over.ticket is not None  # replica two leads
        third = asyncio.create_task(one.lookup(chat(Q)))
        assert await still_waiting(third)  # and now replica one waits for it
        await two.store(took_over.ticket, completion("git revert HEAD"))
        assert (await asyncio.wait_for(third, 5)).status == "hit"
    finally:
        await one.aclose()
        await two.aclose()


@contextlib.asynccontextmanager
async def two(redis: Redis, prefix: str, ttl_s: float,
              check_s: float) -> AsyncIterator[tuple[RedisClaims, RedisClaims]]:
    a = RedisClaims(redis.url, prefix, ttl_s=ttl_s, check_s=check_s)
    b = RedisClaims(redis.url, prefix, ttl_s=ttl_s, check_s=check_s)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_dead_owner_frees_its_flight_within_the_ttl(redis: Redis) -> None:
    async with two(redis, "dead", 0.6, 0.1) as (a, b):
        assert await a.claim("f1")
        assert not await b.claim("f1")
        a._keepers.pop("f1")[1].cancel()  # the owner dies: no refresh, no release
        start = time.monotonic()
        await b.settled("f1", 10)
        assert time.monotonic() - start < 3
        assert await b.claim("f1")
        await b.release("f1")
        assert await a.claim("f1")  # released: free again


async def test_a_live_owner_keeps_its_claim_past_the_ttl(redis: Redis) -> None:
    async with two(redis, "keep", 0.3, 0.05) as (a, b):
        assert await a.claim("f")
        waiter = asyncio.create_task(b.settled("f", 10))
        done, _ = await asyncio.wait([waiter], timeout=1.0)  # > 3 TTLs
        assert not done  # refreshed: still claimed
        await a.release("f")
        await asyncio.wait_for(waiter, 2)


class HeldReply:
    """A TCP relay to Redis that holds back the reply to the first command carrying `marker`
    until `let_go` is set: the command has run in Redis while its caller still waits for the
    answer, so a client can leave right then (mid-claim), every time."""

    def __init__(self, redis: Redis, marker: bytes) -> None:
        self.port, self.marker = redis.port, marker
        self.ran = asyncio.Event()  # the marked command ran in Redis; its reply is held
        self.let_go = asyncio.Event()
        self._seen = False
        self._pipes: set[asyncio.Task[object]] = set()

    @contextlib.asynccontextmanager
    async def url(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        try:
            yield f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"
        finally:
            self.let_go.set()
            server.close()
            for pipe in self._pipes:
                pipe.cancel()
            await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _connection(self, client_r: asyncio.StreamReader,
                          client_w: asyncio.StreamWriter) -> None:
        redis_r, redis_w = await asyncio.open_connection("127.0.0.1", self.port)
        marked = asyncio.Event()

        async def up() -> None:
            while data := await client_r.read(65536):
                if not self._seen and self.marker in data:
                    self._seen = True
                    marked.set()
                redis_w.write(data)
                await redis_w.drain()

        async def down() -> None:
            while data := await redis_r.read(65536):
                if marked.is_set():  # the marked command's reply (one command at a time)
                    marked.clear()
                    self.ran.set()
                    await self.let_go.wait()
                client_w.write(data)
                await client_w.drain()

        pipe = asyncio.ensure_future(asyncio.gather(up(), down(), return_exceptions=True))
        self._pipes.add(pipe)
        try:
            with contextlib.suppress(asyncio.CancelledError):  # the relay is closing
                await pipe
        finally:
            client_w.close()
            redis_w.close()


@pytest.mark.parametrize("reply_comes", [True, False])
async def test_a_leader_cancelled_mid_claim_frees_the_flight_at_once(
        redis: Redis, reply_comes: bool) -> None:
    # found by a review: a leader whose client left while its claim (SET NX) was on its way
    # kept the flight claimed in Redis with nobody to release it, and the other replicas'
    # identical requests waited for its TTL (10 s) before going upstream themselves
    relay = HeldReply(redis, f"claims:{REDIS_FORMAT}:f:".encode())
    async with relay.url() as through_relay:
        one = await open_cache(registry=CollectorRegistry(), config=CacheConfig(
            mode="exact", redis_url=through_relay, namespace="claims"))
        assert one is not None
        two = await replica(redis, CollectorRegistry())
        try:
            leader = asyncio.create_task(one.lookup(chat(Q)))
            await relay.ran.wait()  # replica one's claim is in Redis; the answer is held
            twin = asyncio.create_task(two.lookup(chat(Q)))
            assert await still_waiting(twin)  # replica two sees the flight claimed
            leader.cancel()  # the leader's client leaves (the handler cancels its lookup)
            with pytest.raises(asyncio.CancelledError):
                await leader
            if reply_comes:  # else the claim's socket timeout (1 s) ends its wait
                relay.let_go.set()
            got = await asyncio.wait_for(twin, 5)  # not the claim's 10 s TTL
            assert got.status == "miss" and got.ticket is not None  # replica two leads now
            await two.abandon(got.ticket)
        finally:
            await one.aclose()
            await two.aclose()


async def test_a_stale_release_leaves_a_newer_claim_of_the_same_replica(redis: Redis) -> None:
    # found by a review: the owner token was the replica's, not the claim's, so a release that
    # came late (here a cancelled claimer's, once its SET's reply came) deleted the flight's
    # newer claim by another request of the same replica, and woke the other replicas'
    # waiters: they went upstream beside it
    key = f"race:{REDIS_FORMAT}:f:f"
    relay = HeldReply(redis, key.encode())
    raw = RawRedis.from_url(redis.url)
    async with relay.url() as through_relay:
        a = RedisClaims(through_relay, "race", ttl_s=0.3)
        b = RedisClaims(redis.url, "race")
        try:
            first = asyncio.create_task(a.claim("f"))
            await relay.ran.wait()  # the first claim is in Redis; its reply is held
            first.cancel()  # its client left: it releases once the reply comes
            with pytest.raises(asyncio.CancelledError):
                await first

            async def expired() -> bool:
                return not await raw.exists(key)

            await wait_for_async(expired, "the first claim expires (0.3 s)", 10, every=0.02)
            assert await a.claim("f")  # ... and another request of replica a claims it
            assert not await b.claim("f")
            waiter = asyncio.create_task(b.settled("f", 10))
            assert await still_waiting(waiter)
            relay.let_go.set()  # the first claim's reply: its release runs now
            await asyncio.wait_for(asyncio.gather(*a._unclaiming), 5)
            assert await raw.exists(key)  # the newer claim is still there ...
            assert await still_waiting(waiter)  # ... and its waiters were not woken
            await a.release("f")
            await asyncio.wait_for(waiter, 5)
            assert not await raw.exists(key)
        finally:
            await a.aclose()
            await b.aclose()
            await raw.aclose()


async def test_redis_down_means_lead_and_no_wait() -> None:
    c = RedisClaims("redis://127.0.0.1:1", "down")
    try:
        assert await c.claim("f")
        start = time.monotonic()
        await c.settled("f", 30)
        assert time.monotonic() - start < 5
        await c.release("f")
    finally:
        await c.aclose()


async def counted(registry: CollectorRegistry, name: str, at_least: float) -> None:
    """Until the counter reaches at_least (polled: the lookups wait on Redis replies)."""
    async def reached() -> bool:
        return (registry.get_sample_value(name) or 0) >= at_least

    await wait_for_async(reached, f"{name} reaches {at_least}", 10, every=0.01)


def misses(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("proxy_cache_lookups_total",
                                     {"result": "miss", "tier": ""}) or 0


@pytest.mark.parametrize("stream", [False, True])
async def test_many_twins_all_get_the_stored_answer(redis: Redis, stream: bool) -> None:
    # found by a review: twins woken by their leader looked again one at a time (each re-look
    # registered as the flight's leader, the rest waited for it, and every wait was one of
    # their three tries), so with the store in Redis the fourth twin on went upstream although
    # the answer was stored: 20 identical requests over 4 workers made 16 upstream calls
    reg = CollectorRegistry()
    one = await replica(redis, reg)
    try:
        lead = await one.lookup(chat(Q, stream=stream))
        assert lead.status == "miss" and lead.ticket is not None
        twins = [asyncio.create_task(one.lookup(chat(Q, stream=stream))) for _ in range(6)]
        if not stream:
            await counted(reg, "proxy_cache_single_flight_waits_total", 6)
        await asyncio.sleep(0)  # a stream twin reaches its wait (the leader's first event)
        # without a Redis call: one turn of the loop; it counts nothing
        assert not any(t.done() for t in twins)
        # a stream's leader stores its chunks (a stream is served only from them)
        await one.store(lead.ticket, completion("git reset --soft HEAD~1", streamed=stream))
        got = await asyncio.wait_for(asyncio.gather(*twins), 10)
        assert [(g.status, g.tier) for g in got] == [("hit", "exact")] * 6
        assert misses(reg) == 1  # the leader's own
    finally:
        await one.aclose()


async def test_many_twins_on_another_replica_make_no_upstream_call(redis: Redis) -> None:
    # found by a review: the twins of a replica whose leader found the flight claimed by
    # another replica were woken at once and each claimed in turn, one try each time; the
    # fourth went upstream before the other replica's answer was even stored
    reg_two = CollectorRegistry()
    one, two = await replica(redis, CollectorRegistry()), await replica(redis, reg_two)
    try:
        lead = await one.lookup(chat(Q))
        assert lead.status == "miss" and lead.ticket is not None
        twins = [asyncio.create_task(two.lookup(chat(Q))) for _ in range(6)]
        await counted(reg_two, "proxy_cache_single_flight_remote_waits_total", 1)
        await counted(reg_two, "proxy_cache_single_flight_waits_total", 5)
        await one.store(lead.ticket, completion("git reset --soft HEAD~1"))
        got = await asyncio.wait_for(asyncio.gather(*twins), 10)
        assert [(g.status, g.tier) for g in got] == [("hit", "exact")] * 6
        assert misses(reg_two) == 0
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_stream_is_not_held_back_by_its_own_replicas_stream_leader(redis: Redis) -> None:
    """A stream leader S1 that began beside a JSON leader (its flight `twins:stream`) still
    streams when the JSON one ends; a stream twin S2 on the same replica then must not wait,
    as for another replica's, for S1's whole answer (up to the flight wait, 120 s): it
    follows S1 live, as twins on one replica do."""
    one = await replica(redis, CollectorRegistry())
    try:
        json_lead = await one.lookup(chat(Q))
        stream_lead = await one.lookup(chat(Q, stream=True))
        assert json_lead.ticket is not None and stream_lead.ticket is not None
        # S1's relay has passed its first event on (forwarding.py shares its accumulation)
        live = one.share(stream_lead.ticket, [b'{"choices": []}'])
        await one.store(json_lead.ticket, completion("git reset --soft HEAD~1"))
        twin = asyncio.create_task(one.lookup(chat(Q, stream=True)))
        held_back = await still_waiting(twin)
        await one.abandon(stream_lead.ticket)
        got = await asyncio.wait_for(twin, 5)
        if got.ticket is not None:
            await one.abandon(got.ticket)
        assert not held_back
        assert live is not None and got.live is live  # followed live, as on one replica
    finally:
        await one.aclose()
