"""An upstream answer read whole (a JSON answer, an error's body) is read to
PROXY_MAX_ANSWER_BYTES at most (proxy/upstream.py): a broken or hostile replica that sends an
endless body gets the client a 502 in OpenAI's shape, counted, and its connection dropped,
instead of growing the proxy's memory for as long as it sends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.balancer import Balancer
from proxy.errors import BadGateway, UpstreamHTTPError
from proxy.metrics import Metrics
from proxy.settings import Settings
from proxy.upstream import Upstream
from tests.support.fake_upstream import FakeReply, FakeTransport, FakeVllm
from tests.support.proxy_app import proxy_client

LIMIT = 64 * 1024
JUNK = b"x" * 4096
URL = "http://vllm:8000"


class EndlessVllm(FakeVllm):
    """Answers a completion (not streamed) with a JSON body that never ends: four times the
    limit, then it waits forever (a read without a bound never returns). Its replies are kept."""

    JUNKS = 4 * LIMIT // len(JUNK)

    def __init__(self, status: int = 200) -> None:
        super().__init__()
        self.status = status
        self.replies: list[FakeReply] = []
        self.release = asyncio.Event()  # never set by the tests that read through the proxy

    async def handle(self, method: str, url: str, headers: dict[str, str],
                     body: bytes) -> FakeReply:
        if not url.endswith(("completions", "/v1/responses")):
            return await super().handle(method, url, headers, body)
        reply = FakeReply(self.status, events=[b'{"id": "x", "text": "', *[JUNK] * self.JUNKS],
                          pause=(self.JUNKS, self.release))
        self.replies.append(reply)
        return reply


def test_the_limit_is_a_setting() -> None:
    assert Settings().max_answer_bytes == 64 * 1024 * 1024
    with pytest.raises(ValueError, match="PROXY_MAX_ANSWER_BYTES"):
        Settings(max_answer_bytes=0)


@pytest.mark.parametrize("status", [200, 500])
async def test_an_endless_body_is_cut_at_the_limit(status: int) -> None:
    fake = EndlessVllm(status)
    up = Upstream(fake.transport, Balancer((URL,), backoff=60), Metrics(), LIMIT)
    async with asyncio.timeout(10):
        if status == 200:
            with pytest.raises(BadGateway) as err:
                await up.fetch("POST", "/v1/completions", b"{}")
            assert isinstance(err.value, BadGateway)
            assert err.value.status == 502 and "PROXY_MAX_ANSWER_BYTES" in str(err.value)
        else:  # an error status's body is bounded too: the status stays, without the body
            with pytest.raises(UpstreamHTTPError) as failed:
                await up.fetch("POST", "/v1/completions", b"{}")
            assert failed.value.status == 500  # the client is told why the body is missing
            assert b"PROXY_MAX_ANSWER_BYTES" in failed.value.content
    assert fake.replies[-1].closed and up.balancer.backends[0].inflight == 0
    assert f'proxy_answers_too_large_total{{upstream="{URL}"}} 1.0' in up.metrics.render().decode()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses"])
async def test_the_client_gets_an_openai_502(path: str) -> None:
    fake = EndlessVllm()
    body: dict[str, Any] = {"model": "tiny"}
    body.update({"input": "hi"} if path == "/v1/responses"
                else {"prompt": "hi"} if path == "/v1/completions"
                else {"messages": [{"role": "user", "content": "hi"}]})
    s = Settings(upstreams=(URL,), cache="off", max_answer_bytes=LIMIT)
    async with proxy_client(s, transport=fake.transport) as c:
        async with asyncio.timeout(10):
            r = await c.post(path, json=body)
        metrics = (await c.get("/metrics")).text
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["code"] == "bad_gateway" and error["type"]
    assert "PROXY_MAX_ANSWER_BYTES" in error["message"]
    assert fake.replies[-1].closed  # the connection dropped, the rest never read
    assert f'proxy_answers_too_large_total{{upstream="{URL}"}} 1.0' in metrics
    assert f'proxy_requests_total{{route="{path}",status="502"}} 1.0' in metrics
    assert "proxy_inflight_requests 0.0" in metrics


async def test_over_the_real_transport() -> None:
    """aiohttp's reply, read chunk by chunk to the limit, as in production."""
    fake = EndlessVllm()
    async with fake.served() as url:
        s = Settings(upstreams=(url,), cache="off", max_answer_bytes=LIMIT)
        async with proxy_client(s) as c:
            async with asyncio.timeout(10):
                r = await c.post("/v1/completions", json={"model": "tiny", "prompt": "hi"})
            metrics = (await c.get("/metrics")).text
        fake.release.set()  # the fake's handler may end
    assert r.status_code == 502 and "PROXY_MAX_ANSWER_BYTES" in r.json()["error"]["message"]
    assert f'proxy_answers_too_large_total{{upstream="{url}"}} 1.0' in metrics


async def test_an_endless_health_answer_is_counted() -> None:
    """/health is an answer read whole too (the module's docstring): past the limit the probe
    fails, and proxy_answers_too_large_total counts it as it counts the others."""
    async def handle(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        return FakeReply(200, events=[JUNK] * (4 * LIMIT // len(JUNK)))

    up = Upstream(FakeTransport(handle), Balancer((URL,), backoff=60), Metrics(), LIMIT)
    async with asyncio.timeout(10):
        assert await up.probe(up.balancer.backends[0]) is False
    assert f'proxy_answers_too_large_total{{upstream="{URL}"}} 1.0' in up.metrics.render().decode()
