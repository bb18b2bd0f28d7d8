import pytest
from starlette.requests import Request

from proxy.errors import PayloadTooLarge, Unauthorized
from proxy.receive import KeyRing, is_json, read_body, request_id


def make_request(headers: dict[str, str], chunks: list[bytes] = ()) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                for i, c in enumerate(chunks)] or [{"type": "http.request", "body": b""}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw}, receive)


def test_request_id_honoured_when_sane():
    assert request_id(make_request({"x-request-id": "abc"})) == "abc"
    for bad in ("x" * 200, "bad\x01id", "ünï"):
        assert request_id(make_request({"x-request-id": bad})) != bad
    assert len(request_id(make_request({}))) == 32


def test_keyring():
    ring = KeyRing(("alpha", "beta"))
    a = ring.tenant(make_request({"authorization": "Bearer alpha"}))
    b = ring.tenant(make_request({"authorization": "bearer beta"}))
    assert a and b and a != b and "alpha" not in a
    for header in ({}, {"authorization": "Bearer gamma"}, {"authorization": "Basic alpha"},
                   {"authorization": "Bearer "}):
        with pytest.raises(Unauthorized):
            ring.tenant(make_request(header))
    assert KeyRing(()).tenant(make_request({})) == "" and KeyRing(()).open


async def test_body_limit_by_header_and_by_bytes():
    assert await read_body(make_request({}, [b"ab", b"cd"]), 4, 5.0) == b"abcd"
    with pytest.raises(PayloadTooLarge):
        await read_body(make_request({"content-length": "5"}, [b"abcde"]), 4, 5.0)
    with pytest.raises(PayloadTooLarge):  # a lying (or absent) content-length
        await read_body(make_request({}, [b"abc", b"de"]), 4, 5.0)


@pytest.mark.parametrize(("ctype", "ok"), [
    ("application/json", True), ("APPLICATION/JSON", True),
    ("application/json; charset=utf-8", True), ("application/json;charset=latin-1", True),
    ("text/plain", False), ("", False),
    ("application/x-www-form-urlencoded", False), ("*/*", False)])
def test_is_json_as_vllm_decides(ctype: str, ok: bool) -> None:
    assert is_json(make_request({"content-type": ctype})) is ok


def test_no_content_type_is_not_json() -> None:
    assert not is_json(make_request({}))
