"""A lean load generator: raw asyncio + httptools, one keep-alive connection per worker.

aiohttp/httpx cost more CPU per request than the thing measured here (~1 ms); this client
costs ~40-60 us per request, so at the rates used it is not the bottleneck. Its self-check
(CPU use of its own process, event-loop lag) is reported with every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools
import numpy as np


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[tuple[int, float | None, bytes]] | None = None
        self.first: float | None = None
        self.body: list[bytes] = []
        self.keep = True
        self.closed = False
        self.cache = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        with contextlib.suppress(httptools.HttpParserUpgrade):
            self.parser.feed_data(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower().startswith(b"x-cache") and not name.lower().endswith(b"similarity"):
            self.cache += value.decode().lower() + "/"

    def on_body(self, body: bytes) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep = self.parser.should_keep_alive()
        if self.done is not None and not self.done.done():
            self.done.set_result((self.parser.get_status_code(), self.first,
                                  b"".join(self.body)))


@dataclass
class Sample:
    ok: bool
    status: int
    ttft: float  # seconds to the first body byte
    e2el: float  # seconds to the end of the response
    headers_cache: str = ""


@dataclass
class RunResult:
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0
    loop_lag_p99_ms: float = 0.0

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    def rps(self) -> float:
        return len(self.ok) / self.wall if self.wall else 0.0

    def pct(self, what: str, p: float) -> float:
        xs = [getattr(s, what) for s in self.ok]
        return float(np.percentile(xs, p)) * 1000 if xs else float("nan")

    def summary(self) -> dict[str, Any]:
        return {"n": len(self.samples), "errors": len(self.samples) - len(self.ok),
                "rps": round(self.rps(), 1),
                "ttft_p50_ms": self.pct("ttft", 50), "ttft_p99_ms": self.pct("ttft", 99),
                "e2el_p50_ms": self.pct("e2el", 50), "e2el_p99_ms": self.pct("e2el", 99),
                "client_cpu": round(self.cpu / self.wall, 3) if self.wall else 0.0,
                "client_loop_lag_p99_ms": round(self.loop_lag_p99_ms, 2)}


def _request(host: str, path: str, body: bytes, extra: dict[str, str] | None) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n")
    for k, v in (extra or {}).items():
        head += f"{k}: {v}\r\n"
    return head.encode() + b"\r\n" + body


async def run(url: str, bodies: list[bytes], concurrency: int, *, n: int | None = None,
              duration: float | None = None, headers: dict[str, str] | None = None,
              warmup: int = 0) -> RunResult:
    """Closed loop: `concurrency` workers each send the next body as soon as the previous
    answer ended, until n requests were sent or `duration` seconds passed."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    raws = [_request(f"{host}:{port}", path, b, headers) for b in bodies]
    loop = asyncio.get_running_loop()
    counter = iter(range(1 << 62))
    res = RunResult()
    stop_at = [float("inf")]
    lags: list[float] = []

    async def connect() -> _Conn:
        _, conn = await loop.create_connection(_Conn, host, port)
        return conn

    async def one(conn: _Conn, raw: bytes) -> tuple[_Conn, Sample]:
        if conn.closed or not conn.keep:
            if conn.transport is not None:
                conn.transport.close()
            conn = await connect()
        conn.first, conn.body, conn.cache = None, [], ""
        conn.done = loop.create_future()
        t0 = time.perf_counter()
        assert conn.transport is not None
        conn.transport.write(raw)
        try:
            status, first, _ = await conn.done
        except ConnectionError:
            return await connect(), Sample(False, 0, 0.0, time.perf_counter() - t0)
        t1 = time.perf_counter()
        return conn, Sample(status == 200, status, (first or t1) - t0, t1 - t0,
                            conn.cache.rstrip("/"))

    async def worker(record: bool) -> None:
        conn = await connect()
        try:
            while True:
                i = next(counter)
                if (n is not None and i >= n) or time.perf_counter() >= stop_at[0]:
                    return
                conn, sample = await one(conn, raws[i % len(raws)])
                if record:
                    res.samples.append(sample)
        finally:
            if conn.transport is not None:
                conn.transport.close()

    async def lag() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t - 0.005)

    if warmup:
        wn = [warmup]
        counter_w = iter(range(warmup))

        async def warm() -> None:
            conn = await connect()
            for _ in counter_w:
                conn, _s = await one(conn, raws[0])
            assert conn.transport is not None
            conn.transport.close()
        await asyncio.gather(*(warm() for _ in range(min(concurrency, wn[0]))))
    lag_task = asyncio.create_task(lag())
    c0, t0 = time.process_time(), time.perf_counter()
    if duration is not None:
        stop_at[0] = t0 + duration
    await asyncio.gather(*(worker(True) for _ in range(concurrency)))
    res.wall, res.cpu = time.perf_counter() - t0, time.process_time() - c0
    lag_task.cancel()
    res.loop_lag_p99_ms = float(np.percentile(lags, 99)) * 1000 if lags else 0.0
    return res


async def run_rate(url: str, bodies: list[bytes], rate: float, n: int,
                   headers: dict[str, str] | None = None) -> RunResult:
    """Open loop: request i leaves at i / rate seconds (fixed spacing), whatever the answers
    do; idle keep-alive connections are reused, new ones opened when none is idle."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    raws = [_request(f"{host}:{port}", path, b, headers) for b in bodies]
    loop = asyncio.get_running_loop()
    idle: list[_Conn] = []
    res = RunResult()

    async def one(i: int) -> None:
        conn = idle.pop() if idle else None
        if conn is None or conn.closed or not conn.keep:
            _, conn = await loop.create_connection(_Conn, host, port)
        conn.first, conn.body, conn.cache = None, [], ""
        conn.done = loop.create_future()
        t0 = time.perf_counter()
        assert conn.transport is not None
        conn.transport.write(raws[i % len(raws)])
        try:
            status, first, _ = await conn.done
        except ConnectionError:
            res.samples.append(Sample(False, 0, 0.0, time.perf_counter() - t0))
            return
        t1 = time.perf_counter()
        res.samples.append(Sample(status == 200, status, (first or t1) - t0, t1 - t0,
                                  conn.cache.rstrip("/")))
        idle.append(conn)

    c0, t0 = time.process_time(), time.perf_counter()
    tasks = []
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one(i)))
    await asyncio.gather(*tasks)
    res.wall, res.cpu = time.perf_counter() - t0, time.process_time() - c0
    for conn in idle:
        if conn.transport is not None:
            conn.transport.close()
    return res
