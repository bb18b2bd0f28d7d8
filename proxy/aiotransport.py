"""An httpx transport on aiohttp's connection pool.

httpx's own pool (httpcore on anyio) was half of the proxy's CPU under load (bench/profile.py):
every request scans every pooled connection with a socket-readability syscall, and every read
and write opens anyio cancel scopes. The proxy keeps the httpx API (tests plug in
httpx.MockTransport) and moves the bytes with aiohttp, whose pool and parser cost a fraction.
aiohttp errors become the httpx errors that upstream.translate() already knows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx

RAW_BODY = "proxy.raw_body"  # response extension: the body as aiohttp gives it
_HOP = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})


def _error(exc: BaseException, request: httpx.Request, connecting: bool) -> httpx.HTTPError:
    if isinstance(exc, aiohttp.ConnectionTimeoutError) or (
            connecting and isinstance(exc, aiohttp.ClientConnectorError)
            and isinstance(exc.os_error, TimeoutError)):
        return httpx.ConnectTimeout(str(exc) or "connect timed out", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc), request=request)
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(str(exc) or "read timed out", request=request)
    return httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request)


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _error(exc, self._request, False) from exc

    async def aclose(self) -> None:
        # A body not read to the end: close the connection (vLLM then aborts the request).
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, max_connections: int, keepalive_expiry: float, connect_timeout: float,
                 read_timeout: float, pool_timeout: float) -> None:
        self._limit = max_connections
        self._keepalive = keepalive_expiry
        self._default = (connect_timeout, read_timeout)
        self._pool_timeout = pool_timeout
        self._timeouts: dict[tuple[Any, Any], aiohttp.ClientTimeout] = {}
        self._session: aiohttp.ClientSession | None = None

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        given = request.extensions.get("timeout") or {}
        key = (given.get("connect", self._default[0]), given.get("read", self._default[1]))
        timeout = self._timeouts.get(key)
        if timeout is None:  # a few distinct values ever (the default, /ready's probe)
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=self._pool_timeout + (key[0] or 0.0),
                sock_connect=key[0], sock_read=key[1])
        return timeout

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=self._keepalive,
                                             ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._get_session()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                   if k.lower() not in _HOP]
        try:
            response = await session.request(
                request.method, str(request.url), data=request.content or None, headers=headers,
                allow_redirects=False, timeout=self._timeout(request))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _error(exc, request, True) from exc
        body = _Body(response, request)
        return httpx.Response(response.status, headers=list(response.raw_headers),
                              stream=body, request=request,
                              extensions={"http_version": b"HTTP/1.1", RAW_BODY: body})

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
