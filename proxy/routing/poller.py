"""vLLM's own load, polled from each replica's /metrics: running and waiting requests and KV-cache
use (vLLM ≥ 0.10 names, with the older gpu_cache_usage_perc). With several proxies in front of
one pool, these include the other proxies' traffic, which in-flight counts cannot.

A scrape is read to PROXY_MAX_ANSWER_BYTES at most, as any upstream answer read whole
(proxy/upstream.py): past it the poll fails (the connection dropped, the rest never read) and
proxy_answers_too_large_total counts it. Before, a broken or hostile replica's endless
/metrics body was read into memory for as long as it sent."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from proxy.balancer import Balancer
from proxy.errors import UpstreamError
from proxy.metrics import Metrics
from proxy.routing.backend import Backend
from proxy.settings import ANSWER_BYTES
from proxy.transport import Transport
from proxy.upstream import AnswerTooLarge, read_at_most

log = logging.getLogger("proxy.routing")
_RUNNING = "vllm:num_requests_running"
_WAITING = "vllm:num_requests_waiting"
_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True, slots=True)
class Load:
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0


def parse_load(text: str) -> Load:
    """Sums over engines (data-parallel ranks export one series each); KV use is the fullest."""
    running = waiting = kv = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{")
        if not rest:
            name, _, rest = line.partition(" ")
        if name not in (_RUNNING, _WAITING) and name not in _KV:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        if not math.isfinite(value) or value < 0:
            continue  # NaN or inf from a broken exporter would poison every score (500s)
        if name == _RUNNING:
            running += value
        elif name == _WAITING:
            waiting += value
        else:
            kv = max(kv, value)
    return Load(running, waiting, kv)


class LoadPoller:
    def __init__(self, transport: Transport, balancer: Balancer, metrics: Metrics,
                 interval: float, clock: Callable[[], float] = time.monotonic,
                 max_answer_bytes: int = ANSWER_BYTES) -> None:
        self.transport = transport
        self.balancer = balancer
        self.metrics = metrics
        self.interval = interval
        self.clock = clock
        self.max_answer_bytes = max_answer_bytes

    def _failed(self, backend: Backend, why: str) -> None:
        self.metrics.routing_poll_errors.labels(backend.url).inc()
        log.debug("load poll of %s failed: %s", backend.url, why)

    async def poll(self, backend: Backend) -> None:
        try:
            reply = await self.transport.request("GET", backend.url + "/metrics", None, {},
                                                 wait=self.interval)
            try:
                body = await read_at_most(reply, self.max_answer_bytes, backend.url)
            finally:
                reply.close()
        except AnswerTooLarge:
            self.metrics.answers_too_large.labels(backend.url).inc()
            self._failed(backend, "AnswerTooLarge")
            return
        except UpstreamError as exc:
            self._failed(backend, type(exc).__name__)
            return
        if reply.status != 200:
            self._failed(backend, f"/metrics answered {reply.status}")
            return
        load = parse_load(body.decode("utf-8", "replace"))
        backend.running, backend.waiting, backend.kv_usage = (
            load.running, load.waiting, load.kv_usage)
        backend.polled_until = self.clock() + 3 * self.interval

    async def run(self) -> None:
        while True:
            await asyncio.gather(*(self.poll(b) for b in self.balancer.backends))
            await asyncio.sleep(self.interval)
