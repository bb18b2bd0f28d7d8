"""Counting at vLLM (tokens.RemoteCounter, no tokenizer here) is bounded by admission
(admission.CountGate): a fake vLLM in memory, no model needed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeReply, FakeTransport, FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"


class HeldTokenize:
    """The fake vLLM, its /tokenize calls held until `go` is set (the rest answered at once)."""

    def __init__(self) -> None:
        self.fake = FakeVllm()  # its model path is not here: the proxy counts at vLLM
        self.go = asyncio.Event()
        self.held = 0  # /tokenize calls waiting now
        self.most = 0  # the most at once
        self.calls = 0  # /tokenize calls in all
        self._changed = asyncio.Event()

    async def handle(self, method: str, url: str, headers: dict[str, str],
                     body: bytes) -> FakeReply:
        if url.endswith("/tokenize"):
            self.calls += 1
        if url.endswith("/tokenize") and not self.go.is_set():
            self.held += 1
            self.most = max(self.most, self.held)
            self._changed.set()
            try:
                await self.go.wait()
            finally:
                self.held -= 1
        return await self.fake.handle(method, url, headers, body)

    async def until_held(self, n: int) -> None:
        """Until n /tokenize calls are held (at most 10 s)."""
        async with asyncio.timeout(10):
            while self.held < n:
                self._changed.clear()
                await self._changed.wait()


@pytest.mark.parametrize("overflow", ["reject", "truncate"])
async def test_counting_at_vllm_is_bounded_as_admission_is(overflow: str) -> None:
    # found by a probe: every chat was counted at vLLM before its admission slot was taken, so
    # 40 at once made 40 concurrent /tokenize calls with PROXY_MAX_INFLIGHT=2 and
    # PROXY_MAX_WAITING=0 (truncate makes several a request); now at most 2 at once, the rest
    # wait their turn (at most admission's timeout) and then meet admission as ever
    vllm = HeldTokenize()
    settings = Settings(upstreams=(UP,), cache="off", max_inflight=2, max_waiting=0,
                        input_overflow=overflow, max_input_tokens=8)
    words = " ".join(f"w{i}" for i in range(20)) if overflow == "truncate" else "hi"
    async with proxy_client(settings, transport=FakeTransport(vllm.handle)) as c:
        tasks = [asyncio.create_task(c.post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": f"q{i} {words}"}]}))
            for i in range(40)]
        await vllm.until_held(2)
        assert vllm.held == vllm.most == 2 and not any(t.done() for t in tasks)
        vllm.go.set()
        answers = await asyncio.gather(*tasks)
    codes = [r.status_code for r in answers]
    assert set(codes) <= {200, 429} and codes.count(200) >= 2  # never a 500
    refused = [r for r in answers if r.status_code == 429]
    for r in refused:  # those admission could not take: its own refusal, as without counting
        error: dict[str, Any] = r.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_requests")
        assert r.headers["Retry-After"] == "2"
    assert vllm.most == 2
    if overflow == "truncate":
        assert all("X-Proxy-Input-Truncated" in r.headers
                   for r in answers if r.status_code == 200)


async def test_a_count_past_the_bound_waits_at_most_admissions_timeout() -> None:
    vllm = HeldTokenize()
    settings = Settings(upstreams=(UP,), cache="off", max_inflight=1, max_waiting=0,
                        queue_timeout=0.2)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with proxy_client(settings, transport=FakeTransport(vllm.handle)) as c:
        first = asyncio.create_task(c.post("/v1/chat/completions", json=body))
        await vllm.until_held(1)
        second = await c.post("/v1/chat/completions", json=body)  # its turn never comes
        vllm.go.set()
        assert (await first).status_code == 200
    assert second.status_code == 429
    assert "count tokens at vLLM" in second.json()["error"]["message"]
    assert vllm.calls == 1  # the refused one asked vLLM nothing


async def test_cache_hits_are_not_refused_by_the_count_gate() -> None:
    # review: a cache hit takes no admission slot, yet it is counted at vLLM first; with
    # PROXY_MAX_INFLIGHT=1 and PROXY_MAX_WAITING=0 a second identical request counted beside
    # the first was refused 429 at once although the cache would have answered it
    vllm = HeldTokenize()
    vllm.go.set()
    settings = Settings(upstreams=(UP,), cache="exact", max_inflight=1, max_waiting=0)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with proxy_client(settings, transport=FakeTransport(vllm.handle)) as c:
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
        vllm.go.clear()
        tasks = [asyncio.create_task(c.post("/v1/chat/completions", json=body))
                 for _ in range(2)]
        await vllm.until_held(1)  # one counts, the other waits its turn
        vllm.go.set()
        got = await asyncio.gather(*tasks)
    assert [r.status_code for r in got] == [200, 200], [r.text[:200] for r in got]
    assert all(r.headers.get("X-Cache") == "HIT" for r in got)


async def test_a_request_admission_refuses_is_refused_the_same_after_counting() -> None:
    # the shape a client gets when the slots are full, counted at vLLM or not
    fake = FakeVllm(gate=asyncio.Event())  # completions held: their slots stay taken
    settings = Settings(upstreams=(UP,), cache="off", max_inflight=1, max_waiting=0)
    async with proxy_client(settings, transport=fake.transport) as c:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        first = asyncio.create_task(c.post("/v1/chat/completions", json=body))
        await fake.arrived(1)
        second = await c.post("/v1/chat/completions", json=body)
        assert fake.gate is not None
        fake.gate.set()
        assert (await first).status_code == 200
    assert second.status_code == 429 and second.headers["Retry-After"] == "2"
    assert second.json()["error"]["code"] == "too_many_requests"
    assert len(fake.completions("/tokenize")) == 2  # both counted at vLLM


async def test_one_key_takes_no_more_than_its_share_of_the_counting_turns() -> None:
    # found by a review: one key's flood took every turn to count at vLLM (limit +
    # max_waiting of them), and other keys' requests waited behind it; now a key holds at most
    # its PROXY_TENANT_SHARE of them, as it does of admission's slots
    vllm = HeldTokenize()
    settings = Settings(upstreams=(UP,), cache="off", max_inflight=2, max_waiting=2,
                        api_keys=("key-a", "key-b"), tenant_share=0.5)  # 4 turns, 2 a key

    def chat(c: Any, key: str, i: int) -> asyncio.Task[Any]:
        return asyncio.create_task(c.post(
            "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
            json={"model": "tiny", "messages": [{"role": "user", "content": f"{key} {i}"}]}))

    async with proxy_client(settings, transport=FakeTransport(vllm.handle)) as c:
        flood = [chat(c, "key-a", i) for i in range(6)]
        await vllm.until_held(2)
        other = chat(c, "key-b", 0)
        await vllm.until_held(3)  # b's count is at vLLM beside a's two
        assert vllm.held == vllm.most == 3  # before: a's flood took all 4 turns, b waited
        vllm.go.set()
        answers = await asyncio.gather(*flood)
        assert (await other).status_code == 200
    assert {r.status_code for r in answers} <= {200, 429}
