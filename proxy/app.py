"""create_app(settings): the lifespan builds every dependency and hands it down. No globals."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.lowlevel
import httpx
from starlette.applications import Starlette

from proxy.admission import Admission
from proxy.balancer import Balancer
from proxy.catalog import Catalog
from proxy.errors import ProxyError
from proxy.handler import CompletionHandler, Deps
from proxy.metrics import Metrics
from proxy.nullcache import NullCache
from proxy.receive import KeyRing
from proxy.routes import EXCEPTION_HANDLERS, ROUTES
from proxy.routing.build import background, make_policy
from proxy.settings import Settings
from proxy.tokens import AutoCounter, TokenCounter
from proxy.types import AnswerCache
from proxy.upstream import Upstream, make_client

log = logging.getLogger("proxy.app")


async def build_cache(settings: Settings, metrics: Metrics,
                      count: Callable[[str], int] | None) -> AnswerCache:
    """THE place where the answer cache is built (proxy/cache/ provides open_cache)."""
    if settings.cache == "off":
        return NullCache()
    from proxy.cache import open_cache

    cache = await open_cache(settings, metrics.registry, count)
    return NullCache() if cache is None else cache


def app_from_env() -> Starlette:
    """The app of one worker process when PROXY_WORKERS > 1 (uvicorn's factory)."""
    from proxy.logs import setup_logging
    from proxy.settings import load_settings

    settings = load_settings()
    setup_logging(settings.log_level)
    return create_app(settings)


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None,
               counter: TokenCounter | None = None) -> Starlette:
    """transport and counter are for tests (an httpx MockTransport, a fake tokenizer)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        metrics = Metrics()
        client = make_client(settings, transport)
        balancer = Balancer(settings.upstreams, settings.upstream_backoff, make_policy(settings))
        upstream = Upstream(client, balancer, metrics)
        auto = AutoCounter(upstream, settings.tokenizer)
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
                        cache=cache, metrics=metrics,
                        admission=Admission(settings.max_inflight, settings.max_waiting,
                                            settings.queue_timeout, metrics),
                        keys=KeyRing(settings.api_keys))
            app.state.deps = deps
            app.state.handler = CompletionHandler(deps)
            log.info("ready", extra={"fields": {
                "msg": "proxy started", "upstreams": list(settings.upstreams),
                "models": list(catalog.models), "tokenizer": auto.source if counter is None
                else "given", "cache": type(cache).__name__}})
            # The first streamed answer would import anyio's backend (Starlette's task group)
            # mid-request (seen: ~1 s on a busy box): load it here, before any client waits.
            anyio.lowlevel.current_token()
            # transformers/torch leave ~440k objects; a full collection scanning them stalled
            # the event loop ~400 ms (streaming p99 1.4 s). Freeze what startup made.
            gc.collect()
            gc.freeze()
            tasks = [asyncio.create_task(work)
                     for work in background(settings, balancer, client, metrics)]
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await cache.aclose()
        finally:
            await client.aclose()

    extra: dict[str, Any] = {}
    return Starlette(routes=ROUTES, exception_handlers=EXCEPTION_HANDLERS, lifespan=lifespan,
                     **extra)
