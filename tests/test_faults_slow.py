"""A slow or hung upstream (the loadtest mock, 60 s to its first token) and slow clients: timeouts
fire, the in-flight bound holds, the overflow gets 429 at once instead of piling up, memory stays
flat; a slow-loris body gets 408."""

from __future__ import annotations

import concurrent.futures
import gc
import socket
import time

import httpx
import orjson
import psutil

from proxy.settings import Settings
from tests.support.procs import ensure_tiny_model
from tests.support.reliability import (
    Mock,
    MockProcess,
    mock_process,
    mock_upstream,
    served_proxy,
)
from tests.support.waiting import wait_for

CHAT = "/v1/chat/completions"


def body(text: str, **kw: object) -> dict[str, object]:
    return {"model": "mock", "messages": [{"role": "user", "content": text}], "max_tokens": 4,
            **kw}


def settings(mock: Mock | MockProcess, **kw: object) -> Settings:
    return Settings(**{"upstreams": (mock.url,), "cache": "off",  # type: ignore[arg-type]
                       "tokenizer": str(ensure_tiny_model()), **kw})


def test_read_timeout_fires_for_json_and_streams():
    with mock_upstream(ttft=60.0) as mock, served_proxy(settings(mock, read_timeout=1.0)) as p:
        with httpx.Client(base_url=p.url, timeout=30) as c:
            r = c.post(CHAT, json=body("json"))
            assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
            s = c.post(CHAT, json=body("stream", stream=True))
            assert s.status_code == 200  # headers came; then nothing within the read timeout
            events = [e for e in s.text.split("\n\n") if e]
            last = orjson.loads(events[-1].removeprefix("data: "))
            assert last["error"]["code"] == "upstream_timeout" and "[DONE]" not in s.text
        wait_for(p.idle, "slots released")
        wait_for(lambda: mock.connections() == 0, "upstream connections closed")


def test_in_flight_bound_holds_and_the_overflow_gets_429_at_once():
    limit, waiting = 4, 4
    with mock_upstream(ttft=60.0) as mock, served_proxy(settings(
            mock, max_inflight=limit, max_waiting=waiting, queue_timeout=0.5,
            read_timeout=4.0)) as p:
        peak = {"upstream": 0, "inflight": 0.0}

        def one(i: int) -> tuple[int, float, str | None]:
            started = time.monotonic()
            r = httpx.post(p.url + CHAT, json=body(f"q{i}", stream=i % 2 == 0), timeout=30)
            return r.status_code, time.monotonic() - started, r.headers.get("retry-after")

        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            futures = [pool.submit(one, i) for i in range(40)]
            while not all(f.done() for f in futures):
                peak["upstream"] = max(peak["upstream"], mock.connections())
                peak["inflight"] = max(peak["inflight"], p.metric("proxy_inflight_requests"))
                time.sleep(0.05)
            results = [f.result() for f in futures]
        refused = [r for r in results if r[0] == 429]
        served = [r for r in results if r[0] != 429]
        assert peak["upstream"] <= limit and peak["inflight"] <= limit, peak
        assert len(served) == limit, results  # each timed out upstream: 504, or 200 + error
        assert all(code in (200, 504) for code, _, _ in served), results
        assert len(refused) == 40 - limit
        assert all(ra == "1" for _, _, ra in refused)
        assert all(t < 3.0 for _, t, _ in refused), refused  # refused early, not after 4 s
        assert p.metric("proxy_admission_rejected_total") == 40 - limit
        wait_for(p.idle, "slots released")


def test_memory_stays_flat_under_a_hung_upstream():
    """Python objects are the exact measure of a leak (tasks, buffers, entries kept per request);
    RSS only catches a large native one: malloc arenas of 50 client threads make it noisy."""
    with mock_process(ttft=60.0) as mock, served_proxy(settings(
            mock, max_inflight=32, max_waiting=32, queue_timeout=0.2, read_timeout=0.5)) as p, \
            httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64)) as client:
        proc = psutil.Process()

        def round_(n: int) -> list[int]:
            with concurrent.futures.ThreadPoolExecutor(50) as pool:
                return list(pool.map(lambda i: client.post(
                    p.url + CHAT, json=body(f"m{i}", stream=i % 2 == 0)).status_code, range(n)))

        def settled() -> tuple[int, int]:
            wait_for(p.idle, "slots released")
            gc.collect()
            return len(gc.get_objects()), proc.memory_info().rss

        for _ in range(2):  # warm up: pools, caches, first-use allocations
            round_(60)
        objects, rss = settled()
        codes: list[int] = []
        for _ in range(6):
            codes += round_(60)
        objects_after, rss_after = settled()
        assert set(codes) <= {200, 429, 504}, set(codes)
        assert objects_after - objects < 300, f"{objects_after - objects} objects kept by 360"
        growth = rss_after - rss
        assert growth < 32 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 360 requests"
        wait_for(lambda: mock.connections() == 0, "upstream connections closed")


def test_slow_loris_body_gets_408():
    with mock_upstream() as mock, served_proxy(settings(mock, body_timeout=1.0)) as p:
        host, port = p.url.removeprefix("http://").split(":")
        payload = orjson.dumps(body("slow"))
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: %d\r\n\r\n" % (CHAT.encode(), len(payload)))
            started = time.monotonic()
            answer = b""
            for byte in payload:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    break
                s.settimeout(0.25)
                try:
                    answer += s.recv(65536)
                except TimeoutError:
                    continue
                if answer:
                    break
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert time.monotonic() - started < 10
        assert mock.server.counters["mock_requests_total"] == 0
        with httpx.Client(base_url=p.url, timeout=30) as c:  # and normal clients go on
            assert c.post(CHAT, json=body("fine")).status_code == 200
