"""GET /ready's answer: every upstream replica's /health probed, kept a second. The route is
open without PROXY_METRICS_KEY, and each request probed every replica, so a flood of /ready
made the proxy send N probes a request (the upstreams and the proxy's pool kept busy). Now one
round of probes at a time, shared by every request meanwhile, its answer (503 too) served again
for READY_KEPT seconds: readiness probes come every few seconds, so they still see a fresh one.
Built by the app's lifespan."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from proxy.kept import Kept
from proxy.upstream import Upstream

READY_KEPT = 1.0  # seconds an answer of GET /ready is served again

Answer = tuple[int, bytes]  # status (200 ready, 503 unavailable), JSON body


async def probe_all(upstream: Upstream) -> Answer:
    """Each replica's /health probed (a failing one marked down), with the balancer's state."""
    backends = upstream.balancer.backends
    probes = await asyncio.gather(*(upstream.probe(b) for b in backends))
    state = upstream.balancer.state()
    for item, ok in zip(state, probes, strict=True):
        item["reachable"] = ok
    ready = any(probes)
    body: dict[str, Any] = {"status": "ready" if ready else "unavailable", "upstreams": state}
    return 200 if ready else 503, orjson.dumps(body)


class Readiness(Kept[Answer]):
    def __init__(self, upstream: Upstream, kept: float = READY_KEPT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(lambda: probe_all(upstream), kept, clock)
