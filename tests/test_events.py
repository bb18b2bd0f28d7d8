"""The relays' buffer of an unfinished upstream event (proxy/events.py): whole events out,
however the network splits them, and never more than PROXY_MAX_EVENT_BYTES held: an upstream
that never ends an event gets the client's stream an error event (chat and /v1/responses),
counted, instead of growing the proxy's memory for as long as it sends; the whole events before
it, in the same chunk too, reach the client first."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.errors import BadGateway
from proxy.events import EventBuffer, EventTooLarge
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

LIMIT = 64 * 1024
JUNK = b"x" * 4096  # no event boundary, ever


def test_whole_events_come_out_however_the_chunks_split_them() -> None:
    stream = b"data: 1\n\ndata: 2\n\nevent: e\ndata: 3\n\n"
    for size in range(1, len(stream) + 1):
        buffer = EventBuffer(LIMIT)
        out = [buffer.feed(stream[i:i + size]) for i in range(0, len(stream), size)]
        assert b"".join(out) == stream and buffer.rest() == b""
        assert all(o.endswith(b"\n\n") for o in out if o), size


def test_a_chunk_of_whole_events_is_passed_as_it_is() -> None:
    chunk = b"data: 1\n\n"
    assert EventBuffer(LIMIT).feed(chunk) is chunk


def test_the_limit_counts_the_unfinished_event_only() -> None:
    cut: list[int] = []
    buffer = EventBuffer(10, lambda: cut.append(1))
    assert buffer.feed(b"0123456789\n\n") == b"0123456789\n\n"  # whole events go
    assert buffer.feed(b"012345") == b"" and buffer.feed(b"6789") == b""
    assert buffer.rest() == b"0123456789"
    with pytest.raises(EventTooLarge) as err:
        buffer.feed(b"a")
    assert isinstance(err.value, BadGateway) and "PROXY_MAX_EVENT_BYTES" in str(err.value)
    assert cut == [1] and buffer.rest() == b""


@pytest.mark.parametrize(("held", "chunk"), [(b"", b"data: 1\n\ndata: 2\n\n"),
                                            (b"data: 0", b"\n\ndata: 1\n\n")])
def test_whole_events_before_an_over_limit_tail_in_one_chunk_come_out(held: bytes,
                                                                       chunk: bytes) -> None:
    # one chunk larger than the limit: the whole events before its unfinished tail (one held
    # from an earlier chunk that it completes, too) were dropped with it (the error raised
    # before they were returned)
    cut: list[int] = []
    buffer = EventBuffer(10, lambda: cut.append(1))
    assert buffer.feed(held) == b""
    assert buffer.feed(chunk + b"x" * 11) == held + chunk
    assert cut == [1] and buffer.rest() == b""  # the tail is not held, and counted
    with pytest.raises(EventTooLarge):
        buffer.check()  # what the relays ask once they have sent those events
    with pytest.raises(EventTooLarge):
        buffer.feed(b"\n\n")  # nor is the stream relayed on past it
    buffer.clear()  # the stream's end (a relay that saw its last event) forgets it
    buffer.check()
    assert buffer.feed(b"data: 3\n\n") == b"data: 3\n\n"


class EndlessVllm(FakeVllm):
    """An upstream that starts a stream well, then sends bytes with no event boundary: as
    many as a test reads, then it waits forever (an unbounded relay never ends it)."""

    JUNKS = 4 * LIMIT // len(JUNK)  # sent before the wait: four times the limit

    def __init__(self) -> None:
        super().__init__()
        self.pause = (1 + self.JUNKS, asyncio.Event())

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        return [super()._sse(data, chat)[0], *[JUNK] * (self.JUNKS + 1)]

    def _responses(self, data: dict[str, Any]) -> Any:
        reply = super()._responses(data)
        reply.events = [reply.events[0], *[JUNK] * (self.JUNKS + 1)]
        return reply


async def _stream_through_proxy(path: str, fake: FakeVllm) -> tuple[httpx.Response, str]:
    """A streamed request on `path` through a proxy whose events may hold LIMIT bytes, and the
    proxy's /metrics afterwards."""
    body: dict[str, Any] = {"model": "tiny", "stream": True}
    body.update({"input": "hi"} if path == "/v1/responses"
                else {"messages": [{"role": "user", "content": "hi"}]})
    s = Settings(upstreams=("http://vllm:8000",), cache="off", max_event_bytes=LIMIT)
    async with proxy_client(s, transport=fake.transport) as c:
        async with asyncio.timeout(10):
            r = await c.post(path, json=body)
        metrics = (await c.get("/metrics")).text
    return r, metrics


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_an_event_that_never_ends_cuts_the_stream_with_an_error_event(path: str) -> None:
    r, metrics = await _stream_through_proxy(path, EndlessVllm())
    assert r.status_code == 200  # the headers were out
    events = r.content.rstrip(b"\n").split(b"\n\n")
    assert len(events) == 2 and b"x" * 64 not in r.content  # the first event, then the error
    if path == "/v1/responses":
        assert events[1].startswith(b"event: error\ndata: ")
        error = json.loads(events[1].split(b"data: ", 1)[1])
        assert error["type"] == "error" and error["sequence_number"] == 1
    else:
        error = json.loads(events[1].removeprefix(b"data: "))["error"]
    assert error["code"] == "bad_gateway" and "PROXY_MAX_EVENT_BYTES" in error["message"]
    assert f'proxy_events_too_large_total{{route="{path}"}} 1.0' in metrics
    assert f'proxy_requests_total{{route="{path}",status="502"}} 1.0' in metrics
    assert 'proxy_inflight_requests 0.0' in metrics


TAIL = JUNK * (LIMIT // len(JUNK) + 1)  # past the limit, in the same chunk as whole events


class OneChunkVllm(FakeVllm):
    """An upstream whose first chunk is two whole events and then more than the limit of
    one it never ends; then it waits forever (the relay must not wait for another chunk)."""

    def __init__(self) -> None:
        super().__init__()
        self.pause = (1, asyncio.Event())

        self.whole = b""  # the two whole events sent

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        events = super()._sse(data, chat)
        self.whole = b"".join(events[:2])
        return [self.whole + TAIL, *events[2:]]

    def _responses(self, data: dict[str, Any]) -> Any:
        reply = super()._responses(data)
        self.whole = b"".join(reply.events[:2])
        reply.events = [self.whole + TAIL, *reply.events[2:]]
        return reply


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_whole_events_in_an_over_limit_chunk_reach_the_client_before_the_error(
        path: str) -> None:
    fake = OneChunkVllm()
    r, metrics = await _stream_through_proxy(path, fake)
    assert r.status_code == 200
    events = r.content.rstrip(b"\n").split(b"\n\n")
    assert len(events) == 3 and b"x" * 64 not in r.content, r.content[:300]
    assert b"\n\n".join(events[:2]) + b"\n\n" == fake.whole  # as they came
    error = json.loads(events[2].split(b"data: ", 1)[1])
    if path == "/v1/responses":
        assert events[2].startswith(b"event: error\n") and error["sequence_number"] == 2
    else:
        error = error["error"]
    assert error["code"] == "bad_gateway" and "PROXY_MAX_EVENT_BYTES" in error["message"]
    assert f'proxy_events_too_large_total{{route="{path}"}} 1.0' in metrics
    assert f'proxy_requests_total{{route="{path}",status="502"}} 1.0' in metrics
