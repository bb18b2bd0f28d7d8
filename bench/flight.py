"""Follower TTFT with and without the streaming single flight, on the mock upstream.

One run, in one process: the mock (loadtest/mock.py: first token after --ttft, then one each
--itl), the proxy (PROXY_CACHE=exact) on the same loop. Each round sends a new streaming
question, waits for the leader's first content, then sends --followers identical ones and
takes each one's time to its first content. With PROXY_CACHE_FLIGHT_MAX_BYTES=0 followers wait
for the stored answer (the single flight before flight.py); with the default they follow live.

    PYTHONPATH=$PWD .venv/bin/python -m bench.flight --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

import httpx
import uvicorn

from deploy.net import free_port
from loadtest import mock
from proxy.app import create_app
from proxy.settings import Settings


async def first_content(client: httpx.AsyncClient, body: dict[str, object],
                        started: asyncio.Event | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    ttft, cache = -1.0, ""
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        cache = r.headers.get("x-cache-tier", r.headers.get("x-cache", ""))
        async for line in r.aiter_lines():
            if ttft < 0 and '"content"' in line and '"content":""' not in line:
                ttft = time.perf_counter() - t0
                if started is not None:
                    started.set()
    return ttft, cache


async def measure(upstream: str, max_bytes: int, a: argparse.Namespace, tag: str) -> list[float]:
    os.environ["PROXY_CACHE_FLIGHT_MAX_BYTES"] = str(max_bytes)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(Settings(upstreams=(upstream,), cache="exact", tokenizer=a.tokenizer)),
        host="127.0.0.1", port=port,
        log_config=None, access_log=False))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.01)
    ttfts: list[float] = []
    tiers: set[str] = set()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for i in range(a.rounds):
                body = {"model": mock.MODEL, "stream": True, "max_tokens": a.tokens,
                        "messages": [{"role": "user", "content": f"{tag} question {i}"}]}
                started = asyncio.Event()
                leader = asyncio.create_task(first_content(client, body, started))
                waiting = asyncio.create_task(started.wait())
                await asyncio.wait([leader, waiting], return_when=asyncio.FIRST_COMPLETED)
                if not started.is_set():
                    waiting.cancel()
                    raise SystemExit(f"the leader got no content: {await leader}")
                got = await asyncio.gather(*(first_content(client, body)
                                             for _ in range(a.followers)))
                await leader
                ttfts += [t for t, _ in got]
                tiers |= {c for _, c in got}
    finally:
        server.should_exit = True
        await task
    print(f"  flight_max_bytes={max_bytes}: follower X-Cache-Tier {sorted(tiers)}")
    return ttfts


def summary(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=20)
    return f"median {statistics.median(xs) * 1000:.1f} ms (p5 {q[0] * 1000:.1f}, " \
           f"p95 {q[-1] * 1000:.1f}, n={len(xs)})"


async def run(a: argparse.Namespace) -> None:
    srv = mock.MockServer(ttft=a.ttft, itl=a.itl, output_tokens=a.tokens)
    up = await mock.start(srv)
    port = up.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    try:
        live = await measure(url, 1 << 20, a, "live")
        waited = await measure(url, 0, a, "wait")
    finally:
        up.close()
    print(f"mock: ttft {a.ttft * 1000:.0f} ms, itl {a.itl * 1000:.0f} ms, {a.tokens} tokens; "
          f"{a.rounds} rounds x {a.followers} followers; upstream requests "
          f"{srv.counters['mock_requests_total']:.0f} (= 2 x rounds: one per question)")
    print(f"follower TTFT, streaming single flight: {summary(live)}")
    print(f"follower TTFT, wait for the store:      {summary(waited)}")
    print(f"ratio (wait / live), medians: "
          f"{statistics.median(waited) / statistics.median(live):.1f}x")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.flight")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--followers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--ttft", type=float, default=0.05)
    p.add_argument("--itl", type=float, default=0.01)
    p.add_argument("--tokenizer", default=str(Path(__file__).resolve().parents[1] / ".models"
                                              / "tiny"))
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
