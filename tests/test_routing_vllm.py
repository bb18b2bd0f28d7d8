"""Two vLLM-CPU replicas (prefix caching on, 128-token blocks, KV-cache events published over
ZMQ) behind the proxy: routing by prefix, or by vLLM's own KV events, gives vLLM a higher
prefix-cache hit rate than least-loaded on a shared-prefix workload.

    make test-slow   (or: pytest -m slow tests/test_routing_vllm.py; ~3-5 min, two vLLMs)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.routing_cpu import measure, tenant_chats
from tests.support.procs import Vllm, free_port, proxy_process, start_vllm

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def kv_events(port: int) -> str:
    return ('kv-events-config={"enable_kv_cache_events":true,"publisher":"zmq",'
            f'"endpoint":"tcp://*:{port}"}}')  # "*": vLLM binds


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[Vllm]]:
    ports = [free_port(), free_port()]
    with ThreadPoolExecutor(2) as pool:
        started = [pool.submit(start_vllm, extra=[kv_events(p)], timeout=600) for p in ports]
        servers = [f.result() for f in started]
    for server, port in zip(servers, ports, strict=True):
        server.kv_port = port  # type: ignore[attr-defined]
    try:
        yield servers
    finally:
        for s in servers:
            s.kill()


def hit_rate(replicas: list[Vllm], policy: str, seed: int) -> dict:
    """One request at a time: on this 2-core box concurrent requests make least-loaded follow
    vLLM-CPU's compile stalls (one replica stalls, the other takes nearly everything), which is
    no cache-blind spread at all; one at a time, least-loaded takes the replicas in turn."""
    urls = [r.url for r in replicas]
    chats = tenant_chats(tenants=6, per_tenant=5, words=640, seed=seed)  # fresh tenants per run
    events = ",".join(f"tcp://127.0.0.1:{r.kv_port}" for r in replicas)
    with proxy_process(upstream=",".join(urls), routing=policy, routing_block_size="128",
                       routing_kv_events=events, upstream_header="on", cache="off",
                       log_level="warning", tokenizer=str(replicas[0].model_dir)) as proxy:
        return asyncio.run(measure(proxy, urls, chats, concurrency=1))


def test_prefix_routing_raises_vllms_prefix_cache_hit_rate(replicas):
    spread = hit_rate(replicas, "least-loaded", seed=1)
    routed = hit_rate(replicas, "prefix", seed=2)
    assert all(p["requests"] > 0 for p in spread["replicas"].values())
    assert all(p["requests"] > 0 for p in routed["replicas"].values())  # both still used
    # 6 tenants x 5 questions: prefix recomputes each system prompt once, least-loaded about
    # once per replica it lands on
    assert routed["hit_rate"] > spread["hit_rate"] + 0.05, (spread, routed)


def test_kv_events_routing_raises_it_too(replicas):
    spread = hit_rate(replicas, "least-loaded", seed=3)
    routed = hit_rate(replicas, "kv-events", seed=4)
    assert all(p["requests"] > 0 for p in routed["replicas"].values())
    assert routed["hit_rate"] > spread["hit_rate"] + 0.05, (spread, routed)
