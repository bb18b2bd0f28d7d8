"""The completion flow, top to bottom: receive → validate/clip → policy → cache → upstream →
relay → store. Each step lives in its own module; this file only composes them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from proxy import clip, openai, params, policy
from proxy.admission import Admission
from proxy.bounds import Bounds, prompt_count
from proxy.catalog import Catalog
from proxy.errors import BadGateway, ProxyError, UpstreamError
from proxy.events import EventBuffer
from proxy.headers import sse_headers, upstream_headers
from proxy.hedge import Hedge
from proxy.limits import KeyLimits, parse
from proxy.logs import access
from proxy.metrics import Metrics
from proxy.receive import (
    ClientGone,
    KeyRing,
    is_json,
    read_body,
    request_id,
    until_disconnect,
)
from proxy.relay import Pump, StreamOutcome, followed, relay_stream, replay_stream
from proxy.routing.protocol import RouteRequest, route_request
from proxy.sending import SHUTDOWN_CUT, JsonAnswer, RelayResponse, cut_by_shutdown, error_response
from proxy.settings import Settings
from proxy.sse import Accumulator, replay
from proxy.tokens import TokenCounter
from proxy.types import AnswerCache, CacheRequest, CacheResult, Completion, Kind
from proxy.upstream import Upstream, UpstreamStream

if TYPE_CHECKING:
    from proxy.shared_limits import SharedKeyLimits

log = logging.getLogger("proxy.handler")
PATHS: dict[Kind, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(slots=True)
class Deps:
    settings: Settings
    upstream: Upstream
    catalog: Catalog
    counter: TokenCounter
    cache: AnswerCache
    metrics: Metrics
    admission: Admission
    keys: KeyRing


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


class CompletionHandler:
    def __init__(self, deps: Deps) -> None:
        self.d = deps
        s = deps.settings
        self.bounds = Bounds(s.max_json_depth, s.max_messages, s.max_prompts)
        table = parse(s.key_limits)
        local = KeyLimits(table, s.workers,
                          lambda which: deps.metrics.key_limited.labels(which).inc())
        self.limits: KeyLimits | SharedKeyLimits = local
        if s.key_limits_shared and s.redis_url and table:
            from proxy.shared_limits import SharedKeyLimits

            self.limits = SharedKeyLimits(local, table, s.redis_url, "vsp",
                                          deps.metrics.key_limits_fallbacks.inc)
        self._jobs: set[asyncio.Task[None]] = set()  # handed-over streams (single flight)

    async def __call__(self, request: Request, kind: Kind) -> Response:
        trace = Trace(PATHS[kind], request_id(request), time.perf_counter())
        headers = {"X-Request-ID": trace.rid}
        return await answered(self._handle(request, kind, trace, headers), trace, headers,
                              self.d, self.done)

    async def _handle(self, request: Request, kind: Kind, trace: Trace,
                      headers: dict[str, str]) -> Response:
        d, s = self.d, self.d.settings
        tenant = trace.tenant = d.keys.tenant(request)
        if not is_json(request):  # as vLLM answers it, before any limit is spent
            raise params.VllmTypeError(
                "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")
        trace.lease = await self.limits.admit(tenant)
        raw = await read_body(request, s.max_body_bytes, s.body_timeout)
        # the fields checked as vLLM checks them, before greedy overwrites them: off the event
        # loop with the parse for a large body
        body = await self.bounds.parse(raw, kind, lambda b: params.check(kind, b, s.greedy))
        if kind == "completions":
            trace.weight = prompt_count(body["prompt"])
        if s.log_prompts:
            trace.prompt = body.get("messages") if kind == "chat" else body.get("prompt")
        model = await d.catalog.resolve(body.get("model") or None)  # "": vLLM's default too
        body["model"] = model.name
        policy.check_lengths(kind, body, model.max_model_len)
        truncate = s.input_overflow == "truncate"
        own_limit = s.max_input_tokens or 1 << 31
        # vLLM takes a prompt as long as the context (then refuses the output length 0 left:
        # output_limit); the proxy's truncation leaves a token for output. Where the context
        # is the limit, a prompt past it is refused as vLLM refuses it (the proxy's own
        # context_length_exceeded, which vLLM never answers, is for PROXY_MAX_INPUT_TOKENS)
        model_limit = (model.max_model_len or 1 << 31) - (1 if truncate else 0)
        in_limit = min(own_limit, model_limit)
        context = model.max_model_len if own_limit >= model_limit else None
        clipper = clip.clip_chat if kind == "chat" else clip.clip_prompt
        # a prompt vLLM truncates itself (truncate_prompt_tokens) is as long as it keeps: a
        # longer one is no 400 there, nor its output capped by the whole (found by a review);
        # one it keeps whole-context long leaves no room for output: its 400, below
        keep = clip.kept_by_vllm(kind, body, model.max_model_len)
        if keep is not None and keep > own_limit:
            keep = None
        clipped = await clipper(body, d.counter, model.name,
                                in_limit if keep is None else 1 << 31, truncate,
                                ids=d.upstream.balancer.policy.wants_tokens, context=context)
        input_tokens = clipped.input_tokens if keep is None else min(clipped.input_tokens, keep)
        trace.tokens_in = input_tokens
        # before the key is charged: a prompt that leaves no room is refused as vLLM refuses it
        out_limit = policy.output_limit(s.max_output_tokens, model.max_model_len, input_tokens,
                                        batch=trace.weight > 1)
        if trace.lease is not None:
            await self.limits.spend(tenant, trace.lease, input_tokens * trace.weight)
        if clipped.truncated:
            headers["X-Proxy-Input-Truncated"] = clipped.header()
            d.metrics.clipped.labels("input_truncated").inc()
        body = policy.force_greedy(clipped.body) if s.greedy else clipped.body
        body, asked = policy.cap_output(kind, body, out_limit)
        if asked is not None:
            headers["X-Proxy-Max-Tokens-Clipped"] = f"{asked}->{out_limit}"
            d.metrics.clipped.labels("output").inc()
        stream = body.get("stream") is True
        route = route_request(request.headers, body, s.routing_session_header,
                              clipped.token_ids)
        start: Callable[[], Coroutine[Any, Any, Any]] = (
            (lambda: self._open(kind, body, trace, route)) if stream
            else (lambda: self._fetch(kind, body, trace, route)))
        hedge = Hedge(start, (lambda up: self._close(up, trace)) if stream else None,
                      d.metrics) \
            if s.cache_hedge else None
        cache_control = request.headers.get("cache-control", "").lower()
        try:
            # an identical request's wait for the one in flight can be long: a client that
            # leaves meanwhile frees its slot and key lease now (found by a review)
            result = await until_disconnect(request, d.cache.lookup(CacheRequest(
                kind, body, tenant, "no-cache" in cache_control, "no-store" in cache_control,
                hedge, policy.exact_only(kind, tenant, request.headers.get(policy.SEMANTIC_HEADER),
                                         s.cache_exact_only))))
        except BaseException:
            if hedge is not None:
                await hedge.cancel()
            raise
        trace.cache = result.status
        headers["X-Cache"] = result.status.upper()
        if result.status == "hit" and (result.answer is not None or result.live is not None):
            if hedge is not None:
                await hedge.cancel()
            return self._replay(kind, result, stream, openai.wants_usage(body), headers, trace)
        work = hedge.work() if hedge is not None else start()
        if stream:
            return await self._stream(request, kind, body, result.ticket, headers, trace, work)
        return await self._json(request, kind, body, result.ticket, headers, trace, work)

    def _replay(self, kind: Kind, result: CacheResult, stream: bool, usage: bool,
                headers: dict[str, str], trace: Trace) -> Response:
        headers["X-Cache-Tier"] = result.tier or "exact"
        if result.similarity is not None:
            headers["X-Cache-Similarity"] = f"{result.similarity:.4f}"
        trace.tokens_out = 0
        events: AsyncIterator[bytes]
        leave = None
        if result.live is not None:  # an identical stream in flight (only streams follow one)
            live = result.live
            events = followed(kind, live, usage)

            async def leave() -> None:  # counted out of the flight however the response ends
                live.leave()
        elif not stream:
            assert result.answer is not None
            return JsonAnswer(orjson.dumps(result.answer), headers, **self._send_limits(),
                              on_sent=self._sent(trace))
        else:  # a stream's hit is always vLLM's chunks (cache/entry.py: answered)
            assert result.events is not None
            events = replay_stream(replay(kind, usage, result.events))
        return RelayResponse(events, self._closer(trace, leave), headers=sse_headers(headers),
                             **self._send_limits())

    async def _fetch(self, kind: Kind, body: dict[str, Any], trace: Trace,
                     route: RouteRequest) -> bytes:
        async with self.d.admission.slot(trace.tenant, trace.weight):
            opened = await self.d.upstream.open("POST", PATHS[kind], openai.dumps(body),
                                                upstream_headers(trace.rid), route)
            trace.upstream = opened.backend.url
            return await self.d.upstream.read(opened)

    async def _open(self, kind: Kind, body: dict[str, Any], trace: Trace,
                    route: RouteRequest) -> UpstreamStream:
        d = self.d
        await d.admission.acquire(trace.tenant, trace.weight)
        try:
            return await d.upstream.open("POST", PATHS[kind],
                                         openai.dumps(policy.with_usage(body)),
                                         upstream_headers(trace.rid), route)
        except BaseException:
            d.admission.release(trace.tenant, trace.weight)
            raise

    async def _close(self, upstream: UpstreamStream, trace: Trace) -> None:
        self.d.admission.release(trace.tenant, trace.weight)
        await upstream.aclose()

    async def _json(self, request: Request, kind: Kind, body: dict[str, Any],
                    ticket: object | None, headers: dict[str, str], trace: Trace,
                    work: Awaitable[bytes]) -> Response:
        d = self.d
        try:  # a client that leaves while queued for a slot leaves the queue too
            content = await until_disconnect(request, work)
            answer = _json_answer(content)
        except BaseException:
            if ticket is not None:
                await d.cache.abandon(ticket)
            raise
        name_upstream(d, headers, trace.upstream)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(usage, dict):
            trace.tokens_out = _token_count(usage.get("completion_tokens"))
        task = None
        if ticket is not None:
            task = BackgroundTask(self._store, ticket, Completion(body=answer))
        return JsonAnswer(content, headers, background=task, **self._send_limits(),
                          on_sent=self._sent(trace))

    async def _stream(self, request: Request, kind: Kind, body: dict[str, Any],
                      ticket: object | None, headers: dict[str, str], trace: Trace,
                      work: Awaitable[UpstreamStream]) -> Response:
        d = self.d
        try:  # the client may leave while queued, or before the upstream's headers come
            upstream = await until_disconnect(request, work)
        except BaseException:
            if ticket is not None:
                await d.cache.abandon(ticket)
            raise
        trace.upstream = upstream.backend.url
        name_upstream(d, headers, trace.upstream)
        outcome = StreamOutcome(started=trace.started)
        acc = Accumulator(kind) if ticket is not None else None
        shared = d.cache.share(ticket, acc.raw) if acc is not None else None
        relayed = relay_stream(upstream, outcome, acc, not openai.wants_usage(body),
                               event_buffer(d, trace.route))
        pump = None
        if shared is not None and acc is not None:
            acc.on_add = shared.wake
            pump = Pump(relayed)  # the upstream read outlives this client if others follow

        settled = False

        async def settle() -> None:
            """After the upstream stream ended (or was given up): free it, store or abandon.
            Once: when the pump's read ends, or at the leader's close, whichever is first."""
            nonlocal settled
            if settled:
                return
            settled = True
            await self._close(upstream, trace)
            if ticket is not None:
                done = acc.completion() if acc is not None and outcome.finished else None
                await (self._store(ticket, done) if done else d.cache.abandon(ticket))

        if pump is not None:
            # settled as soon as the read ends: followers get their end then, not when a slow
            # leader's client has read it all (found by a review: 28 s later)
            self._background(pump.task, settle)

        async def close() -> None:
            if outcome.first_byte is not None:
                d.metrics.ttft.labels(trace.route).observe(outcome.first_byte - trace.started)
            if outcome.usage:
                trace.tokens_out = _token_count(outcome.usage.get("completion_tokens"))
            if trace.tokens_out is None:  # cut before the usage chunk: charge what was relayed
                trace.tokens_out = outcome.events  # (a key's tpm was bypassed by leaving early)
            if not outcome.finished:
                trace.status = 499 if outcome.error is None else outcome.error
            if pump is not None and not pump.task.done():
                assert shared is not None  # a pump is made only for a shared stream
                if shared.followers:  # the client left; others follow
                    d.metrics.flight_handovers.inc()

                    def stop() -> None:  # until they leave too
                        shared.close()
                        pump.task.cancel()

                    shared.when_empty(stop)
                    return  # settled when the read ends (above)
                shared.close()  # stopped: nobody joins it meanwhile (a review)
                await pump.stop()
            await settle()

        chunks = relayed if pump is None else pump.chunks()
        return RelayResponse(chunks, self._closer(trace, close), headers=sse_headers(headers),
                             **self._send_limits())

    async def drain(self) -> None:
        """At shutdown: let handed-over streams finish (and store) for their followers."""
        if self._jobs:
            await asyncio.wait(list(self._jobs), timeout=self.d.settings.drain_timeout)

    async def aclose(self) -> None:
        await self.limits.aclose()

    def _background(self, task: asyncio.Task[None], then: Callable[[], Awaitable[None]]) -> None:
        """Finish a handed-over stream for its followers, then `then`; kept referenced."""
        async def finish() -> None:
            await asyncio.gather(task, return_exceptions=True)
            await then()

        job = asyncio.create_task(finish())
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    def _sent(self, trace: Trace) -> Callable[[bool], None]:
        """A JSON answer is logged and counted once sent, as a stream is once it ends: its time
        includes the sending, a key's lease is held until then, and an answer cut at the send
        timeout is a 499, not the 200 it used to be logged as before it went (a review)."""
        def sent(whole: bool) -> None:
            if not whole:
                trace.status = 499
            self.done(trace)
        return sent

    def _send_limits(self) -> dict[str, Any]:
        return {"send_timeout": self.d.settings.send_timeout,
                "on_send_timeout": self.d.metrics.send_timeouts.inc}

    def _closer(self, trace: Trace, then: Any) -> Any:
        async def close() -> None:
            try:
                if then is not None:
                    await then()
            finally:
                self.done(trace)
        return close

    async def _store(self, ticket: object, completion: Completion) -> None:
        try:
            await self.d.cache.store(ticket, completion)
        except Exception:
            log.exception("cache store failed")

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


def _token_count(value: object) -> int | None:
    """A usage count as vLLM sends it; anything else (negative, a float, a string) is none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _json_answer(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise BadGateway("the upstream answered 200 with a body that is not JSON") from None


def event_buffer(d: Deps, route: str) -> EventBuffer:
    """A relay's buffer of an unfinished upstream event: bounded, its overflow counted."""
    return EventBuffer(d.settings.max_event_bytes, d.metrics.events_too_large.labels(route).inc)


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
