from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis as RawRedis

from proxy.cache import open_cache
from proxy.cache.config import REDIS_FORMAT, CacheConfig
from proxy.cache.entry import Entry
from proxy.cache.keys import request_keys
from proxy.cache.lookup import SemanticCache
from proxy.cache.redis_store import RedisStore
from proxy.cache.store import StoreUnavailable
from proxy.settings import Settings
from tests.cache_support import answer, chat, completion, embedder, judge
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import Redis
from tests.support.proxy_app import proxy_client
from tests.support.waiting import wait_for_async

pytestmark = pytest.mark.redis
T, REP = (f"{prefix}:{REDIS_FORMAT}:" for prefix in ("t", "rep"))  # the tests' stores' keys


def entry(exact: str, namespace: str = "tiny", finish: str = "stop") -> Entry:
    vec = np.ones(4, dtype=np.float32) / 2
    return Entry(exact=exact, partition="p" * 64, namespace=namespace, kind="chat", text=exact,
                 max_tokens=8, answer=answer(exact, finish=finish), vector=vec.tobytes())


@pytest.fixture
async def store(redis: Redis) -> AsyncIterator[RedisStore]:
    s = await RedisStore(redis.url, max_entries=3, ttl=None, prefix="t").open()
    yield s
    await s.aclose()


async def test_put_get_replace_and_catch_up(store: RedisStore, redis: Redis) -> None:
    other = await RedisStore(redis.url, max_entries=3, ttl=None, prefix="t").open()
    try:
        a = await store.put(entry("a"))
        assert a is not None and a.id == 1
        got = await other.get_exact("a")
        assert got is not None and got.answer == a.answer and got.text == "a"
        seen = await other.changes()
        assert [(e.id, e.partition, e.vector) for e in seen] == [(1, "p" * 64, a.vector)]
        assert await other.changes() == []
        assert await store.put(entry("a", finish="length")) is None  # stop answer kept
        assert [e is not None for e in await other.get_many([1, 42])] == [True, False]
    finally:
        await other.aclose()


async def test_size_bound_evicts_least_recently_used(redis: Redis) -> None:
    evicted: list[int] = []
    s = await RedisStore(redis.url, max_entries=3, ttl=None, prefix="t",
                         on_evict=evicted.append).open()
    try:
        for name in "abc":
            await s.put(entry(name))
        await s.get_exact("a")  # b is now the least recently used
        await s.put(entry("d"))
        assert evicted == [1]
        assert await s.get_exact("b") is None and await s.get_exact("a") is not None
        assert await s.count() == 3 and 2 in s.take_removed()
    finally:
        await s.aclose()


async def test_ttl(redis: Redis) -> None:
    s = await RedisStore(redis.url, max_entries=10, ttl=0.2, prefix="t").open()
    try:
        await s.put(entry("a"))
        assert await s.get_exact("a") is not None
        await asyncio.sleep(0.3)
        assert await s.get_exact("a") is None
        await s.put(entry("b"))
        assert await s.count() == 1  # "a" expired: not counted, and its id goes to the index
        assert 1 in s.take_removed()
        assert [await s._r.zcard(f"{T}{z}") for z in ("lru", "born", "log")] == [1, 1, 1]
    finally:
        await s.aclose()


async def test_flush_namespace_and_all(store: RedisStore) -> None:
    await store.put(entry("a", "m1"))
    await store.put(entry("b", "m2"))
    assert await store.flush("m1") == 1
    assert await store.get_exact("a") is None and await store.get_exact("b") is not None
    assert await store.flush() == 1
    assert await store.get_exact("b") is None and await store.count() == 0


async def test_a_flush_reuses_no_id_and_leaves_other_keys(store: RedisStore,
                                                          redis: Redis) -> None:
    # found by a review: a flush deleted `seq`, ids restarted at 1, and an `x:` pointer written
    # while the flush ran named another question's entry (an exact HIT with the wrong answer);
    # it also deleted the shared per-key limits kept under the same prefix
    first = await store.put(entry("a"))
    from redis.asyncio import Redis as Client

    raw = Client.from_url(redis.url)
    try:
        await raw.set(T + "x:stale", 1)  # as if written for id 1 while the flush was running
        await raw.set("t:lim:key:r", "3")
        assert await store.flush() == 1
        await raw.set(T + "x:stale", 1)
        second = await store.put(entry("b"))
        assert first is not None and second is not None and second.id > first.id
        assert await store.get_exact("stale") is None
        assert await raw.get("t:lim:key:r") == b"3"
    finally:
        await raw.aclose()


