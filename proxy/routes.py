"""The route table, and the small endpoints that are not the completion flow."""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.admin import cache_flush, cache_stats
from proxy.deps import Deps
from proxy.errors import MethodNotAllowed, NotFound, ProxyError, Unauthorized
from proxy.handler import CompletionHandler
from proxy.passthrough import CANCEL, STORED, Passthrough
from proxy.readiness import Readiness
from proxy.receive import request_id
from proxy.sending import error_response, json_response
from proxy.version import VersionCache

log = logging.getLogger("proxy.routes")


def _deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


async def chat(request: Request) -> Response:
    handler: CompletionHandler = request.app.state.handler
    return await handler(request, "chat")


async def completions(request: Request) -> Response:
    handler: CompletionHandler = request.app.state.handler
    return await handler(request, "completions")


async def tokenize(request: Request) -> Response:
    passthrough: Passthrough = request.app.state.passthrough
    return await passthrough(request, "/tokenize")


async def detokenize(request: Request) -> Response:
    passthrough: Passthrough = request.app.state.passthrough
    return await passthrough(request, "/detokenize")


async def responses(request: Request) -> Response:
    passthrough: Passthrough = request.app.state.passthrough
    return await passthrough(request, "/v1/responses")


async def stored_response(request: Request) -> Response:
    passthrough: Passthrough = request.app.state.passthrough
    return await passthrough.stored(request, STORED)


async def cancel_response(request: Request) -> Response:
    passthrough: Passthrough = request.app.state.passthrough
    return await passthrough.stored(request, CANCEL)


async def models(request: Request) -> Response:
    """vLLM's GET /v1/models behind the API key, as vLLM guards it; one upstream call at a time,
    its answer kept 5 s (proxy/version.py). No admission slot nor key limits: vLLM limits it
    in no way, and a flood of it costs the upstreams one call at a time whoever sends it."""
    d = _deps(request)
    kept: VersionCache = request.app.state.models  # the same kind, its own MODELS_KEPT
    try:
        d.keys.tenant(request)
        response = json_response(await kept.get())
    except ProxyError as err:
        response = error_response(err)
    d.metrics.requests.labels("/v1/models", str(response.status_code)).inc()
    return response


async def version(request: Request) -> Response:
    """vLLM's GET /version, passed through (found by a review: a 404 here, where vLLM answers
    {"version": "0.32.0"}). Open, as vLLM's is: its API key guards only /v1 paths."""
    d = _deps(request)
    kept: VersionCache = request.app.state.version
    try:
        response = json_response(await kept.get())
    except ProxyError as err:
        response = error_response(err)
    d.metrics.requests.labels("/version", str(response.status_code)).inc()
    return response


async def health(request: Request) -> Response:
    return json_response(b'{"status":"ok"}')


def _operator(request: Request, d: Deps) -> None:
    """PROXY_METRICS_KEY, when set, guards /metrics and /ready (they name the upstreams)."""
    key = d.settings.metrics_key
    if not key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = hashlib.sha256(token.strip().encode()).digest()  # equal lengths: no length leak
    if not hmac.compare_digest(given, hashlib.sha256(key.encode()).digest()) \
            or scheme.lower() != "bearer":
        raise Unauthorized("this endpoint needs 'Authorization: Bearer <PROXY_METRICS_KEY>'")


async def ready(request: Request) -> Response:
    """Every replica's /health probed: one round at a time, its answer kept a second
    (proxy/readiness.py), so an open /ready is no lever on the upstreams."""
    d = _deps(request)
    try:
        _operator(request, d)
    except ProxyError as err:
        return error_response(err)
    readiness: Readiness = request.app.state.ready
    status, body = await readiness.get()
    return json_response(body, status)


async def metrics(request: Request) -> Response:
    d = _deps(request)
    try:
        _operator(request, d)
    except ProxyError as err:
        return error_response(err)
    for item in d.upstream.balancer.state():
        d.metrics.upstream_up.labels(item["url"]).set(1 if item["state"] == "up" else 0)
    return Response(d.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def http_error(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    if status == 405:  # with the route's Allow header, as vLLM (FastAPI) sends it
        return error_response(MethodNotAllowed(f"{request.method} is not allowed here"),
                              getattr(exc, "headers", None))
    if status == 404:
        return error_response(NotFound(f"no route for {request.url.path}"))
    detail = getattr(exc, "detail", "error")
    return error_response(ProxyError(str(detail)))


async def unexpected(request: Request, exc: Exception) -> Response:
    rid = request_id(request)
    route = getattr(request.scope.get("route"), "path", "other")  # bounded label values
    log.error("unexpected error", exc_info=exc, extra={"fields": {
        "msg": "unexpected error", "rid": rid, "route": route}})
    deps = getattr(request.app.state, "deps", None)
    if deps is not None:
        deps.metrics.unexpected.labels(route).inc()
    return error_response(ProxyError(f"internal proxy error (request id {rid})"),
                          {"X-Request-ID": rid})


def get_only(path: str, endpoint: Any, *more: str) -> Route:
    """A GET route (and `more` methods) without the HEAD that Starlette adds to every GET
    route: vLLM's routes are FastAPI's, which answer HEAD /v1/models, /health, /version with
    405 (Allow: GET)."""
    route = Route(path, endpoint, methods=["GET", *more])
    route.methods = {"GET", *more}
    return route


ROUTES = [
    Route("/v1/chat/completions", chat, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/responses", responses, methods=["POST"]),
    get_only(STORED, stored_response),
    Route(CANCEL, cancel_response, methods=["POST"]),
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
    get_only("/v1/models", models),
    get_only("/health", health),
    get_only("/ping", health, "POST"),  # vLLM's /ping (SageMaker's health check) is its /health
    get_only("/version", version),
    get_only("/ready", ready),
    Route("/metrics", metrics, methods=["GET"]),  # HEAD too: vLLM's /metrics answers it (200)
    get_only("/admin/cache/stats", cache_stats),
    Route("/admin/cache/flush", cache_flush, methods=["POST"]),
]

EXCEPTION_HANDLERS: dict[Any, Any] = {HTTPException: http_error, Exception: unexpected}
