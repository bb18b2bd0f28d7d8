"""The client against scripted replies: what counts as a token chunk, and a malformed reply
fails its own request only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
import pytest
from aiohttp import web

from loadtest.client import Client, ClientConfig, Result
from loadtest.request import Request

Script = Callable[[], list[tuple[float, bytes]]]


def sse(*events: object) -> list[bytes]:
    return [b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n"
            for e in events]


@asynccontextmanager
async def server(parts: list[tuple[float, bytes]], stream: bool = True
                 ) -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.StreamResponse:
        if not stream:
            return web.Response(body=parts[0][1], content_type="application/json")
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for delay, chunk in parts:
            await asyncio.sleep(delay)
            await resp.write(chunk)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def send(parts: list[tuple[float, bytes]], endpoint: str = "chat",
               stream: bool = True) -> Result:
    async with server(parts, stream) as url:
        client = Client(ClientConfig(url, "m", endpoint=endpoint, stream=stream), None)
        try:
            return await client.send(Request(0, "hi", 4, 2))
        finally:
            await client.aclose()


def chunk(content: str | None = None, role: str | None = None,
          finish: str | None = None) -> dict[str, object]:
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3,
                                  "total_tokens": 5}}


async def test_the_role_and_finish_chunks_carry_no_token() -> None:
    events = sse(chunk(role="assistant", content=""), chunk(" a"), chunk(" b"), chunk(" c"),
                 chunk(content="", finish="length"), USAGE, b"[DONE]")
    gaps = [0.05, 0.0, 0.02, 0.02, 0.0, 0.0, 0.0]  # the role chunk right before the first token
    r = await send(list(zip(gaps, events, strict=True)))
    assert r.success and r.text == " a b c" and r.output_tokens == 3
    assert len(r.itl) == 2 and min(r.itl) > 0.015  # no ~0 gap for the role chunk
    assert r.ttft >= 0.045


async def test_without_usage_the_chunks_with_output_are_counted() -> None:
    events = sse(chunk(role="assistant", content=""), chunk(" a"), chunk(" b"),
                 chunk(content="", finish="stop"), b"[DONE]")
    r = await send([(0.0, e) for e in events])
    assert r.success and not r.usage_reported and r.output_tokens == 2


async def test_an_answer_that_ends_before_any_output_still_succeeds() -> None:
    events = sse(chunk(role="assistant", content=""), chunk(content="", finish="stop"),
                 {**USAGE, "usage": {"prompt_tokens": 2, "completion_tokens": 1}}, b"[DONE]")
    r = await send([(0.01, e) for e in events])
    assert r.success and r.text == "" and r.ttft > 0 and r.output_tokens == 1


@pytest.mark.parametrize("bad", [b"[1,2]", b'{"choices":"x"}', b'{"choices":[null]}',
                                 b'{"choices":[],"usage":[1]}',
                                 b'{"choices":[{"delta":"x"}]}'])
async def test_a_malformed_event_fails_that_request_not_the_run(bad: bytes) -> None:
    r = await send([(0.0, e) for e in [*sse(chunk(" a")), *sse(bad)]])
    assert not r.success and r.error.startswith("malformed response")


async def test_a_body_that_is_not_an_object_fails_cleanly() -> None:
    r = await send([(0.0, b'"hello"')], stream=False)
    assert not r.success and "expected a JSON object" in r.error


async def test_a_stream_cut_before_done_fails() -> None:
    """A stream that ends cleanly after two tokens, with no finish_reason, usage or [DONE]
    (an upstream or proxy that cut the answer): an incomplete answer is no success, and its
    short latency and two tokens stay out of the stats (before: a success)."""
    events = sse(chunk(role="assistant", content=""), chunk(" a"), chunk(" b"))
    r = await send([(0.0, e) for e in events])
    assert not r.success and "[DONE]" in r.error
    r = await send([(0.0, e) for e in [*events, *sse(b"[DONE]")]])  # the same, ended: a success
    assert r.success and r.output_tokens == 2


class _KeepAliveServer(asyncio.Protocol):
    """A server with uvicorn's 5 s keep-alive (vLLM's, the proxy's), on a clock the test
    moves: a request that arrives on a connection idle for 5 s crossed the server's close of
    it (uvicorn closes it then), so it is dropped unanswered, as the race drops it."""

    KEEP_ALIVE = 5.0
    ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
              b"transfer-encoding: chunked\r\n\r\n")

    def __init__(self, clock: Callable[[], float], connections: list[int]) -> None:
        self.clock, self.connections = clock, connections
        self.idle_since: float | None = None
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connections.append(1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        head, sep, rest = self.buf.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        if not sep or len(rest) < length:
            return
        self.buf = rest[length:]
        if self.idle_since is not None and self.clock() - self.idle_since >= self.KEEP_ALIVE:
            self.transport.close()
            return
        body = b"".join(sse(chunk(" a"), chunk(content="", finish="length"), b"[DONE]"))
        self.transport.write(self.ANSWER + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        self.idle_since = self.clock()


async def test_no_request_is_sent_on_a_connection_the_servers_keep_alive_is_closing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found on a proxy + Redis stack with a pool of warm connections (answers from the
    cache leave connections idle): aiohttp's default keeps an idle connection for 15 s, so
    the client reused connections that uvicorn (vLLM, the proxy) closes after 5 s idle, and
    the close crossed the request: 2 of 3,750 requests failed with 'Server disconnected' in
    each of two runs (1 of 3,750 against a bare uvicorn), none with connections kept 4 s. A
    saturated server leaves no connection idle, so only the faster target lost requests to it,
    and one failed request decides a sweep point. The client now lets go of a connection
    before the server's keep-alive can close it."""
    now = [0.0]
    monkeypatch.setattr("aiohttp.connector.monotonic", lambda: now[0])  # the pool's clock
    connections: list[int] = []
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _KeepAliveServer(lambda: now[0], connections),
                                   "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = Client(ClientConfig(f"http://127.0.0.1:{port}", "m", endpoint="completions"),
                    None)
    try:
        first = await client.send(Request(0, "hi", 4, 2))
        now[0] += 1.0  # a connection reused soon after its answer: kept
        second = await client.send(Request(1, "hi", 4, 2))
        assert first.success and second.success and len(connections) == 1
        now[0] += _KeepAliveServer.KEEP_ALIVE  # idle as long as the server keeps it
        third = await client.send(Request(2, "hi", 4, 2))
        assert third.success, third.error
        assert len(connections) == 2  # a new connection, not the one being closed
    finally:
        await client.aclose()
        srv.close()
        await srv.wait_closed()
