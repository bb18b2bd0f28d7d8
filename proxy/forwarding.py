"""A completion sent to vLLM (a cache miss, or no cache): an admission slot held for it, the
upstream request read whole (JSON) or opened (a stream), the answer relayed to the client, then
stored in the cache or the cache's claim abandoned. A stream that identical requests follow
(single flight) is read on for them after its own client leaves: a background job, let finish
at shutdown (drain)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from proxy import openai, policy
from proxy.deps import Deps, event_buffer
from proxy.errors import BadGateway
from proxy.headers import sse_headers, upstream_headers
from proxy.receive import until_disconnect
from proxy.relay import Pump, StreamOutcome, relay_stream
from proxy.routing.protocol import RouteRequest
from proxy.sending import JsonAnswer, RelayResponse
from proxy.sse import Accumulator
from proxy.trace import Finisher, Trace, name_upstream
from proxy.types import Completion, Kind
from proxy.upstream import UpstreamStream

log = logging.getLogger("proxy.handler")  # a failed store keeps the name it always had
PATHS: dict[Kind, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class Forwarding:
    def __init__(self, deps: Deps, finish: Finisher) -> None:
        self.d = deps
        self.finish = finish
        self._jobs: set[asyncio.Task[None]] = set()  # handed-over streams (single flight)

    async def fetch(self, kind: Kind, body: dict[str, Any], trace: Trace,
                    route: RouteRequest) -> bytes:
        async with self.d.admission.slot(trace.tenant, trace.weight):
            opened = await self.d.upstream.open("POST", PATHS[kind], openai.dumps(body),
                                                upstream_headers(trace.rid), route)
            trace.upstream = opened.backend.url
            return await self.d.upstream.read(opened)

    async def open(self, kind: Kind, body: dict[str, Any], trace: Trace,
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

    async def close(self, upstream: UpstreamStream, trace: Trace) -> None:
        self.d.admission.release(trace.tenant, trace.weight)
        await upstream.aclose()

    async def json(self, request: Request, kind: Kind, body: dict[str, Any],
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
        return JsonAnswer(content, headers, background=task, **self.finish.send_limits(),
                          on_sent=self.finish.sent(trace))

    async def stream(self, request: Request, kind: Kind, body: dict[str, Any],
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
            await self.close(upstream, trace)
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
        return RelayResponse(chunks, self.finish.closer(trace, close),
                             headers=sse_headers(headers), **self.finish.send_limits())

    async def drain(self) -> None:
        """At shutdown: let handed-over streams finish (and store) for their followers."""
        if self._jobs:
            await asyncio.wait(list(self._jobs), timeout=self.d.settings.drain_timeout)

    def _background(self, task: asyncio.Task[None], then: Callable[[], Awaitable[None]]) -> None:
        """Finish a handed-over stream for its followers, then `then`; kept referenced."""
        async def finish() -> None:
            await asyncio.gather(task, return_exceptions=True)
            await then()

        job = asyncio.create_task(finish())
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _store(self, ticket: object, completion: Completion) -> None:
        try:
            await self.d.cache.store(ticket, completion)
        except Exception:
            log.exception("cache store failed")


def _token_count(value: object) -> int | None:
    """A usage count as vLLM sends it; anything else (negative, a float, a string) is none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _json_answer(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise BadGateway("the upstream answered 200 with a body that is not JSON") from None
