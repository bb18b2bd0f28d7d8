"""Scrape Prometheus /metrics before/after (and gauges during) a run; report the deltas."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

GAUGES_TO_PEAK = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                  "vllm:num_requests_waiting")


def parse(text: str) -> dict[str, float]:
    """Sample name -> value summed over label sets (histogram buckets and _created dropped)."""
    out: dict[str, float] = defaultdict(float)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith(("_created", "_bucket")):
                continue
            out[s.name] += float(s.value)
    return dict(out)


async def scrape(http: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    try:
        r = await http.get(url, timeout=10)
        return parse(r.text) if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()
            if k.endswith(("_total", "_count", "_sum")) and v - before.get(k, 0.0) != 0}


# vLLM's own histograms: the referee for the client's timings (means over the run)
SERVER_MEANS = {"Server mean TTFT (ms)": "vllm:time_to_first_token_seconds",
                "Server mean ITL (ms)": "vllm:inter_token_latency_seconds",
                "Server mean TPOT (ms)": "vllm:request_time_per_output_token_seconds",
                "Server mean E2E (ms)": "vllm:e2e_request_latency_seconds",
                "Server mean queue time (ms)": "vllm:request_queue_time_seconds"}
REFEREE = {"Server mean TTFT (ms)": "mean_ttft_ms", "Server mean ITL (ms)": "mean_itl_ms",
           "Server mean E2E (ms)": "mean_e2el_ms"}
DIVERGENCE_WARN = 0.25  # client above server by this fraction: the client is in the numbers


def referee(res: dict[str, Any]) -> list[str]:
    """Warnings where the client's mean exceeds vLLM's own by more than DIVERGENCE_WARN."""
    out = []
    for who in ("backend", "target"):
        srv = ((res.get("server_metrics") or {}).get(who) or {}).get("summary") or {}
        for label, key in REFEREE.items():
            server, client = srv.get(label), res.get(key)
            if server and client and client > server * (1 + DIVERGENCE_WARN):
                out.append(f"client {key} {client:.1f} ms is {client / server - 1:.0%} above "
                           f"vLLM's own ({who}: {server:.1f} ms): the client, a proxy or the "
                           "network is part of this measurement")
        if srv:
            break
    return out


def ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def summary(d: dict[str, float], after: dict[str, float], peak: dict[str, float]
            ) -> dict[str, float | int]:
    """The rows operators read: vLLM's engine counters, and any cache counter of the target."""
    s: dict[str, float | int] = {}
    g = d.get
    if "vllm:prompt_tokens_total" in after:
        s["Server requests finished"] = int(g("vllm:e2e_request_latency_seconds_count", 0))
        s["Server prompt tokens"] = int(g("vllm:prompt_tokens_total", 0))
        s["Server generation tokens"] = int(g("vllm:generation_tokens_total", 0))
        for label, name in SERVER_MEANS.items():
            if g(f"{name}_count"):
                s[label] = 1000 * ratio(g(f"{name}_sum", 0), g(f"{name}_count", 0))
        s["Prefix cache hit rate (%)"] = 100 * ratio(g("vllm:prefix_cache_hits_total", 0),
                                                     g("vllm:prefix_cache_queries_total", 0))
        s["Preemptions"] = int(g("vllm:num_preemptions_total", 0))
        s["KV-cache usage peak (%)"] = 100 * peak.get("vllm:kv_cache_usage_perc", 0.0)
        s["Running requests peak"] = int(peak.get("vllm:num_requests_running", 0))
        s["Waiting requests peak"] = int(peak.get("vllm:num_requests_waiting", 0))
        drafts = g("vllm:spec_decode_num_draft_tokens_total", 0)
        if drafts:
            acc = g("vllm:spec_decode_num_accepted_tokens_total", 0)
            s["Spec-decode acceptance rate (%)"] = 100 * ratio(acc, drafts)
            s["Spec-decode acceptance length"] = 1 + ratio(
                acc, g("vllm:spec_decode_num_drafts_total", 0))
    for k, v in sorted(d.items()):
        if not k.startswith("vllm:") and k.endswith("_total") and any(
                w in k for w in ("cache", "hit", "miss")):
            s[k[:38]] = int(v) if v == int(v) else v
    return s


def counters(m: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {who: {k: v for k, v in d.items() if k.endswith("_total")
                  and not k.startswith(("process_", "python_"))} for who, d in m.items()}


class Scraper:
    def __init__(self, urls: dict[str, str], poll_s: float = 1.0) -> None:
        self.urls = urls
        self.poll_s = poll_s
        self.before: dict[str, dict[str, float]] = {}
        self.peak: dict[str, dict[str, float]] = defaultdict(dict)
        self._http = httpx.AsyncClient()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for name, url in self.urls.items():
            got = await scrape(self._http, url)
            if got is not None:
                self.before[name] = got
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self._sample()

    async def _sample(self) -> dict[str, dict[str, float]]:
        got: dict[str, dict[str, float]] = {}
        for name in self.before:
            m = await scrape(self._http, self.urls[name])
            if m is None:
                continue
            got[name] = m
            for k in GAUGES_TO_PEAK:
                if k in m:
                    self.peak[name][k] = max(self.peak[name].get(k, 0.0), m[k])
        return got

    async def _settled(self, tries: int = 8) -> dict[str, dict[str, float]]:
        """Engines publish counters a moment after the last response: wait until they stop."""
        after = await self._sample()
        for _ in range(tries):
            await asyncio.sleep(0.25)
            again = await self._sample()
            if counters(again) == counters(after):
                break
            after = again
        return after

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        after = await self._settled()
        await self._http.aclose()
        out: dict[str, Any] = {}
        for name, a in after.items():
            d = deltas(self.before[name], a)
            out[name] = {"url": self.urls[name], "deltas": d, "peak": dict(self.peak[name]),
                         "summary": summary(d, a, self.peak[name])}
        return out
