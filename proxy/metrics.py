"""Every Prometheus metric, defined once, in a per-app registry (tests build many apps).

With several workers, `python -m proxy serve` sets PROMETHEUS_MULTIPROC_DIR (a fresh temp dir)
before they start: every worker writes its values there and a scrape of any one of them sums
all (prometheus-client's multiprocess mode), so counters never jump back between scrapes."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("proxy_requests", "Requests by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram("proxy_request_duration_seconds",
                                 "Total time to the last byte", ["route"], buckets=_LATENCY,
                                 registry=r)
        self.ttft = Histogram("proxy_ttft_seconds", "Time to the first streamed byte",
                              ["route"], buckets=_LATENCY, registry=r)
        self.tokens_in = Counter("proxy_tokens_in", "Prompt tokens", ["route"], registry=r)
        self.tokens_out = Counter("proxy_tokens_out", "Completion tokens", ["route"], registry=r)
        self.clipped = Counter("proxy_clipped_requests", "Requests clipped, by what was done",
                               ["kind"], registry=r)
        self.upstream_errors = Counter("proxy_upstream_errors", "Upstream failures",
                                       ["upstream", "kind"], registry=r)
        self.inflight = Gauge("proxy_inflight_requests", "Upstream requests in flight",
                              registry=r, multiprocess_mode="livesum")
        self.waiting = Gauge("proxy_waiting_requests", "Requests waiting for a slot",
                             registry=r, multiprocess_mode="livesum")
        self.rejected = Counter("proxy_admission_rejected", "Requests refused with 429",
                                registry=r)
        self.hedged = Counter("proxy_cache_hedged",
                              "Upstream calls started while the semantic tier searched: used "
                              "(a miss) or cancelled (a hit)", ["outcome"], registry=r)
        self.unexpected = Counter("proxy_unexpected_errors",
                                  "Exceptions the proxy did not expect (answered 500)",
                                  ["route"], registry=r)
        self.send_timeouts = Counter("proxy_send_timeouts",
                                     "Streams and JSON answers cut because the client read "
                                     "nothing for PROXY_SEND_TIMEOUT seconds", registry=r)
        self.events_too_large = Counter(
            "proxy_events_too_large", "Streams cut because the upstream sent more than "
            "PROXY_MAX_EVENT_BYTES without ending an event", ["route"], registry=r)
        self.answers_too_large = Counter(
            "proxy_answers_too_large", "Upstream answers (read whole, not streamed; "
            "/metrics scrapes too) cut because they were longer than PROXY_MAX_ANSWER_BYTES",
            ["upstream"], registry=r)
        self.key_limited = Counter("proxy_key_limited",
                                   "Requests refused by a per-key limit", ["limit"], registry=r)
        self.key_limits_fallbacks = Counter(
            "proxy_key_limits_fallbacks", "Shared per-key limit checks that failed in Redis "
            "and fell back to this worker's share", registry=r)
        self.flight_handovers = Counter(
            "proxy_flight_handovers", "Streams whose client left while identical requests "
            "followed them: the upstream read went on for the followers", registry=r)
        self.routed = Counter("proxy_routed_requests", "Requests sent to each upstream",
                              ["upstream"], registry=r)
        self.affinity_hits = Counter("proxy_routing_affinity_hits",
                                     "Requests sent where their prefix/session already was",
                                     ["upstream"], registry=r)
        self.spills = Counter("proxy_routing_spills",
                              "Requests affinity wanted on this upstream, sent elsewhere for load",
                              ["upstream"], registry=r)
        self.routing_poll_errors = Counter("proxy_routing_poll_errors",
                                           "Failed polls of an upstream's /metrics",
                                           ["upstream"], registry=r)
        self.upstream_up = Gauge("proxy_upstream_up", "1 when an upstream is considered up",
                                 ["upstream"], registry=r, multiprocess_mode="mostrecent")
        self.own = CollectorRegistry()  # collectors of this process only (the guard's counts)

    def render(self) -> bytes:
        path = os.environ.get(MULTIPROC_ENV)
        if not path:
            return generate_latest(self.registry) + generate_latest(self.own)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path)  # type: ignore[no-untyped-call]
        return generate_latest(merged) + generate_latest(self.own)
