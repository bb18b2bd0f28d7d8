"""The production transport (aiohttp) against a real HTTP server in this process: bytes, error
translation, cancellation by closing, and the whole proxy over it."""

from __future__ import annotations

import asyncio

import pytest

from proxy.errors import (
    BadGateway,
    UpstreamConnectTimeout,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.settings import Settings
from proxy.transport import AiohttpTransport, Limits
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import free_port
from tests.support.proxy_app import proxy_client

LIMITS = Limits(connect=2.0, read=5.0, pool=5.0, connections=8, keepalive=4.0)
STREAM = b'{"model": "tiny", "prompt": "x", "max_tokens": 4, "stream": true}'
JSON = {"content-type": "application/json"}


async def test_json_and_stream_bodies_arrive_whole() -> None:
    fake, transport = FakeVllm(), AiohttpTransport(LIMITS)
    async with fake.served() as url:
        reply = await transport.request("GET", url + "/v1/models", None, {})
        assert reply.status == 200 and b'"tiny"' in await reply.read()
        reply.close()
        reply = await transport.request("POST", url + "/v1/completions", STREAM, JSON)
        body = b"".join([c async for c in reply.chunks()])
        reply.close()
        assert body.count(b"data: ") == 5 and body.endswith(b"data: [DONE]\n\n")
        assert fake.requests[-1].json["prompt"] == "x"
        assert fake.requests[-1].headers["accept-encoding"] == "identity"
    await transport.aclose()


async def test_refused_connection_is_unavailable() -> None:
    transport = AiohttpTransport(LIMITS)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UpstreamUnavailable) as info:
        await transport.request("GET", url + "/health", None, {})
    assert url in str(info.value) and "/health" not in str(info.value)
    assert info.value.absent  # nothing listens there: it holds nothing
    await transport.aclose()


async def test_no_connection_in_time_is_unavailable_but_not_absent() -> None:
    # the one pooled connection is held by a request vLLM has not answered: the next one waits
    # for it past the connect timeout (pool wait + connect). Failed over as a refusal is, but
    # the replica is there, saturated: before, the same error as a refusal
    gate = asyncio.Event()
    fake = FakeVllm(gate=gate)
    transport = AiohttpTransport(Limits(connect=0.1, read=5.0, pool=0.1, connections=1,
                                        keepalive=4.0))
    async with fake.served() as url:
        held = asyncio.create_task(
            transport.request("POST", url + "/v1/completions", STREAM, JSON))
        await fake.arrived(1, "/v1/completions")
        with pytest.raises(UpstreamConnectTimeout) as info:
            await transport.request("GET", url + "/health", None, {})
        assert isinstance(info.value, UpstreamUnavailable) and not info.value.absent
        assert info.value.status == 503 and info.value.body()["error"]["code"] == \
            "upstream_unavailable"
        gate.set()
        (await held).close()
        await transport.aclose()


async def test_silence_is_a_timeout() -> None:
    fake = FakeVllm(read_timeout=True)
    transport = AiohttpTransport(Limits(connect=2.0, read=0.3, pool=5.0, connections=8,
                                        keepalive=4.0))
    async with fake.served() as url:
        with pytest.raises(UpstreamTimeout):
            await transport.request("POST", url + "/v1/completions", STREAM, JSON)
        await transport.aclose()


async def test_a_broken_stream_is_a_bad_gateway() -> None:
    fake, transport = FakeVllm(stream_error_after=2), AiohttpTransport(LIMITS)
    async with fake.served() as url:
        reply = await transport.request("POST", url + "/v1/completions", STREAM, JSON)
        with pytest.raises(BadGateway):
            async for _ in reply.chunks():
                pass
        reply.close()
    await transport.aclose()


async def test_closing_an_unfinished_body_drops_the_connection() -> None:
    """How a client's disconnect reaches vLLM: the proxy closes the upstream connection."""
    gate = asyncio.Event()
    fake, transport = FakeVllm(), AiohttpTransport(LIMITS)
    async with fake.served() as url:
        reply = await transport.request("GET", url + "/v1/models", None, {})
        await reply.read()
        reply.close()  # read to the end: the connection goes back to the pool
        fake.gate = gate
        task = asyncio.create_task(
            transport.request("POST", url + "/v1/completions", STREAM, JSON))
        await fake.arrived(1, "/v1/completions")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        # the pool still works after a cancelled request
        reply = await transport.request("GET", url + "/health", None, {})
        assert reply.status == 200
        reply.close()
    await transport.aclose()


async def test_the_whole_proxy_over_the_production_transport() -> None:
    fake = FakeVllm()
    async with fake.served() as url:
        settings = Settings(upstreams=(url,), cache="off")
        async with proxy_client(settings) as c:
            r = await c.post("/v1/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3})
            assert r.status_code == 200
            assert r.json()["choices"][0]["message"]["content"] == " w0 w1 w2"
            async with c.stream("POST", "/v1/chat/completions", json={
                    "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 3, "stream": True}) as s:
                text = "".join([line async for line in s.aiter_lines()])
            assert s.status_code == 200 and text.endswith("data: [DONE]")
            assert (await c.get("/ready")).status_code == 200
