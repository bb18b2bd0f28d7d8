"""What the relay does with what the upstream sends, through the proxy: replies vLLM would not
send (a non-object usage, a negative count, a connection kept open after [DONE]), a stream cut
before its usage chunk, and an answer whose text contains the [DONE] line."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client
from tests.support.serving import served
from tests.support.waiting import wait_for_async
from tests.test_handler import settings, sse_events


class OddVllm(FakeVllm):
    """What vLLM would not send (found by a review): usage that is not an object, a negative
    count, a connection kept open after [DONE]."""

    def __init__(self, odd: str) -> None:
        super().__init__()
        self.odd = odd
        self.never = asyncio.Event()

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        events = super()._sse(data, chat)
        if self.odd == "usage":
            events.insert(-1, b'data: {"id": "x", "choices": [], "usage": 5}\n\n')
        if self.odd == "done_then_hang":  # [DONE], then the connection stays open
            self.pause = (len(events), self.never)
            events.append(b": still here\n\n")
        return events

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        answer = super()._json(data, chat)
        if self.odd == "negative":
            answer["usage"]["completion_tokens"] = -3
        return answer


@pytest.mark.parametrize("odd", ["usage", "negative", "done_then_hang"])
async def test_odd_upstream_answers_neither_500_nor_hold_a_slot(odd: str):
    fake = OddVllm(odd)
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
           "stream": odd != "negative", "stream_options": {"include_usage": True}}
    if odd == "negative":
        del ask["stream_options"]
    async with proxy_client(settings(max_inflight=1, queue_timeout=0.5),
                            transport=fake.transport) as c:
        for _ in range(3):  # a slot leaked by the first would refuse the next ones (429)
            async with asyncio.timeout(10):  # and one held open would never end
                r = await c.post("/v1/chat/completions", json=ask)
            assert r.status_code == 200, r.text
            if ask["stream"]:
                assert r.text.endswith("data: [DONE]\n\n")
        metrics = (await c.get("/metrics")).text
    assert "proxy_inflight_requests 0.0" in metrics
    assert "proxy_unexpected_errors_total{" not in metrics


async def left(client: httpx.AsyncClient) -> bool:
    """The proxy has counted a client that left (a 499)."""
    return 'status="499"' in (await client.get("/metrics")).text


async def test_a_stream_cut_before_its_usage_is_charged_what_was_relayed():
    # found by a review: a client that left just before the usage chunk was charged 0 tokens,
    # so a key's tpm limit was never reached
    fake = FakeVllm(pause=(11, asyncio.Event()))  # role, 10 words, then (never) the usage
    auth = {"Authorization": "Bearer sk-a"}
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
           "stream": True}
    codes = []
    async with fake.served() as upstream, served(create_app(Settings(
            upstreams=(upstream,), cache="off", api_keys=("sk-a",),
            key_limits='{"sk-a": {"tpm": 50}}'))) as url, \
            httpx.AsyncClient(base_url=url, timeout=30, headers=auth) as c:
        for _ in range(6):  # ~5 tokens in each; 10 out (and the role chunk) if charged
            async with c.stream("POST", "/v1/chat/completions", json=ask) as r:
                codes.append(r.status_code)
                if r.status_code == 200:
                    async for line in r.aiter_lines():
                        if "length" in line:
                            break  # leave before the usage chunk and [DONE]
            await wait_for_async(lambda: left(c), "the proxy has seen this one leave", 10,
                                 every=0.01)
    assert 429 in codes, codes


class SseTalk(FakeVllm):
    def words(self, data: dict[str, Any]) -> list[str]:
        return [" see", " data: [DONE]", "\n\ndata: [DONE]\n\n", " is", " the", " end"]


@pytest.mark.parametrize("cache", ["off", "exact"])
async def test_an_answer_that_writes_the_done_line_is_not_cut_there(cache: str):
    # found by a review: the relay stopped at any "data: [DONE]" in a chunk, also inside a
    # generated token, and the client got a cut answer with status 200
    fake = SseTalk()
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "sse"}], "stream": True}
    async with proxy_client(settings(cache=cache), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json=ask)
    assert r.status_code == 200 and r.text.endswith("\n\ndata: [DONE]\n\n")
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in sse_events(r.text)[:-1] if json.loads(e).get("choices"))
    assert text == " see data: [DONE]\n\ndata: [DONE]\n\n is the end"


class OddShapes(FakeVllm):
    """Chunks and answers whose fields have shapes vLLM never sends (found by a review): the
    cache folded them without a check, and the fold's exception left the flight registered."""

    def __init__(self, chunk: bytes | None = None, usage: Any = None) -> None:
        super().__init__()
        self.chunk, self.usage = chunk, usage

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        events = super()._sse(data, chat)
        if self.chunk is not None:
            events.insert(1, self.chunk)
        return events

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        answer = super()._json(data, chat)
        if self.usage is not None:
            answer["usage"] = self.usage
        return answer


@pytest.mark.parametrize("chunk", [
    b'data: {"id": "x", "choices": [1]}\n\n',
    b'data: {"id": "x", "choices": 5}\n\n',
    b'data: {"id": "x", "choices": [{"index": 0, "delta": "hi"}]}\n\n',
    b'data: {"id": "x", "choices": [{"index": [0], "delta": {}}]}\n\n',
    b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": 7}}]}\n\n',
])
async def test_an_odd_stream_chunk_does_not_hang_the_next_identical_request(chunk: bytes):
    # the first answer's fold raised (AttributeError/TypeError) in the stream's close, before
    # the cache's ticket was stored or abandoned: its single flight stayed live for good, and
    # every identical stream after it followed that flight and never ended
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
           "stream": True}
    async with proxy_client(settings(cache="exact"),
                            transport=OddShapes(chunk=chunk).transport) as c:
        for _ in range(2):
            async with asyncio.timeout(10):
                r = await c.post("/v1/chat/completions", json=ask)
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
            assert r.headers["x-cache"] == "MISS"  # never stored, never followed
        metrics = (await c.get("/metrics")).text
    assert "proxy_unexpected_errors_total{" not in metrics


@pytest.mark.parametrize("usage", [5, "x", [1], True])
async def test_a_json_answer_with_an_odd_usage_is_not_a_500_when_asked_again(usage: Any):
    # such an answer was stored; every identical request then read its usage as a dict while
    # looking it up: 500 until the entry was evicted
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    async with proxy_client(settings(cache="exact"),
                            transport=OddShapes(usage=usage).transport) as c:
        codes = [(await c.post("/v1/chat/completions", json=ask)).status_code
                 for _ in range(3)]
    assert codes == [200, 200, 200]
