"""A streamed POST /v1/responses relayed as vLLM sends it (proxy/responses_sse.py): whole
events, untouched, ending at response.completed (no [DONE] in this API); a stream cut before
its last event, or broken, ends with an error event the OpenAI SDK raises from."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.events import EventBuffer
from proxy.responses_sse import ResponsesOutcome, relay_events
from proxy.routing.backend import Backend
from proxy.settings import Settings
from proxy.upstream import UpstreamStream
from tests.support import fake_passthrough
from tests.support.fake_upstream import FakeReply, FakeVllm
from tests.support.proxy_app import proxy_client

BODY = {"model": "tiny", "input": "hi", "max_output_tokens": 4, "stream": True}


async def stream(fake: FakeVllm, body: dict[str, Any] = BODY,
                 **kw: Any) -> tuple[Any, bytes, str]:
    s = Settings(**{"upstreams": ("http://vllm:8000",), "cache": "off", **kw})
    async with proxy_client(s, transport=fake.transport) as c:
        async with c.stream("POST", "/v1/responses", json=body) as got:
            content = b"".join([chunk async for chunk in got.aiter_bytes()])
        metrics = (await c.get("/metrics")).text
    return got, content, metrics


async def test_a_stream_is_relayed_event_for_event() -> None:
    fake = FakeVllm()
    got, content, metrics = await stream(fake)
    assert got.status_code == 200
    assert got.headers["content-type"] == "text/event-stream; charset=utf-8"
    sent = fake.completions("/v1/responses")[0].json
    assert content == b"".join(fake_passthrough.events(sent, "tiny"))
    assert content.rstrip().split(b"\n")[-2] == b"event: response.completed"
    assert 'proxy_requests_total{route="/v1/responses",status="200"} 1.0' in metrics
    assert 'proxy_tokens_out_total{route="/v1/responses"} 4.0' in metrics
    assert 'proxy_ttft_seconds_count{route="/v1/responses"} 1.0' in metrics


async def test_the_policy_applies_to_streams_too() -> None:
    fake = FakeVllm()
    await stream(fake, {**BODY, "max_output_tokens": 100, "temperature": 2}, max_output_tokens=3)
    sent = fake.completions("/v1/responses")[0].json
    assert (sent["max_output_tokens"], sent["temperature"], sent["top_k"]) == (3, 0.0, -1)
    assert sent["stream"] is True


async def test_a_broken_stream_ends_with_an_error_event() -> None:
    fake = FakeVllm(stream_error_after=2)
    got, content, metrics = await stream(fake)
    assert got.status_code == 200  # the headers were out
    last = content.rstrip().split(b"\n\n")[-1]
    assert last.startswith(b"event: error\ndata: ")
    data = json.loads(last.split(b"data: ", 1)[1])
    assert data["type"] == "error" and data["sequence_number"] == 2
    assert data["error"]["code"] == "bad_gateway" or data["error"]["type"]
    assert 'proxy_requests_total{route="/v1/responses",status="502"} 1.0' in metrics


def _upstream(events: list[bytes]) -> UpstreamStream:
    return UpstreamStream(Backend("http://vllm:8000"), FakeReply(200, events=events))


async def _relay(events: list[bytes]) -> tuple[bytes, ResponsesOutcome]:
    outcome = ResponsesOutcome()
    relayed = relay_events(_upstream(events), outcome, EventBuffer(1 << 20))
    out = b"".join([c async for c in relayed])
    return out, outcome


async def test_a_stream_cut_before_its_last_event_is_incomplete() -> None:
    events = fake_passthrough.events({"max_output_tokens": 2}, "tiny")
    out, outcome = await _relay(events[:-1])
    assert out.startswith(b"".join(events[:-1]))
    assert b"event: error\n" in out and b"before its last event" in out
    assert not outcome.finished and outcome.error == 502


async def test_events_split_anywhere_are_sent_whole_and_the_end_stops_the_read() -> None:
    events = fake_passthrough.events({"max_output_tokens": 3}, "tiny")
    whole = b"".join(events)
    pieces = [whole[i:i + 7] for i in range(0, len(whole), 7)]
    never = asyncio.Event()  # an upstream that keeps the connection open after the end
    reply = FakeReply(200, events=[*pieces, b"event: x\ndata: {}\n\n"], pause=(len(pieces), never))
    outcome = ResponsesOutcome()
    chunks = [c async for c in relay_events(UpstreamStream(Backend("u"), reply), outcome,
                                                EventBuffer(1 << 20))]
    assert b"".join(chunks) == whole
    assert all(c.endswith(b"\n\n") for c in chunks)
    assert outcome.finished and (outcome.input_tokens, outcome.output_tokens) == (5, 3)


async def cut_by_shutdown(path: str, body: dict[str, Any]) -> list[bytes]:
    """A stream held upstream after two events, cut as uvicorn cuts it when its graceful
    shutdown is over (the task cancelled with its message): the bodies the client got."""
    fake = FakeVllm(pause=(2, asyncio.Event()))
    raw = json.dumps(body).encode()
    asked = asyncio.Event()
    started = asyncio.Event()
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if asked.is_set():
            await asyncio.Event().wait()  # the client stays
        asked.set()
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])
            started.set()

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/json"), (b"host", b"proxy")],
             "server": ("proxy", 80)}
    s = Settings(upstreams=("http://vllm:8000",), cache="off")
    async with proxy_client(s, transport=fake.transport) as c:
        task = asyncio.create_task(c.app(scope, receive, send))  # type: ignore[attr-defined]
        async with asyncio.timeout(10):
            await started.wait()
            task.cancel("Task cancelled, timeout graceful shutdown exceeded")  # uvicorn's
            await task
    return sent


async def test_a_stream_cut_by_the_shutdown_ends_with_a_responses_error_event() -> None:
    # found by a review: it ended with a chat stream's `data: {"error": ...}` line, which a
    # Responses client (OpenAI's SDK) does not read as an error event
    sent = await cut_by_shutdown("/v1/responses", BODY)
    events = b"".join(sent).rstrip(b"\n").split(b"\n\n")
    assert [e.split(b"\n")[0] for e in events] == [
        b"event: response.created", b"event: response.output_text.delta", b"event: error"]
    data = json.loads(events[-1].split(b"\ndata: ", 1)[1])
    assert data["type"] == "error" and data["sequence_number"] == 2
    assert data["code"] == data["error"]["code"] == "shutting_down"
    assert "PROXY_SHUTDOWN_TIMEOUT" in data["message"]


async def test_a_chat_stream_cut_by_the_shutdown_still_ends_as_vllm_ends_one() -> None:
    sent = await cut_by_shutdown("/v1/chat/completions", {
        "model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    last = b"".join(sent).rstrip(b"\n").split(b"\n\n")[-1]
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "shutting_down"
