"""The answer cache: exact + semantic tiers; a learned judge vets semantic hits (no HTTP).

`open_cache()` builds it from the app's settings in the app's lifespan; nothing loads at import:
importing this package (or a light module of it, such as `store`) pulls in no faiss, numpy or
torch, so a proxy with `PROXY_CACHE=off` runs on a host without them, and one with
`PROXY_CACHE=exact` imports none of them either (only the semantic tier needs them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from proxy.cache.config import CacheConfig
    from proxy.cache.embedder import Embedder
    from proxy.cache.judge import Judge
    from proxy.cache.lookup import SemanticCache
    from proxy.types import TextCounter

__all__ = ["open_cache"]


async def open_cache(settings: Any = None, registry: CollectorRegistry | None = None,
                     count: TextCounter | None = None, *,
                     config: CacheConfig | None = None,
                     embedder: Embedder | None = None,
                     judge: Judge | None = None) -> SemanticCache | None:
    """The cache for these settings, or None when PROXY_CACHE=off (use NullCache then).

    `count` is the served model's token counter (text -> tokens), used to check that cutting a
    longer cached answer at `max_tokens` is exact. `embedder` and `judge` let several caches
    share one (a shared judge keeps the threshold it was opened with).
    """
    from proxy.cache.config import CacheConfig
    from proxy.cache.lookup import SemanticCache
    from proxy.cache.metrics import CacheMetrics
    from proxy.cache.store import MemoryStore, Store

    cfg = config or CacheConfig.from_settings(settings)
    if cfg.mode == "off":
        return None
    metrics = CacheMetrics(registry)
    if cfg.mode == "semantic" and embedder is None:
        from proxy.cache.embedder import Embedder

        embedder = await Embedder.load(cfg.embed_model, cfg.embed_threads,
                                        cfg.embed_backend)
    if cfg.mode == "semantic" and judge is None:
        from proxy.cache.judge import Judge

        judge = await Judge.load(cfg.max_false_hit_rate, cfg.judge_dir, cfg.judge_threads)
    store: Store
    claims = None
    if cfg.redis_url:
        from proxy.cache.redis_claims import RedisClaims
        from proxy.cache.redis_store import RedisStore

        claims = RedisClaims(cfg.redis_url, cfg.namespace)

        store = await RedisStore(cfg.redis_url, cfg.max_entries, cfg.ttl, cfg.namespace,
                                 on_evict=lambda n: metrics.evictions.inc(n)).open()
    else:
        store = await MemoryStore(cfg.max_entries, cfg.ttl, cfg.snapshot,
                                  on_evict=lambda _id: metrics.evictions.inc()).open()
    semantic = cfg.mode == "semantic"
    return SemanticCache(cfg, store, metrics, embedder if semantic else None, count,
                         judge if semantic else None, claims)
