"""A fake vLLM for fast tests, answering like vLLM's OpenAI server, in two ways:

    fake = FakeVllm()
    app = create_app(settings, transport=fake.transport)   # in memory, at the proxy's seam
    async with fake.served() as url: ...                     # for real, on a loopback port
    ... fake.requests[-1].json  # what the proxy sent upstream

`transport` implements proxy.transport.Transport, raising the errors the real transport
raises; `served()` puts the same answers behind a real HTTP server, so the production
transport (aiohttp) is tested in-process too (tests/test_transport.py).

Answers are deterministic: the text is "w0 w1 w2 ..." up to max_tokens (default 16). Knobs:
`fail_with` (status, body) answers every completion with that error; `connect_error` refuses
the listed base URLs; `connect_timeout` does not connect to them in time (a saturated replica:
the error the production transport makes of aiohttp's connect timeout); `read_timeout` makes
completions time out (served: never answer); `stream_error_after` (n events) breaks a stream
mid-way; `gate` (an asyncio.Event) holds completions until it is set; `pause` (n, event) holds
each stream after n events until set;
`finish` is every answer's finish_reason ("length", as max_tokens ends the fake's answers).
It also answers /tokenize, /detokenize and /v1/responses (tests/support/fake_passthrough.py),
and GET /v1/responses/{id} and its cancel for the responses in `held` (id -> the request that
made it; only at the base URL `held_at` when set). As vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1
does, a POST /v1/responses (unless `"store": false`) is held under its `request_id`, replacing
one held before, and a `previous_response_id` not held is vLLM's 404.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from proxy.errors import BadGateway, UpstreamTimeout, UpstreamUnavailable
from proxy.transport import translate
from tests.support import fake_passthrough
from tests.support.serving import served


class FakeReply:
    """What the fake answers: a status and a body (bytes, or events that may break)."""

    def __init__(self, status: int, content: bytes = b"", *, json_body: Any = None,
                 events: list[bytes] | None = None, break_after: int | None = None,
                 headers: Mapping[str, str] | None = None,
                 pause: tuple[int, asyncio.Event] | None = None) -> None:
        self.status = status
        self.content = json.dumps(json_body).encode() if json_body is not None else content
        self.events = events
        self.break_after = break_after
        self.pause = pause  # (n, event): after n events, wait for the event
        self.headers = dict(headers or {"content-type": "application/json"})
        self.closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.events is None:
            yield self.content
            return
        for i, ev in enumerate(self.events):
            if self.pause is not None and i == self.pause[0]:
                await self.pause[1].wait()
            if self.break_after is not None and i >= self.break_after:
                raise BadGateway("the upstream fake failed: connection reset")
            yield ev

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])

    def close(self) -> None:
        self.closed = True


class FakeTransport:
    """proxy.transport.Transport over a FakeVllm (or any async handler), in memory."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> FakeReply:
        reply: FakeReply = await self.handle(method, url, dict(headers), content or b"")
        return reply

    async def aclose(self) -> None:
        return None


