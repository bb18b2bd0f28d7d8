"""The cache's Prometheus metrics, registered into the registry the app passes in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class CacheMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry()
        self.lookups = Counter("proxy_cache_lookups_total",
                               "Cache lookups by result (hit, miss, bypass) and tier",
                               ["result", "tier"], registry=reg)
        self.similarity = Histogram(
            "proxy_cache_similarity", "Cosine similarity of the best semantic candidate",
            ["outcome"], registry=reg,
            buckets=(0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.99, 1.0))
        self.rejections = Counter("proxy_cache_rejections_total",
                                  "Semantic candidates rejected: cosine floor, a hand-kept "
                                  "rule, the judge, or the judge busy (shed); embed_busy: a "
                                  "lookup that skipped the semantic tier, the embedder busy",
                                  ["reason"], registry=reg)
        self.judge_verdicts = Counter("proxy_cache_judge_verdicts_total",
                                      "Semantic candidates the learned judge scored, by verdict",
                                      ["verdict"], registry=reg)
        self.judge_seconds = Histogram("proxy_cache_judge_seconds",
                                       "Time to score one lookup's candidates (queue + batch)",
                                       registry=reg, buckets=_LATENCY)
        self.embed_seconds = Histogram("proxy_cache_embedding_seconds",
                                       "Time to embed one question (queue + batch)",
                                       registry=reg, buckets=_LATENCY)
        self.lookup_seconds = Histogram("proxy_cache_lookup_seconds", "Whole lookup time",
                                        ["result"], registry=reg, buckets=_LATENCY)
        self.entries = Gauge("proxy_cache_entries", "Entries in the store (as last seen)",
                             registry=reg)
        self.evictions = Counter("proxy_cache_evictions_total", "Entries evicted by the size bound",
                                 registry=reg)
        self.stores = Counter("proxy_cache_stores_total", "Answers offered to the cache",
                              ["outcome"], registry=reg)
        self.backend_errors = Counter("proxy_cache_backend_errors_total",
                                      "Store errors (e.g. Redis down): the cache was bypassed",
                                      ["op"], registry=reg)
        self.single_flight_waits = Counter("proxy_cache_single_flight_waits_total",
                                           "Lookups that waited for an identical miss in flight",
                                           registry=reg)
        self.single_flight_streams = Counter(
            "proxy_cache_single_flight_streams_total",
            "Streaming lookups that followed an identical stream in flight, live", registry=reg)
        self.single_flight_fallbacks = Counter(
            "proxy_cache_single_flight_fallbacks_total",
            "Identical misses that went upstream themselves instead of following the one in "
            "flight: overflow (its stream passed the buffer bound), leader_failed (before its "
            "first event), timeout, unstored (its answer could not be stored)", ["reason"],
            registry=reg)
        self.single_flight_broken = Counter(
            "proxy_cache_single_flight_broken_total",
            "Live followers ended with an error event: the stream they followed failed",
            registry=reg)
        self.single_flight_remote_waits = Counter(
            "proxy_cache_single_flight_remote_waits_total",
            "Lookups that waited for an identical miss another proxy replica had claimed in "
            "Redis, then looked again", registry=reg)
