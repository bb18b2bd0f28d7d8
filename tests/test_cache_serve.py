"""Whether and how a stored entry answers a request (proxy/cache/serve.py): whole, or cut to a
smaller max_tokens, as JSON or as vLLM's stored chunks."""

from __future__ import annotations

import orjson
import pytest

from proxy.cache.entry import Entry
from proxy.cache.serve import answered, serve
from tests.cache_support import answer, entry, stream


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
    assert cut["created"] >= e.answer["created"]  # its id is the request's (tests/test_handler)


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
