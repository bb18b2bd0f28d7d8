"""One request's record and its end, for every route (completions and the passthrough): the
Trace (what the access log and the metrics say, never its text); `answered`, the route's
answer whatever it raised; the Finisher, which counts it, releases its key's lease and logs it
once the answer has gone (a relayed one at its relay's end)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from proxy.deps import Deps
from proxy.errors import ProxyError, UpstreamError
from proxy.logs import access
from proxy.receive import ClientGone
from proxy.sending import SHUTDOWN_CUT, JsonAnswer, RelayResponse, cut_by_shutdown, error_response

if TYPE_CHECKING:
    from proxy.limits import KeyLimits
    from proxy.shared_limits import SharedKeyLimits

log = logging.getLogger("proxy.handler")  # a bug's log keeps the name it always had


@dataclass(slots=True)
class Trace:
    """What the access log and the metrics say about one request (never its text)."""
    route: str
    rid: str
    started: float
    status: int = 200
    tokens_in: int | None = None
    tokens_out: int | None = None
    cache: str = "bypass"
    upstream: str | None = None
    prompt: Any = None  # only with PROXY_LOG_PROMPTS=on
    tenant: str = ""
    weight: int = 1  # admission slots: the number of prompts in a batch
    lease: str | None = None  # counted in by the per-key limits (owes a release)


class Finisher:
    """The end of each request: counted, its key's lease released, logged; and what an answer
    is sent with so that it ends so (the send timeout, the callbacks)."""

    def __init__(self, deps: Deps, limits: KeyLimits | SharedKeyLimits) -> None:
        self.d = deps
        self.limits = limits

    def sent(self, trace: Trace) -> Callable[[bool], None]:
        """A JSON answer is logged and counted once sent, as a stream is once it ends: its time
        includes the sending, a key's lease is held until then, and an answer cut at the send
        timeout is a 499, not the 200 it used to be logged as before it went (a review)."""
        def sent(whole: bool) -> None:
            if not whole:
                trace.status = 499
            self.done(trace)
        return sent

    def send_limits(self) -> dict[str, Any]:
        return {"send_timeout": self.d.settings.send_timeout,
                "on_send_timeout": self.d.metrics.send_timeouts.inc}

    def closer(self, trace: Trace, then: Any) -> Any:
        async def close() -> None:
            try:
                if then is not None:
                    await then()
            finally:
                self.done(trace)
        return close

    def done(self, trace: Trace) -> None:
        if trace.lease is not None:
            self.limits.release(trace.tenant, trace.lease, trace.tokens_out or 0)
        m = self.d.metrics
        elapsed = time.perf_counter() - trace.started
        m.requests.labels(trace.route, str(trace.status)).inc()
        m.latency.labels(trace.route).observe(elapsed)
        if trace.tokens_in:
            m.tokens_in.labels(trace.route).inc(trace.tokens_in)
        if trace.tokens_out:
            m.tokens_out.labels(trace.route).inc(trace.tokens_out)
        fields = {"rid": trace.rid, "route": trace.route, "status": trace.status,
                  "ms": round(elapsed * 1000, 2), "tokens_in": trace.tokens_in,
                  "tokens_out": trace.tokens_out, "cache": trace.cache,
                  "upstream": trace.upstream}
        if trace.prompt is not None:
            fields["prompt"] = trace.prompt
        access(fields)


def name_upstream(d: Deps, headers: dict[str, str], url: str | None) -> None:
    """X-Upstream: the replica that answered or failed, when PROXY_UPSTREAM_HEADER is on."""
    if d.settings.upstream_header and url:
        headers["X-Upstream"] = url


async def answered(handle: Awaitable[Response], trace: Trace, headers: dict[str, str],
                   d: Deps, done: Callable[[Trace], None]) -> Response:
    """A route's answer, whatever `handle` raised: the proxy's errors OpenAI-shaped, a client
    gone (499), a shutdown's cut, a bug (500, logged with its request id, counted; never
    silent); `done` (metrics, key lease, access log) for every answer but a relayed one,
    whose relay calls it at its end."""
    try:
        response = await handle
    except ProxyError as err:
        trace.status = err.status
        if isinstance(err, UpstreamError) and err.upstream:  # which replica failed
            trace.upstream = err.upstream
            name_upstream(d, headers, err.upstream)
        response = error_response(err, headers)
    except ClientGone:
        trace.status = 499
        response = Response(status_code=499)
    except asyncio.CancelledError as exc:  # uvicorn's grace period is over: say so
        if not cut_by_shutdown(exc):
            raise
        trace.status = SHUTDOWN_CUT.status
        response = error_response(SHUTDOWN_CUT, headers)
    except Exception:
        log.exception("unexpected error", extra={"fields": {
            "msg": "unexpected error", "rid": trace.rid, "route": trace.route}})
        d.metrics.unexpected.labels(trace.route).inc()
        trace.status = 500
        response = error_response(ProxyError(
            f"internal proxy error (request id {trace.rid})"), headers)
    if not isinstance(response, RelayResponse | JsonAnswer):
        done(trace)
    return response
