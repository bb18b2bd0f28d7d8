"""How busy a replica is, in requests, and when affinity should give way to load.

load = max(this proxy's in-flight requests to it, the running requests vLLM reports) + the
requests vLLM has waiting + its KV-cache use (0..1, a tie-breaker between equal counts). vLLM's
own numbers (polled from /metrics by poller.py) include other proxies' traffic; they are used
only while fresh.

excess = (load - least load) / (least load + slack): 0 on the least loaded replica, 1 when a
replica carries the least load plus as much again plus `slack` requests. A policy pays
`weight * excess` against its affinity gain (0..1), so with weight 1 a replica holding the whole
prefix keeps the request until it is about twice as loaded as the idlest one (plus slack).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.routing.backend import Backend


@dataclass(frozen=True, slots=True)
class LoadGuard:
    weight: float = 1.0  # PROXY_ROUTING_LOAD_WEIGHT
    slack: float = 4.0  # PROXY_ROUTING_LOAD_SLACK (requests)

    def loads(self, candidates: Sequence[Backend], now: float) -> list[float]:
        return [load(b, now) for b in candidates]

    def penalties(self, loads: Sequence[float]) -> list[float]:
        least = min(loads)
        return [self.weight * (x - least) / (least + self.slack) for x in loads]


def load(b: Backend, now: float) -> float:
    if b.polled_until < now:  # stale or never polled: only what this proxy knows
        return float(b.inflight)
    return max(b.inflight, b.running) + b.waiting + b.kv_usage
