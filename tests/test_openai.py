import orjson
import pytest

from proxy.errors import BadRequest, UpstreamHTTPError
from proxy.openai import error_content, parse_json, validate, wants_usage


def test_parse_json_rejects_non_objects_and_bad_bytes():
    assert parse_json(b'{"a": 1}') == {"a": 1}
    for raw in (b"", b"[1]", b"nul", b"\xc3\x28", b'"x"'):
        with pytest.raises(BadRequest):
            parse_json(raw)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
     "max_tokens": 5, "n": 1, "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
])
def test_valid_chat_bodies(body):
    validate("chat", body)


@pytest.mark.parametrize(('body', 'param'), [
    ({}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
     "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": True}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream_options": []}, "stream_options"),
    ({"messages": [{"role": "user", "content": [1]}]}, "messages"),
])
def test_invalid_chat_bodies_name_the_param(body, param):
    with pytest.raises(BadRequest) as info:
        validate("chat", body)
    assert info.value.param == param


def test_prompts():
    for prompt in ("x", ["a", "b"], [1, 2], [[1], [2, 3]]):
        validate("completions", {"prompt": prompt})
    for prompt in (None, 1, [], [True], [[1], []], [{"a": 1}]):
        with pytest.raises(BadRequest):
            validate("completions", {"prompt": prompt})


def test_error_bodies_are_openai_shaped():
    err = orjson.loads(error_content(BadRequest("nope", param="x")))
    assert err == {"error": {"message": "nope", "type": "invalid_request_error", "param": "x",
                             "code": None}}
    upstream = b'{"error": {"message": "m", "type": "t", "param": null, "code": 400}}'
    assert error_content(UpstreamHTTPError(400, upstream)) == upstream
    wrapped = orjson.loads(error_content(UpstreamHTTPError(502, b"<html>bad</html>")))
    assert wrapped["error"]["message"] == "<html>bad</html>" and wrapped["error"]["code"] == 502


def test_wants_usage():
    assert wants_usage({"stream_options": {"include_usage": True}})
    assert not wants_usage({"stream_options": {"include_usage": "yes"}}) and not wants_usage({})
