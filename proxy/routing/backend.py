"""One upstream vLLM replica as the router sees it: health, in-flight count, vLLM's own load."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class Backend:
    url: str
    inflight: int = 0  # this proxy's requests to it
    down_until: float = 0.0
    failures: int = 0
    last_error: str | None = None
    # this proxy's requests it dropped or failed with a 500 since it last answered well: with
    # `inflight`, how many it held when it died (proxy/upstream.py: the sole suspect or not)
    lost: int = 0
    # vLLM's own view (proxy/routing/poller.py), trusted until polled_until
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    polled_until: float = 0.0

    def is_up(self, now: float) -> bool:
        return self.down_until <= now
