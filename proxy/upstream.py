"""The httpx seam: forward (JSON), stream, cancel. httpx errors become our errors HERE only."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping

import httpx

from proxy.aiotransport import RAW_BODY, AiohttpTransport
from proxy.balancer import Balancer
from proxy.errors import (
    BadGateway,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.metrics import Metrics
from proxy.routing.backend import Backend
from proxy.routing.protocol import Choice, RouteRequest
from proxy.settings import Settings

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


def make_client(settings: Settings,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    timeout = httpx.Timeout(connect=settings.connect_timeout, read=settings.read_timeout,
                            write=settings.read_timeout, pool=settings.queue_timeout + 30.0)
    limits = httpx.Limits(max_connections=settings.max_inflight + 32,
                          max_keepalive_connections=settings.max_inflight + 32,
                          keepalive_expiry=4.0)  # below uvicorn's (vLLM's) 5 s keep-alive
    if transport is None:  # aiohttp moves the bytes: httpcore's pool cost 3x the CPU
        transport = AiohttpTransport(settings.max_inflight + 32, 4.0, settings.connect_timeout,
                                     settings.read_timeout, settings.queue_timeout + 30.0)
    return httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False, transport=transport,
                             headers={"accept-encoding": "identity"})


def translate(exc: httpx.HTTPError, url: str) -> UpstreamError:
    if isinstance(exc, _CONNECT_ERRORS):
        return UpstreamUnavailable(f"the upstream {url} is unreachable: {type(exc).__name__}")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"the upstream {url} timed out: {type(exc).__name__}")
    return BadGateway(f"the upstream {url} failed: {type(exc).__name__}")


class UpstreamStream:
    """An open upstream response whose body is relayed chunk by chunk; aclose() cancels it."""

    def __init__(self, backend: Backend, response: httpx.Response) -> None:
        self.backend = backend
        self.response = response
        self._open = True

    async def chunks(self) -> AsyncIterator[bytes]:
        # aiohttp's body straight (AiohttpTransport hands it over), past httpx's per-chunk layers
        raw: AsyncIterable[bytes] | None = self.response.extensions.get(RAW_BODY)
        try:
            async for chunk in raw if raw is not None else self.response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise translate(exc, self.backend.url) from None

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self.backend.inflight -= 1
            await self.response.aclose()


class Upstream:
    def __init__(self, client: httpx.AsyncClient, balancer: Balancer, metrics: Metrics) -> None:
        self.client = client
        self.balancer = balancer
        self.metrics = metrics

    async def open(self, method: str, path: str, content: bytes | None = None,
                   headers: Mapping[str, str] | None = None,
                   route: RouteRequest | None = None) -> UpstreamStream:
        """Send where the routing policy says; on a connect error try the next one. Error
        statuses from vLLM raise UpstreamHTTPError with vLLM's own body."""
        key = await self.balancer.policy.key(route) if route is not None else None
        tried: tuple[Backend, ...] = ()
        last: UpstreamError = UpstreamUnavailable("no upstream is configured")
        while (choice := self.balancer.choose(key, tried)) is not None:
            backend = choice.backend
            tried += (backend,)
            if route is not None:
                self._count(choice)
            backend.inflight += 1
            try:
                request = self.client.build_request(method, backend.url + path, content=content,
                                                    headers=headers)
                response = await self.client.send(request, stream=True)
            except httpx.HTTPError as exc:
                backend.inflight -= 1
                last = translate(exc, backend.url)
                self.metrics.upstream_errors.labels(backend.url, type(last).__name__).inc()
                if isinstance(exc, _CONNECT_ERRORS):
                    self.balancer.mark_down(backend, type(exc).__name__)
                    continue
                raise last from None
            except BaseException:
                backend.inflight -= 1
                raise
            self.balancer.mark_up(backend)
            stream = UpstreamStream(backend, response)
            if response.status_code >= 400:
                await self._raise_status(stream)
            return stream
        raise last

    def _count(self, choice: Choice) -> None:
        m = self.metrics
        m.routed.labels(choice.backend.url).inc()
        if choice.affinity:
            m.affinity_hits.labels(choice.backend.url).inc()
        if choice.spilled_from is not None:
            m.spills.labels(choice.spilled_from.url).inc()

    async def _raise_status(self, stream: UpstreamStream) -> None:
        try:
            content = await stream.response.aread()
        except httpx.HTTPError:
            content = b""
        finally:
            await stream.aclose()
        status = stream.response.status_code
        if status >= 500:
            self.metrics.upstream_errors.labels(stream.backend.url, f"http_{status}").inc()
        raise UpstreamHTTPError(status, content)

    async def fetch(self, method: str, path: str, content: bytes | None = None,
                    headers: Mapping[str, str] | None = None) -> bytes:
        """A whole (non-streaming) answer; cancelling the caller cancels the upstream request."""
        return await self.read(await self.open(method, path, content, headers))

    async def read(self, stream: UpstreamStream) -> bytes:
        """The whole body of an opened answer, then the stream closed."""
        try:
            return await stream.response.aread()
        except httpx.HTTPError as exc:
            raise translate(exc, stream.backend.url) from None
        finally:
            await stream.aclose()

    async def probe(self, backend: Backend, wait: float = 2.0) -> bool:
        try:
            response = await self.client.get(backend.url + "/health", timeout=wait)
        except httpx.HTTPError as exc:
            self.balancer.mark_down(backend, type(exc).__name__)
            return False
        if response.status_code == 200:
            self.balancer.mark_up(backend)
            return True
        return False
