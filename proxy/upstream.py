"""The upstream client: pick a backend, send, fail over, cancel by closing.

Bytes move through a `Transport` (proxy/transport.py: aiohttp in production, a fake in tests);
this module adds what is vLLM-specific: the balancer, passive health, error statuses carrying
vLLM's own body, and the in-flight count per backend. A request fails over to the next backend
(the failed one down for the back-off) when it was refused (it never reached an engine), when
a gateway status came back (502/503/504), or when the connection dropped before any answer and
the backend's /health still answers. A request whose backend died while holding it (a 500, or
a dropped connection, and then /health fails) may be what killed the engine, and would kill
each replica in turn: when it was the only request this proxy had there (the sole suspect),
or it was already sent on once after a replica died, the client gets a 502. When others were
held there too it is more likely one of the innocent ones, and nothing has reached its client
yet (open() ends before any byte is relayed): it goes to another replica, once. A request
that kills engines so costs at most two replicas; its innocent neighbours are answered. A
stream whose replica dies after its first bytes reached the client ends with an error event
(proxy/relay.py): it cannot be retried. The dead backend rests.

An answer read whole (JSON, an error's body, /health) is read to PROXY_MAX_ANSWER_BYTES at most:
past it the connection is dropped and the request fails with a 502 (AnswerTooLarge), counted.
Before, a broken or hostile replica's endless body was read into memory for as long as it sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from proxy.balancer import Balancer
from proxy.errors import BadGateway, UpstreamError, UpstreamHTTPError, UpstreamUnavailable
from proxy.metrics import Metrics
from proxy.routing.backend import Backend
from proxy.routing.protocol import Choice, RouteRequest
from proxy.settings import ANSWER_BYTES, Settings
from proxy.transport import AiohttpTransport, Limits, Reply, Transport

_DOWN = (502, 503, 504)  # a gateway or an engine that is not there: the replica, not the request


def limits(settings: Settings) -> Limits:
    return Limits(connect=settings.connect_timeout, read=settings.read_timeout,
                  pool=settings.queue_timeout + 30.0, connections=settings.max_inflight + 32,
                  keepalive=4.0)  # below uvicorn's (vLLM's) 5 s keep-alive


def make_transport(settings: Settings) -> Transport:
    return AiohttpTransport(limits(settings))


class AnswerTooLarge(BadGateway):
    pass


async def read_at_most(reply: Reply, limit: int, url: str) -> bytes:
    """The whole body, if it is no longer than limit; else AnswerTooLarge, with no more than
    limit bytes held (the caller's close then drops the connection: the rest is never read)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in reply.chunks():
        size += len(chunk)
        if size > limit:
            raise AnswerTooLarge(f"the upstream {url} answered with more than {limit} bytes "
                                 f"(the limit, PROXY_MAX_ANSWER_BYTES): the answer is dropped")
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class UpstreamStream:
    """An open upstream response whose body is relayed chunk by chunk; aclose() cancels it."""

    def __init__(self, backend: Backend, reply: Reply) -> None:
        self.backend = backend
        self.reply = reply
        self.status = reply.status
        self._open = True

    def chunks(self) -> AsyncIterator[bytes]:
        return self.reply.chunks()

    async def read(self, limit: int) -> bytes:
        return await read_at_most(self.reply, limit, self.backend.url)

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self.backend.inflight -= 1
            self.reply.close()


METADATA_WAIT = 10.0  # seconds for /v1/models: a hung replica must not block start-up or clients


def _died(backend: Backend, what: str) -> BadGateway:
    """A replica died while it held the request, which is not sent to another (_suspect): a
    request that crashes an engine (a "poison" request) would crash each replica in turn."""
    exc = BadGateway(f"the upstream {backend.url} failed while it held this request ({what}, "
                     "then its /health failed); not retried on another replica, as the "
                     "request itself may have caused the failure")
    exc.upstream = backend.url
    return exc


def _suspect(backend: Backend, retried: bool) -> bool:
    """Whether a request whose replica died holding it stays there (a 502): it was the only
    one this proxy held there (what is still in flight, and what failed there since it last
    answered well, this one included), or it was already sent on after one death."""
    return retried or backend.inflight + backend.lost <= 1


class Upstream:
    def __init__(self, transport: Transport, balancer: Balancer, metrics: Metrics,
                 max_answer_bytes: int = ANSWER_BYTES) -> None:
        self.transport = transport
        self.balancer = balancer
        self.metrics = metrics
        self.max_answer_bytes = max_answer_bytes

    async def open(self, method: str, path: str, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None,
                   route: RouteRequest | None = None, wait: float | None = None,
                   asked: list[Backend] | None = None,
                   errors: list[UpstreamError] | None = None) -> UpstreamStream:
        """Send where the routing policy says; on a connect error try the next one. Error
        statuses from vLLM raise UpstreamHTTPError with vLLM's own body. `wait` bounds a
        metadata call (METADATA_WAIT): past it the replica is marked down and the next tried.
        `asked`: replicas already asked, not sent it again; each one this call tries is added
        to it (a search across the replicas passes the same list to each of its calls).
        `errors`: each failure it went on to the next replica from is added to it (`upstream`
        set), for a search to judge what the replicas it did not hear from were doing."""
        key = await self.balancer.policy.key(route) if route is not None else None
        tried = [] if asked is None else asked
        passed: list[UpstreamError] = [] if errors is None else errors
        last: UpstreamError = UpstreamUnavailable("no upstream is configured")
        retried = False  # sent on once after a replica died holding it
        while (choice := self.balancer.choose(key, tried)) is not None:
            backend = choice.backend
            tried.append(backend)
            backend.inflight += 1
            try:
                reply = await self.transport.request(method, backend.url + path, content,
                                                     headers or {}, wait=wait)
            except UpstreamError as exc:
                backend.inflight -= 1
                last, exc.upstream = exc, backend.url
                self.metrics.upstream_errors.labels(backend.url, type(exc).__name__).inc()
                dropped = isinstance(exc, BadGateway) and wait is None
                if dropped:
                    backend.lost += 1
                if dropped and not await self.probe(backend):
                    # dropped before any answer and /health fails (the probe marks it down):
                    # it died holding this request, which may be what killed it
                    self.balancer.policy.refused(choice, key)
                    last = _died(backend, "the connection dropped")
                    if _suspect(backend, retried):
                        raise last from None
                    retried = True
                    passed.append(last)
                    continue
                if isinstance(exc, UpstreamUnavailable | BadGateway) or wait is not None:
                    # refused, or dropped by a replica that lives on: down for the back-off,
                    # next one
                    self.balancer.mark_down(backend, str(exc))
                    self.balancer.policy.refused(choice, key)
                    passed.append(exc)
                    continue
                raise
            except BaseException:
                backend.inflight -= 1
                raise
            stream = UpstreamStream(backend, reply)
            if route is not None:  # it reached this replica (a refused connect did not)
                self._count(choice)
            if reply.status < 400:
                self.balancer.mark_up(backend)
                return stream
            if reply.status == 500:
                backend.lost += 1
            failed = await self._status_error(stream)
            failed.upstream = backend.url
            if reply.status in _DOWN:
                # a gateway error: the replica rests (it answers fast, so least-loaded would
                # keep choosing it: found by a review, 55 of 60 requests failed); this
                # request, which it never ran, goes to the next one
                self.balancer.mark_down(backend, f"HTTP {reply.status}")
                self.balancer.policy.refused(choice, key)
                last = failed
                passed.append(failed)
                continue
            if reply.status == 500 and not await self.probe(backend):
                # a 500 from a replica whose /health then fails (the probe marks it down):
                # its engine died while it held this request, which may be what killed it
                self.balancer.policy.refused(choice, key)
                last = _died(backend, "it answered 500")
                if _suspect(backend, retried):
                    raise last from None
                retried = True
                passed.append(last)
                continue
            raise failed
        raise last

    def _count(self, choice: Choice) -> None:
        m = self.metrics
        m.routed.labels(choice.backend.url).inc()
        if choice.affinity:
            m.affinity_hits.labels(choice.backend.url).inc()
        if choice.spilled_from is not None:
            m.spills.labels(choice.spilled_from.url).inc()

    async def _status_error(self, stream: UpstreamStream) -> UpstreamHTTPError:
        try:
            content = await self._body(stream)
        except UpstreamError as exc:  # too large, or cut: the status, and why it has no body
            content = str(exc).encode()
        finally:
            await stream.aclose()
        if stream.status >= 500:
            self.metrics.upstream_errors.labels(stream.backend.url, f"http_{stream.status}").inc()
        return UpstreamHTTPError(stream.status, content)

    async def fetch(self, method: str, path: str, content: bytes | None = None,
                    headers: Mapping[str, str] | None = None, wait: float | None = None) -> bytes:
        """A whole (non-streaming) answer; cancelling the caller cancels the upstream request."""
        return await self.read(await self.open(method, path, content, headers, wait=wait))

    async def read(self, stream: UpstreamStream) -> bytes:
        """The whole body of an opened answer, then the stream closed."""
        try:
            return await self._body(stream)
        finally:
            await stream.aclose()

    async def _body(self, stream: UpstreamStream) -> bytes:
        try:
            return await stream.read(self.max_answer_bytes)
        except AnswerTooLarge:
            self.metrics.answers_too_large.labels(stream.backend.url).inc()
            raise

    async def probe(self, backend: Backend, wait: float = 2.0) -> bool:
        try:
            reply = await self.transport.request("GET", backend.url + "/health", None, {},
                                                 wait=wait)
        except UpstreamError as exc:
            self.balancer.mark_down(backend, type(exc).__name__)
            return False
        try:
            await read_at_most(reply, self.max_answer_bytes, backend.url)
        except AnswerTooLarge:
            self.metrics.answers_too_large.labels(backend.url).inc()
            return False
        except UpstreamError:
            return False
        finally:
            reply.close()
        if reply.status == 200:
            self.balancer.mark_up(backend)
            return True
        self.balancer.mark_down(backend, f"/health answered {reply.status}")
        return False

    async def aclose(self) -> None:
        await self.transport.aclose()