async def test_a_hung_redis_is_probed_by_one_call_while_the_rest_bypass(redis: Redis) -> None:
    # found by a review: with Redis stopped (SIGSTOP) every caller waited out the socket
    # timeout (~2 s with the retry), half of all requests at 10 req/s
    import os
    import signal

    s = await RedisStore(redis.url, max_entries=10, ttl=None, prefix="t",
                         retry_after=0.0).open()
    assert redis.proc is not None
    os.kill(redis.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(StoreUnavailable):
            await s.get_exact("a")  # the failure that marks it down

        async def timed() -> float:
            started = time.perf_counter()
            with pytest.raises(StoreUnavailable):
                await s.get_exact("a")
            return time.perf_counter() - started

        took = sorted(await asyncio.gather(*(timed() for _ in range(5))))
        assert took[-1] > 0.5  # the one probe waited for the socket ...
        assert took[3] < took[-1] / 10  # ... the other four bypassed at once
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
        await s.aclose()


async def test_down_raises_unavailable_then_recovers(redis: Redis) -> None:
    s = await RedisStore(redis.url, max_entries=10, ttl=None, prefix="t",
                         retry_after=0.0).open()
    try:
        await s.put(entry("a"))
        redis.stop()
        with pytest.raises(StoreUnavailable):
            await s.get_exact("a")
        redis.start()
        assert await s.get_exact("a") is None  # a fresh redis-server: data gone
        await s.changes()
        assert s.take_reset()  # ... and the replica knows to rebuild its index
        await s.put(entry("b"))
        assert await s.get_exact("b") is not None
    finally:
        await s.aclose()


async def test_going_down_and_coming_back_are_logged_once_each(
        redis: Redis, caplog: pytest.LogCaptureFixture) -> None:
    # found by a review: Redis going down or answering again was only counted in
    # proxy_cache_backend_errors_total, never logged: nothing told an operator when
    caplog.set_level(logging.INFO, logger="proxy.cache")
    s = await RedisStore(redis.url, max_entries=10, ttl=None, prefix="t",
                         retry_after=0.0).open()

    def lines() -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "proxy.cache"]

    try:
        await s.put(entry("a"))
        assert lines() == []
        redis.stop()
        failed = await asyncio.gather(*(s.get_exact("a") for _ in range(5)),
                                      return_exceptions=True)  # in flight as it went down
        assert all(isinstance(f, StoreUnavailable) for f in failed)
        for _ in range(3):  # and each probe after it
            with pytest.raises(StoreUnavailable):
                await s.get_exact("a")
        [(level, message)] = lines()
        assert level == logging.WARNING and str(failed[0]) in message
        redis.start()
        for _ in range(3):
            await s.put(entry("b"))
        assert lines()[1:] == [(logging.INFO,
                                "cache store: Redis answers again; the cache is in use again")]
        redis.stop()  # a second outage is a second transition
        with pytest.raises(StoreUnavailable):
            await s.get_exact("b")
        assert [level for level, _ in lines()] == [logging.WARNING, logging.INFO,
                                                   logging.WARNING]
    finally:
        await s.aclose()


async def replica(redis: Redis, registry: CollectorRegistry, **kw: Any) -> SemanticCache:
    cfg = CacheConfig(redis_url=redis.url, namespace="rep", **kw)
    cache = await open_cache(registry=registry, config=cfg, embedder=embedder(),
                             judge=judge())
    assert cache is not None
    return cache


