"""The narrow seam under the upstream client: send one request, get a status and a body stream.

`Transport.request()` is all the proxy needs from an HTTP client, so a test fake is a class
with one method (tests/support/fake_upstream.py) and the production client is aiohttp, used
directly: its pool and parser cost a fraction of httpx/httpcore's CPU under load (bench/
upstream_ab.py measures the choice). Foreign errors become the proxy's own HERE only:
a refused connection or an unknown host → UpstreamUnavailable (the balancer fails over), a
connect timeout (the pool's wait, then the connect) → UpstreamConnectTimeout (failed over too,
but the replica may be there), other timeouts → UpstreamTimeout, anything else on the wire →
BadGateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from proxy.errors import (
    BadGateway,
    UpstreamConnectTimeout,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)


@dataclass(frozen=True, slots=True)
class Limits:
    connect: float  # seconds to open a TCP connection
    read: float  # seconds of silence while waiting for bytes
    pool: float  # seconds to wait for a free pooled connection
    connections: int  # open connections across all upstreams
    keepalive: float  # idle seconds before a pooled connection is closed


class Reply(Protocol):
    status: int

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None:
        """Done with the body: keep the connection if it was read to the end, else drop it
        (vLLM then aborts the request)."""


class Transport(Protocol):
    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> Reply:
        """wait (seconds) overrides the connect and read timeouts for this call (probes)."""

    async def aclose(self) -> None: ...


def translate(exc: BaseException, url: str, connecting: bool) -> UpstreamError:
    url = "/".join(url.split("/", 3)[:3])  # the upstream's origin, as configured
    if isinstance(exc, aiohttp.ConnectionTimeoutError) or (
            connecting and isinstance(exc, aiohttp.ClientConnectorError)
            and isinstance(exc.os_error, TimeoutError)):
        return UpstreamConnectTimeout(f"the upstream {url} is unreachable: connect timed out")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnavailable(f"the upstream {url} is unreachable: {type(exc).__name__}")
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"the upstream {url} timed out: {type(exc).__name__}")
    return BadGateway(f"the upstream {url} failed: {type(exc).__name__}")


class _AiohttpReply:
    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self._url = url
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise translate(exc, self._url, False) from None

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise translate(exc, self._url, False) from None

    def close(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport:
    """One pooled aiohttp session, made on first use inside the running loop."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._session: aiohttp.ClientSession | None = None
        self._default = self._timeout(limits.connect, limits.read)

    def _timeout(self, connect: float, read: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, connect=self.limits.pool + connect,
                                     sock_connect=connect, sock_read=read)

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.limits.connections,
                                             keepalive_timeout=self.limits.keepalive,
                                             ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False,
                skip_auto_headers=("User-Agent", "Content-Type"),
                headers={"accept-encoding": "identity"},
                cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> Reply:
        try:
            response = await self._get_session().request(
                method, url, data=content, headers=dict(headers), allow_redirects=False,
                timeout=self._default if wait is None else self._timeout(wait, wait))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise translate(exc, url, True) from None
        return _AiohttpReply(response, url)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
