"""Hostile input, property-based: thousands of generated requests against every route of an
in-process proxy (ASGI, a fake vLLM behind it, the tiny model's real tokenizer and chat
template for counting). Every answer is < 500, and every 4xx is OpenAI-shaped.

Schemathesis is not used: the proxy serves no OpenAPI description (Starlette routes, no
schema), and the OpenAI request shapes are generated here directly from what the proxy accepts.

FUZZ_EXAMPLES scales the number of cases per property (default 300: ~2,500 requests in all).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import ensure_tiny_model
from tests.support.proxy_app import proxy_client

N = int(os.environ.get("FUZZ_EXAMPLES", "300"))
UP = "http://vllm:8000"
POSTS = ("/v1/chat/completions", "/v1/completions")
GETS = ("/v1/models", "/health", "/ready", "/metrics")
FUZZ = settings(max_examples=N, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


class Harness:
    """One proxy app (lifespan entered once) on a private event loop; sync calls into it."""

    def __init__(self, **kw: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.stack = AsyncExitStack()
        fake = FakeVllm(root=str(ensure_tiny_model()))
        s = Settings(**{"upstreams": (UP,), "cache": "off", "max_body_bytes": 256 * 1024,
                        "max_output_tokens": 8, **kw})
        self.client: httpx.AsyncClient = self.run(self.stack.enter_async_context(
            proxy_client(s, transport=fake.transport)))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.run(self.client.request(method, path, **kw))

    def close(self) -> None:
        self.run(self.stack.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


@pytest.fixture(scope="module")
def cached_proxy() -> Iterator[Harness]:
    """The same with the exact-tier cache on (its keys see every fuzzed body too)."""
    h = Harness(cache="exact", api_keys=("k1", "k2"))
    yield h
    h.close()


def check(r: httpx.Response) -> None:
    """The proxy's promise for any input: never a 5xx of its own; errors are OpenAI-shaped."""
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        body = orjson.loads(r.content)
        err = body["error"]
        assert isinstance(err, dict), body
        assert isinstance(err["message"], str) and err["message"], body
        assert isinstance(err["type"], str) and err["type"], body
        assert "param" in err and "code" in err, body
    elif r.headers.get("content-type", "").startswith("text/event-stream"):
        events = r.text.split("\n\n")
        assert events[-1] == "" and events[-2] == "data: [DONE]", r.text[-300:]
        for ev in events[:-2]:
            assert ev.startswith("data: "), ev
            orjson.loads(ev[6:])
    elif r.headers.get("content-type", "").startswith("application/json"):
        orjson.loads(r.content)


# --- strategies -------------------------------------------------------------------------------

nasty_text = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
    st.sampled_from(["", " ", "\x00", "\u202e", "\ufeff", "{{ raise_exception('x') }}",
                     "{% for %}", "<|im_start|>system", "\r\n\r\n", "data: [DONE]\n\n",
                     "\ud7ff", "\U0010ffff", "a" * 5000]),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63),
                                                          max_value=2**64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), nasty_text)
json_values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=12), kids, max_size=4)),
    max_leaves=20)
roles = st.one_of(st.sampled_from(["user", "assistant", "system", "developer", "tool"]),
                  st.text(max_size=10), json_values)
part = st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": nasty_text}),
                 st.dictionaries(st.text(max_size=8), json_values, max_size=3), json_values)
content = st.one_of(nasty_text, st.none(), st.lists(part, max_size=3), json_values)
message = st.one_of(
    st.fixed_dictionaries({"role": roles, "content": content}),
    st.fixed_dictionaries({"role": roles, "content": content},
                          optional={"name": json_values, "tool_calls": json_values,
                                    "tool_call_id": json_values}),
    json_values)
messages = st.one_of(st.lists(message, max_size=6), json_values)
prompt = st.one_of(nasty_text, st.lists(nasty_text, max_size=3),
                   st.lists(st.integers(min_value=-5, max_value=2**40), max_size=10),
                   st.lists(st.lists(st.integers(min_value=0, max_value=50000), max_size=5),
                            max_size=3), json_values)
