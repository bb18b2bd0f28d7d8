"""One error tree. Every failure the client can see is a ProxyError with an OpenAI-shaped body.

A request the proxy refuses where vLLM would refuse it too is answered as vLLM 0.32 answers
it (same status, `type`, `code` and `param`), so that clients cannot tell the proxy is there:
VllmTypeError for what vLLM's typing of the body refuses (FastAPI's RequestValidationError),
VllmValueError for what its own checks refuse (VLLMValidationError, ValueError, TypeError).
The proxy's own refusals (limits, keys, timeouts) keep their OpenAI types and string codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


class ProxyError(Exception):
    status = 500
    type = "internal_error"
    code: str | int | None = None

    def __init__(self, message: str, *, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class InputTooLong(BadRequest):
    """A prompt past the proxy's own limit (PROXY_MAX_INPUT_TOKENS); one past the model's
    context is refused as vLLM refuses it (context_exceeded)."""

    code = "context_length_exceeded"


class VllmTypeError(BadRequest):
    """What vLLM's RequestValidationError handler answers (`param`: "body.<field>...")."""

    type = "Bad Request"
    code = 400


class VllmValueError(BadRequest):
    """What vLLM answers for a VLLMValidationError, ValueError or TypeError of a request."""

    type = "BadRequestError"
    code = 400


def no_output_room(room: int) -> VllmValueError:
    """vLLM's answer when the prompt leaves no room for output in the context: the output
    length it computes, context less prompt, is under 1 (SamplingParams' own check)."""
    return VllmValueError(f"max_tokens must be at least 1, got {room}. "
                          f"(parameter=max_tokens, value={room})", param="max_tokens")


def context_exceeded(tokens: int, context: int, ids: bool) -> VllmValueError:
    """vLLM's answer for a prompt of `tokens` tokens and a model's context of `context` (no
    truncation asked): past it, its renderer's refusal, which counts a text prompt only up to
    context + 1 tokens (it tokenizes no further) and says "at least" for that count; one that
    fills it exactly leaves no room for output. `ids`: the prompt is a list of token ids."""
    if tokens <= context:
        return no_output_room(context - tokens)
    count = tokens if ids else context + 1
    least = "at least " if count == context + 1 else ""
    return VllmValueError(
        f"This model's maximum context length is {context} tokens. However, your prompt "
        f"contains {least}{count} input tokens, which exceeds this limit even without any "
        f"output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={count})", param="input_tokens")


# vLLM's clean_loc_for_param (entrypoints/serve/exception_handling/handlers/validation.py):
# pydantic-core's wrapper and union-branch markers are dropped from an error's location
_BRACKETED = re.compile(r"[\[\]{}()]")
_MARKERS = frozenset({
    "function-wrap", "function-after", "function-before", "function-plain", "json-or-python",
    "lax-or-strict", "chain", "default", "nullable", "tagged-union", "union", "call",
    "arguments", "is-instance", "is-subclass", "callable", "str", "int", "float", "bool",
    "bytes", "bytearray", "list", "tuple", "dict", "set", "frozenset", "complex", "none",
    "nonetype"})
_MAX_REPORTED, _MAX_INPUT, _MAX_LINE = 10, 200, 1000


def clean_loc(loc: Iterable[int | str]) -> str:
    given = [str(p) for p in loc]
    parts = [p for p in given if not (_BRACKETED.search(p) or p.lower() in _MARKERS)]
    return ".".join(parts or given)


def _summary(value: Any) -> Any:
    if isinstance(value, str):
        return value[:_MAX_INPUT] + "...[truncated]" if len(value) > _MAX_INPUT else value
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = str(value)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return f"<{type(value).__name__}>"
    return text[:_MAX_INPUT] + "...[truncated]" if len(text) > _MAX_INPUT else text


def validation_error(errors: list[Mapping[str, Any]]) -> VllmTypeError:
    """vLLM's answer to these (FastAPI-style) validation errors: each error's `loc` starts with
    "body"; the message lists at most ten, `param` is the first one's location."""
    lines = []
    for err in errors[:_MAX_REPORTED]:
        item = {k: err[k] for k in ("type", "loc", "msg", "input", "ctx") if k in err}
        item["loc"] = clean_loc(item["loc"])
        if "input" in item:
            item["input"] = _summary(item["input"])
        text = str(item)
        lines.append(text[:_MAX_LINE] + "...[truncated]" if len(text) > _MAX_LINE else text)
    count = len(errors)
    label = "error" if count == 1 else "errors"
    message = f"{count} validation {label}:\n" + "".join(f"  {line}\n" for line in lines)
    if count > len(lines):
        message += f"  ...and {count - len(lines)} more {label}\n"
    return VllmTypeError(message.rstrip(), param=clean_loc(errors[0]["loc"]) if errors else None)


class Unauthorized(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class ModelNotFound(ProxyError):
    status = 404
    type = "NotFoundError"  # as vLLM answers
    code = 404


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class RequestTimeout(ProxyError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class TooManyRequests(ProxyError):
    status = 429
    type = "rate_limit_error"
    code = "too_many_requests"


class ShuttingDown(ProxyError):
    """Cut by the proxy's own shutdown: in flight past PROXY_SHUTDOWN_TIMEOUT."""

    status = 503
    type = "service_unavailable"
    code = "shutting_down"


class UpstreamError(ProxyError):
    """Anything that went wrong talking to vLLM.

    `absent`: the replica is known not to be there (its connection refused, its name not
    resolved, a gateway saying it is down), so it holds nothing that could be asked of it now;
    False where it may be there, busy or slow (a timeout), or answered. Decided here only: a
    search across the replicas (a stored response, proxy/passthrough.py) takes another
    replica's 404 as the answer only when every other one was absent."""

    upstream: str | None = None  # which backend, once one was tried (X-Upstream, access log)
    absent = False


class UpstreamUnavailable(UpstreamError):
    """The request reached no engine: the replica refused the connection (or has no address),
    or no replica is left to try."""

    status = 503
    type = "upstream_unavailable"
    code = "upstream_unavailable"
    absent = True


class UpstreamConnectTimeout(UpstreamUnavailable):
    """No connection within the connect timeout (a free pooled connection awaited, then the
    TCP connect): unavailable as a refusal is (failed over, the same 503), but the replica may
    be up and saturated, holding what is asked. Before, it was an UpstreamUnavailable like a
    refusal, and a stored response on a saturated replica was answered with the other
    replica's 404 (found by a review)."""

    absent = False


class BadGateway(UpstreamError):
    status = 502
    type = "bad_gateway"
    code = "bad_gateway"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "upstream_timeout"
    code = "upstream_timeout"


class UpstreamHTTPError(UpstreamError):
    """vLLM answered with an error status: keep its status and (OpenAI) body."""

    def __init__(self, status: int, content: bytes) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.content = content
        # a gateway's "bad gateway" or "unavailable": the replica behind it is not there; its
        # 504 is a timeout (the replica may be there, slow), an engine's own status an answer
        self.absent = status in (502, 503)