async def test_two_replicas_share_exact_and_semantic_entries(redis: Redis) -> None:
    one = await replica(redis, CollectorRegistry())
    two = await replica(redis, CollectorRegistry())
    try:
        miss = await one.lookup(chat("How do I reverse a list in Python?"))
        await one.store(miss.ticket, completion("reversed(xs)"))
        exact = await two.lookup(chat("How do I reverse a list in Python?"))
        assert (exact.status, exact.tier) == ("hit", "exact")
        sem = await two.lookup(chat("What's the way to reverse a Python list?"))
        assert (sem.status, sem.tier) == ("hit", "semantic")
        assert sem.answer is not None
        assert sem.answer["choices"][0]["message"]["content"] == "reversed(xs)"
        near = await two.lookup(chat("How do I not reverse a list in Python?"))
        assert near.status == "miss"
        await two.abandon(near.ticket)
        assert (await two.lookup(chat("How do I reverse a list in Python?", tenant="B"))
                ).status == "miss"
        assert await two.flush("tiny") == 1
        assert (await one.lookup(chat("What's the way to reverse a Python list?"))
                ).status == "miss"
    finally:
        await one.aclose()
        await two.aclose()


async def test_redis_down_bypasses_and_recovers(redis: Redis) -> None:
    registry = CollectorRegistry()
    cache = await replica(redis, registry)
    try:
        redis.stop()
        down = await cache.lookup(chat("What is a circuit breaker?"))
        assert down.status == "bypass"
        errors = registry.get_sample_value("proxy_cache_backend_errors_total", {"op": "lookup"})
        assert errors is not None and errors >= 1
        redis.start()
        result = down

        async def recovered() -> bool:
            nonlocal result
            result = await cache.lookup(chat("What is a circuit breaker?"))
            return result.status != "bypass"

        await wait_for_async(recovered, "the cache is back on Redis", 10, every=0.1)
        assert result.status == "miss"
        await cache.store(result.ticket, completion("it opens"))
        assert (await cache.lookup(chat("What is a circuit breaker?"))).status == "hit"
    finally:
        await cache.aclose()


@pytest.mark.parametrize("record", [b"not json", b'{"q": 1}', b"[1, 2]", b'{"exact": "x"}',
                                    b'{"exact": "x", "partition": "p", "namespace": "n", '
                                    b'"kind": "chat", "answer": 5}',
                                    b'{"exact": "x", "partition": "p", "namespace": "n", '
                                    b'"kind": "chat", "answer": {"choices": 5}}'],
                         ids=["not-json", "another-shape", "a-list", "no-answer",
                              "answer-not-object", "choices-not-a-list"])
async def test_a_corrupt_or_foreign_entry_is_a_miss_then_replaced(redis: Redis,
                                                                    record: bytes) -> None:
    # found by a review: an entry Redis holds that this version cannot read (corrupted, or
    # left by another program or version under the prefix) raised out of the lookup: a 500
    # for every identical request until the key's TTL
    cache = await replica(redis, CollectorRegistry())
    raw = RawRedis.from_url(redis.url)
    try:
        q = "How do I reverse a list in Python?"
        first = await cache.lookup(chat(q))
        await cache.store(first.ticket, completion("reversed(xs)"))
        [key] = await raw.keys(REP + "e:*")
        await raw.set(key, record)
        miss = await cache.lookup(chat(q))
        assert miss.status == "miss"
        assert (await cache.lookup(chat("What's the way to reverse a Python list?"))
                ).status == "miss"
        await cache.store(miss.ticket, completion("xs[::-1]"))
        hit = await cache.lookup(chat(q))
        assert hit.status == "hit" and hit.answer is not None
        assert hit.answer["choices"][0]["message"]["content"] == "xs[::-1]"
    finally:
        await raw.aclose()
        await cache.aclose()


def streamed(r: Any) -> tuple[str, bool]:
    """A streamed answer's text, and whether it ended with [DONE]."""
    events = [e[6:] for e in r.text.split("\n\n") if e.startswith("data: ")]
    text = "".join((ch.get("delta") or {}).get("content") or ""
                   for e in events if e != "[DONE]" for ch in orjson.loads(e)["choices"])
    return text, events[-1:] == ["[DONE]"]


