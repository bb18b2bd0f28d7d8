"""Helpers for the reliability tests: the proxy served for real (uvicorn in a thread whose loop
the test can inspect), and the loadtest mock upstream in another thread, made slow or hung."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import psutil
import uvicorn

from deploy.net import free_port, wait_http
from loadtest.mock import MockServer, start
from proxy.app import create_app
from proxy.guard import UVICORN_OPTIONS
from proxy.settings import Settings
from tests.support.procs import REPO

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread; call coroutines into it from the test."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def established(process: psutil.Process, port: int) -> int:
    """TCP connections into `port` that `process` holds open."""
    return sum(1 for c in process.net_connections("tcp")
               if c.laddr and c.laddr.port == port and c.status == "ESTABLISHED")


@dataclass
class Mock:
    url: str
    port: int
    server: MockServer

    def connections(self) -> int:
        """Open TCP connections into the mock (upstream requests the proxy holds open)."""
        return established(psutil.Process(), self.port)


@dataclass
class MockProcess:
    url: str
    port: int
    proc: subprocess.Popen[bytes]

    def connections(self) -> int:
        return established(psutil.Process(self.proc.pid), self.port)


@contextmanager
def mock_process(ttft: float = 0.0, itl: float = 0.0) -> Iterator[MockProcess]:
    """The mock in its own process: what it holds (hung handlers) stays out of the test's heap."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "mock", "--port", str(port),
         "--ttft-ms", str(ttft * 1000), "--itl-ms", str(itl * 1000)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/v1/models", 60, proc)
        yield MockProcess(url, port, proc)
    finally:
        proc.kill()
        proc.wait(10)


@contextmanager
def mock_upstream(ttft: float = 0.0, itl: float = 0.0,
                  output_tokens: int | None = None) -> Iterator[Mock]:
    lt = LoopThread("mock-upstream")
    port = free_port()
    mock = MockServer(ttft, itl, output_tokens)

    async def up() -> asyncio.Server:
        return await start(mock, "127.0.0.1", port)

    srv = lt.call(up())
    try:
        yield Mock(f"http://127.0.0.1:{port}", port, mock)
    finally:
        async def down() -> None:
            srv.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        lt.call(down())
        lt.stop()


@dataclass
class Served:
    url: str
    lt: LoopThread
    server: uvicorn.Server

    def tasks(self) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1

        return self.lt.call(count())

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not on /metrics")

    def idle(self) -> bool:
        return (self.metric("proxy_inflight_requests") == 0
                and self.metric("proxy_waiting_requests") == 0)


@contextmanager
def served_proxy(settings: Settings, **uv: Any) -> Iterator[Served]:
    port = free_port()
    fields = {f: getattr(settings, f) for f in settings.__dataclass_fields__}
    s = Settings(**{**fields, "port": port})
    config = uvicorn.Config(create_app(s), host="127.0.0.1", port=port, loop="none",
                            log_config=None, access_log=False, lifespan="on",
                            **{"http": "httptools", **UVICORN_OPTIONS, **uv})
    server = uvicorn.Server(config)
    lt = LoopThread("proxy")
    fut = asyncio.run_coroutine_threadsafe(server.serve(), lt.loop)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 120)
        yield Served(url, lt, server)
    finally:
        server.should_exit = True
        fut.result(30)
        lt.stop()
