"""One request at a time: build the OpenAI body, stream it, time it with perf_counter."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from loadtest.request import Request
from loadtest.tokens import Tokenizer, count_tokens

# Seconds an idle connection is kept for the next request: below the 5 s keep-alive of
# uvicorn (vLLM's, the proxy's), as the proxy's own upstream pool is. aiohttp's default (15 s)
# reused connections the server was closing, and a POST whose connection closes under it
# fails ('Server disconnected'; aiohttp retries only idempotent methods): 2 of 3,750 requests
# to a proxy whose warm connections idled ~5 s, in each of two runs (tests/test_loadtest_client.py).
KEEPALIVE_S = 4.0


@dataclass
class Result:
    index: int
    success: bool = False
    status: int = 0
    error: str = ""
    start: float = 0.0          # perf_counter when sent
    scheduled: float = 0.0      # perf_counter when the schedule wanted it sent
    queue_time: float = 0.0     # waiting for a --max-concurrency slot
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0        # E2EL: send to last token chunk
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_reported: bool = False
    text: str = ""
    cache: str = "none"         # X-Cache class: hit / miss / bypass / none
    cache_headers: dict[str, str] = field(default_factory=dict)
    canonical_id: str | None = None
    kind: str = ""

    def row(self, t0: float) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["start"] = self.start - t0
        d["scheduled"] = self.scheduled - t0
        return d


class Malformed(ValueError):
    """A reply that is JSON but not an OpenAI chunk or body: that request fails, the run
    goes on."""


def _object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise Malformed(f"expected a JSON object, got {type(data).__name__}")
    return data


def _choices(data: dict[str, Any]) -> list[dict[str, Any]]:
    choices = data.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise Malformed("choices is not a list of objects")
    return choices


def _count(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"a token count is {value!r}")
    return value


def cache_class(value: str | None) -> str:
    if not value:
        return "none"
    v = value.strip().lower()
    for name in ("hit", "miss", "bypass"):
        if v.startswith(name):
            return name
    return v.split(";")[0].split(",")[0] or "none"


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    model: str
    endpoint: str = "chat"            # chat | completions
    stream: bool = True
    temperature: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout: float = 600.0


class Client:
    def __init__(self, cfg: ClientConfig, max_connections: int | None,
                 tokenizer: Tokenizer | None = None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        path = "/v1/chat/completions" if cfg.endpoint == "chat" else "/v1/completions"
        self.url = cfg.base_url.rstrip("/") + path
        self.max_connections = max_connections or 0  # aiohttp: 0 = unlimited
        self._http: aiohttp.ClientSession | None = None
        self.headers = {"content-type": "application/json", **cfg.headers}

    @property
    def http(self) -> aiohttp.ClientSession:
        # aiohttp, not httpx: measured 4-25x less client CPU per streamed request (README)
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0,
                                               keepalive_timeout=KEEPALIVE_S),
                timeout=aiohttp.ClientTimeout(total=self.cfg.timeout, sock_connect=30))
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    def body(self, req: Request) -> bytes:
        b: dict[str, Any] = {"model": self.cfg.model, "max_tokens": req.max_tokens,
                             "stream": self.cfg.stream}
        if self.cfg.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": req.prompt}]
        else:
            b["prompt"] = req.prompt
        if self.cfg.stream:
            b["stream_options"] = {"include_usage": True}
        if req.ignore_eos:
            b["ignore_eos"] = True
        if req.user is not None:
            b["user"] = req.user
        if self.cfg.temperature is not None:
            b["temperature"] = self.cfg.temperature
        b.update(self.cfg.extra_body)
        return orjson.dumps(b)

    async def send(self, req: Request) -> Result:
        out = Result(req.index, canonical_id=req.canonical_id, kind=req.kind)
        content = self.body(req)
        http = self.http
        chunks = 0
        finished: float | None = None  # when a choice's finish_reason came (an empty answer)
        done = not self.cfg.stream  # a stream is whole once its [DONE] came
        st = time.perf_counter()
        out.start = st
        last = st
        try:
            async with http.post(self.url, data=content, headers=self.headers) as resp:
                out.status = resp.status
                out.cache = cache_class(resp.headers.get("x-cache"))
                out.cache_headers = {k.lower(): v for k, v in resp.headers.items()
                                     if k.lower().startswith("x-cache")}
                if resp.status != 200:
                    body = (await resp.read()).decode("utf-8", "replace")
                    out.error = f"HTTP {resp.status}: {body[:300]}"
                    return self._finish(out, req, chunks)
                if not self.cfg.stream:
                    data = _object(orjson.loads(await resp.read()))
                    last = time.perf_counter()
                    out.ttft = last - st
                    self._absorb(out, data, _choices(data))
                    chunks = 1 if data.get("choices") else 0
                else:
                    buf = b""
                    async for piece in resp.content.iter_any():
                        now = time.perf_counter()
                        buf += piece.replace(b"\r\n", b"\n")
                        while b"\n\n" in buf:
                            event, buf = buf.split(b"\n\n", 1)
                            for line in event.split(b"\n"):
                                if not line.startswith(b"data:"):
                                    continue  # comments (pings), event: lines
                                payload = line[5:].strip()
                                if payload == b"[DONE]":
                                    done = True
                                if payload == b"[DONE]" or not payload:
                                    continue
                                data = _object(orjson.loads(payload))
                                choices = _choices(data)  # checked once an event
                                if self._carries_output(choices):
                                    if chunks == 0:
                                        out.ttft = now - st
                                    else:
                                        out.itl.append(now - last)
                                    last = now
                                    chunks += 1
                                elif finished is None and any(
                                        c.get("finish_reason") for c in choices):
                                    finished = now
                                self._absorb(out, data, choices)
            if not chunks and finished is not None:  # it ended before any output
                out.ttft = finished - st
                last = finished
            if not done and not out.error and (chunks or finished is not None):
                out.error = "stream ended before [DONE]: the answer is incomplete"
            if (chunks or finished is not None) and not out.error:
                out.success = True
            elif not out.error:
                out.error = "Never received a valid chunk to calculate TTFT."
            out.latency = last - st
        except TimeoutError:
            out.error = f"TimeoutError: no complete answer within --timeout {self.cfg.timeout:g} s"
        except (aiohttp.ClientError, orjson.JSONDecodeError, OSError) as e:
            out.error = f"{type(e).__name__}: {e}"
        except Malformed as e:
            out.error = f"malformed response: {e}"
        return self._finish(out, req, chunks)

    def _carries_output(self, choices: list[dict[str, Any]]) -> bool:
        """A chunk with generated output: text, or (chat) content, reasoning or tool calls. The
        chat role chunk and a bare finish_reason chunk carry none (vLLM's benchmark times
        only content too), so they start no TTFT and add no inter-token gap."""
        for choice in choices:
            if self.cfg.endpoint == "chat":
                delta = choice.get("delta") or choice.get("message") or {}
                if not isinstance(delta, dict):
                    raise Malformed(f"delta is {type(delta).__name__}")
                if any(delta.get(k) for k in ("content", "reasoning_content", "reasoning",
                                              "tool_calls")):
                    return True
            elif choice.get("text"):
                return True
        return False

    def _absorb(self, out: Result, data: dict[str, Any],
                choices: list[dict[str, Any]]) -> None:
        if "error" in data and not data.get("choices"):
            out.error = "stream error: " + orjson.dumps(data["error"]).decode()[:300]
        for choice in choices:
            if self.cfg.endpoint == "chat":
                msg = choice.get("delta") or choice.get("message") or {}
                text = msg.get("content") if isinstance(msg, dict) else None
            else:
                text = choice.get("text")
            out.text += text if isinstance(text, str) else ""
        usage = data.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise Malformed(f"usage is {type(usage).__name__}")
            out.usage_reported = True
            out.output_tokens = _count(usage.get("completion_tokens"))
            out.prompt_tokens = _count(usage.get("prompt_tokens"))

    def _finish(self, out: Result, req: Request, chunks: int) -> Result:
        if not out.usage_reported:
            out.prompt_tokens = req.prompt_len or count_tokens(self.tokenizer, req.prompt) or 0
            if out.success:
                counted = count_tokens(self.tokenizer, out.text)
                out.output_tokens = counted if counted is not None else chunks
        return out