async def quiet(c: Any) -> None:
    """Until the cache has nothing in flight: a stream's store runs on after its response."""
    async def nothing_in_flight() -> bool:
        return not (await c.get("/admin/cache/stats", headers=ADMIN)).json()["in_flight"]

    await wait_for_async(nothing_in_flight, "nothing in flight in the cache", 10, every=0.01)


ADMIN = {"Authorization": "Bearer admin-key"}
ANOTHER = orjson.dumps([{"object": "chat.completion.chunk", "model": "tiny", "choices": [
    {"index": 0, "delta": {"role": "assistant", "content": " another answer"},
     "finish_reason": "stop"}]}])


@pytest.mark.parametrize("chunks", [
    b'[{"choices": [', b'{"choices": []}', b"[1, 2]", b'[{"choices": 5}]',
    b'[{"choices": [7]}]', b'[{"choices": [{"index": 0, "delta": " w0"}]}]',
    b'[{"choices": [{"index": 0, "delta": {"content": 5}}]}]', b"[]", ANOTHER],
    ids=["not-json", "not-a-list", "not-objects", "choices-not-a-list", "choice-not-an-object",
         "delta-not-an-object", "content-not-text", "empty", "another-answer"])
async def test_a_corrupt_stored_stream_is_a_miss_then_replaced(redis: Redis,
                                                                chunks: bytes) -> None:
    # found by a review: the stored chunks were not checked when read, so a corrupt or
    # foreign chunk list failed mid-replay after the status line (a broken stream), or was
    # replayed as this question's answer; and the stop answer's head kept it from being
    # replaced by the next store
    fake = FakeVllm(finish="stop")  # a stop answer is kept over any later one (entry.better)
    s = Settings(upstreams=("http://vllm:8000",), cache="exact", redis_url=redis.url,
                 admin_key="admin-key")
    raw = RawRedis.from_url(redis.url)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Name the planets."}],
            "max_tokens": 4, "stream": True}
    try:
        async with proxy_client(s, transport=fake.transport) as c:
            first = await c.post("/v1/chat/completions", json=body)
            assert first.headers["x-cache"] == "MISS"
            answer_text, done = streamed(first)
            assert done and answer_text == " w0 w1 w2 w3"
            await quiet(c)
            [key] = await raw.keys("*:e:*")
            head, _, stored = (await raw.get(key)).partition(b"\n")
            assert orjson.loads(stored)  # the stream was stored with the answer
            await raw.set(key, head + b"\n" + chunks)
            calls = len(fake.completions())
            again = await c.post("/v1/chat/completions", json=body)
            assert again.status_code == 200 and again.headers["x-cache"] == "MISS"
            assert streamed(again) == (answer_text, True)
            assert len(fake.completions()) == calls + 1  # answered by the upstream
            await quiet(c)
            hit = await c.post("/v1/chat/completions", json=body)
            assert (hit.headers["x-cache"], hit.headers["x-cache-tier"]) == ("HIT", "exact")
            assert streamed(hit) == (answer_text, True)
            assert len(fake.completions()) == calls + 1
    finally:
        await raw.aclose()


@pytest.mark.parametrize("pointer", [b"abc", b"", b"1.5"], ids=["letters", "empty", "float"])
async def test_a_corrupt_exact_pointer_is_a_miss_then_replaced(redis: Redis,
                                                               pointer: bytes) -> None:
    cache = await replica(redis, CollectorRegistry())
    raw = RawRedis.from_url(redis.url)
    try:
        q = "How do I reverse a list in Python?"
        first = await cache.lookup(chat(q, exact_only=True))
        await cache.store(first.ticket, completion("reversed(xs)"))
        [key] = await raw.keys(REP + "x:*")
        await raw.set(key, pointer)
        miss = await cache.lookup(chat(q, exact_only=True))
        assert miss.status == "miss"
        await cache.store(miss.ticket, completion("xs[::-1]"))
        assert (await cache.lookup(chat(q, exact_only=True))).status == "hit"
    finally:
        await raw.aclose()
        await cache.aclose()



