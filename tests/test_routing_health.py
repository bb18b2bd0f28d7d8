"""Several replicas' /health probed in the background: a replica that accepts connections and
never answers is marked down within a round, so no request waits on it for the read timeout."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from proxy.routing.backend import Backend
from proxy.routing.health import PROBE_WAIT, watch
from proxy.settings import Settings
from tests.support.procs import ensure_tiny_model
from tests.support.reliability import mock_upstream, served_proxy
from tests.support.waiting import wait_for

CHAT = "/v1/chat/completions"


async def test_every_replica_is_probed_each_round_within_the_interval() -> None:
    seen: list[tuple[str, float]] = []
    rounds = asyncio.Event()

    async def probe(backend: Backend, wait: float) -> bool:
        seen.append((backend.url, wait))
        if len(seen) >= 6:
            rounds.set()
        return True

    task = asyncio.create_task(watch([Backend("a"), Backend("b")], probe, 0.01))
    await asyncio.wait_for(rounds.wait(), 10)
    task.cancel()
    assert [url for url, _ in seen[:6]] == ["a", "b"] * 3
    assert all(wait == 0.01 for _, wait in seen)  # never longer than a round
    seen.clear()
    task = asyncio.create_task(watch([Backend("a")], probe, 30.0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    assert seen == [("a", PROBE_WAIT)]


@contextmanager
def accepts_and_never_answers() -> Iterator[str]:
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def run() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        server.close()


# (stream, health interval, back-off): the last a back-off shorter than a round (the probe's
# wait and the interval, 1 s): before the watch held a replica it found down, the hung one was
# up 0.9 s of every second and the first request then waited for the client's timeout
@pytest.mark.parametrize(("stream", "interval", "backoff"),
                         [(False, 0.2, 1.0), (True, 0.2, 1.0), (False, 0.5, 0.1)])
def test_a_hung_replica_is_marked_down_and_skipped(stream: bool, interval: float,
                                                   backoff: float) -> None:
    with accepts_and_never_answers() as hung, mock_upstream(ttft=0.0) as mock:
        # first in the list: least-loaded breaks its ties towards it (start-up's /v1/models
        # waits METADATA_WAIT on it, then marks it down for the back-off)
        settings = Settings(upstreams=(hung, mock.url), cache="off", health_interval=interval,
                            upstream_backoff=backoff, tokenizer=str(ensure_tiny_model()))
        with served_proxy(settings) as p, httpx.Client(base_url=p.url, timeout=10) as c:
            def hung_is_down() -> bool:
                return f'proxy_upstream_up{{upstream="{hung}"}} 0.0' in c.get("/metrics").text

            wait_for(hung_is_down, "the hung replica marked down")
            started = time.monotonic()
            while time.monotonic() - started < 3.0:  # several back-offs: without the probes it
                r = c.post(CHAT, json={  # would be chosen again, and this would time out
                    "model": "mock", "max_tokens": 4, "stream": stream,
                    "messages": [{"role": "user", "content": "q"}]})
                assert r.status_code == 200, r.text
                time.sleep(0.05)


async def test_a_probe_that_raises_does_not_end_the_watch() -> None:
    calls: list[str] = []
    again = asyncio.Event()

    async def probe(backend: Backend, wait: float) -> bool:
        calls.append(backend.url)
        if calls.count("a") >= 2:
            again.set()
        if backend.url == "a":
            raise RuntimeError("a bug in a probe")
        return True

    task = asyncio.create_task(watch([Backend("a"), Backend("b")], probe, 0.01))
    await asyncio.wait_for(again.wait(), 10)
    task.cancel()
    assert calls.count("b") >= 1
