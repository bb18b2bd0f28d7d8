"""The lookup pipeline (proxy/cache/lookup.py): the two tiers in turn, policy and tenants,
storing, cuts of a stored answer, single flight, stats and flush. The semantic tier's own
rules and judge: tests/test_cache_semantic.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from proxy.cache import open_cache
from proxy.cache.config import CacheConfig
from proxy.cache.lookup import SemanticCache
from tests.cache_support import chat, completion, fill, metric, semantic_cache
from tests.support.waiting import wait_for_async


@pytest.fixture
async def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def cache(registry: CollectorRegistry) -> AsyncIterator[SemanticCache]:
    c = await semantic_cache(registry)
    yield c
    await c.aclose()


async def waiting(registry: CollectorRegistry, n: int) -> None:
    """Until n lookups wait on the single flight (they wait on the loop's own tasks)."""
    async def counted() -> bool:
        return metric(registry, "proxy_cache_single_flight_waits_total") >= n

    await wait_for_async(counted, f"{n} lookups wait on the flight", 10, every=0.01)


async def test_exact_then_semantic_hit(cache: SemanticCache, registry: CollectorRegistry) -> None:
    await fill(cache, "How do I reverse a list in Python?", "use reversed()")
    exact = await cache.lookup(chat("How do I reverse a list in Python?"))
    assert (exact.status, exact.tier, exact.similarity) == ("hit", "exact", 1.0)
    assert exact.answer is not None
    assert exact.answer["choices"][0]["message"]["content"] == "use reversed()"
    sem = await cache.lookup(chat("What's the way to reverse a Python list?"))
    assert (sem.status, sem.tier) == ("hit", "semantic")
    assert sem.similarity is not None and 0.8 <= sem.similarity < 1.0
    assert metric(registry, "proxy_cache_lookups_total", result="hit", tier="semantic") == 1


async def test_exact_only_requests_skip_the_semantic_tier(cache: SemanticCache) -> None:
    await fill(cache, "How do I reverse a list in Python?", "use reversed()")
    strict = await cache.lookup(chat("What's the way to reverse a Python list?",
                                     exact_only=True))
    assert strict.status == "miss"
    exact = await cache.lookup(chat("How do I reverse a list in Python?", exact_only=True))
    assert (exact.status, exact.tier) == ("hit", "exact")


async def test_tenants_never_share(cache: SemanticCache) -> None:
    await fill(cache, "What is Redis?", "A's answer", tenant="A")
    assert (await cache.lookup(chat("What is Redis?", tenant="B"))).status == "miss"
    assert (await cache.lookup(chat("What is Redis?", tenant="A"))).status == "hit"


async def test_shared_mode_lets_tenants_share(registry: CollectorRegistry) -> None:
    cache = await semantic_cache(registry, shared=True)
    try:
        await fill(cache, "What is Redis?", "shared", tenant="A")
        assert (await cache.lookup(chat("What is Redis?", tenant="B"))).status == "hit"
    finally:
        await cache.aclose()


async def test_cache_control_and_policy_bypass(cache: SemanticCache) -> None:
    assert (await cache.lookup(chat("q1", no_store=True))).status == "bypass"
    assert (await cache.lookup(chat("q1", temperature=0.7))).status == "bypass"
    assert (await cache.lookup(chat("q1", n=2))).status == "bypass"
    await fill(cache, "What is a closure?", "first")
    fresh = await cache.lookup(chat("What is a closure?", no_cache=True))
    assert fresh.status == "miss"  # skip lookup ...
    await cache.store(fresh.ticket, completion("second", finish="stop"))  # ... still store
    hit = await cache.lookup(chat("What is a closure?"))
    assert hit.answer is not None
    assert hit.answer["choices"][0]["message"]["content"] == "first"  # stop answer kept


async def test_errored_or_aborted_answers_are_not_stored(cache: SemanticCache) -> None:
    miss = await cache.lookup(chat("What is an aborted stream?"))
    await cache.store(miss.ticket, completion("partial", finish="abort"))
    again = await cache.lookup(chat("What is an aborted stream?"))
    assert again.status == "miss"
    await cache.abandon(again.ticket)
    assert (await cache.lookup(chat("What is an aborted stream?"))).status == "miss"


async def test_max_tokens_prefix_cut(cache: SemanticCache) -> None:
    miss = await cache.lookup(chat("Count to ten", max_tokens=4))
    await cache.store(miss.ticket, completion("1 2 3 4", finish="length",
                                              pieces=("1", " 2", " 3", " 4")))
    cut = await cache.lookup(chat("Count to ten", max_tokens=2))
    assert cut.status == "hit" and cut.answer is not None
    assert cut.answer["choices"][0]["message"]["content"] == "1 2"
    longer = await cache.lookup(chat("Count to ten", max_tokens=8))
    assert longer.status == "miss"


@pytest.mark.parametrize("extra", [{"stop": [" 1"]}, {"stop": "x"}, {"min_tokens": 3}])
async def test_no_cut_with_stop_strings_or_min_tokens(cache: SemanticCache,
                                                      extra: dict[str, object]) -> None:
    # vLLM holds back streamed text that may begin a stop string, so a piece lags its token
    # (found: " 698 619 wh" served where vLLM says " 698 619 why"); and it refuses a
    # max_tokens below min_tokens
    miss = await cache.lookup(chat("Count to ten", max_tokens=4, **extra))
    await cache.store(miss.ticket, completion("1 2 3 4", finish="length",
                                              pieces=("1", " 2", " 3", " 4")))
    same = await cache.lookup(chat("Count to ten", max_tokens=4, **extra))
    assert same.status == "hit"  # the whole answer still serves its own limit
    cut = await cache.lookup(chat("Count to ten", max_tokens=2, **extra))
    assert cut.status == "miss"
    await cache.abandon(cut.ticket)


async def test_single_flight(cache: SemanticCache, registry: CollectorRegistry) -> None:
    first = await cache.lookup(chat("What is single flight?"))
    assert first.status == "miss"
    waiters = [asyncio.create_task(cache.lookup(chat("What is single flight?")))
               for _ in range(5)]
    await waiting(registry, 5)
    assert not any(w.done() for w in waiters)
    await cache.store(first.ticket, completion("once"))
    results = await asyncio.gather(*waiters)
    assert all(r.status == "hit" for r in results)


async def test_single_flight_abandon_promotes_one_waiter(cache: SemanticCache,
                                                         registry: CollectorRegistry) -> None:
    first = await cache.lookup(chat("What is a leader?"))
    waiters = [asyncio.create_task(cache.lookup(chat("What is a leader?"))) for _ in range(3)]
    await waiting(registry, 3)
    await cache.abandon(first.ticket)
    done, pending = await asyncio.wait(waiters, timeout=5)
    assert len(done) == 1 and next(iter(done)).result().status == "miss"
    leader = next(iter(done)).result()
    await cache.store(leader.ticket, completion("ok"))
    assert all(r.status == "hit" for r in await asyncio.gather(*pending))


async def test_exact_mode_has_no_semantic_tier(registry: CollectorRegistry) -> None:
    cache = await open_cache(registry=registry, config=CacheConfig(mode="exact"))
    assert cache is not None and cache.embedder is None
    try:
        await fill(cache, "What is the capital of France?", "Paris")
        assert (await cache.lookup(chat("What is the capital of France?"))).tier == "exact"
        assert (await cache.lookup(chat("What's the capital city of France?"))).status == "miss"
    finally:
        await cache.aclose()
    assert await open_cache(config=CacheConfig(mode="off")) is None


async def test_stats_and_flush(cache: SemanticCache, registry: CollectorRegistry) -> None:
    await fill(cache, "What is a monad?", "m", model="m1")
    await fill(cache, "What is a functor?", "f", model="m2")
    stats = await cache.stats()
    assert stats["entries"] == 2 and stats["indexed"] == 2
    assert await cache.flush("m1") == 1
    assert (await cache.lookup(chat("What is a monad?", model="m1"))).status == "miss"
    assert (await cache.lookup(chat("What is a functor?", model="m2"))).status == "hit"
    assert metric(registry, "proxy_cache_entries") == 1


async def test_a_text_part_that_is_not_a_string_is_no_semantic_question(
        cache: SemanticCache) -> None:
    # found by a review: a text part's `text` was read with str(), so {"text": 5} (or null, or
    # a list) asked "5" and hit the stored answer to "5" (the same text: no judge), a 200 where
    # vLLM refuses the request (400, a text part's text must be a string)
    parts: Any = [{"type": "text", "text": "What is 2 + 3?"}, {"type": "text", "text": "5"}]
    await fill(cache, "", "yes", messages=[{"role": "user", "content": parts}])
    for odd in (5, None, ["5"]):
        odd_parts = [parts[0], {"type": "text", "text": odd}]
        got = await cache.lookup(chat("", messages=[{"role": "user", "content": odd_parts}]))
        assert got.status == "miss", (odd, got.tier)


async def test_a_stream_after_a_json_answer_is_a_miss_then_replays_its_own_chunks(
        registry: CollectorRegistry) -> None:
    """A stream is never made from a JSON answer (it was re-chunked at word boundaries: ' 1721 ',
    '1027 ' where vLLM streams ' 1721', ' 1027'): the first stream after one is a miss, its
    answer replaces the entry with its chunks, and the next stream replays them as they came."""
    cache = await open_cache(registry=registry, config=CacheConfig(mode="exact"))
    assert cache is not None
    try:
        first = await cache.lookup(chat("Count on", max_tokens=2))
        await cache.store(first.ticket, completion(" 1721 1027", finish="length", tokens=2))
        stream = await cache.lookup(chat("Count on", max_tokens=2, stream=True))
        assert stream.status == "miss" and stream.ticket is not None
        streamed = completion(" 1721 1027", finish="length", pieces=(" 1721", " 1027"),
                              streamed=True)
        await cache.store(stream.ticket, streamed)
        assert metric(registry, "proxy_cache_stores_total", outcome="stored") == 2
        again = await cache.lookup(chat("Count on", max_tokens=2, stream=True))
        assert (again.status, again.tier) == ("hit", "exact")
        assert streamed.events is not None and again.events == orjson.loads(streamed.events)
        cut = await cache.lookup(chat("Count on", max_tokens=1, stream=True))
        assert cut.status == "hit" and cut.events is not None  # the stored chunks, cut
        assert [c["choices"][0]["delta"].get("content") for c in cut.events if c["choices"]] \
            == ["", " 1721"]
        json_hit = await cache.lookup(chat("Count on", max_tokens=2))
        assert json_hit.status == "hit" and json_hit.events is None
        assert json_hit.answer is not None
        assert json_hit.answer["choices"][0]["message"]["content"] == " 1721 1027"
    finally:
        await cache.aclose()


async def test_twins_of_an_answer_that_cannot_be_stored_all_go_upstream_at_once(
        registry: CollectorRegistry) -> None:
    # found by a probe: a leader whose answer the cache refuses (finish tool_calls, as agents'
    # tools requests end) woke its twins as if it had stored it; each looked again, missed,
    # and the first led a new round while the others waited again (5 twins of a 1 s answer
    # took 4 s, upstream one after another)
    cache = await open_cache(registry=registry, config=CacheConfig(mode="exact"))
    assert cache is not None
    try:
        first = await cache.lookup(chat("Call the weather tool"))
        twins = [asyncio.create_task(cache.lookup(chat("Call the weather tool")))
                 for _ in range(4)]
        await waiting(registry, 4)
        await cache.store(first.ticket, completion("", finish="tool_calls"))
        done, pending = await asyncio.wait(twins, timeout=5)
        assert not pending, f"{len(pending)} of 4 twins still wait for another leader"
        results = [t.result() for t in done]
        assert all(r.status == "miss" and r.ticket is not None for r in results)
        assert metric(registry, "proxy_cache_single_flight_fallbacks_total",
                      reason="unstored") == 4
        for r in results:  # their own answers are refused alike; nobody waits on them
            await cache.store(r.ticket, completion("", finish="tool_calls"))
        assert (await cache.stats())["in_flight"] == 0
    finally:
        await cache.aclose()


async def test_a_semantic_hit_reports_the_prompt_tokens_of_the_question_asked(
        cache: SemanticCache) -> None:
    """A probe (session 23): a semantic hit's usage was the stored question's (prompt_tokens
    23 where vLLM counts the question asked as 22); clients bill by it."""
    question = "How do I reverse a list in Python?"
    miss = await cache.lookup(chat(question, stream=True))
    await cache.store(miss.ticket, completion("use reversed()", pieces=("use", " reversed()"),
                                              streamed=True))
    paraphrase = "What's the way to reverse a Python list?"
    for stream in (False, True):
        req = replace(chat(paraphrase, stream=stream), prompt_tokens=11)
        sem = await cache.lookup(req)
        assert (sem.status, sem.tier) == ("hit", "semantic") and sem.answer is not None
        assert sem.answer["usage"] == {"prompt_tokens": 11, "completion_tokens": 2,
                                       "total_tokens": 13}
        if stream:
            assert sem.events is not None
            assert [c["usage"] for c in sem.events if c.get("usage")] == [sem.answer["usage"]]
    exact = await cache.lookup(replace(chat(question), prompt_tokens=11))
    assert exact.tier == "exact" and exact.answer is not None
    assert exact.answer["usage"]["prompt_tokens"] == 7  # vLLM's own count, stored with it


async def test_an_answer_that_carries_its_prompt_is_never_another_questions(
        cache: SemanticCache) -> None:
    """return_token_ids answers with prompt_token_ids, return_prompt_text with the rendered
    prompt: a paraphrase's would be another prompt's."""
    for extra in ({"return_token_ids": True}, {"return_prompt_text": True}):
        await fill(cache, "How do I reverse a list in Python?", "use reversed()", **extra)
        sem = await cache.lookup(chat("What's the way to reverse a Python list?", **extra))
        assert sem.status == "miss", extra
        await cache.abandon(sem.ticket)
        same = await cache.lookup(chat("How do I reverse a list in Python?", **extra))
        assert (same.status, same.tier) == ("hit", "exact")


async def test_a_route_that_is_never_searched_by_meaning_is_not_embedded(
        cache: SemanticCache) -> None:
    """PROXY_CACHE_EXACT_ONLY=completions (the default): no completions request searches by
    meaning, so storing one embedded its prompt for nothing, on the embedder every semantic
    lookup waits for (and whose bound sheds them)."""
    assert cache.embedder is not None
    before = cache.embedder.calls
    miss = await cache.lookup(replace(chat("How do I reverse a list in Python?"),
                                      searchable=False, exact_only=True))
    await cache.store(miss.ticket, completion("use reversed()"))
    assert cache.embedder.calls == before  # neither the lookup nor the store embedded it
    again = await cache.lookup(replace(chat("How do I reverse a list in Python?"),
                                       searchable=False, exact_only=True))
    assert (again.status, again.tier) == ("hit", "exact")
    other = await cache.lookup(chat("What's the way to reverse a Python list?"))
    assert other.status == "miss"  # not indexed
