"""A streamed `/v1/responses` answer relayed as it arrives: vLLM's Responses events
(`event: response.<type>` then `data: {...}`), whole events only, untouched but for the
caller's response ids (proxy/response_ids.py). Unlike a chat stream it ends with no [DONE]: its
last event is `response.completed` (or `.incomplete`, `.failed`), whose response carries the
usage. A stream that ends before one is incomplete and ends with an `error` event, as does one
the upstream breaks, one whose unfinished event outgrows PROXY_MAX_EVENT_BYTES
(proxy/events.py), and one cut by the proxy's shutdown; the relay stops at the terminal event,
so an upstream that keeps the connection open cannot hold the client."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from proxy.errors import BadGateway, ProxyError
from proxy.events import EventBuffer
from proxy.response_ids import AS_IS, ResponseIds
from proxy.responses import usage_of
from proxy.upstream import UpstreamStream

TERMINAL = (b"event: response.completed\n", b"event: response.incomplete\n",
            b"event: response.failed\n")


@dataclass(slots=True)
class ResponsesOutcome:
    started: float = field(default_factory=time.perf_counter)
    first_byte: float | None = None
    finished: bool = False  # the terminal event was relayed
    error: int | None = None  # the status of a failure mid-stream
    events: int = 0  # events relayed (also the next sequence_number)
    input_tokens: int | None = None
    output_tokens: int | None = None


def _terminal(outcome: ResponsesOutcome, events: bytes) -> bool:
    """Whether these whole events hold the terminal one (or vLLM's own error event); its
    usage noted."""
    for ev in events.split(b"\n\n"):
        if ev.startswith(b"event: error\n"):
            outcome.error = 502
            return True
        if ev.startswith(TERMINAL):
            _, _, data = ev.partition(b"\ndata: ")
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                outcome.input_tokens, outcome.output_tokens = usage_of(obj.get("response"))
            return True
    return False


def error_event(err: ProxyError, sequence: int) -> bytes:
    """The Responses API's `error` event; with the OpenAI error object too, which is what
    OpenAI's SDK raises an APIError from in a stream."""
    body = err.body()["error"]
    data = {"type": "error", "code": body["code"], "message": body["message"],
            "param": body["param"], "sequence_number": sequence, "error": body}
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"


async def relay_events(stream: UpstreamStream, outcome: ResponsesOutcome, buffer: EventBuffer,
                       ids: ResponseIds = AS_IS) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream.chunks():
            if outcome.first_byte is None:
                outcome.first_byte = time.perf_counter()
            events = buffer.feed(chunk)
            if not events:
                continue
            outcome.events += events.count(b"\n\n")
            ended = b"event: " in events and _terminal(outcome, events)
            yield ids.shown(events)  # whole events: an id is never split
            if ended:
                outcome.finished = outcome.error is None
                return
            buffer.check()  # an event past the limit after those: the stream is cut here
        raise BadGateway(f"the upstream {stream.backend.url} ended the stream before its "
                         f"last event (response.completed): the answer is incomplete")
    except ProxyError as err:  # headers are sent: tell the client in the stream, then stop
        outcome.error = err.status
        yield error_event(err, outcome.events)
