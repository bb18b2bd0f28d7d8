"""A fake vLLM for fast tests: an httpx MockTransport that answers like vLLM's OpenAI server.

    fake = FakeVllm()
    app = create_app(settings, transport=fake.transport)
    ... fake.requests[-1].json  # what the proxy sent upstream

Answers are deterministic: the text is "w0 w1 w2 ..." up to max_tokens (default 16). Knobs:
`fail_with` (status, body) answers every completion with that error; `connect_error` raises
httpx.ConnectError for the listed base URLs; `read_timeout` raises httpx.ReadTimeout;
`stream_error_after` (n events) breaks a stream mid-way with httpx.ReadError; `gate` (an
asyncio.Event) holds completions until it is set.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


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
    read_timeout: bool = False
    stream_error_after: int | None = None  # events before the stream breaks
    gate: asyncio.Event | None = None  # completions wait for it (to hold requests in flight)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    _arrived: asyncio.Condition | None = None

    async def arrived(self, n: int, path: str = "/v1/chat/completions") -> None:
        """Wait until n completion requests have reached the fake."""
        self._arrived = self._arrived or asyncio.Condition()
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.completions(path)) >= n)

    def completions(self, path: str = "/v1/chat/completions") -> list[Seen]:
        return [r for r in self.requests if r.url.endswith(path)]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        if base in self.connect_error:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(Seen(request.method, str(request.url), dict(request.headers), body))
        self._arrived = self._arrived or asyncio.Condition()
        async with self._arrived:
            self._arrived.notify_all()
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": self.model, "object": "model", "root": self.root,
                 "max_model_len": self.max_model_len}]})
        if path == "/tokenize":
            data = json.loads(body)
            text = data.get("prompt") or " ".join(
                str(m.get("content")) for m in data.get("messages", []))
            tokens = list(range(len(text.split())))
            return httpx.Response(200, json={"count": len(tokens), "tokens": tokens,
                                             "max_model_len": self.max_model_len})
        if path in ("/v1/chat/completions", "/v1/completions"):
            if self.gate is not None:
                await self.gate.wait()
            if self.read_timeout:
                raise httpx.ReadTimeout("timed out", request=request)
            if self.fail_with is not None:
                return httpx.Response(self.fail_with[0], json=self.fail_with[1])
            data = json.loads(body)
            if data.get("model") != self.model:
                return httpx.Response(404, json={"error": {
                    "message": f"The model `{data.get('model')}` does not exist.",
                    "type": "NotFoundError", "param": "model", "code": 404}})
            chat = path.endswith("chat/completions")
            if data.get("stream"):
                return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                      content=self._chunks(self._sse(data, chat), request))
            return httpx.Response(200, json=self._json(data, chat))
        return httpx.Response(404, json={"detail": "Not Found"})

    def words(self, data: dict[str, Any]) -> list[str]:
        n = data.get("max_tokens") or data.get("max_completion_tokens") or 16
        return [f" w{i}" for i in range(min(n, 16))]

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        words = self.words(data)
        text = "".join(words)
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text},
             "finish_reason": "length"} if chat
            else {"index": 0, "text": text, "finish_reason": "length"})
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
            last = "length" if i == len(words) - 1 else None
            events.append({**head, "choices": [
                {"index": 0, "delta": {"content": w}, "finish_reason": last} if chat
                else {"index": 0, "text": w, "finish_reason": last}]})
        if (data.get("stream_options") or {}).get("include_usage"):
            events.append({**head, "choices": [], "usage": {
                "prompt_tokens": 5, "completion_tokens": len(words),
                "total_tokens": 5 + len(words)}})
        return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [
            b"data: [DONE]\n\n"]

    async def _chunks(self, events: list[bytes], request: httpx.Request) -> AsyncIterator[bytes]:
        for i, ev in enumerate(events):
            if self.stream_error_after is not None and i >= self.stream_error_after:
                raise httpx.ReadError("connection reset", request=request)
            yield ev
