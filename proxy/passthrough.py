"""vLLM's routes that the proxy passes through with no answer cache: `POST /tokenize`,
`POST /detokenize` (the body sent as the client sent it, vLLM's answer relayed as is) and
`POST /v1/responses` (shaped by proxy/responses.py first: greedy, output cap; streamed through
proxy/responses_sse.py). Every one goes through what the completion routes go through: API
key, media type, the key's limits, the body-size limit and time, JSON and depth checks, an
admission slot, the balancer; errors are OpenAI-shaped, a bug a logged 500.

A stored response, `GET /v1/responses/{id}` (its query as sent: `stream`, `starting_after`)
and `POST /v1/responses/{id}/cancel`, has no body: the API key, the key's limits and an
admission slot; vLLM keeps it in one replica's memory, so the replicas are asked in turn, each
once at most, until one knows the id (the others' 404 have no effect); a 404 is the client's
when every other replica is known not to be there (its connection refused, a gateway's 502 or
503: UpstreamError.absent); one that timed out may hold it, and its error is the answer.

Response ids are each API key's own (proxy/response_ids.py): `request_id` and
`previous_response_id` in a POST and the id in a stored response's path are tagged with the
key's tag before vLLM sees them, and the tag is taken out of vLLM's answers and errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from proxy import openai, responses
from proxy.admission import request_key
from proxy.bounds import INLINE_BYTES, Bounds, TooDeep, depth_exceeds
from proxy.deps import Deps, event_buffer
from proxy.errors import UpstreamError, UpstreamHTTPError, VllmTypeError
from proxy.headers import sse_headers, upstream_headers
from proxy.receive import is_json, read_body, request_id, until_disconnect
from proxy.response_ids import AS_IS, ResponseIds
from proxy.responses_sse import ResponsesOutcome, error_event, relay_events
from proxy.routing.backend import Backend
from proxy.sending import JsonAnswer, RelayResponse
from proxy.trace import Trace, answered, name_upstream
from proxy.upstream import UpstreamStream

if TYPE_CHECKING:
    from proxy.limits import KeyLimits
    from proxy.shared_limits import SharedKeyLimits

RESPONSES = "/v1/responses"
PATHS = ("/tokenize", "/detokenize", RESPONSES)
STORED = "/v1/responses/{response_id}"  # the routes' names, in metrics and the access log
CANCEL = "/v1/responses/{response_id}/cancel"
_TRUE = frozenset({"1", "true", "on", "yes", "t", "y"})  # a bool query value, as vLLM reads it


class Passthrough:
    def __init__(self, deps: Deps, limits: KeyLimits | SharedKeyLimits, bounds: Bounds,
                 done: Callable[[Trace], None]) -> None:
        self.d = deps
        self.limits = limits  # the completion handler's: one budget per key for every route
        self.bounds = bounds
        self.done = done  # the completion handler's Finisher: metrics, key lease, access log

    async def __call__(self, request: Request, path: str) -> Response:
        trace = Trace(path, request_id(request), time.perf_counter())
        headers = {"X-Request-ID": trace.rid}
        return await answered(self._handle(request, path, trace, headers), trace, headers,
                              self.d, self.done)

    async def _handle(self, request: Request, path: str, trace: Trace,
                      headers: dict[str, str]) -> Response:
        d, s = self.d, self.d.settings
        tenant = trace.tenant = d.keys.tenant(request)
        request_key.set(tenant)  # its counts at vLLM take this key's turns (CountGate)
        if not is_json(request):  # as vLLM answers it, before any limit is spent
            raise VllmTypeError(
                "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")
        trace.lease = await self.limits.admit(tenant)
        raw = await read_body(request, s.max_body_bytes, s.body_timeout)
        # a large body is parsed off the event loop, as the completion routes parse theirs
        body = await asyncio.to_thread(self._parse, raw) if len(raw) > INLINE_BYTES \
            else self._parse(raw)
        if path != RESPONSES:
            content = await until_disconnect(request, self._fetch(path, raw, trace))
            return self._answer(content, headers, trace)
        responses.check(body)  # before the model is looked up, as vLLM types the body first
        model = await d.catalog.resolve(body.get("model") or None)
        body, asked, limit = responses.shape(body, s.greedy, s.max_output_tokens,
                                             model.max_model_len)
        ids = d.keys.response_ids(tenant)
        body = ids.ask(body)
        body["model"] = model.name
        if asked is not None:
            headers["X-Proxy-Max-Tokens-Clipped"] = f"{asked}->{limit}"
            d.metrics.clipped.labels("output").inc()
        if trace.lease is not None:  # as a chat prompt is: charged before the call
            text = responses.input_text(body)
            estimate = await d.counter.count_text(model.name, text) if text else 0
            await self._charge(trace, estimate, None)
        if body.get("stream") is True:
            return await self._stream(request, "POST", RESPONSES, openai.dumps(body), trace,
                                      headers, ids)
        content = await until_disconnect(request, self._fetch(path, openai.dumps(body), trace,
                                                              ids))
        in_, out = responses.usage(content)
        await self._charge(trace, in_, out)
        return self._answer(ids.shown(content), headers, trace)

    async def stored(self, request: Request, route: str) -> Response:
        """GET /v1/responses/{id} or POST /v1/responses/{id}/cancel (`route`: which)."""
        trace = Trace(route, request_id(request), time.perf_counter())
        headers = {"X-Request-ID": trace.rid}
        return await answered(self._stored(request, trace, headers), trace, headers, self.d,
                              self.done)

    async def _stored(self, request: Request, trace: Trace,
                      headers: dict[str, str]) -> Response:
        trace.tenant = self.d.keys.tenant(request)
        trace.lease = await self.limits.admit(trace.tenant)
        ids = self.d.keys.response_ids(trace.tenant)
        query = request.url.query
        held = quote(ids.upstream(request.path_params["response_id"]), safe="")
        path = trace.route.replace("{response_id}", held) + (f"?{query}" if query else "")
        method = request.method
        stream = method == "GET" and \
            request.query_params.get("stream", "").lower() in _TRUE
        if stream:  # its events as they come; the response's usage was charged when made
            return await self._stream(request, method, path, None, trace, headers, ids,
                                      charge=False)
        content = await until_disconnect(request, self._fetch(path, None, trace, ids, method))
        return self._answer(ids.shown(content), headers, trace)

    async def _reach(self, method: str, path: str, content: bytes | None, trace: Trace,
                     ids: ResponseIds) -> UpstreamStream:
        try:
            return await self._find(method, path, content, trace)
        except UpstreamHTTPError as exc:  # vLLM's error body: the ids as the client named them
            exc.content = ids.shown(exc.content)
            raise

    async def _find(self, method: str, path: str, content: bytes | None,
                    trace: Trace) -> UpstreamStream:
        """The upstream answer; for a stored response, from the replica that holds it: the
        replicas are asked in turn, each once at most (one list of those asked, shared by
        every open(): before, one marked down during the search was offered again by the
        balancer, as the one whose back-off ends first, and asked twice), until one answers
        other than 404. That 404 is the client's answer too when every other replica is
        known not to be there (UpstreamError.absent: refused, or a gateway's 502/503), as
        vLLM alone would answer: before, a replica refusing connections beside one that
        answered 404 got the client a 503. One that timed out (connecting, or waiting for a
        pooled connection: saturated, not gone) may hold the id: its error, a retryable 503,
        is the answer, whichever replica was asked first (every failure open() went on from
        is in `errors`)."""
        up, headers = self.d.upstream, upstream_headers(trace.rid)
        if not path.startswith(RESPONSES + "/"):
            return await up.open(method, path, content, headers)
        asked: list[Backend] = []
        errors: list[UpstreamError] = []  # each failure open() went on from (its replica)
        missing: UpstreamHTTPError | None = None  # a replica's 404: it does not hold the id
        while True:
            try:
                return await up.open(method, path, content, headers, asked=asked,
                                     errors=errors)
            except UpstreamError as exc:
                if isinstance(exc, UpstreamHTTPError) and exc.status == 404:
                    missing = exc
                elif missing is None or exc not in errors:
                    raise  # no 404 yet, an answer, or a failure open() did not go on from
            if len(asked) >= len(up.balancer.backends):
                break
        present = [e for e in errors if not e.absent]
        if present:
            raise present[0]
        raise missing

    def _parse(self, raw: bytes) -> dict[str, Any]:
        """The body as vLLM reads it (its errors for bad JSON), nested no deeper than allowed,
        with no more `input` items than a chat may have messages."""
        body = openai.parse_json(raw)
        self.bounds.check_counts("chat", {"messages": body.get("input")})
        self.bounds.check_counts("chat", body)
        if depth_exceeds(body, self.bounds.max_depth):
            raise TooDeep(f"the request JSON is nested more than {self.bounds.max_depth} "
                          f"levels deep (the limit, PROXY_MAX_JSON_DEPTH)")
        return body

    async def _fetch(self, path: str, content: bytes | None, trace: Trace,
                     ids: ResponseIds = AS_IS, method: str = "POST") -> bytes:
        async with self.d.admission.slot(trace.tenant):
            opened = await self._reach(method, path, content, trace, ids)
            trace.upstream = opened.backend.url
            return await self.d.upstream.read(opened)

    async def _open(self, method: str, path: str, content: bytes | None, trace: Trace,
                    ids: ResponseIds) -> UpstreamStream:
        await self.d.admission.acquire(trace.tenant)
        try:
            return await self._reach(method, path, content, trace, ids)
        except BaseException:
            self.d.admission.release(trace.tenant)
            raise

    async def _stream(self, request: Request, method: str, path: str, content: bytes | None,
                      trace: Trace, headers: dict[str, str], ids: ResponseIds,
                      charge: bool = True) -> Response:
        d = self.d
        upstream = await until_disconnect(request, self._open(method, path, content, trace, ids))
        trace.upstream = upstream.backend.url
        name_upstream(self.d, headers, trace.upstream)
        outcome = ResponsesOutcome(started=trace.started)

        async def close() -> None:
            try:
                d.admission.release(trace.tenant)
                await upstream.aclose()
                if outcome.first_byte is not None:
                    d.metrics.ttft.labels(trace.route).observe(
                        outcome.first_byte - trace.started)
                if not outcome.finished:
                    trace.status = 499 if outcome.error is None else outcome.error
                if charge:
                    await self._charge(trace, outcome.input_tokens,
                                       outcome.output_tokens if outcome.output_tokens
                                       is not None else outcome.events)  # cut: what was sent
            finally:
                self.done(trace)

        return RelayResponse(relay_events(upstream, outcome, event_buffer(d, trace.route), ids),
                             close,
                             headers=sse_headers(headers), send_timeout=d.settings.send_timeout,
                             on_send_timeout=d.metrics.send_timeouts.inc,
                             last_words=lambda err: error_event(err, outcome.events))

    async def _charge(self, trace: Trace, tokens_in: int | None, tokens_out: int | None) -> None:
        """The key's tokens per minute: the input's estimate before the call (its text counted
        here), what vLLM then counts beyond it (its usage), the output at release
        (trace.tokens_out). Before, the input was charged only from vLLM's usage at the end: a
        key's concurrent requests, or one whose client left before the answer, went through
        uncharged (found by a review), where a chat prompt is charged before the call."""
        charged = trace.tokens_in or 0
        trace.tokens_in = charged if tokens_in is None else tokens_in
        trace.tokens_out = tokens_out
        if trace.lease is not None and tokens_in and tokens_in > charged:
            await self.limits.spend(trace.tenant, trace.lease, tokens_in - charged)

    def _answer(self, content: bytes, headers: dict[str, str], trace: Trace) -> Response:
        name_upstream(self.d, headers, trace.upstream)

        def sent(whole: bool) -> None:
            if not whole:
                trace.status = 499
            self.done(trace)

        return JsonAnswer(content, headers, send_timeout=self.d.settings.send_timeout,
                          on_send_timeout=self.d.metrics.send_timeouts.inc, on_sent=sent)