@pytest.mark.parametrize("vector", [b"", b"\xff" * 64 + b"\0" * 8, b"p" * 64 + b"\0\0\0",
                                    b"p" * 64 + np.ones(768, dtype=np.float32).tobytes()],
                         ids=["empty", "partition-not-utf8", "torn", "another-embedder"])
async def test_a_vector_this_index_cannot_take_is_skipped(redis: Redis, vector: bytes) -> None:
    # found by a review: a logged vector of another size (another embedder's entries under the
    # same prefix, as in a rolling change of PROXY_CACHE_EMBED_MODEL, or a corrupted record)
    # made the replicas' catch-up raise: a 500 for the semantic lookup that read it
    cache = await replica(redis, CollectorRegistry())
    raw = RawRedis.from_url(redis.url)
    try:
        await raw.set(REP + "v:999", vector)
        await raw.zadd(REP + "log", {"999": 999})
        q = "How do I reverse a list in Python?"
        miss = await cache.lookup(chat(q))
        assert miss.status == "miss"
        await cache.store(miss.ticket, completion("reversed(xs)"))
        sem = await cache.lookup(chat("What's the way to reverse a Python list?"))
        assert (sem.status, sem.tier) == ("hit", "semantic")
    finally:
        await raw.aclose()
        await cache.aclose()


_N = int(REDIS_FORMAT.removeprefix("v"))


@pytest.mark.parametrize("other", ["", f"v{_N - 1}:", f"v{_N + 1}:"],
                         ids=["before-the-version", "the-previous-format", "a-later-format"])
async def test_an_entry_of_another_format_is_not_found(redis: Redis, other: str) -> None:
    # found by a review: the keys carried no format version, so after an upgrade that changes
    # the entry format the new code would read, and serve, the entries the old code wrote
    q = "How do I reverse a list in Python?"
    keys = request_keys("chat", chat(q).body, "", "none")  # as the exact-only cache keys it
    old = Entry(exact=keys.exact, partition=keys.partition, namespace=keys.namespace,
                kind="chat", text=None, max_tokens=keys.max_tokens,
                answer=answer("an answer of another format"), id=1)
    p = f"old:{other}"
    raw = RawRedis.from_url(redis.url)
    await raw.set(p + "seq", 1)
    await raw.set(p + "e:1", old.to_record())
    await raw.set(p + "x:" + keys.exact, 1)
    await raw.zadd(p + "lru", {"1": time.time()})
    cache = await open_cache(registry=CollectorRegistry(), config=CacheConfig(
        mode="exact", redis_url=redis.url, namespace="old"))
    assert cache is not None
    try:
        miss = await cache.lookup(chat(q))
        assert miss.status == "miss"
        await cache.store(miss.ticket, completion("xs[::-1]"))
        hit = await cache.lookup(chat(q))
        assert hit.status == "hit" and hit.answer is not None
        assert hit.answer["choices"][0]["message"]["content"] == "xs[::-1]"
        assert await cache.db.count() == 1
        assert await raw.get(p + "e:1") == old.to_record()  # the other format's: untouched
        assert await raw.get(p + "x:" + keys.exact) == b"1"
    finally:
        await raw.aclose()
        await cache.aclose()


async def test_entries_past_their_ttl_leave_the_namespace_set(redis: Redis) -> None:
    # found by a review: an entry whose TTL passed was dropped from the zsets but not from its
    # namespace's set (its record, which named the namespace, was gone), so `ns:{model}` grew
    # by one id for every entry ever expired: Redis memory without bound under a TTL
    s = await RedisStore(redis.url, max_entries=10, ttl=0.2, prefix="t").open()
    try:
        for name in "abc":
            await s.put(entry(name))

        async def expired() -> bool:  # Redis expires them
            return not await s._r.exists(*(f"{T}e:{i}" for i in (1, 2, 3)))

        await wait_for_async(expired, "the entries past their TTL expire", 10)
        d = await s.put(entry("d"))
        assert d is not None
        assert await s.count() == 1
        assert await s._r.smembers(T + "ns:tiny") == {str(d.id).encode()}
        assert await s.flush("tiny") == 1
    finally:
        await s.aclose()
