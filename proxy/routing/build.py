"""PROXY_ROUTING -> the policy object, and the background work it needs (built in the app's
lifespan: /health probes of several replicas; vLLM /metrics polls; vLLM KV-event subscriptions
for kv-events)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from proxy.balancer import Balancer
from proxy.metrics import Metrics
from proxy.routing.backend import Backend
from proxy.routing.health import watch
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.load import LoadGuard
from proxy.routing.poller import LoadPoller
from proxy.routing.prefix import Prefix
from proxy.routing.protocol import Policy
from proxy.routing.session import Session
from proxy.settings import Settings
from proxy.transport import Transport


def make_policy(settings: Settings) -> Policy:
    guard = LoadGuard(settings.routing_load_weight, settings.routing_load_slack)
    if settings.routing == "prefix":
        return Prefix(settings.routing_block_size, settings.routing_index_blocks, guard)
    if settings.routing == "kv-events":
        from proxy.routing.kv_events import KvEvents

        return KvEvents(settings.routing_block_size, guard,
                        dict(zip(settings.upstreams, settings.routing_kv_events, strict=True)))
    if settings.routing == "session":
        return Session(guard)
    return LeastLoaded()


def background(settings: Settings, balancer: Balancer, transport: Transport,
               metrics: Metrics, probe: Callable[[Backend, float], Awaitable[bool]],
               ) -> list[Coroutine[Any, Any, None]]:
    """What runs beside the requests: with several replicas, their /health probed; vLLM's
    /metrics polled for the policies that weigh affinity against load; one KV-event
    subscription per replica for kv-events."""
    work: list[Coroutine[Any, Any, None]] = []
    if len(settings.upstreams) > 1 and settings.health_interval > 0:
        work.append(watch(balancer.backends, probe, settings.health_interval, balancer.hold))
    if (settings.routing != "least-loaded" and len(settings.upstreams) > 1
            and settings.routing_poll_interval > 0):
        work.append(LoadPoller(transport, balancer, metrics, settings.routing_poll_interval,
                               max_answer_bytes=settings.max_answer_bytes).run())
    listen = getattr(balancer.policy, "listen", None)
    if listen is not None:
        work += [listen(url) for url in settings.upstreams]
    return work
