"""A fast mock OpenAI server: known TTFT/ITL, vLLM-shaped SSE chunks, /v1/models, /metrics.

Hand-rolled on asyncio + httptools (no framework) so it is never the bottleneck when used as
a fake upstream. Token k of a streamed answer leaves at start + ttft + (k-1)*itl exactly.

A capacity model, for checking `loadtest sweep` against a known knee: `max_batch` B lets at
most B answers generate at once (the rest wait, first come first served: their TTFT grows),
and `itl_growth` G makes each token cost itl * (1 + G * (running - 1)), as a batch slows a
GPU's decode step. With G = 0 the mock serves at most B / (ttft + (n - 1) * itl) req/s."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Any, cast

import httptools
import orjson

from loadtest.workload import WORDS

MODEL = "mock"


@dataclass
class MockServer:
    ttft: float = 0.02
    itl: float = 0.005
    output_tokens: int | None = None
    cache: bool = False
    max_batch: int = 0  # 0: unlimited
    itl_growth: float = 0.0
    running: int = 0
    slots: asyncio.Semaphore | None = None
    counters: dict[str, float] = field(default_factory=lambda: {
        "mock_requests_total": 0.0, "mock_generation_tokens_total": 0.0,
        "mock_prompt_tokens_total": 0.0, "mock_cache_hits_total": 0.0,
        "mock_cache_misses_total": 0.0})
    store: dict[bytes, list[str]] = field(default_factory=dict)

    def metrics(self) -> bytes:
        lines = []
        for k, v in self.counters.items():
            lines += [f"# TYPE {k[:-6]} counter", f"{k} {v}"]
        return ("\n".join(lines) + "\n").encode()

    def answer(self, prompt: str, n: int) -> list[str]:
        # words drawn by the prompt's hash: one prompt, one answer; two prompts, two answers
        # (a walk of WORDS from the hash had 99 answers, so hits looked wrong to the judge)
        h = int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "big")
        return [" " + w for w in random.Random(h).choices(WORDS, k=n)]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj: dict[str, Any]) -> bytes:
    return chunk(b"data: " + orjson.dumps(obj) + b"\n\n")


class Conn(asyncio.Protocol):
    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = b""
        self.prev: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.reply(400, b"bad request")
            if self.transport is not None:
                self.transport.close()

    def on_message_begin(self) -> None:
        self.url, self.body = b"", b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        method, url, body = self.parser.get_method(), self.url, self.body
        start = time.perf_counter()
        if method == b"POST" and url.startswith(b"/v1/"):
            self.prev = asyncio.get_running_loop().create_task(
                self.generate(url, body, start, self.prev))
        elif url == b"/v1/models":
            self.reply(200, orjson.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "owned_by": "mock", "max_model_len": 1 << 20}]}))
        elif url == b"/metrics":
            self.reply(200, self.server.metrics(), b"text/plain; version=0.0.4")
        elif url in (b"/health", b"/"):
            self.reply(200, b"")
        else:
            self.reply(404, b'{"error": "not found"}')

    def reply(self, status: int, body: bytes, ctype: bytes = b"application/json",
              extra: bytes = b"") -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
                             % (status, b"OK" if status == 200 else b"ERR", ctype, len(body),
                                extra) + body)

    async def generate(self, url: bytes, raw: bytes, start: float,
                       prev: asyncio.Task[None] | None) -> None:
        if prev is not None:
            await prev  # one response at a time per connection (HTTP/1.1 order)
        s = self.server
        try:
            req = orjson.loads(raw)
            chat = url.startswith(b"/v1/chat")
            prompt = (" ".join(str(m.get("content", "")) for m in req["messages"]) if chat
                      else str(req["prompt"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            self.reply(400, b'{"error": {"message": "bad body"}}')
            return
        n = s.output_tokens or int(req.get("max_tokens") or req.get("max_completion_tokens")
                                   or 16)
        key = orjson.dumps([chat, prompt, n])
        hit = s.cache and key in s.store
        tokens = s.store[key] if hit else s.answer(prompt, n)
        ttft, itl = (0.0, 0.0) if hit else (s.ttft, s.itl)
        extra = b""
        if s.cache:
            extra = b"x-cache: %s\r\n" % (b"hit" if hit else b"miss")
            s.counters["mock_cache_hits_total" if hit else "mock_cache_misses_total"] += 1
        plen = len(prompt.split())
        s.counters["mock_requests_total"] += 1
        s.counters["mock_prompt_tokens_total"] += plen
        s.counters["mock_generation_tokens_total"] += n
        usage = {"prompt_tokens": plen, "completion_tokens": n, "total_tokens": plen + n}
        if s.max_batch and not hit:
            s.slots = s.slots or asyncio.Semaphore(s.max_batch)
            async with s.slots:
                s.running += 1
                try:
                    await self.paced(req, chat, tokens, usage, time.perf_counter(), ttft,
                                     itl * (1 + s.itl_growth * (s.running - 1)), extra)
                finally:
                    s.running -= 1
        else:
            await self.paced(req, chat, tokens, usage, start, ttft, itl, extra)
        if s.cache and not hit:
            s.store[key] = tokens

    async def paced(self, req: dict[str, Any], chat: bool, tokens: list[str],
                    usage: dict[str, int], start: float, ttft: float, itl: float,
                    extra: bytes) -> None:
        n = len(tokens)
        if req.get("stream"):
            await self.stream(chat, tokens, usage, start, ttft, itl, extra,
                              bool((req.get("stream_options") or {}).get("include_usage")))
        else:
            await asyncio.sleep(max(0.0, start + ttft + itl * (n - 1) - time.perf_counter()))
            text = "".join(tokens)
            choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant",
                                                               "content": text},
                                       "finish_reason": "length"} if chat else
                                      {"index": 0, "text": text, "finish_reason": "length"})
            self.reply(200, orjson.dumps({"id": "mock", "object": "chat.completion" if chat
                                          else "text_completion", "model": MODEL,
                                          "choices": [choice], "usage": usage}), extra=extra)

    async def stream(self, chat: bool, tokens: list[str], usage: dict[str, int], start: float,
                     ttft: float, itl: float, extra: bytes, with_usage: bool) -> None:
        t = self.transport
        if t is None:
            return
        t.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\n" + extra + b"\r\n")
        obj = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": "mock", "object": obj, "created": int(time.time()), "model": MODEL}
        for k, tok in enumerate(tokens):
            delay = start + ttft + k * itl - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if t.is_closing():
                return
            last = k == len(tokens) - 1
            out = b""
            if chat and k == 0:
                out += sse({**base, "choices": [{"index": 0, "delta": {
                    "role": "assistant", "content": ""}, "logprobs": None,
                    "finish_reason": None}]})
            c: dict[str, Any] = ({"index": 0, "delta": {"content": tok}} if chat
                                 else {"index": 0, "text": tok})
            c.update(logprobs=None, finish_reason="length" if last else None)
            out += sse({**base, "choices": [c]})
            if last:
                if with_usage:
                    out += sse({**base, "choices": [], "usage": usage})
                out += chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            t.write(out)
        if not tokens:
            t.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def start(server: MockServer, host: str = "127.0.0.1", port: int = 0,
                reuse_port: bool = False) -> asyncio.Server:
    """reuse_port: several mock processes can listen on one port (the kernel spreads the
    connections), so the mock is not the bottleneck of a many-process client."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Conn(server), host, port, backlog=4096,
                                    reuse_port=reuse_port or None)


def serve(host: str, port: int, ttft: float, itl: float, output_tokens: int | None,
          cache: bool, max_batch: int = 0, itl_growth: float = 0.0,
          reuse_port: bool = False) -> None:
    async def main() -> None:
        srv = await start(MockServer(ttft, itl, output_tokens, cache, max_batch, itl_growth),
                          host, port, reuse_port)
        print(f"mock OpenAI server on http://{host}:{port} (ttft {ttft * 1000:g} ms, "
              f"itl {itl * 1000:g} ms)", flush=True)
        async with srv:
            await srv.serve_forever()

    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
