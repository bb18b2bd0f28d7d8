"""Upstream SSE to the client, chunk by chunk (whole events only, parsed only when needed); a
streaming single flight's leader (Pump) and its followers (followed); cached answers replayed.
The responses that carry them to the client are proxy/sending.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.errors import BadGateway, ProxyError
from proxy.events import EventBuffer
from proxy.openai import error_content
from proxy.sse import DONE, Accumulator, event, reframe, replay_head
from proxy.types import Kind, LiveStream
from proxy.upstream import UpstreamStream

_USAGE = b'"usage"'
_FINISHED = b'"finish_reason":"'  # a terminal chunk (vLLM writes no spaces)


def _ends(events: bytes) -> bool:
    """Whether these whole events end with vLLM's [DONE] event, as an event: the text
    "data: [DONE]" inside a generated token (code about SSE) is not the end (found by a
    review: such answers were cut there, status 200)."""
    return events == DONE or events.endswith(b"\n\n" + DONE)


@dataclass(slots=True)
class StreamOutcome:
    started: float = field(default_factory=time.perf_counter)
    first_byte: float | None = None
    usage: dict[str, Any] | None = None
    finished: bool = False  # the upstream stream ended normally
    error: int | None = None  # the status of an upstream failure mid-stream
    events: int = 0  # data events relayed: what a stream cut before its usage chunk is charged


def _stamped(held: list[bytes], fingerprint: Any) -> list[bytes]:
    if fingerprint is None:
        return held
    out = []
    for ev in held:
        obj = orjson.loads(ev[6:])
        obj["system_fingerprint"] = fingerprint
        out.append(b"data: " + orjson.dumps(obj))
    return out


def _process(events: bytes, outcome: StreamOutcome, acc: Accumulator | None,
             drop_usage: bool, held: list[bytes]) -> bytes:
    """Usage noted; the usage chunk dropped when the client did not ask for it. vLLM then puts
    system_fingerprint on the terminal chunks (finish_reason set) instead, and the proxy, which
    always asks for usage, learns it only from the usage chunk that follows: terminal chunks are
    held until it arrives (the same engine step) and sent stamped in its place."""
    kept: list[bytes] = []
    changed = False
    for ev in events.split(b"\n\n"):
        if not ev:
            continue
        if ev.startswith(b"data: ") and ev[6:7] == b"{":
            if acc is not None:
                acc.add_raw(ev[6:])
            if drop_usage and _FINISHED in ev and _USAGE not in ev:
                held.append(ev)
                changed = True
                continue
            if _USAGE not in ev:
                kept.append(ev)
                continue
            obj = orjson.loads(ev[6:])
            if isinstance(obj, dict) and obj.get("usage") and isinstance(obj["usage"], dict):
                outcome.usage = obj["usage"]
                if drop_usage and not obj.get("choices"):
                    kept += _stamped(held, obj.get("system_fingerprint"))
                    held.clear()
                    changed = True
                    continue
        elif held:  # [DONE] or an error before any usage chunk: the held chunks go first
            kept += held
            held.clear()
            changed = True
        kept.append(ev)
    if not changed:
        return events
    return b"".join(ev + b"\n\n" for ev in kept)


async def relay_stream(stream: UpstreamStream, outcome: StreamOutcome, acc: Accumulator | None,
                       drop_usage: bool, buffer: EventBuffer) -> AsyncIterator[bytes]:
    """Yield whole SSE events as they arrive. Parsing happens only for chunks that carry usage
    or (usage dropped) a finish_reason, or for every chunk while accumulating for the cache."""
    held: list[bytes] = []
    last = b""  # the last whole events sent: vLLM ends every stream with [DONE]
    try:
        async for received in stream.chunks():
            if outcome.first_byte is None:
                outcome.first_byte = time.perf_counter()
            chunk = buffer.feed(received)
            if not chunk:
                continue
            if acc is not None or _USAGE in chunk or held or (drop_usage and _FINISHED in chunk):
                before = len(held)
                try:
                    chunk = _process(chunk, outcome, acc, drop_usage, held)
                except orjson.JSONDecodeError:  # sent as it came, after what was held before
                    if acc is not None:
                        acc.failed = True
                    chunk = b"".join(ev + b"\n\n" for ev in held[:before]) + chunk
                    held.clear()
            if chunk:
                last = chunk
                outcome.events += chunk.count(b"data: {")
                yield chunk
                if _ends(chunk):  # the end: an upstream that keeps the connection open
                    buffer.clear()  # after [DONE] must not hold the client until read timeout
                    break
            buffer.check()  # an event past the limit after those: the stream is cut here
        if not _ends(last) and buffer.rest().strip() != DONE.strip():
            # a clean end without [DONE]: the upstream cut the answer (found by a review:
            # such streams reached clients as complete, status 200)
            raise BadGateway(f"the upstream {stream.backend.url} ended the stream before "
                             f"[DONE]: the answer is incomplete")
    except ProxyError as err:  # headers are sent: tell the client in the stream, then stop
        outcome.error = err.status
        yield b"".join(ev + b"\n\n" for ev in held) + b"data: " + error_content(err) + b"\n\n"
        return
    if held:
        yield b"".join(ev + b"\n\n" for ev in held)
    if rest := buffer.rest():
        yield rest
    outcome.finished = True


class Pump:
    """A streaming single flight's leader relays through this: one task reads the upstream
    (and so fills the cache's accumulator), the leader's response reads from the pump. When
    the leader's client leaves while others follow, the task goes on for them (forwarding.py's
    close hands it over) instead of being cancelled with the leader's response."""

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(source))

    async def _run(self, source: AsyncIterator[bytes]) -> None:
        try:
            async for chunk in source:
                self._queue.put_nowait(chunk)
        finally:
            self._queue.put_nowait(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._queue.get()) is not None:
            yield chunk

    async def stop(self) -> None:
        """Cancel the reading (nobody left to read for) and wait for it to end."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def followed(kind: Kind, live: LiveStream, include_usage: bool,
                   rid: str | None = None) -> AsyncIterator[bytes]:
    """An identical stream in flight, as this request's own stream (cache/flight.py): each
    event re-framed as a replay is; an error event if the shared stream did not end well."""
    head = replay_head(kind, rid)
    # without include_usage vLLM stamps system_fingerprint on the terminal chunks: as the
    # leader's relay (_process) does, they wait for the usage chunk dropped here and take its
    # fingerprint (found by a review: a follower's stream had none)
    held: list[dict[str, Any]] = []

    def flush() -> bytes:
        out = b"".join(event(h) for h in held)
        held.clear()
        return out

    async for payload in live.follow():
        try:
            ev = orjson.loads(payload)
        except orjson.JSONDecodeError:
            ev = None
        if not isinstance(ev, dict):  # as the leader's client got it (vLLM never sends one)
            yield flush() + b"data: " + payload + b"\n\n"
            continue
        if "error" in ev:
            yield flush() + b"data: " + payload + b"\n\n"
            return
        if not include_usage:
            if not ev.get("choices") and ev.get("usage"):
                if ev.get("system_fingerprint") is not None:
                    for h in held:
                        h["system_fingerprint"] = ev["system_fingerprint"]
                if held:
                    yield flush()
                continue
            if _FINISHED in payload:
                held.append(reframe(head, ev))
                continue
        yield flush() + event(reframe(head, ev))
    if held:
        yield flush()
    if live.state == "done":
        yield DONE
    else:
        yield b"data: " + error_content(BadGateway(
            "the identical request this one followed lost its upstream stream; retry")) + b"\n\n"


async def replay_stream(events: Iterable[bytes]) -> AsyncIterator[bytes]:
    for ev in events:
        yield ev
