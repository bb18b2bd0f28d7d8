from __future__ import annotations

import orjson
import pytest

from proxy.cache.entry import Entry, answered, better, chunks, serve, storable
from tests.cache_support import answer


def entry(finish: str, tokens: int, max_tokens: int | None,
          pieces: tuple[str, ...] | None = None) -> Entry:
    text = "".join(pieces) if pieces else "hello world"
    return Entry(exact="x", partition="p", namespace="tiny", kind="chat", text="q",
                 max_tokens=max_tokens, answer=answer(text, finish=finish, tokens=tokens),
                 pieces=pieces)


def test_stop_answers_any_limit_at_least_its_length() -> None:
    e = entry("stop", 3, 16)
    assert serve(e, 16) is not None and serve(e, 3) is not None and serve(e, None) is not None
    assert serve(e, 2) is None  # no pieces: cannot cut


def test_length_answers_same_limit_and_cuts_with_token_pieces() -> None:
    pieces = ("a", " b", " c", " d")
    e = entry("length", 4, 4, pieces)
    assert serve(e, 5) is None
    same = serve(e, 4)
    assert same is not None and same["choices"][0]["message"]["content"] == "a b c d"
    cut = serve(e, 2)
    assert cut is not None
    assert cut["choices"][0]["message"]["content"] == "a b"
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert cut["id"].startswith("chatcmpl-cache-")


def test_cut_refused_when_pieces_are_not_tokens_or_counter_disagrees() -> None:
    assert serve(entry("length", 5, 5, ("a", " b", " c", " d")), 2) is None
    e = entry("length", 4, 4, ("a", " b", " c", " d"))
    assert serve(e, 2, count=lambda s: 3) is None
    assert serve(e, 2, count=lambda s: len(s.split())) is not None


def test_stop_entry_cut_below_its_length() -> None:
    e = entry("stop", 3, 16, ("x", "y", "z"))
    e.answer["choices"][0]["stop_reason"] = 7  # a stop token id ended the whole answer
    cut = serve(e, 2)
    assert cut is not None and cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["stop_reason"] is None  # as vLLM says for a length finish


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


def stream(pieces: tuple[str, ...], finish: str) -> list[dict[str, object]]:
    """vLLM's chunks for these pieces (without id/created), as the cache stores them."""
    return [{"object": "chat.completion.chunk", "model": "tiny", "choices": [
        {"index": 0, "delta": {"content": p},
         "finish_reason": finish if n == len(pieces) - 1 else None}]}
        for n, p in enumerate(pieces)] + [{"choices": [], "usage": {"completion_tokens": 3}}]


def test_the_stored_stream_is_replayed_only_for_the_whole_answer() -> None:
    stop = entry("stop", 3, 16, ("a", " b", " c"))
    stop.events = orjson.dumps(stream(("a", " b", " c"), "stop"))
    for limit in (None, 3):
        got = answered(stop, limit, True)
        assert got is not None and got[1] == stream(("a", " b", " c"), "stop")
        json_hit = answered(stop, limit, False)
        assert json_hit is not None and json_hit[1] is None  # JSON: the answer alone
    cut_hit = answered(stop, 2, True)
    assert cut_hit is not None and cut_hit[1] is not None  # a cut: the stored chunks, cut
    cut = entry("length", 4, 4, ("a", " b", " c", " d"))
    cut.events = orjson.dumps(stream(("a", " b", " c", " d"), "length"))
    got = answered(cut, 4, True)
    assert got is not None and got[1] is not None and answered(cut, 8, True) is None


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


def vllm_chunks(kind: str, pieces: tuple[str, ...], finish: str) -> list[dict[str, object]]:
    """vLLM 0.32's stream for these tokens (without id/created) as the proxy stores it (it asks
    for usage): chat's role chunk first; the finish chunk with stop_reason; then usage."""
    chat = kind == "chat"
    obj = "chat.completion.chunk" if chat else "text_completion"
    out: list[dict[str, object]] = []
    if chat:
        out.append({"object": obj, "model": "tiny", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}], "prompt_token_ids": None})
    for n, p in enumerate(pieces):
        end = n == len(pieces) - 1
        choice: dict[str, object] = {"index": 0, "delta": {"content": p}} if chat \
            else {"index": 0, "text": p}
        choice.update(logprobs=None, finish_reason=finish if end else None)
        if end or not chat:
            choice["stop_reason"] = None
        if not chat:
            choice["prompt_token_ids"] = None
        choice["token_ids"] = None
        out.append({"object": obj, "model": "tiny", "choices": [choice]})
    out.append({"object": obj, "model": "tiny", "choices": [], "usage": {
        "prompt_tokens": 7, "total_tokens": 7 + len(pieces), "completion_tokens": len(pieces)},
        "system_fingerprint": "fp"})
    return out


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_a_streamed_cut_is_the_stored_stream_cut_as_vllm_streams_it(kind: str) -> None:
    """What vLLM streams for max_tokens=2 is its stream for 4 tokens cut after the second token
    chunk: the same chunks, one a token (before, the cut was re-chunked at word boundaries:
    ' a b' came as ' a ' and 'b', chunks vLLM never sends)."""
    pieces = (" a", " b", " c", " d")
    e = Entry(exact="x", partition="p", namespace="tiny", kind=kind, text="q", max_tokens=4,
              answer=answer("".join(pieces), finish="length", tokens=4), pieces=pieces)
    if kind == "completions":
        choice = e.answer["choices"][0]
        choice["text"] = choice.pop("message")["content"]
    e.events = orjson.dumps(vllm_chunks(kind, pieces, "length"))
    got = answered(e, 2, True)
    assert got is not None
    assert got[1] == vllm_chunks(kind, pieces[:2], "length")


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
