"""A stored entry (proxy/cache/entry.py): what is storable, its JSON and Redis record, which
stored chunks can be replayed, and which of two entries is kept."""

from __future__ import annotations

import orjson
import pytest

from proxy.cache.entry import Entry, better, chunks, storable
from proxy.cache.serve import answered
from tests.cache_support import answer, entry, stream


def test_storable() -> None:
    assert storable(answer("hi"))
    assert storable(answer("hi", finish="length"))
    assert not storable(answer("hi", finish="abort"))
    tool = answer("")
    tool["choices"][0]["message"]["tool_calls"] = [{"id": "t"}]
    assert not storable(tool)
    assert not storable({"error": {"message": "x"}, "choices": []})


def test_better_and_json_round_trip() -> None:
    assert better(entry("stop", 3, 8), entry("length", 4, 4))
    assert not better(entry("length", 8, 8), entry("stop", 3, 4))
    assert better(entry("length", 8, 8), entry("length", 4, 4))
    e = entry("length", 2, 2, ("a", "b"))
    e.vector = b"\x00\x00\x80?"
    back = Entry.from_json(e.to_json())
    assert back == e


def test_the_redis_record_keeps_the_events_apart_and_reads_the_old_form() -> None:
    e = entry("stop", 2, 8, ("a", "b"))
    e.events = b'[{"choices":[{"delta":{"content":"a\\nb"}}]}]'  # an escaped newline inside
    record = e.to_record()
    assert record.count(b"\n") == 1 and record.endswith(b"\n" + e.events)
    assert Entry.from_record(record) == e
    assert Entry.from_record(e.to_json()) == e  # written before the split: events inside
    plain = entry("stop", 2, 8)
    assert plain.to_record() == plain.to_json() and Entry.from_record(plain.to_record()) == plain


@pytest.mark.parametrize("events", [
    b"[{", b'{"choices": []}', b"[1]", b'[{"choices": {}}]', b'[{"choices": ["a"]}]',
    b'[{"choices": [{"delta": "a b c"}]}]', b'[{"choices": [{"delta": {"content": 1}}]}]',
    b"[]", orjson.dumps(stream(("a", " b", " d"), "stop")),
    orjson.dumps(stream(("a", " b", " c"), "length"))],
    ids=["not-json", "not-a-list", "not-objects", "choices-not-a-list", "choice-not-an-object",
         "delta-not-an-object", "content-not-text", "no-chunks", "other-text",
         "other-finish"])
def test_a_stored_stream_that_cannot_be_replayed_is_a_miss_and_replaced(events: bytes) -> None:
    stop = entry("stop", 3, 16, ("a", " b", " c"))
    stop.events = events
    assert chunks(stop) is None and answered(stop, 3, True) is None
    got = answered(stop, 3, False)  # JSON is served from the answer, which reads well
    assert got is not None and got[1] is None
    assert better(entry("length", 4, 4), stop)  # a stop answer is kept, but not this one


def test_better_keeps_the_answer_with_the_streams_chunks() -> None:
    """Where both answer the same requests, the entry with the stream's chunks is kept, as only
    it answers a stream (a JSON answer is a stream's miss): before, a stop answer stored from
    JSON stayed for good and every stream of it was a miss."""
    def streamed(finish: str, tokens: int, max_tokens: int | None) -> Entry:
        e = entry(finish, tokens, max_tokens, ("a", " b", " c"))
        e.events = orjson.dumps(stream(("a", " b", " c"), finish))
        return e

    json_stop, json_cut = entry("stop", 3, 8), entry("length", 3, 3)
    assert answered(json_stop, 8, True) is None and answered(json_stop, 8, False) is not None
    assert better(streamed("stop", 3, 16), json_stop)
    assert not better(entry("stop", 3, 16), streamed("stop", 3, 8))
    assert not better(streamed("stop", 3, 16), streamed("stop", 3, 8))  # the older one stays
    assert better(streamed("length", 3, 3), json_cut)
    assert not better(json_cut, streamed("length", 3, 3))
    assert better(entry("length", 3, 3), json_cut)  # as before: the newer one
    assert not better(streamed("length", 3, 3), json_stop)  # answers other requests
