"""One error tree. Every failure the client can see is a ProxyError with an OpenAI-shaped body."""

from __future__ import annotations

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
    code = "context_length_exceeded"


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
    """Anything that went wrong talking to vLLM."""

    upstream: str | None = None  # which backend, once one was tried (X-Upstream, access log)


class UpstreamUnavailable(UpstreamError):
    status = 503
    type = "upstream_unavailable"
    code = "upstream_unavailable"


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
