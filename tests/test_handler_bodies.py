"""Request bodies read and refused as vLLM reads and refuses them (the handler's parse and
checks, against a fake vLLM at the transport seam): bad input, coercion, sizes, numbers JSON
libraries disagree on, where the checks run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client
from tests.test_handler import CHAT, settings

BAD_BODIES: list[tuple[bytes, int]] = [
    (b"{not json", 400),
    (b"\xff\xfe{}", 400),  # invalid UTF-8
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}', 400),
    # a lone surrogate as UTF-8 bytes, or in a UTF-16 body: was a 500 (found by a review)
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', 400),
    ('{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}'.encode("utf-16"),
     400),
    (b"[]", 400),
    (b"", 400),
    (b'{"model": "tiny"}', 400),  # missing messages
    (b'{"model": "tiny", "messages": []}', 400),
    (b'{"model": "tiny", "messages": "hi"}', 400),
    (b'{"model": "tiny", "messages": [{"content": "hi"}]}', 400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": 5}]}', 400),
    (b'{"model": 5, "messages": [{"role": "user", "content": "hi"}]}', 400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}',
     400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "x9"}',
     400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}',
     400),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": "maybe"}',
     400),
    (b'{"model": "nope", "messages": [{"role": "user", "content": "hi"}]}', 404),
]


@pytest.mark.parametrize(("raw", "status"), BAD_BODIES)
async def test_bad_input_is_a_4xx_openai_error(raw: bytes, status: int):
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", content=raw,
                         headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_bad_completions_prompt_is_a_400():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        for prompt in (None, 5, [], [1, "a"], [[]]):
            r = await c.post("/v1/completions", json={"model": "tiny", "prompt": prompt})
            assert r.status_code == 400, prompt


async def test_oversized_body_is_413():
    fake = FakeVllm()
    async with proxy_client(settings(max_body_bytes=100), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "x" * 200}]})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


async def test_what_vllm_accepts_is_accepted_and_coerced():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": "5",
                                                       "stream": 0, "temperature": "0.3"})
    assert r.status_code == 200, r.text
    sent = fake.completions()[-1].json
    assert sent["max_tokens"] == 5 and sent["stream"] is False


async def test_n_above_one_with_greedy_is_a_clear_400():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={**CHAT, "n": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    assert "greedy decoding" in r.json()["error"]["message"]
    assert fake.completions() == []


async def test_a_body_not_sent_as_json_is_vllms_400_and_spends_no_limit():
    fake = FakeVllm()
    ok = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}'
    s = settings(api_keys=("sk-a",), key_limits='{"sk-a": {"rpm": 1}}')
    auth = {"Authorization": "Bearer sk-a"}
    async with proxy_client(s, transport=fake.transport) as c:
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {**auth, "content-type": ctype} if ctype else auth
            r = await c.post("/v1/chat/completions", content=ok, headers=headers)
            assert r.status_code == 400, (ctype, r.text)
            err = r.json()["error"]
            assert err["type"] == "Bad Request" and err["code"] == 400
            assert "Only 'application/json' is allowed" in err["message"]
        r = await c.post("/v1/chat/completions", content=ok,
                         headers={**auth, "content-type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text  # the one request a minute was not spent above
    assert len(fake.completions()) == 1


async def test_integers_past_64_bits_outside_the_sampling_fields_are_forwarded_exactly():
    # found by a review: since such bodies are read exactly (the stdlib json), a tool schema's
    # or a message's integer past 64 bits reached orjson.dumps in the token counter's /tokenize
    # call: a 500 (it was a 200 before, the integer read as a float)
    fake = FakeVllm()
    big = 123456789012345678901234
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "maximum": big}}}}}
    async with proxy_client(settings(), transport=fake.transport) as c:
        tools = await c.post("/v1/chat/completions", json={**CHAT, "tools": [tool]})
        extra = await c.post("/v1/chat/completions", json={
            **CHAT, "messages": [{"role": "user", "content": "hi", "x": big}]})
    assert (tools.status_code, extra.status_code) == (200, 200), (tools.text, extra.text)
    sent = [r.json for r in fake.completions()]
    assert sent[0]["tools"][0]["function"]["parameters"]["properties"]["a"]["maximum"] == big
    assert sent[1]["messages"][0]["x"] == big


def test_a_logged_prompt_with_an_integer_past_64_bits_is_still_one_json_line():
    import logging

    from proxy.logs import JsonFormatter

    record = logging.LogRecord("proxy.access", logging.INFO, __file__, 1, "", None, None)
    record.fields = {"status": 200, "prompt": [2**100, 5]}
    assert json.loads(JsonFormatter().format(record))["prompt"] == [2**100, 5]


async def test_nan_and_infinity_are_forwarded_as_sent_not_as_null():
    # found by a review: read since 1084743 (as vLLM reads them), NaN and Infinity were written
    # to vLLM as null by orjson.dumps, which vLLM reads otherwise: `length_penalty: NaN` is a
    # 200 from vLLM itself but null is its 400 ('Input should be a valid number'), and
    # `top_logprobs: NaN` is its 400 ('finite number') but null a 200
    fake = FakeVllm()
    raw = (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], '
           b'"length_penalty": NaN, "top_logprobs": -Infinity, "x": [1e400], '
           b'"logit_bias": {"5": NaN}}')
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", content=raw,
                         headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    body = fake.completions()[-1].body
    for part in (b'"length_penalty":NaN', b'"top_logprobs":-Infinity', b'"x":[Infinity]',
                 b'"logit_bias":{"5":NaN}'):
        assert part in body, body


async def test_a_large_body_is_checked_off_the_event_loop(monkeypatch):
    # pydantic over every message of a 4 MB body took ~100 ms: on the loop, every stream stalled
    import threading

    from proxy import params

    on_loop: list[bool] = []
    real = params.check

    def spy(*args: Any) -> None:
        on_loop.append(threading.current_thread() is threading.main_thread())
        real(*args)

    monkeypatch.setattr(params, "check", spy)
    fake = FakeVllm()
    big = {**CHAT, "messages": [{"role": "user", "content": "word " * 20_000}]}  # ~100 KB
    async with proxy_client(settings(), transport=fake.transport) as c:
        small = await c.post("/v1/chat/completions", json=CHAT)
        large = await c.post("/v1/chat/completions", json=big)
    # the large prompt is past the fake's context: refused after the check, as it should be
    assert (small.status_code, large.status_code) == (200, 400), large.text
    assert large.json()["error"]["param"] == "input_tokens"  # vLLM's refusal
    assert on_loop == [True, False]


async def test_a_lone_surrogate_in_user_is_forwarded_as_vllm_takes_it():
    """vLLM answers 200 to `user: "\\ud800"` (it reads no text there); the proxy refused it."""
    fake = FakeVllm()
    raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "user": "\\ud800"}'
    async with proxy_client(settings(cache="exact"), transport=fake.transport) as c:
        for stream in (b"false", b"true"):
            r = await c.post("/v1/chat/completions", content=raw[:-1] + b', "stream": ' + stream
                             + b"}", headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            assert fake.completions()[-1].json["user"] == "\ud800"
