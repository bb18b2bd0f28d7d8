"""Redis killed (SIGKILL) and restarted under the proxy's cache: requests keep succeeding (the
cache is bypassed, and that is counted), the proxy reconnects by itself, entries written before
the kill are served again afterwards (Redis with an fsync'd append-only file, as deployed), and
no served answer is ever another question's or a torn one, including entries being written
at the moment of the kill. Redis hung (SIGSTOP): a request waits one socket timeout, not two."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import Redis, free_port
from tests.support.proxy_app import proxy_client
from tests.support.waiting import wait_for, wait_for_async

pytestmark = pytest.mark.redis
CHAT = "/v1/chat/completions"


class Persistent:
    """redis-server with appendonly + appendfsync always in its own directory."""

    def __init__(self, data: Path) -> None:
        self.port, self.data = free_port(), data
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed")  # as tests/support/procs.py
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._pong, "redis-server answers PING", 10)

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no shutdown save, like a crash
            self.proc.wait()


@pytest.fixture
def redis_aof(tmp_path: Path) -> Iterator[Persistent]:
    r = Persistent(tmp_path)
    r.start()
    yield r
    r.kill()


def expected(question: str) -> str:
    h = hashlib.sha256(question.encode()).hexdigest()
    return "".join(f" {h[i:i + 4]}" for i in range(0, 16, 4))


class KeyedFake(FakeVllm):
    """Each question gets its own answer, so a wrong or torn entry is visible."""

    def words(self, data: dict[str, Any]) -> list[str]:
        q = str(data["messages"][-1]["content"])
        return [f" {w}" for w in expected(q).split()]


def ask(q: str, **kw: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": q}], "max_tokens": 4, **kw}


def text_of(r: Any) -> str:
    if r.headers["content-type"].startswith("text/event-stream"):
        return "".join((ch.get("delta") or {}).get("content") or ""
                       for ev in r.text.split("\n\n") if ev.startswith("data: {")
                       for ch in orjson.loads(ev[6:]).get("choices") or ())
    return str(r.json()["choices"][0]["message"]["content"])


def counter(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name))


@pytest.mark.parametrize("mode", ["exact", "semantic"])
async def test_redis_killed_and_restarted(redis_aof: Persistent, mode: str) -> None:
    fake = KeyedFake()
    s = Settings(upstreams=("http://vllm:8000",), cache=mode, redis_url=redis_aof.url)
    async with proxy_client(s, transport=fake.transport) as c:
        before = [f"question number {i} about topic {i * 7}" for i in range(20)]
        # stored as asked: a stream is served only from an answer stored with its chunks
        for i, q in enumerate(before):
            r = await c.post(CHAT, json=ask(q, stream=i % 2 == 1))
            assert r.status_code == 200 and r.headers["x-cache"] == "MISS"
        for i, q in enumerate(before[:5]):
            r = await c.post(CHAT, json=ask(q, stream=i % 2 == 1))
            assert r.headers["x-cache"] == "HIT" and text_of(r) == expected(q)

        # kill Redis while a burst of misses is being answered and stored
        during = [f"written during the crash {i}" for i in range(40)]
        burst = [asyncio.ensure_future(c.post(CHAT, json=ask(q, stream=i % 2 == 0)))
                 for i, q in enumerate(during)]
        # the burst is under way (its first request has reached vLLM, its answer is on its
        # way to the store, the others behind it): then the kill
        await fake.arrived(len(before) + 1)
        redis_aof.kill()
        for q, r in zip(during, await asyncio.gather(*burst), strict=True):
            assert r.status_code == 200 and text_of(r) == expected(q)

        # Redis down: every request is answered, the cache is bypassed and that is counted
        for i, q in enumerate(before[:10]):
            r = await c.post(CHAT, json=ask(q, stream=i % 2 == 0))
            assert r.status_code == 200 and r.headers["x-cache"] == "BYPASS"
            assert text_of(r) == expected(q)
        metrics = (await c.get("/metrics")).text
        assert counter(metrics, "proxy_cache_backend_errors_total") >= 1

        # restarted on the same port from its append-only file: the proxy reconnects by itself
        redis_aof.start()
        status = "BYPASS"

        async def reconnected() -> bool:
            nonlocal status
            status = (await c.post(CHAT, json=ask(before[0]))).headers["x-cache"]
            return status != "BYPASS"

        await wait_for_async(reconnected, "the proxy is back on Redis", 15, every=0.1)
        assert status == "HIT", "entries written before the kill are served again"
        for i, q in enumerate(before):
            r = await c.post(CHAT, json=ask(q, stream=i % 2 == 1))
            assert r.status_code == 200 and r.headers["x-cache"] == "HIT", q
            assert text_of(r) == expected(q)
        for i, q in enumerate(during):  # stored whole, or not at all: never torn or swapped
            r = await c.post(CHAT, json=ask(q, stream=i % 3 == 0))
            assert r.status_code == 200 and r.headers["x-cache"] in ("HIT", "MISS")
            assert text_of(r) == expected(q)
        new = await c.post(CHAT, json=ask("a new question after the restart"))
        assert new.headers["x-cache"] == "MISS"
        again = await c.post(CHAT, json=ask("a new question after the restart"))
        assert again.headers["x-cache"] == "HIT"


@pytest.fixture
def freeze(redis: Redis) -> Iterator[Callable[[], None]]:
    """Stops the test's redis-server (SIGSTOP) when called: it still accepts connections but
    never answers, as a hung Redis does; let go (SIGCONT) at teardown."""
    assert redis.proc is not None
    pid = redis.proc.pid
    yield lambda: os.kill(pid, signal.SIGSTOP)
    os.kill(pid, signal.SIGCONT)


async def test_a_hung_redis_holds_a_burst_for_one_socket_timeout(
        redis: Redis, freeze: Callable[[], None]) -> None:
    # found by a review: the store's client retried a command after its socket timeout, so a
    # hung Redis held every request of a burst for two timeouts (2.0 s) before it went
    # upstream, not the one timeout (1 s) the store's bypass is built on
    fake = KeyedFake()
    s = Settings(upstreams=("http://vllm:8000",), cache="exact", redis_url=redis.url)
    async with proxy_client(s, transport=fake.transport) as c:
        warm = await c.post(CHAT, json=ask("before the hang"))
        assert warm.headers["x-cache"] == "MISS"  # the store is up, and in use
        freeze()
        q = "asked by everyone while Redis hangs"
        started = time.perf_counter()
        burst = await asyncio.gather(*(c.post(CHAT, json=ask(q, stream=i % 2 == 0))
                                       for i in range(10)))
        took = time.perf_counter() - started
        for r in burst:
            assert r.status_code == 200 and r.headers["x-cache"] == "BYPASS"
            assert text_of(r) == expected(q)
        assert 0.9 < took < 1.6, took  # one socket timeout (1 s), not two
