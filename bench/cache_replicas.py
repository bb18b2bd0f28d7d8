"""Issue 15: the Redis-shared answer cache across two proxy processes.

    nice -n 10 .venv/bin/python -m bench.cache_replicas \
        --json docs/routing-results/cache-replicas.json

One redis-server, one mock upstream (answers at once), three proxies with PROXY_CACHE=semantic:
`mem` (its own memory store, the single-proxy baseline) and `r1`, `r2` (both on the Redis).
Each round takes fresh question pairs (question, paraphrase) from tests/data/cache_pairs.jsonl:
the questions are asked through r1 (those it misses get stored; the rest were close to an
earlier round's and are dropped) and through mem; then, one at a time,
  - the same questions through r2: does a sibling's entry hit (exact tier), and how fast,
    against mem answering its own entries;
  - the paraphrases through r2 and mem (semantic tier, r2's index caught up from Redis);
  - new questions through r2 and mem (misses: what Redis adds to the miss path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from bench import lean, procs
from deploy.net import free_port
from loadtest.workload import WORDS
from proxy.cache.config import REDIS_FORMAT

PAIRS = procs.REPO / "tests" / "data" / "cache_pairs.jsonl"


def chat(q: str) -> bytes:
    return orjson.dumps({"model": "mock", "max_tokens": 16,
                         "messages": [{"role": "user", "content": q}]})


def pairs() -> list[tuple[str, str]]:
    rows = [json.loads(x) for x in PAIRS.read_text().splitlines() if x.strip()]
    return [(r["a"], r["b"]) for r in rows if r.get("same")]


def stats(r: lean.RunResult, want: str) -> dict[str, Any]:
    """How many answers carried X-Cache `want` ("hit/exact", "hit/semantic", "miss"), and the
    latency of all of them."""
    seen = [s for s in r.ok if s.headers_cache == want]
    return {"n": len(r.samples), "as_wanted": len(seen),
            "share": len(seen) / len(r.samples) if r.samples else 0.0,
            "p50_ms": r.pct("e2el", 50), "p99_ms": r.pct("e2el", 99)}


async def entries(redis: Redis) -> int:
    n = 0
    async for _ in redis.scan_iter(match=f"vsp:{REDIS_FORMAT}:e:*", count=1000):
        n += 1
    return n


async def until_stored(redis: Redis, n: int) -> None:
    """Stores finish after the answer is sent: wait until Redis holds n entries."""
    async with asyncio.timeout(60):
        while await entries(redis) < n:  # noqa: ASYNC110 (polls another process)
            await asyncio.sleep(0.1)


async def round_(urls: dict[str, str], redis: Redis, qa: list[tuple[str, str]],
                 fresh: list[str]) -> dict[str, Any]:
    """Only the questions r1 missed (and so stored) are asked again: a question close to an
    earlier round's was answered from the cache and stored nothing."""
    before = await entries(redis)
    first = await lean.run(urls["r1"], [chat(a) for a, _ in qa], 1, n=len(qa))
    kept = [pair for pair, s in zip(qa, first.samples, strict=True) if s.headers_cache == "miss"]
    await until_stored(redis, before + len(kept))
    asked = [chat(a) for a, _ in kept]
    para = [chat(b) for _, b in kept]
    await lean.run(urls["mem"], asked, 1, n=len(asked))
    out: dict[str, Any] = {"stored_by_r1": len(kept), "asked": len(qa)}
    for name in ("r2", "mem"):
        out[f"exact_{name}"] = stats(await lean.run(urls[name], asked, 1, n=len(asked)),
                                     "hit/exact")
        out[f"semantic_{name}"] = stats(await lean.run(urls[name], para, 1, n=len(para)),
                                        "hit/semantic")
    for name, suffix in (("r2", ""), ("mem", " again")):  # new to the proxy that asks
        new = [chat(q + suffix) for q in fresh]
        out[f"miss_{name}"] = stats(await lean.run(urls[name], new, 1, n=len(new)), "miss")
    return out


async def bench(url: str, rounds: int, per_round: int) -> dict[str, Any]:
    redis = Redis.from_url(url)
    try:
        for _ in range(100):
            try:
                await redis.ping()
                break
            except Exception:
                await asyncio.sleep(0.1)
        qa = pairs()
        if len(qa) < rounds * per_round:
            raise SystemExit(f"only {len(qa)} pairs for {rounds} x {per_round}")
        env = {"PROXY_CACHE": "semantic", "PROXY_LOG_LEVEL": "warning"}
        with procs.mock(0, 0, None, "mock-replicas") as m, \
                procs.ours(m.url, None, env, name="mem") as mem, \
                procs.ours(m.url, None, {**env, "PROXY_REDIS_URL": url}, name="r1") as r1, \
                procs.ours(m.url, None, {**env, "PROXY_REDIS_URL": url}, name="r2") as r2:
            urls = {k: p.url + "/v1/chat/completions"
                    for k, p in (("mem", mem), ("r1", r1), ("r2", r2))}
            warm = [chat(f"warm up number {i}") for i in range(30)]
            for u in urls.values():
                await lean.run(u, warm, 2, n=len(warm))
            await until_stored(redis, len(warm))
            out: list[dict[str, Any]] = []
            for k in range(rounds):
                part = qa[k * per_round:(k + 1) * per_round]
                rng = random.Random(k)
                fresh = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))
                         + f" {i}?" for i in range(per_round)]
                out.append(await round_(urls, redis, part, fresh))
                print(f"round {k}: " + json.dumps(out[-1]), flush=True)
            return {"rounds": out}
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cache_replicas")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--per-round", type=int, default=80)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    print(f"load average before: {os.getloadavg()}", flush=True)
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        doc = asyncio.run(bench(f"redis://127.0.0.1:{port}/0", a.rounds, a.per_round))
    finally:
        server.kill()
        server.wait()
    rounds = doc["rounds"]

    def med(key: str, field: str) -> float:
        return float(statistics.median(r[key][field] for r in rounds))

    ratios = {
        "sibling exact hit share (r2 asks what r1 stored)": f"{med('exact_r2', 'share'):.3f}",
        "sibling semantic hit share (paraphrases via r2)": f"{med('semantic_r2', 'share'):.3f}",
        "own semantic hit share (paraphrases via mem)": f"{med('semantic_mem', 'share'):.3f}",
        "misses that were misses, Redis / memory":
            f"{med('miss_r2', 'share'):.3f} / {med('miss_mem', 'share'):.3f}",
        "exact hit p50 ms, Redis sibling / memory own":
            f"{med('exact_r2', 'p50_ms'):.2f} / {med('exact_mem', 'p50_ms'):.2f}",
        "semantic hit p50 ms, Redis sibling / memory own":
            f"{med('semantic_r2', 'p50_ms'):.2f} / {med('semantic_mem', 'p50_ms'):.2f}",
        "miss p50 ms, Redis / memory":
            f"{med('miss_r2', 'p50_ms'):.2f} / {med('miss_mem', 'p50_ms'):.2f}",
    }
    print("\nmedians over rounds")
    for k, v in ratios.items():
        print(f"  {k:52} {v}")
    doc["ratios"] = ratios
    doc["args"] = {"rounds": a.rounds, "per_round": a.per_round}
    doc["loadavg_after"] = os.getloadavg()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