@dataclass
class Seen:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeVllm:
    model: str = "tiny"
    max_model_len: int = 2048
    root: str = "/nonexistent/tiny"
    requests: list[Seen] = field(default_factory=list)
    fail_with: tuple[int, dict[str, Any]] | None = None
    connect_error: set[str] = field(default_factory=set)  # base URLs that refuse connections
    connect_timeout: set[str] = field(default_factory=set)  # base URLs not connected in time
    read_timeout: bool = False
    stream_error_after: int | None = None  # events before the stream breaks
    gate: asyncio.Event | None = None  # completions wait for it (to hold requests in flight)
    pause: tuple[int, asyncio.Event] | None = None  # streams stop after n events until set
    finish: str = "length"
    held: dict[str, Any] = field(default_factory=dict)  # stored responses: id -> request
    held_at: str | None = None  # the one replica (base URL) that holds them; None: each

    @property
    def transport(self) -> FakeTransport:
        return FakeTransport(self.handle)

    @asynccontextmanager
    async def served(self) -> AsyncIterator[str]:
        """The same answers from a real HTTP server (uvicorn) on a free loopback port."""
        async with served(self._asgi, lifespan="off", interface="asgi3",
                          timeout_graceful_shutdown=1) as url:
            yield url

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        url = f"http://{headers.get('host', 'fake')}{scope['path']}"
        if self.read_timeout and scope["path"].endswith("completions"):
            await asyncio.Event().wait()  # never answers: the client's read timeout fires
        reply = await self.handle(scope["method"], url, headers, body)
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers.items()]})
        async for chunk in reply.chunks():  # a break raises: uvicorn drops the connection
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    _arrived: asyncio.Condition | None = None

    async def arrived(self, n: int, path: str = "/v1/chat/completions") -> None:
        """Wait until n completion requests have reached the fake."""
        self._arrived = self._arrived or asyncio.Condition()
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.completions(path)) >= n)

    def completions(self, path: str = "/v1/chat/completions") -> list[Seen]:
        return [r for r in self.requests if r.url.endswith(path)]

    async def handle(self, method: str, url: str, headers: dict[str, str],
                     body: bytes) -> FakeReply:
        base = "/".join(url.split("/", 3)[:3])
        if base in self.connect_error:
            raise UpstreamUnavailable(f"the upstream {base} is unreachable: connection refused")
        if base in self.connect_timeout:  # the pool's wait, then the connect, timed out
            raise translate(aiohttp.ConnectionTimeoutError(f"Connection timeout to host {url}"),
                            url, True)
        self.requests.append(Seen(method, url, headers, body))
        self._arrived = self._arrived or asyncio.Condition()
        async with self._arrived:
            self._arrived.notify_all()
        path = "/" + url.split("/", 3)[3].split("?")[0] if url.count("/") >= 3 else "/"
        if path == "/health":
            return FakeReply(200)
        if path == "/version":
            return FakeReply(200, json_body={"version": "0.32.0"})
        if path == "/v1/models":
            return FakeReply(200, json_body={"object": "list", "data": [
                {"id": self.model, "object": "model", "root": self.root,
                 "max_model_len": self.max_model_len}]})
        if path in ("/tokenize", "/detokenize"):
            status, answer = (fake_passthrough.tokenize if path == "/tokenize"
                              else fake_passthrough.detokenize)(json.loads(body))
            if path == "/tokenize" and status == 200:
                answer["max_model_len"] = self.max_model_len
            return FakeReply(status, json_body=answer)
        if path.startswith("/v1/responses/"):
            held = self.held if self.held_at in (None, base) else {}
            status, answer = fake_passthrough.stored(method, path, url.partition("?")[2],
                                                     held, self.model)
            if isinstance(answer, list):
                return FakeReply(status, events=answer,
                                 headers={"content-type": "text/event-stream; charset=utf-8"})
            return FakeReply(status, json_body=answer)
        if path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
            if self.gate is not None:
                await self.gate.wait()
            if self.read_timeout:
                raise UpstreamTimeout(f"the upstream {base} timed out: read timed out")
            if self.fail_with is not None:
                return FakeReply(self.fail_with[0], json_body=self.fail_with[1])
            data = json.loads(body)
            if data.get("model") != self.model:
                return FakeReply(404, json_body={"error": {
                    "message": f"The model `{data.get('model')}` does not exist.",
                    "type": "NotFoundError", "param": "model", "code": 404}})
            if path == "/v1/responses":
                return self._hold(data, base) or self._responses(data)
            chat = path.endswith("chat/completions")
            if data.get("stream"):
                return FakeReply(200, events=self._sse(data, chat),
                                 break_after=self.stream_error_after, pause=self.pause,
                                 headers={"content-type": "text/event-stream"})
            return FakeReply(200, json_body=self._json(data, chat))
        return FakeReply(404, json_body={"detail": "Not Found"})

    def _hold(self, data: dict[str, Any], base: str) -> FakeReply | None:
        """vLLM's 404 for a previous_response_id it does not hold; else None, the response
        held (unless `"store": false`) under its request_id."""
        previous = data.get("previous_response_id")
        if previous is not None and (previous not in self.held
                                     or self.held_at not in (None, base)):
            return FakeReply(404, json_body=fake_passthrough.not_found(previous))
        if data.get("store", True):
            self.held[data.get("request_id", "resp_fake")] = data
        return None

    def _responses(self, data: dict[str, Any]) -> FakeReply:
        if data.get("stream"):
            return FakeReply(200, events=fake_passthrough.events(data, self.model),
                             break_after=self.stream_error_after, pause=self.pause,
                             headers={"content-type": "text/event-stream; charset=utf-8"})
        return FakeReply(200, json_body=fake_passthrough.response(data, self.model))

    def words(self, data: dict[str, Any]) -> list[str]:
        n = data.get("max_tokens") or data.get("max_completion_tokens") or 16
        return [f" w{i}" for i in range(min(n, 16))]

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        words = self.words(data)
        text = "".join(words)
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text},
             "finish_reason": self.finish} if chat
            else {"index": 0, "text": text, "finish_reason": self.finish})
        return {"id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.model, "choices": [choice],
                "usage": {"prompt_tokens": 5, "completion_tokens": len(words),
                          "total_tokens": 5 + len(words)}}

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        words = self.words(data)
        head = {"id": "cmpl-fake", "created": 1, "model": self.model,
                "object": "chat.completion.chunk" if chat else "text_completion"}
        events: list[dict[str, Any]] = []
        if chat:
            events.append({**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                       "content": ""},
                                                "finish_reason": None}]})
        for i, w in enumerate(words):
            last = self.finish if i == len(words) - 1 else None
            events.append({**head, "choices": [
                {"index": 0, "delta": {"content": w}, "finish_reason": last} if chat
                else {"index": 0, "text": w, "finish_reason": last}]})
        if (data.get("stream_options") or {}).get("include_usage"):
            events.append({**head, "choices": [], "usage": {
                "prompt_tokens": 5, "completion_tokens": len(words),
                "total_tokens": 5 + len(words)}})
        return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [
            b"data: [DONE]\n\n"]
