"""Hedged upstream calls: started when the semantic search begins, used on a miss, cancelled
(and their slot freed) on a hit; PROXY_CACHE_HEDGE=off never starts one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.hedge import Hedge
from proxy.metrics import Metrics
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"


def counted(m: Metrics, outcome: str) -> float:
    return m.hedged.labels(outcome)._value.get()  # type: ignore[attr-defined, no-any-return]


async def test_work_without_the_hook_is_a_fresh_call():
    m, calls = Metrics(), []

    async def start() -> int:
        calls.append(1)
        return 7

    hedge = Hedge(start, None, m)
    assert await hedge.work() == 7 and calls == [1]
    await hedge.cancel()  # nothing was hedged: nothing to cancel
    assert counted(m, "used") == counted(m, "cancelled") == 0


async def test_hooked_call_starts_once_and_is_the_one_used():
    m, calls = Metrics(), []

    async def start() -> int:
        calls.append(1)
        await asyncio.sleep(0.01)
        return 7

    hedge = Hedge(start, None, m)
    hedge()
    hedge()  # the cache calls it at most once; twice still starts one call
    await asyncio.sleep(0)
    assert calls == [1]
    assert await hedge.work() == 7 and calls == [1] and counted(m, "used") == 1


async def test_cancel_stops_a_running_call_and_closes_a_finished_one():
    m, closed = Metrics(), []
    started = asyncio.Event()

    async def forever() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    async def close(value: str) -> None:
        closed.append(value)

    running = Hedge(forever, close, m)
    running()
    await started.wait()
    await asyncio.wait_for(running.cancel(), 5)
    assert closed == []

    returned = asyncio.Event()

    async def quick() -> str:
        returned.set()  # the call's task ends in this same step: no await before the return
        return "stream"

    finished = Hedge(quick, close, m)
    finished()
    await returned.wait()
    await finished.cancel()
    assert closed == ["stream"] and counted(m, "cancelled") == 2


def ask(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            **kw}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_semantic_hit_cancels_the_hedged_call_and_a_miss_uses_it(stream: bool):
    fake = FakeVllm(gate=asyncio.Event())
    fake.gate.set()  # type: ignore[union-attr]
    # a loose error bound: the committed judge promises 1 % on nothing (docs/cache.md)
    s = Settings(upstreams=(UP,), cache="semantic", tokenizer=None, cache_max_false_hit_rate=0.3)
    async with proxy_client(s, transport=fake.transport) as c:
        metrics = c.app.state.deps.metrics  # type: ignore[attr-defined]
        miss = await c.post("/v1/chat/completions",
                            json=ask("How do I reverse a list in Python?", stream=stream))
        assert miss.status_code == 200 and miss.headers["X-Cache"] == "MISS"
        assert len(fake.completions()) == 1 and counted(metrics, "used") == 1
        fake.gate.clear()  # type: ignore[union-attr]  # vLLM now holds every request
        hit = await asyncio.wait_for(c.post(
            "/v1/chat/completions",
            json=ask("What's the way to reverse a Python list?", stream=stream)), 30)
        assert hit.headers["X-Cache"] == "HIT" and hit.headers["X-Cache-Tier"] == "semantic"
        assert len(fake.completions()) == 2  # the hedged call went out ...
        assert counted(metrics, "cancelled") == 1  # ... and was cancelled, vLLM still holding it
        assert metrics.inflight._value.get() == 0  # its admission slot is free again
        assert "w0" in hit.text


async def test_hedge_off_waits_for_the_lookup():
    fake = FakeVllm()
    s = Settings(upstreams=(UP,), cache="semantic", cache_hedge=False,
                 cache_max_false_hit_rate=0.3)
    async with proxy_client(s, transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json=ask("How do I reverse a list in Python?"))
        hit = await c.post("/v1/chat/completions",
                           json=ask("What's the way to reverse a Python list?"))
        assert hit.headers["X-Cache"] == "HIT" and len(fake.completions()) == 1
        text = (await c.get("/metrics")).text
        assert 'proxy_cache_hedged_total{outcome="used"}' not in text


@pytest.mark.parametrize("stream", [False, True])
async def test_simultaneous_twins_share_one_upstream_call_with_hedging_on(stream: bool):
    # found by a review: each twin hedged while the leader embedded, so 10 identical
    # requests at once made 10 upstream calls (single flight only worked with hedging off)
    fake = FakeVllm(gate=asyncio.Event())
    s = Settings(upstreams=(UP,), cache="semantic", cache_max_false_hit_rate=0.3)
    async with proxy_client(s, transport=fake.transport) as c:
        body = ask("Which river flows through Vienna?", stream=stream)
        twins = [asyncio.create_task(c.post("/v1/chat/completions", json=body))
                 for _ in range(6)]
        await asyncio.wait_for(fake.arrived(1), 30)  # the leader's call, held at vLLM
        fake.gate.set()  # type: ignore[union-attr]
        replies = await asyncio.wait_for(asyncio.gather(*twins), 60)
    assert len(fake.completions()) == 1
    assert sorted(r.headers["X-Cache"] for r in replies) == ["HIT"] * 5 + ["MISS"]
    if not stream:
        assert len({r.json()["choices"][0]["message"]["content"] for r in replies}) == 1
