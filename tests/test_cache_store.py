from __future__ import annotations

import time
from pathlib import Path

from proxy.cache.entry import Entry
from proxy.cache.store import MemoryStore
from tests.cache_support import answer


def entry(exact: str, namespace: str = "tiny", finish: str = "stop") -> Entry:
    return Entry(exact=exact, partition="p", namespace=namespace, kind="chat", text=exact,
                 max_tokens=8, answer=answer(exact, finish=finish), vector=b"\x00" * 8)


async def test_put_get_and_lru_bound() -> None:
    evicted: list[int] = []
    store = MemoryStore(max_entries=2, ttl=None, on_evict=evicted.append)
    a = await store.put(entry("a"))
    b = await store.put(entry("b"))
    assert a is not None and b is not None
    assert (await store.get_exact("a")) is a  # touches a: b is now the oldest
    await store.put(entry("c"))
    assert await store.get_exact("b") is None and evicted == [b.id]
    assert [e is not None for e in await store.get_many([a.id, b.id])] == [True, False]
    assert b.id in store.take_removed() and await store.count() == 2


async def test_ttl_expires_on_read() -> None:
    store = MemoryStore(max_entries=10, ttl=60)
    e = await store.put(entry("a"))
    assert e is not None
    e.created = time.time() - 61
    assert await store.get_exact("a") is None and await store.count() == 0


async def test_count_leaves_out_entries_past_their_ttl() -> None:
    # found by a review: stats and proxy_cache_entries counted them until evicted
    store = MemoryStore(max_entries=10, ttl=60)
    old = entry("old")
    old.created = time.time() - 61
    await store.put(old)
    fresh = await store.put(entry("fresh"))
    assert await store.count() == 1 and fresh is not None
    assert old.id in store.take_removed()  # the index forgets it too
    for _ in range(3000):  # replacements: the bookkeeping stays bounded by the live entries
        assert await store.put(entry("same", finish="length")) is not None
    assert await store.count() == 2 and len(store._born) <= 2 * 2 + 1024


async def test_replacement_keeps_the_better_answer() -> None:
    store = MemoryStore(max_entries=10, ttl=None)
    await store.put(entry("a", finish="stop"))
    assert await store.put(entry("a", finish="length")) is None
    got = await store.get_exact("a")
    assert got is not None and got.finish_reason == "stop"


async def test_flush_by_namespace_and_all() -> None:
    store = MemoryStore(max_entries=10, ttl=None)
    await store.put(entry("a", "m1"))
    await store.put(entry("b", "m2"))
    assert await store.flush("m1") == 1
    assert await store.get_exact("a") is None and await store.get_exact("b") is not None
    assert await store.flush() == 1 and await store.count() == 0


async def test_snapshot_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    store = MemoryStore(max_entries=10, ttl=None, snapshot=path)
    await store.put(entry("a"))
    await store.aclose()
    again = await MemoryStore(max_entries=10, ttl=None, snapshot=path).open()
    got = await again.get_exact("a")
    assert got is not None and got.answer["choices"][0]["message"]["content"] == "a"
    assert [e.exact for e in await again.changes()] == ["a"]  # handed to the index once
    assert await again.changes() == []
