"""vLLM's routes that the proxy passes through with no answer cache: `POST /tokenize`,
`POST /detokenize` (the body sent as the client sent it, vLLM's answer relayed as is). Every
one goes through what the completion routes go through: API
key, media type, the key's limits, the body-size limit and time, JSON and depth checks, an
admission slot, the balancer; errors are OpenAI-shaped, a bug a logged 500."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from proxy import openai
from proxy.bounds import INLINE_BYTES, Bounds, TooDeep, depth_exceeds
from proxy.errors import ProxyError, UpstreamError, VllmTypeError
from proxy.handler import Deps, Trace, _upstream_headers
from proxy.receive import ClientGone, is_json, read_body, request_id, until_disconnect
from proxy.relay import SHUTDOWN_CUT, JsonAnswer, RelayResponse, cut_by_shutdown, error_response

if TYPE_CHECKING:
    from proxy.limits import KeyLimits
    from proxy.shared_limits import SharedKeyLimits

log = logging.getLogger("proxy.passthrough")
PATHS = ("/tokenize", "/detokenize")


class Passthrough:
    def __init__(self, deps: Deps, limits: KeyLimits | SharedKeyLimits, bounds: Bounds,
                 done: Callable[[Trace], None]) -> None:
        self.d = deps
        self.limits = limits  # the completion handler's: one budget per key for every route
        self.bounds = bounds
        self.done = done  # the completion handler's: metrics, key lease, access log

    async def __call__(self, request: Request, path: str) -> Response:
        trace = Trace(path, request_id(request), time.perf_counter())
        headers = {"X-Request-ID": trace.rid}
        try:
            response = await self._handle(request, path, trace, headers)
        except ProxyError as err:
            trace.status = err.status
            if isinstance(err, UpstreamError) and err.upstream:
                trace.upstream = err.upstream
            response = error_response(err, headers)
        except ClientGone:
            trace.status = 499
            response = Response(status_code=499)
        except asyncio.CancelledError as exc:
            if not cut_by_shutdown(exc):
                raise
            trace.status = SHUTDOWN_CUT.status
            response = error_response(SHUTDOWN_CUT, headers)
        except Exception:  # a bug: answered, logged with its request id, counted
            log.exception("unexpected error", extra={"fields": {
                "msg": "unexpected error", "rid": trace.rid, "route": path}})
            self.d.metrics.unexpected.labels(path).inc()
            trace.status = 500
            response = error_response(ProxyError(
                f"internal proxy error (request id {trace.rid})"), headers)
        if not isinstance(response, RelayResponse | JsonAnswer):
            self.done(trace)
        return response

    async def _handle(self, request: Request, path: str, trace: Trace,
                      headers: dict[str, str]) -> Response:
        d, s = self.d, self.d.settings
        tenant = trace.tenant = d.keys.tenant(request)
        if not is_json(request):  # as vLLM answers it, before any limit is spent
            raise VllmTypeError(
                "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")
        trace.lease = await self.limits.admit(tenant)
        raw = await read_body(request, s.max_body_bytes, s.body_timeout)
        # a large body is parsed off the event loop, as the completion routes parse theirs
        if len(raw) > INLINE_BYTES:
            await asyncio.to_thread(self._parse, raw)
        else:
            self._parse(raw)
        content = await until_disconnect(request, self._fetch(path, raw, trace))
        return self._answer(content, headers, trace)

    def _parse(self, raw: bytes) -> dict[str, Any]:
        """The body as vLLM reads it (its errors for bad JSON), nested no deeper than allowed,
        with no more `messages` than a chat may have."""
        body = openai.parse_json(raw)
        self.bounds.check_counts("chat", body)
        if depth_exceeds(body, self.bounds.max_depth):
            raise TooDeep(f"the request JSON is nested more than {self.bounds.max_depth} "
                          f"levels deep (the limit, PROXY_MAX_JSON_DEPTH)")
        return body

    async def _fetch(self, path: str, content: bytes, trace: Trace) -> bytes:
        async with self.d.admission.slot(trace.tenant):
            opened = await self.d.upstream.open("POST", path, content, _upstream_headers(trace))
            trace.upstream = opened.backend.url
            return await self.d.upstream.read(opened)

    def _answer(self, content: bytes, headers: dict[str, str], trace: Trace) -> Response:
        self._upstream_header(trace, headers)

        def sent(whole: bool) -> None:
            if not whole:
                trace.status = 499
            self.done(trace)

        return JsonAnswer(content, headers, send_timeout=self.d.settings.send_timeout,
                          on_send_timeout=self.d.metrics.send_timeouts.inc, on_sent=sent)

    def _upstream_header(self, trace: Trace, headers: dict[str, str]) -> None:
        if self.d.settings.upstream_header and trace.upstream:
            headers["X-Upstream"] = trace.upstream
