"""With several replicas, each one's /health probed every PROXY_HEALTH_INTERVAL seconds. A replica
that still accepts connections but no longer answers (a hung API server), or whose engine died
(vLLM's /health fails), is marked down within one round instead of holding every request sent to
it until the read timeout (600 s); one that answers again is marked up. The probe is
Upstream.probe: at most PROBE_WAIT seconds, and it marks the replica itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from proxy.routing.backend import Backend

log = logging.getLogger("proxy.routing")
PROBE_WAIT = 2.0  # seconds a replica has to answer /health


async def watch(backends: Sequence[Backend], probe: Callable[[Backend, float], Awaitable[bool]],
                interval: float, hold: Callable[[Backend, float], None] | None = None) -> None:
    """`hold(backend, seconds)`: keep a replica the probe found down down that long at least. A
    probe marks it down for the back-off (PROXY_UPSTREAM_BACKOFF) only, and the next verdict
    comes a round later (the interval and the probe's wait): where the back-off is shorter, or
    the loop runs late, the hung replica was up in between and every request sent to it then
    waited for the read timeout. Held for two rounds, it is down until a probe finds it well."""
    wait = min(PROBE_WAIT, interval)
    while True:
        results = await asyncio.gather(*(probe(b, wait) for b in backends),
                                       return_exceptions=True)
        for backend, result in zip(backends, results, strict=True):
            if isinstance(result, Exception):  # a bug in a probe must not end the watch
                log.error("health probe of %s failed", backend.url, exc_info=result)
            elif result is False and hold is not None:
                hold(backend, 2 * (interval + wait))
        await asyncio.sleep(interval)
