"""Streaming single flight: identical streaming misses follow the one upstream stream in flight."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from proxy.app import create_app
from proxy.cache import open_cache
from proxy.cache.config import CacheConfig
from proxy.cache.flight import Flight
from proxy.cache.lookup import SemanticCache
from proxy.settings import Settings
from tests.cache_support import chat, completion
from tests.support.fake_upstream import FakeVllm
from tests.support.serving import served
from tests.support.waiting import wait_for_async


async def test_a_follower_gets_what_came_then_each_event_as_it_comes() -> None:
    flight, events = Flight(), [b"1", b"2"]
    flight.attach(events)
    got: list[bytes] = []
    seen_two = asyncio.Event()

    async def follow() -> None:
        async for ev in flight.follow():
            got.append(ev)
            if len(got) == 2:
                seen_two.set()

    task = asyncio.create_task(follow())
    await seen_two.wait()
    assert got == [b"1", b"2"] and not task.done()
    events.append(b"3")
    flight.wake()
    flight.finish(True)
    await task
    assert got == [b"1", b"2", b"3"] and flight.state == "done"


async def test_one_can_follow_only_once_the_leader_has_sent_something() -> None:
    flight = Flight()
    waiting = asyncio.create_task(flight.started())
    done, _ = await asyncio.wait([waiting], timeout=0.05)
    assert not done                                     # nothing yet: still waiting
    flight.attach([b"first"])
    assert await waiting is True
    failed = Flight()
    failed.finish(False)
    assert await failed.started() is False              # the leader failed first: go upstream


@pytest.fixture
async def cache() -> AsyncIterator[SemanticCache]:
    c = await open_cache(registry=CollectorRegistry(), config=CacheConfig(mode="exact"))
    assert c is not None
    yield c
    await c.aclose()


async def test_streaming_followers_join_live_and_json_ones_wait(cache: SemanticCache) -> None:
    leader = await cache.lookup(chat("Stream once", stream=True))
    assert leader.status == "miss"
    follower = asyncio.create_task(cache.lookup(chat("Stream once", stream=True)))
    waiter = asyncio.create_task(cache.lookup(chat("Stream once")))   # not streaming
    other = await cache.lookup(chat("Stream once", stream=True, tenant="b"))
    assert other.status == "miss"                        # another tenant: its own flight
    events: list[bytes] = []
    wake = cache.share(leader.ticket, events)
    assert wake is not None and cache.share(object(), []) is None
    events.append(b'{"choices": []}')
    wake.wake()
    joined = await follower
    assert (joined.status, joined.tier) == ("hit", "flight") and joined.live is not None
    assert wake.followers == 1
    assert not waiter.done()
    await cache.store(leader.ticket, completion("all of it", streamed=True))
    assert joined.live.state == "done"
    hit = await waiter
    assert (hit.status, hit.tier) == ("hit", "exact")


async def test_a_stream_does_not_wait_for_a_json_leader_but_leads_the_streams(
        cache: SemanticCache) -> None:
    """A JSON answer does not answer a stream (serve.py: answered): a stream twin of a JSON
    leader leads a flight of its own at once, which its stream twins follow, and JSON twins
    still wait for the JSON leader."""
    leader = await cache.lookup(chat("Both ways"))
    assert leader.status == "miss"
    stream = await cache.lookup(chat("Both ways", stream=True))
    assert stream.status == "miss" and stream.ticket is not None   # led, not waiting
    follower = asyncio.create_task(cache.lookup(chat("Both ways", stream=True)))
    waiter = asyncio.create_task(cache.lookup(chat("Both ways")))
    events: list[bytes] = []
    wake = cache.share(stream.ticket, events)
    assert wake is not None
    events.append(b'{"choices": []}')
    wake.wake()
    joined = await follower
    assert (joined.status, joined.tier) == ("hit", "flight")
    await cache.store(leader.ticket, completion("all of it"))
    hit = await waiter
    assert (hit.status, hit.tier) == ("hit", "exact") and hit.events is None
    await cache.store(stream.ticket, completion("all of it", streamed=True))
    replayed = await cache.lookup(chat("Both ways", stream=True))
    assert (replayed.status, replayed.tier) == ("hit", "exact") and replayed.events


async def test_a_leader_that_fails_before_its_first_event_promotes_a_follower(
        cache: SemanticCache) -> None:
    leader = await cache.lookup(chat("Fail first", stream=True))
    follower = asyncio.create_task(cache.lookup(chat("Fail first", stream=True)))
    done, _ = await asyncio.wait([follower], timeout=0.05)
    assert not done
    await cache.abandon(leader.ticket)
    again = await follower
    assert again.status == "miss" and again.ticket is not None   # it leads now


def served_proxy(settings: Settings) -> AbstractAsyncContextManager[str]:
    """The real server on this test's loop (beside the fake upstream's, which it calls)."""
    return served(create_app(settings))


def body(text: str) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            "stream": True}


def content(raw: list[str]) -> tuple[str, str | None]:
    text, last = "", None
    for line in raw:
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            last = "[DONE]"
            continue
        ev = json.loads(data)
        if "error" in ev:
            last = "error"
            continue
        for c in ev.get("choices") or ():
            text += (c.get("delta") or {}).get("content") or ""
    return text, last


async def lines(response: httpx.Response, into: list[str], first: asyncio.Event) -> None:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            into.append(line)
            if '"content": " w' in line or '"content":" w' in line:
                first.set()


@pytest.mark.parametrize("break_stream", [False, True])
async def test_through_the_proxy_one_upstream_stream_serves_every_identical_request(
        break_stream: bool) -> None:
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume), stream_error_after=5 if break_stream else None)
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client, \
            client.stream("POST", "/v1/chat/completions", json=body("Share me")) as lead:
        leader_lines: list[str] = []
        leader_first = asyncio.Event()
        reading = asyncio.create_task(lines(lead, leader_lines, leader_first))
        await leader_first.wait()
        async with client.stream("POST", "/v1/chat/completions", json=body("Share me")) as follow:
            assert follow.headers["x-cache"] == "HIT"
            assert follow.headers["x-cache-tier"] == "flight"
            follower_lines: list[str] = []
            follower_first = asyncio.Event()
            following = asyncio.create_task(lines(follow, follower_lines, follower_first))
            # the upstream is paused after its first events: the follower got them live
            await follower_first.wait()
            assert not reading.done()
            resume.set()
            await following
        await reading
    assert len(fake.completions()) == 1                 # one upstream request for both
    lead_text, lead_end = content(leader_lines)
    follow_text, follow_end = content(follower_lines)
    if break_stream:
        assert lead_end == "error" and follow_end == "error"   # never a cut answer as whole
    else:
        assert lead_end == follow_end == "[DONE]"
        assert follow_text == lead_text == " w0 w1 w2 w3 w4 w5 w6 w7"
        ids = {json.loads(x[6:])["id"] for x in follower_lines if x != "data: [DONE]"}
        assert len(ids) == 1 and "cmpl-fake" not in ids    # its own id, as a replay's


async def left(client: httpx.AsyncClient) -> bool:
    """The proxy has counted a client that left (a 499)."""
    return 'status="499"' in (await client.get("/metrics")).text


async def test_when_the_leaders_client_leaves_the_followers_still_get_the_whole_answer() -> None:
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume))
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("Hand over")) as lead:
            leader_first = asyncio.Event()
            reading = asyncio.create_task(lines(lead, [], leader_first))
            await leader_first.wait()
            follow_cm = client.stream("POST", "/v1/chat/completions", json=body("Hand over"))
            follow = await follow_cm.__aenter__()
            assert follow.headers["x-cache-tier"] == "flight"
            follower_lines: list[str] = []
            follower_first = asyncio.Event()
            following = asyncio.create_task(lines(follow, follower_lines, follower_first))
            await follower_first.wait()
            reading.cancel()                             # the leader's client goes away
        await wait_for_async(lambda: left(client), "the proxy saw it leave", 10, every=0.01)
        resume.set()                                     # and only then the upstream goes on
        await following
        await follow_cm.__aexit__(None, None, None)
        again = await client.post("/v1/chat/completions", json={**body("Hand over"),
                                                                 "stream": False})
        metrics = (await client.get("/metrics")).text
    text, end = content(follower_lines)
    assert end == "[DONE]" and text == " w0 w1 w2 w3 w4 w5 w6 w7"
    assert len(fake.completions()) == 1
    assert again.headers["x-cache"] == "HIT" and again.headers["x-cache-tier"] == "exact"
    assert again.json()["choices"][0]["message"]["content"] == text   # stored after all
    assert "proxy_flight_handovers_total 1.0" in metrics


def test_a_flight_is_full_past_its_byte_bound() -> None:
    flight = Flight(max_bytes=8)
    flight.attach([b"12345"])
    assert not flight.full and flight.size == 5
    flight.events.append(b"6789")
    flight.wake()
    assert flight.full and flight.size == 9


async def flight_cache(max_bytes: int) -> tuple[SemanticCache, CollectorRegistry]:
    registry = CollectorRegistry()
    c = await open_cache(registry=registry,
                         config=CacheConfig(mode="exact", flight_max_bytes=max_bytes))
    assert c is not None
    return c, registry


async def test_past_the_bound_a_new_follower_goes_upstream_itself() -> None:
    cache, registry = await flight_cache(16)
    try:
        leader = await cache.lookup(chat("Long one", stream=True))
        early = asyncio.create_task(cache.lookup(chat("Long one", stream=True)))
        events: list[bytes] = []
        wake = cache.share(leader.ticket, events)
        assert wake is not None
        events.append(b'{"choices": []}')             # 15 bytes: within the bound
        wake.wake()
        joined = await early
        assert joined.tier == "flight" and joined.live is not None
        events.append(b'{"choices": []}')             # 30 bytes: past it
        wake.wake()
        late = await cache.lookup(chat("Long one", stream=True))
        assert late.status == "miss" and late.ticket is not None
        assert late.ticket.flight is None               # its own upstream call, no flight
        assert registry.get_sample_value("proxy_cache_single_flight_fallbacks_total",
                                         {"reason": "overflow"}) == 1
        got = [ev async for ev in _until_done(joined.live, cache, leader.ticket)]
        assert got == events                            # the joined follower gets it all
    finally:
        await cache.aclose()


async def _until_done(live: Any, cache: SemanticCache, ticket: Any) -> AsyncIterator[bytes]:
    it = live.follow()
    yield await it.__anext__()
    await cache.store(ticket, completion("all of it", streamed=True))
    async for ev in it:
        yield ev


async def test_a_bound_of_zero_keeps_streaming_followers_waiting_for_the_store() -> None:
    cache, _ = await flight_cache(0)
    try:
        leader = await cache.lookup(chat("No live", stream=True))
        follower = asyncio.create_task(cache.lookup(chat("No live", stream=True)))
        assert cache.share(leader.ticket, []) is None   # no flight to share with
        await cache.store(leader.ticket, completion("all of it", streamed=True))
        hit = await follower
        assert (hit.status, hit.tier) == ("hit", "exact") and hit.live is None
    finally:
        await cache.aclose()


async def test_followers_of_a_failed_stream_are_counted() -> None:
    cache, registry = await flight_cache(1 << 20)
    try:
        leader = await cache.lookup(chat("Breaks", stream=True))
        follower = asyncio.create_task(cache.lookup(chat("Breaks", stream=True)))
        wake = cache.share(leader.ticket, [b'{"choices": []}'])
        assert wake is not None
        wake.wake()
        joined = await follower
        assert joined.live is not None
        it = joined.live.follow()
        assert await it.__anext__() == b'{"choices": []}'
        await cache.abandon(leader.ticket)
        assert [ev async for ev in it] == [] and joined.live.state == "failed"
        assert registry.get_sample_value("proxy_cache_single_flight_broken_total") == 1
    finally:
        await cache.aclose()


def usage_of(raw: list[str]) -> Any:
    found = [json.loads(x[6:]).get("usage") for x in raw if x != "data: [DONE]"]
    return [u for u in found if u]


@pytest.mark.parametrize("leader_leaves", [False, True])
async def test_three_followers_share_one_upstream_stream_live(leader_leaves: bool) -> None:
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume))
    ask = {**body("Share widely"), "stream_options": {"include_usage": True}}
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        lead_cm = client.stream("POST", "/v1/chat/completions", json=ask)
        lead = await lead_cm.__aenter__()
        leader_lines: list[str] = []
        leader_first = asyncio.Event()
        reading = asyncio.create_task(lines(lead, leader_lines, leader_first))
        await leader_first.wait()
        followers: list[tuple[list[str], asyncio.Task[None], httpx.Response]] = []
        firsts: list[asyncio.Event] = []
        cms = [client.stream("POST", "/v1/chat/completions", json=ask) for _ in range(3)]
        for cm in cms:
            follow = await cm.__aenter__()
            assert (follow.headers["x-cache"], follow.headers["x-cache-tier"]) == ("HIT",
                                                                                   "flight")
            got: list[str] = []
            first = asyncio.Event()
            followers.append((got, asyncio.create_task(lines(follow, got, first)), follow))
            firsts.append(first)
        for first in firsts:                            # all live before the upstream resumes
            await first.wait()
        assert not reading.done()
        if leader_leaves:
            reading.cancel()
            await lead_cm.__aexit__(None, None, None)
        resume.set()
        for _, task, _ in followers:
            await task
        for cm in cms:
            await cm.__aexit__(None, None, None)
        if not leader_leaves:
            await reading
            await lead_cm.__aexit__(None, None, None)
    assert len(fake.completions()) == 1                 # one upstream request for all four
    for got, _, _ in followers:
        text, end = content(got)
        if leader_leaves:   # handed over (or done before the proxy saw it leave): whole
            assert (text, end) == (" w0 w1 w2 w3 w4 w5 w6 w7", "[DONE]")
        else:
            assert (text, end) == content(leader_lines) == (" w0 w1 w2 w3 w4 w5 w6 w7", "[DONE]")
            assert usage_of(got) == usage_of(leader_lines) and usage_of(got)
            finish = [c["finish_reason"] for x in got[:-1]
                      for c in json.loads(x[6:]).get("choices") or () if c["finish_reason"]]
            assert finish == ["length"]


async def test_through_the_proxy_past_the_bound_a_follower_goes_upstream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_CACHE_FLIGHT_MAX_BYTES", "64")   # less than one chunk's JSON
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume))
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client, \
            client.stream("POST", "/v1/chat/completions", json=body("Too big")) as lead:
        leader_lines: list[str] = []
        leader_first = asyncio.Event()
        reading = asyncio.create_task(lines(lead, leader_lines, leader_first))
        await leader_first.wait()
        follow_lines: list[str] = []
        follow_first = asyncio.Event()
        following = asyncio.create_task(lines_of(client, follow_lines, follow_first))
        await follow_first.wait()     # its own upstream stream got to the pause too
        assert len(fake.completions()) == 2
        resume.set()
        cache_header = await following
        await reading
    assert cache_header == "MISS"
    assert content(follow_lines) == content(leader_lines) == (" w0 w1 w2 w3 w4 w5 w6 w7",
                                                              "[DONE]")


async def lines_of(client: httpx.AsyncClient, into: list[str], first: asyncio.Event) -> str:
    async with client.stream("POST", "/v1/chat/completions", json=body("Too big")) as r:
        await lines(r, into, first)
        return r.headers["x-cache"]


async def test_shutdown_lets_a_handed_over_stream_finish_for_its_followers() -> None:
    from proxy.forwarding import Forwarding

    deps = SimpleNamespace(settings=Settings(drain_timeout=30.0))
    forwarding = Forwarding(deps, None)  # type: ignore[arg-type]
    release = asyncio.Event()
    finished: list[str] = []

    async def stream() -> None:
        await release.wait()

    async def then() -> None:
        finished.append("stored")

    forwarding._background(asyncio.create_task(stream()), then)
    draining = asyncio.create_task(forwarding.drain())
    done, _ = await asyncio.wait([draining], timeout=0.05)
    assert not done                                     # it waits for the stream
    release.set()
    await draining
    assert finished == ["stored"] and not forwarding._jobs


async def test_shutdown_waits_for_handed_over_streams_at_most_the_drain_timeout() -> None:
    from proxy.forwarding import Forwarding

    deps = SimpleNamespace(settings=Settings(drain_timeout=0.05))
    forwarding = Forwarding(deps, None)  # type: ignore[arg-type]
    never = asyncio.Event()

    async def then() -> None:
        pass

    stuck = asyncio.create_task(never.wait())
    forwarding._background(stuck, then)
    await asyncio.wait_for(forwarding.drain(), timeout=5)  # returns: PROXY_DRAIN_TIMEOUT passed
    assert not stuck.done()
    stuck.cancel()


async def test_no_one_joins_a_stream_that_is_being_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's client leaves and nobody follows: its upstream stream is stopped and the
    flight abandoned. An identical request arriving while the stop is under way joined the
    stream (still 'live', events in) and then got the leader's abandonment as an error event,
    'lost its upstream stream; retry', where nothing upstream had failed (a review of the
    flight's end). It goes upstream itself now and gets the whole answer."""
    from proxy.relay import Pump

    resume, stopping, proceed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    stop = Pump.stop

    async def held_stop(self: Pump) -> None:  # the stop's window held open
        stopping.set()
        await proceed.wait()
        await stop(self)

    monkeypatch.setattr(Pump, "stop", held_stop)
    fake = FakeVllm(pause=(3, resume))
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("Cut off")) as lead:
            leader_first = asyncio.Event()
            reading = asyncio.create_task(lines(lead, [], leader_first))
            await leader_first.wait()
            reading.cancel()                             # the leader's client goes away
        await stopping.wait()                            # its stream is being stopped

        async def twin() -> tuple[str, list[str]]:
            got: list[str] = []
            async with client.stream("POST", "/v1/chat/completions",
                                     json=body("Cut off")) as resp:
                await lines(resp, got, asyncio.Event())
            return resp.headers["x-cache"], got

        asking = asyncio.create_task(twin())
        async with asyncio.timeout(20):                  # it goes upstream, not into the flight
            await fake.arrived(2)                        # while the stop is still held open
        proceed.set()
        resume.set()
        _, got = await asking
    assert content(got) == (" w0 w1 w2 w3 w4 w5 w6 w7", "[DONE]")
