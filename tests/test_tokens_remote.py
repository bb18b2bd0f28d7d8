"""Counting at vLLM (tokens.RemoteCounter, no tokenizer here) is bounded by admission
(admission.CountGate): a fake vLLM in memory, no model needed."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
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

    async def handle(self, method: str, url: str, headers: dict[str, str],
                     body: bytes) -> FakeReply:
        if url.endswith("/tokenize") and not self.go.is_set():
            self.held += 1
            self.most = max(self.most, self.held)
            try:
                await self.go.wait()
            finally:
                self.held -= 1
        return await self.fake.handle(method, url, headers, body)


async def finished(tasks: list[asyncio.Task[httpx.Response]],
                   n: int) -> list[httpx.Response]:
    """Until n of the requests are answered (each wait for the next answer, at most 10 s)."""
    pending = set(tasks)
    while len(tasks) - len(pending) < n:
        done, pending = await asyncio.wait(pending, timeout=10,
                                           return_when=asyncio.FIRST_COMPLETED)
        assert done, f"{len(tasks) - len(pending)} answered, {n} expected"
    return [t.result() for t in tasks if t.done()]


@pytest.mark.parametrize("overflow", ["reject", "truncate"])
async def test_counting_at_vllm_is_bounded_as_admission_is(overflow: str) -> None:
    # found by a probe: every chat was counted at vLLM before its admission slot was taken, so
    # 40 at once made 40 concurrent /tokenize calls with PROXY_MAX_INFLIGHT=2 and
    # PROXY_MAX_WAITING=0 (truncate makes several a request)
    vllm = HeldTokenize()
    settings = Settings(upstreams=(UP,), cache="off", max_inflight=2, max_waiting=0,
                        input_overflow=overflow, max_input_tokens=8)
    words = " ".join(f"w{i}" for i in range(20)) if overflow == "truncate" else "hi"
    async with proxy_client(settings, transport=FakeTransport(vllm.handle)) as c:
        tasks = [asyncio.create_task(c.post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": f"q{i} {words}"}]}))
            for i in range(40)]
        refused = await finished(tasks, 38)  # while two are counted, the others are refused
        assert vllm.held == vllm.most == 2
        assert {r.status_code for r in refused} == {429}
        error: dict[str, Any] = refused[0].json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_requests")
        assert "at capacity" in error["message"] and refused[0].headers["Retry-After"] == "2"
        vllm.go.set()
        answers = await asyncio.gather(*tasks)
    assert sorted(r.status_code for r in answers) == [200] * 2 + [429] * 38
    assert vllm.most == 2
    if overflow == "truncate":
        assert all("X-Proxy-Input-Truncated" in r.headers
                   for r in answers if r.status_code == 200)


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
