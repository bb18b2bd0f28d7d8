"""PROXY_ROUTING -> the policy object (built in the app's lifespan)."""

from __future__ import annotations

from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.load import LoadGuard
from proxy.routing.prefix import Prefix
from proxy.routing.protocol import Policy
from proxy.routing.session import Session
from proxy.settings import Settings


def make_policy(settings: Settings) -> Policy:
    guard = LoadGuard(settings.routing_load_weight, settings.routing_load_slack)
    if settings.routing == "prefix":
        return Prefix(settings.routing_block_size, settings.routing_index_blocks, guard)
    if settings.routing == "session":
        return Session(guard)
    return LeastLoaded()


def polls_load(settings: Settings) -> bool:
    """vLLM's /metrics are polled for the policies that weigh affinity against load."""
    return (settings.routing != "least-loaded" and len(settings.upstreams) > 1
            and settings.routing_poll_interval > 0)
