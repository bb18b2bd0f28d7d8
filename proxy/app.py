"""create_app(settings): the lifespan builds every dependency and hands it down. No globals."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.lowlevel
from starlette.applications import Starlette

from proxy.admission import Admission, CountGate
from proxy.balancer import Balancer
from proxy.catalog import Catalog
from proxy.deps import Deps
from proxy.errors import ProxyError
from proxy.guard import Guard, connection_cap, file_limit
from proxy.handler import CompletionHandler
from proxy.metrics import Metrics
from proxy.nullcache import NullCache
from proxy.passthrough import Passthrough
from proxy.readiness import Readiness
from proxy.receive import KeyRing
from proxy.routes import EXCEPTION_HANDLERS, ROUTES
from proxy.routing.build import background, make_policy
from proxy.settings import Settings
from proxy.tokens import AutoCounter, TokenCounter
from proxy.transport import Transport
from proxy.types import AnswerCache, TextCounter
from proxy.upstream import METADATA_WAIT, Upstream, make_transport
from proxy.version import MODELS_KEPT, VersionCache

log = logging.getLogger("proxy.app")


async def build_cache(settings: Settings, metrics: Metrics,
                      count: TextCounter | None) -> AnswerCache:
    """THE place where the answer cache is built (proxy/cache/ provides open_cache)."""
    if settings.cache == "off":
        return NullCache()
    from proxy.cache import open_cache

    cache = await open_cache(settings, metrics.registry, count)
    return NullCache() if cache is None else cache


def _part(total: int, workers: int) -> int:
    return total if workers == 1 else -(-total // workers)  # ceil: 1 stays 1, 0 stays 0


def app_from_env() -> Starlette:
    """The app of one worker process when PROXY_WORKERS > 1 (uvicorn's factory)."""
    from proxy.logs import setup_logging
    from proxy.settings_env import load_settings

    settings = load_settings()
    setup_logging(settings.log_level)
    return create_app(settings, freeze_gc=True)


def create_app(settings: Settings, *, transport: Transport | None = None,
               counter: TokenCounter | None = None, freeze_gc: bool = False,
               clock: Callable[[], float] = time.monotonic) -> Starlette:
    """transport, counter and clock are for tests (a fake vLLM, a fake tokenizer, the time
    that the kept answers of /version, /v1/models and /ready age by);
    freeze_gc is for the server process (python -m proxy serve), never for apps in tests."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        metrics = Metrics()
        # The connection guard (proxy/guard.py) finds itself in the lifespan state.
        guard = Guard(connection_cap(settings.max_connections, file_limit()),
                      settings.header_timeout, settings.max_connections_per_ip)
        metrics.own.register(guard)
        balancer = Balancer(settings.upstreams, settings.upstream_backoff, make_policy(settings))
        upstream = Upstream(transport or make_transport(settings), balancer, metrics,
                            settings.max_answer_bytes)
        # Each of PROXY_WORKERS processes takes its part of the whole bound.
        admission = Admission(_part(settings.max_inflight, settings.workers),
                              _part(settings.max_waiting, settings.workers),
                              settings.queue_timeout, metrics,
                              settings.tenant_share if settings.api_keys else 1.0)
        # counting at vLLM comes before admission: bounded by it (admission.CountGate)
        auto = AutoCounter(upstream.fetch, settings.tokenizer, CountGate(admission).hold)
        catalog = Catalog(upstream, on_models=auto.on_models if counter is None else None)
        try:
            await auto.start()
            try:
                await catalog.refresh()
            except ProxyError as exc:
                log.warning("no upstream answered /v1/models at start (%s); will retry", exc)
            chosen = counter or auto
            cache = await build_cache(settings, metrics, auto.count_sync())
            deps = Deps(settings=settings, upstream=upstream, catalog=catalog, counter=chosen,
                        cache=cache, metrics=metrics, admission=admission,
                        keys=KeyRing(settings.api_keys))
            app.state.deps = deps
            app.state.handler = handler = CompletionHandler(deps)
            app.state.passthrough = Passthrough(deps, handler.limits, handler.bounds,
                                                handler.finish.done)
            app.state.version = version = VersionCache(
                lambda: upstream.fetch("GET", "/version", wait=METADATA_WAIT), clock=clock)
            app.state.models = models = VersionCache(
                lambda: upstream.fetch("GET", "/v1/models", wait=METADATA_WAIT), MODELS_KEPT, clock)
            app.state.ready = ready = Readiness(upstream, clock=clock)
            log.info("ready", extra={"fields": {
                "msg": "proxy started", "upstreams": list(settings.upstreams),
                "models": list(catalog.models), "tokenizer": auto.source if counter is None
                else "given", "cache": type(cache).__name__}})
            # The first streamed answer would import anyio's backend (Starlette's task group)
            # mid-request (seen: ~1 s on a busy box): load it here, before any client waits.
            anyio.lowlevel.current_token()
            # transformers/torch leave ~440k objects; a full collection scanning them stalled
            # the event loop ~400 ms (streaming p99 1.4 s). The server freezes what startup
            # made (a process-wide act: only where the process is the proxy's own).
            if freeze_gc:
                gc.collect()
                gc.freeze()
            tasks = [asyncio.create_task(work)
                     for work in background(settings, balancer, upstream.transport, metrics,
                                             upstream.probe)]
            try:
                yield {"guard": guard}
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await app.state.handler.drain()  # streams handed over to followers end first
                await app.state.handler.aclose()
                await version.aclose()
                await models.aclose()
                await ready.aclose()
                await cache.aclose()
        finally:
            await upstream.aclose()

    extra: dict[str, Any] = {}
    return Starlette(routes=ROUTES, exception_handlers=EXCEPTION_HANDLERS, lifespan=lifespan,
                     **extra)
