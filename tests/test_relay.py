import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import orjson
from starlette.background import BackgroundTask

from proxy.cache.flight import Flight
from proxy.errors import BadGateway
from proxy.events import EventBuffer
from proxy.relay import StreamOutcome, followed, relay_stream
from proxy.sending import PIECE, JsonAnswer
from proxy.sse import Accumulator


class FakeStream:
    backend = SimpleNamespace(url="http://vllm:8000")

    def __init__(self, chunks: list[bytes], fail: bool = False) -> None:
        self._chunks, self._fail = chunks, fail

    async def chunks(self) -> AsyncIterator[bytes]:
        for c in self._chunks:
            yield c
        if self._fail:
            raise BadGateway("the upstream failed")


def ev(obj) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


CONTENT = [ev({"id": "1", "choices": [{"index": 0, "delta": {"content": w},
                                       "finish_reason": "stop" if w == "c" else None}]})
           for w in "abc"]
USAGE = ev({"id": "1", "choices": [], "usage": {"completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"
STREAM = b"".join(CONTENT) + USAGE + DONE


async def run(chunks, acc=None, drop=False, fail=False):
    outcome = StreamOutcome()
    stream = FakeStream(chunks, fail)
    out = [c async for c in relay_stream(stream, outcome, acc, drop,  # type: ignore[arg-type]
                                           EventBuffer(1 << 20))]
    return out, outcome


async def test_whole_events_only_even_when_the_network_splits_them():
    pieces = [STREAM[i:i + 7] for i in range(0, len(STREAM), 7)]
    out, outcome = await run(pieces)
    assert b"".join(out) == STREAM
    assert all(c.endswith(b"\n\n") for c in out)
    assert outcome.finished and outcome.usage == {"completion_tokens": 3}


async def test_usage_chunk_dropped_when_the_client_did_not_ask():
    out, outcome = await run([STREAM], drop=True)
    assert b"".join(out) == b"".join(CONTENT) + b"data: [DONE]\n\n"
    assert outcome.usage == {"completion_tokens": 3}


async def test_passthrough_is_byte_identical_chunk_for_chunk():
    out, _ = await run([*CONTENT, USAGE, DONE])
    assert out == [*CONTENT, USAGE, DONE]


async def test_a_stream_that_ends_without_done_is_an_error_not_a_complete_answer():
    # found by a review: an upstream that closed cleanly mid-answer reached the client as 200
    out, outcome = await run([*CONTENT[:2]])
    body = b"".join(out)
    assert body.startswith(b"".join(CONTENT[:2])) and not outcome.finished
    assert outcome.error == 502
    assert orjson.loads(body.split(b"\n\n")[-2][6:])["error"]["code"] == "bad_gateway"
    out, outcome = await run([b"{not json"])  # a body that is no SSE at all
    assert not outcome.finished and b"{not json" not in b"".join(out)


async def test_accumulates_for_the_cache():
    acc = Accumulator("chat")
    await run([STREAM], acc=acc)
    done = acc.completion()
    assert done is not None and done.pieces == ("a", "b", "c")
    assert done.body["choices"][0]["message"]["content"] == "abc"


async def test_upstream_failure_mid_stream_becomes_an_error_event():
    out, outcome = await run(CONTENT[:1], fail=True)
    assert not outcome.finished and outcome.error == 502
    assert orjson.loads(out[-1][6:])["error"]["code"] == "bad_gateway"


FP_USAGE = ev({"id": "1", "choices": [], "usage": {"completion_tokens": 3},
               "system_fingerprint": "vllm-fp-1"})


async def test_without_usage_the_terminal_chunk_carries_the_fingerprint_as_vllm_sends_it():
    # vLLM without include_usage stamps system_fingerprint on the chunk with finish_reason; the
    # proxy always asks for usage, so it moves the fingerprint from the dropped usage chunk
    out, outcome = await run([CONTENT[0], CONTENT[1], CONTENT[2], FP_USAGE + b"data: [DONE]\n\n"],
                             drop=True)
    assert out[:2] == CONTENT[:2]  # content is not held back, only the terminal chunk
    events = [orjson.loads(e[6:]) for e in b"".join(out).split(b"\n\n")[:-2]]
    assert [e["choices"][0]["delta"]["content"] for e in events] == ["a", "b", "c"]
    assert "system_fingerprint" not in events[1]
    assert events[2]["system_fingerprint"] == "vllm-fp-1"
    assert b"".join(out).endswith(b"data: [DONE]\n\n") and outcome.finished
    out, _ = await run([CONTENT[2] + FP_USAGE, DONE], drop=False)  # asked for: untouched
    assert out == [CONTENT[2] + FP_USAGE, DONE]


async def test_a_held_terminal_chunk_is_not_lost_when_the_stream_breaks():
    out, outcome = await run(CONTENT, drop=True, fail=True)
    body = b"".join(out)
    assert body.startswith(b"".join(CONTENT)) and outcome.error == 502
    assert orjson.loads(body.split(b"\n\n")[-2][6:])["error"]["code"] == "bad_gateway"
    out, _ = await run([*CONTENT, b"data: [DONE]\n\n"], drop=True)  # no usage chunk at all
    assert b"".join(out) == b"".join(CONTENT) + b"data: [DONE]\n\n"


async def answered(size: int, stall_after: int | None = None) -> tuple[list[Any], list[str]]:
    """A JsonAnswer of `size` bytes sent to a server whose send blocks (a client that stopped
    reading) after `stall_after` messages: what was sent, and what happened."""
    sent: list[Any] = []
    events: list[str] = []

    async def send(message: Any) -> None:
        if stall_after is not None and len(sent) >= stall_after:
            await asyncio.Event().wait()
        sent.append(message)

    async def store() -> None:
        events.append("stored")

    answer = JsonAnswer(b"x" * size, {"x-cache": "MISS"}, background=BackgroundTask(store),
                        send_timeout=0.2, on_send_timeout=lambda: events.append("cut"))
    await answer({"type": "http"}, None, send)  # type: ignore[arg-type]
    return sent, events


async def test_a_json_answer_goes_in_pieces_and_whole() -> None:
    for size in (0, 10, PIECE, 2 * PIECE + 1):
        sent, events = await answered(size)
        body = [m for m in sent if m["type"] == "http.response.body"]
        assert b"".join(m["body"] for m in body) == b"x" * size
        assert [m["more_body"] for m in body] == [True] * (len(body) - 1) + [False]
        assert all(len(m["body"]) <= PIECE for m in body)
        assert events == ["stored"]


async def test_a_json_answer_nobody_takes_is_cut_and_still_stored() -> None:
    sent, events = await answered(3 * PIECE, stall_after=2)  # headers, one piece, then stuck
    assert len(sent) == 2 and sent[1]["more_body"] is True
    assert sorted(events) == ["cut", "stored"]  # the store does not depend on the client


async def test_a_follower_gets_an_event_that_is_not_a_json_object_as_the_leader_did() -> None:
    # the leader's client gets every upstream event as it came; a follower parsed each one and
    # raised on one that is not a JSON object, which ended its stream without [DONE] (a review)
    flight = Flight()
    first = orjson.dumps({"id": "x", "object": "chat.completion.chunk",
                          "choices": [{"index": 0, "delta": {"content": "a"}}]})
    flight.attach([first, b"{not json", b"5", b"[1, 2]"])
    flight.finish(True)
    got = [ev async for ev in followed("chat", flight, include_usage=False)]
    assert orjson.loads(got[0].removeprefix(b"data: "))["choices"][0]["delta"]["content"] == "a"
    assert got[1:] == [b"data: {not json\n\n", b"data: 5\n\n", b"data: [1, 2]\n\n",
                       b"data: [DONE]\n\n"]


async def test_a_follower_without_usage_gets_the_fingerprint_on_its_terminal_chunk() -> None:
    # vLLM without include_usage stamps system_fingerprint on the chunk with finish_reason; the
    # leader's relay moves it there from the usage chunk it drops, a replay from the store
    # does too, but a follower dropped the usage chunk and the fingerprint with it (a review)
    flight = Flight()
    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    flight.attach([orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "a"},
                                                       "finish_reason": None}]}),
                   orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "b"},
                                                       "finish_reason": "length"}]}),
                   orjson.dumps({**chunk, "choices": [], "usage": {"completion_tokens": 2},
                                 "system_fingerprint": "vllm-fp-1"})])
    flight.finish(True)
    got = [ev async for ev in followed("chat", flight, include_usage=False)]
    events = [orjson.loads(e.removeprefix(b"data: ")) for e in got[:-1]]
    assert got[-1] == b"data: [DONE]\n\n" and len(events) == 2
    assert "system_fingerprint" not in events[0]
    assert events[1]["choices"][0]["finish_reason"] == "length"
    assert list(events[1])[-1] == "system_fingerprint"  # last, as vLLM writes it
    assert events[1]["system_fingerprint"] == "vllm-fp-1"
    with_usage = [ev async for ev in followed("chat", flight, include_usage=True)]
    assert orjson.loads(with_usage[2].removeprefix(b"data: "))["system_fingerprint"] == "vllm-fp-1"
    assert "system_fingerprint" not in orjson.loads(with_usage[1].removeprefix(b"data: "))