OPTIONAL = {
    "model": st.one_of(st.just("tiny"), json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_values}),
                                json_values),
    "max_tokens": st.one_of(st.integers(min_value=-3, max_value=2**40), json_values),
    "max_completion_tokens": st.one_of(st.integers(min_value=-3, max_value=2**40),
                                       json_values),
    "temperature": json_values, "top_p": json_values, "n": json_values, "seed": json_values,
    "stop": json_values, "tools": json_values, "logprobs": json_values, "echo": json_values,
    "best_of": json_values, "user": json_values, "response_format": json_values,
}
chat_body = st.fixed_dictionaries({"messages": messages}, optional=OPTIONAL)
completion_body = st.fixed_dictionaries({"prompt": prompt}, optional=OPTIONAL)
content_types = st.sampled_from([
    None, "application/json", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/json; charset=latin-1", "", "*/*"])
headers = st.fixed_dictionaries({}, optional={
    "x-request-id": st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                            max_size=300),
    "cache-control": st.sampled_from(["no-cache", "no-store", "max-age=0", "garbage"]),
    "authorization": st.sampled_from(["Bearer k1", "Bearer k2", "Bearer", "Basic k1", "",
                                      "Bearer k1 k2", "bearer  k1 "]),
})


def post(h: Harness, path: str, raw: bytes, ctype: str | None,
         extra: dict[str, str] | None = None) -> httpx.Response:
    hdrs = dict(extra or {})
    if ctype is not None:
        hdrs["content-type"] = ctype
    return h.request("POST", path, content=raw, headers=hdrs)


# --- properties -------------------------------------------------------------------------------

@FUZZ
@given(body=chat_body, hdrs=headers)
def test_chat_bodies(proxy: Harness, body: dict[str, Any], hdrs: dict[str, str]) -> None:
    check(post(proxy, POSTS[0], orjson.dumps(body), "application/json", hdrs))


@FUZZ
@given(body=completion_body, hdrs=headers)
def test_completion_bodies(proxy: Harness, body: dict[str, Any], hdrs: dict[str, str]) -> None:
    check(post(proxy, POSTS[1], orjson.dumps(body), "application/json", hdrs))


@FUZZ
@given(path=st.sampled_from(POSTS), value=json_values, ctype=content_types)
def test_any_json_value_as_body(proxy: Harness, path: str, value: Any, ctype: str | None) -> None:
    check(post(proxy, path, orjson.dumps(value), ctype))


@FUZZ
@given(path=st.sampled_from(POSTS), raw=st.binary(max_size=300), ctype=content_types)
def test_raw_bytes_invalid_utf8_and_truncated_json(proxy: Harness, path: str, raw: bytes,
                                                   ctype: str | None) -> None:
    valid = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prompt":"hi"}'
    check(post(proxy, path, raw, ctype))
    check(post(proxy, path, valid[: len(raw) % len(valid)] + raw, ctype))


@settings(max_examples=max(50, N // 4), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
       path=st.one_of(st.sampled_from(POSTS + GETS + ("/", "/v1", "/admin", "/v1/cache",
                                                      "/v1/models/tiny", "/%00", "/..%2f"))
                      , st.text(alphabet="abcdefv1/._-%?=&", max_size=40).map(lambda p: "/" + p)),
       body=st.binary(max_size=64))
def test_every_route_and_method(proxy: Harness, method: str, path: str, body: bytes) -> None:
    r = proxy.request(method, path, content=body)
    if method == "HEAD":
        assert r.status_code < 500
    else:
        check(r)


@FUZZ
@given(path=st.sampled_from(POSTS), body=st.one_of(chat_body, completion_body), hdrs=headers)
def test_bodies_through_the_exact_cache(cached_proxy: Harness, path: str, body: dict[str, Any],
                                        hdrs: dict[str, str]) -> None:
    r = post(cached_proxy, path, orjson.dumps(body), "application/json", hdrs)
    check(r)
    if r.status_code == 200:  # the same again: a hit or a miss, but as good an answer
        again = post(cached_proxy, path, orjson.dumps(body), "application/json", hdrs)
        check(again)
        assert again.status_code == 200


# --- hand-made hostile inputs -----------------------------------------------------------------

def test_oversized_bodies_are_413(proxy: Harness) -> None:
    big = orjson.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * 300_000}]})
    r = post(proxy, POSTS[0], big, "application/json")
    check(r)
    assert r.status_code == 413

    async def chunks() -> Any:  # no content-length: the limit is enforced while reading
        for _ in range(40):
            yield b"x" * 10_000

    r = proxy.run(proxy.client.post(POSTS[0], content=chunks(),
                                    headers={"content-type": "application/json"}))
    check(r)
    assert r.status_code == 413
    r = post(proxy, POSTS[1], b"{}", "application/json", {"content-length": "99999999999"})
    assert r.status_code in (400, 413)


def test_deeply_nested_json_is_400(proxy: Harness) -> None:
    for depth in (100, 1000, 5000, 50_000):
        raw = b'{"messages":' + b"[" * depth + b"]" * depth + b"}"
        r = post(proxy, POSTS[0], raw, "application/json")
        check(r)
        assert r.status_code == 400
    nested: Any = "hi"
    for _ in range(200):
        nested = [{"type": "text", "text": nested}]
    raw = json.dumps({"messages": [{"role": "user", "content": nested}]}).encode()
    r = post(proxy, POSTS[0], raw, "application/json")
    check(r)


def test_huge_messages_array_and_giant_strings(proxy: Harness) -> None:
    many = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}] * 2_000}
    r = post(proxy, POSTS[0], orjson.dumps(many), "application/json")
    check(r)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_tokens"  # vLLM's
    many["messages"] *= 3  # past PROXY_MAX_MESSAGES: refused before any tokenizing
    r = post(proxy, POSTS[0], orjson.dumps(many), "application/json")
    check(r)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_items"
    giant = {"model": "tiny", "prompt": "word " * 50_000}
    r = post(proxy, POSTS[1], orjson.dumps(giant), "application/json")
    check(r)
    assert r.status_code == 400


def test_control_characters_and_odd_unicode_pass_or_fail_cleanly(proxy: Harness) -> None:
    for text in ["\x00\x01\x02\x1b[31m", "\u2028\u2029", "\ufffe\uffff", "e\u0301" * 100,
                 "\U0001f600" * 200, "\\u0000", "\r" * 100]:
        for path, body in ((POSTS[0], {"messages": [{"role": "user", "content": text}]}),
                           (POSTS[1], {"prompt": text})):
            for stream in (False, True):
                r = post(proxy, path, orjson.dumps({**body, "stream": stream}),
                         "application/json")
                check(r)
                assert r.status_code == 200, r.text
    lone = b'{"messages":[{"role":"user","content":"\\ud800"}]}'  # a lone surrogate escape
    check(post(proxy, POSTS[0], lone, "application/json"))
    invalid = b'{"messages":[{"role":"user","content":"\xff\xfe\xc3"}]}'
    r = post(proxy, POSTS[0], invalid, "application/json")
    check(r)
    assert r.status_code == 400


def test_wrong_content_types_never_5xx(proxy: Harness) -> None:
    body = orjson.dumps({"messages": [{"role": "user", "content": "hi"}]})
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "application/xml",
                  "multipart/form-data; boundary=zz", "application/json; charset=utf-16"):
        check(post(proxy, POSTS[0], body, ctype))
    check(post(proxy, POSTS[0], b"messages=hi&model=tiny", "application/x-www-form-urlencoded"))
    check(post(proxy, POSTS[0], "{}".encode("utf-16"), "application/json"))


@settings(max_examples=max(50, N // 4), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(POSTS), field=st.sampled_from(
           ["messages", "prompt", "tools", "stop", "metadata", "response_format", "n"]),
       depth=st.integers(min_value=1, max_value=1100),
       opens=st.lists(st.sampled_from([b"[", b'{"k":']), min_size=1, max_size=3))
def test_deep_json_in_any_field(proxy: Harness, path: str, field: str, depth: int,
                                opens: list[bytes]) -> None:
    """Nesting up to past orjson's own parse limit (1024), in any field: never a 500."""
    head = b"".join(opens[i % len(opens)] for i in range(depth))
    tail = b"".join(b"]" if o == b"[" else b"}" for o in reversed(
        [opens[i % len(opens)] for i in range(depth)]))
    base = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prompt":"hi",'
    r = post(proxy, path, base + b'"' + field.encode() + b'":' + head + b"1" + tail + b"}",
             "application/json")
    check(r)
    if depth > 64:
        assert r.status_code == 400
