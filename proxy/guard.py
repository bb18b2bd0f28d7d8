"""The connection layer's guard, around uvicorn's httptools protocol: a cap on open
connections (under the file limit), an optional cap per client IP, and a deadline for a
request's headers (httptools has none: a client sending one byte every few seconds would hold
its connection, and its file descriptor, forever). Refused and slow connections are counted on
/metrics and logged at most once per LOG_EVERY seconds."""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("proxy.guard")
LOG_EVERY = 10.0
HEADROOM = 1024  # descriptors kept for upstream connections, files, the listener
# The proxy serves no WebSocket. With uvicorn's default (ws "auto", and `websockets` installed)
# an upgrade request handed the connection to another protocol, so the guard's count never
# came back down: 20 upgrades locked out every client at PROXY_MAX_CONNECTIONS=20 (found by a
# review). With "none" an upgrade is answered as plain HTTP on the guarded connection.
UVICORN_OPTIONS = {"ws": "none"}
# A request's line and headers, at most (httptools has no bound, uvicorn's h11 has 16 KiB):
# one client sent 90 MB of URL within the header deadline, all of it kept, and its parsing
# stalled every other client for seconds (found by a review). vLLM needs far less.
MAX_HEAD_BYTES = 1 << 20
_HEAD_TOO_LARGE = (b'{"error": {"message": "the request line and headers exceed the limit of '
                   + str(MAX_HEAD_BYTES).encode() + b' bytes", "type": '
                   b'"invalid_request_error", "param": null, "code": "header_too_large"}}')
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                  b"content-type: application/json\r\nconnection: close\r\n"
                  b"content-length: " + str(len(_HEAD_TOO_LARGE)).encode() + b"\r\n\r\n"
                  + _HEAD_TOO_LARGE)


def raise_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def file_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(configured: int | None, file_limit: int) -> int:
    """PROXY_MAX_CONNECTIONS, or the file limit less HEADROOM (never past it)."""
    room = max(1, file_limit - HEADROOM)
    return room if configured is None else min(configured, room)


@dataclass(slots=True, eq=False)  # hashable: a registry keys its collectors
class Guard(Collector):
    max_connections: int
    header_timeout: float
    max_per_ip: int | None = None
    open: int = 0
    by_ip: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(
        default_factory=lambda: {"limit": 0, "per_ip": 0, "head_too_large": 0})
    slow: int = 0
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict)

    def admit(self, ip: str) -> str | None:
        """Count a new connection in, or say why it is refused."""
        if self.open >= self.max_connections:
            return self._refuse("limit", ip)
        if self.max_per_ip is not None and self.by_ip.get(ip, 0) >= self.max_per_ip:
            return self._refuse("per_ip", ip)
        self.open += 1
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        return None

    def release(self, ip: str) -> None:
        self.open -= 1
        left = self.by_ip[ip] - 1
        if left:
            self.by_ip[ip] = left
        else:
            del self.by_ip[ip]

    def _refuse(self, why: str, ip: str) -> str:
        self.refused[why] += 1
        self._note(f"refused_{why}", ip)
        return why

    def head_too_large(self, ip: str) -> None:
        self._refuse("head_too_large", ip)

    def timed_out(self, ip: str) -> None:
        self.slow += 1
        self._note("header_timeout", ip)

    def _note(self, event: str, ip: str) -> None:
        now = time.monotonic()
        last, since = self._logged.get(event, (-LOG_EVERY, 0))
        if now - last < LOG_EVERY:
            self._logged[event] = (last, since + 1)
            return
        self._logged[event] = (now, 0)
        log.warning(event, extra={"fields": {
            "msg": f"connection {event.replace('_', ' ')}", "event": event, "client": ip,
            "more_since_last_log": since, "open": self.open, "cap": self.max_connections}})

    def collect(self) -> Iterator[Any]:
        refused = CounterMetricFamily("proxy_connections_refused",
                                      "Connections closed at once: over the cap",
                                      labels=["reason"])
        for why, n in self.refused.items():
            refused.add_metric([why], n)
        yield refused
        yield CounterMetricFamily("proxy_connections_slow",
                                  "Connections closed because their headers did not arrive "
                                  "within PROXY_HEADER_TIMEOUT", value=self.slow)
        yield GaugeMetricFamily("proxy_connections_open", "Open client connections",
                                value=self.open)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (`http="proxy.guard:GuardedProtocol"`) with the checks of
    the Guard that the app's lifespan puts in its state (each worker process builds its own)."""

    _guard: Guard | None = None
    _ip = ""
    _refused = False
    _deadline: asyncio.TimerHandle | None = None
    _head = 0  # bytes received since the current request began, until its headers are in
    _in_head = True

    @property
    def guard(self) -> Guard:
        assert self._guard is not None
        return self._guard

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._guard = self.app_state.get("guard")
        if self._guard is None:  # the app has not started (or runs without a guard)
            super().connection_made(transport)
            return
        peer = transport.get_extra_info("peername")
        self._ip = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if self.guard.admit(self._ip) is not None:
            self._refused = True
            transport.abort()
            return
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        if self._guard is None:
            super().connection_lost(exc)
            return
        self._disarm()
        self.guard.release(self._ip)
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.guard.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        self.guard.timed_out(self._ip)
        # close, not abort: the end of the last answer may still be buffered for a slow
        # reader. (A client that never reads keeps a closing connection open; a review
        # reported it, no test here reproduced it, and abort would cost slow readers their tail.)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._guard is None or not self._in_head or self.transport.is_closing():
            return
        self._head += len(data)
        if self._head > MAX_HEAD_BYTES:
            self.guard.head_too_large(self._ip)
            self._disarm()
            if self.cycle is None or self.cycle.response_complete:  # not inside an answer
                self.transport.write(HEAD_TOO_LARGE)
            self.transport.close()

    def on_message_begin(self) -> None:
        self._in_head, self._head = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._guard is not None:
            self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # the next request's headers are in already
        super().on_response_complete()
        if self._guard is not None and not self.transport.is_closing() and not pipelined:
            self._arm()  # the next request's headers (and the idle time before) have a deadline

