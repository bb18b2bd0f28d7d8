"""Issue 7, item 3: what the answer cache costs.

    python -m bench.cache_cost [--quick] [--json PATH] [--plots DIR] [--sizes 10000,100000]

A. At the client, through `python -m proxy serve` in front of the mock upstream (proxy on
   core 0, client + mock on core 1, non-streaming): exact hits and semantic hits (p50/p99) at
   concurrency 1/4/16; and semantic misses at 50 req/s open loop (new questions: exact lookup
   + embedding + index search + store) against PROXY_CACHE=off, with the hedged upstream
   call on and off, in front of a mock answering after 30 ms and after 0 ms. The proxies
   inherit PROXY_* from the environment: with the committed judge, semantic hits need a loose
   PROXY_CACHE_MAX_FALSE_HIT_RATE (0.3; docs/cache.md), else every paraphrase misses.
B. The embedder in-process: micro-batching on (max_batch 32, no wait; and a 2 ms wait) vs
   off (batch 1) at 1/8/32 concurrent callers: per-call p50/p99 and embeddings/s.
C. The vector index in-process: flat (IndexFlatIP) vs HNSW (M=32) at 10k/100k/1M entries:
   build time, search p50/p99, recall@1 of HNSW against flat.
D. The learned judge in-process (one ONNX Runtime thread, as the proxy runs it): one lookup's
   candidates scored as one batch of 1, 2 or 4 pairs from the judge's dev split: per-batch
   and per-candidate p50/p99. --judge-compare unsigned also opens the judge with the portable
   rewrite (proxy/cache/judge_session.py; the proxy serves the weights as stored where this
   CPU multiplies them exactly) and times both on the same batches, interleaved, so that the
   load on a shared box falls on both alike; the served judge keeps the usual keys.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench import lean, procs
from loadtest.workload import WORDS

PAIRS = procs.REPO / "tests" / "data" / "cache_pairs.jsonl"
JUDGE_PAIRS = procs.REPO / "tests" / "data" / "judge" / "dev.jsonl"


def chat(q: str) -> bytes:
    return orjson.dumps({"model": "mock", "max_tokens": 16,
                         "messages": [{"role": "user", "content": q}]})


def pairs(limit: int) -> list[tuple[str, str]]:
    rows = [json.loads(x) for x in PAIRS.read_text().splitlines() if x.strip()]
    return [(r["a"], r["b"]) for r in rows if r.get("same")][:limit]


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) * 1000 if xs else float("nan")


def summarize(r: lean.RunResult, want: str | None) -> dict[str, Any]:
    kept = [s.e2el for s in r.ok if want is None or s.headers_cache == want]
    every = [s.e2el for s in r.ok]  # hits and what was not one (a shed lookup goes upstream)
    return {"n": len(kept), "of": len(r.samples), "p50_ms": _pct(kept, 50),
            "p99_ms": _pct(kept, 99), "all_p50_ms": _pct(every, 50), "all_p99_ms": _pct(every, 99),
            "client_cpu": round(r.cpu / r.wall, 3) if r.wall else 0}


async def through_proxy(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    qa = pairs(12 if quick else 200)
    stored = [chat(a) for a, _ in qa]
    paraphrased = [chat(b) for _, b in qa]
    rng = random.Random(11)
    fresh = [chat(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))) + f" {i}?")
             for i in range(60 if quick else 600)]
    warm = [chat("warm up " + w) for w in WORDS[:50]]
    with procs.mock(0, 0, "1", "mock-cache") as m, \
            procs.ours(m.url, "0", {"PROXY_CACHE": "semantic"}, name="ours-hits") as p:
        url = p.url + "/v1/chat/completions"
        await lean.run(url, warm, 4, n=len(warm))
        await lean.run(url, stored, 1, n=len(stored))  # misses: stored
        await asyncio.sleep(1.0)  # background stores finish
        for c in (1, 4, 16):
            n = 60 if quick else 1500
            r = await lean.run(url, stored, c, n=n)
            out[f"exact_hit_c{c}"] = summarize(r, "hit/exact")
            r = await lean.run(url, paraphrased, c, n=n)
            out[f"semantic_hit_c{c}"] = summarize(r, "hit/semantic")
            print(f"  c={c:2} exact {out[f'exact_hit_c{c}']}\n"
                  f"       semantic {out[f'semantic_hit_c{c}']}", flush=True)
    # Misses: new questions at 50 req/s. Hedging hides the lookup behind the upstream's own
    # time to answer, so it is measured against an upstream that takes 30 ms (a fast GPU's
    # TTFT for a short prompt) and one that takes none (nothing to hide behind).
    modes = (("off", {"PROXY_CACHE": "off"}), ("semantic", {"PROXY_CACHE": "semantic"}),
             ("semantic_nohedge", {"PROXY_CACHE": "semantic", "PROXY_CACHE_HEDGE": "off"}))
    for ttft in (30,) if quick else (30, 0):
        with procs.mock(ttft, 0, "1", f"mock-ttft{ttft}") as m:
            for mode, env in modes:
                with procs.ours(m.url, "0", env, name=f"ours-{mode}") as p:
                    url = p.url + "/v1/chat/completions"
                    await lean.run(url, warm, 4, n=len(warm))
                    r = await lean.run_rate(url, fresh, 50.0, len(fresh))
                    key = f"miss_50rps_ttft{ttft}_cache_{mode}"
                    out[key] = summarize(r, None)
                    print(f"  50 req/s new questions, upstream TTFT {ttft} ms, cache {mode}: "
                          f"{out[key]}", flush=True)
    return out


async def embedder_batching(quick: bool) -> dict[str, Any]:
    from proxy.cache.embedder import Embedder

    out: dict[str, Any] = {}
    rng = random.Random(5)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))) for _ in range(512)]
    batching: tuple[tuple[str, dict[str, Any]], ...] = (
        ("on", {"max_batch": 32, "max_wait": 0.0}),
        ("on_wait2ms", {"max_batch": 32, "max_wait": 0.002}),
        ("off", {"max_batch": 1, "max_wait": 0.0}))
    for label, kw in batching:
        emb = await Embedder.load(**kw)
        await emb.embed("warm up")
        for conc in (1, 8, 32):
            per = 4 if quick else max(8, 256 // conc)
            lat: list[float] = []

            async def caller(k: int, per: int = per, lat: list[float] = lat,
                             emb: Embedder = emb) -> None:
                for j in range(per):
                    t = time.perf_counter()
                    await emb.embed(texts[(k * per + j) % len(texts)])
                    lat.append(time.perf_counter() - t)
            t0 = time.perf_counter()
            batches0 = emb.batches
            await asyncio.gather(*(caller(k) for k in range(conc)))
            wall = time.perf_counter() - t0
            out[f"batching_{label}_c{conc}"] = {
                "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99),
                "per_s": round(len(lat) / wall, 1),
                "mean_batch": round(len(lat) / max(1, emb.batches - batches0), 1)}
            print(f"  embed batching {label:3} c={conc:2} {out[f'batching_{label}_c{conc}']}",
                  flush=True)
        await emb.aclose()
    return out


def judge_cost(quick: bool, compare: list[str]) -> dict[str, Any]:
    from proxy.cache.config import CacheConfig
    from proxy.cache.judge import Judge

    rows = [json.loads(x) for x in JUDGE_PAIRS.read_text().splitlines() if x.strip()]
    qa = [(r["a"], r["b"]) for r in rows]
    cfg = CacheConfig.from_settings()  # PROXY_CACHE_JUDGE_MODEL, PROXY_CACHE_JUDGE_THREADS
    judges = {"": Judge.open(0.01, cfg.judge_dir, threads=cfg.judge_threads)}
    for weights in compare:
        judges[f"_{weights}"] = Judge.open(0.01, cfg.judge_dir, threads=cfg.judge_threads,
                                           weights=weights)  # type: ignore[arg-type]
    for judge in judges.values():
        judge.logits(qa[:8])  # warm up
    out: dict[str, Any] = {"judge_model": cfg.judge_model, "judge_threads": cfg.judge_threads,
                           "judge_weights": judges[""].weights}
    print(f"  judge {cfg.judge_model}: serves the {judges[''].weights} weights, "
          f"{cfg.judge_threads} thread(s)", flush=True)
    rounds = 50 if quick else 600
    order = list(judges)
    shuffle = random.Random(7)
    for size in (1, 2, 4):
        lat: dict[str, list[float]] = {key: [] for key in judges}
        for i in range(rounds):
            batch = [qa[(i * size + j) % len(qa)] for j in range(size)]
            shuffle.shuffle(order)
            for key in order:
                t = time.perf_counter()
                judges[key].logits(batch)
                lat[key].append(time.perf_counter() - t)
        for key, xs in lat.items():
            name = f"judge{key}_batch{size}"
            out[name] = {"p50_ms": _pct(xs, 50), "p99_ms": _pct(xs, 99),
                         "per_candidate_p50_ms": _pct(xs, 50) / size}
            print(f"  {name}: {out[name]}", flush=True)
    for judge in judges.values():
        judge.close()
    return out


def index_scaling(sizes: list[int], quick: bool) -> dict[str, Any]:
    import faiss

    from proxy.cache.index import VectorIndex, _Partition

    faiss.omp_set_num_threads(1)  # one request's search: as the proxy runs it
    dim, out = 384, {}
    rng = np.random.default_rng(3)
    for size in sizes:
        # clustered vectors (like questions on a few topics), normalized
        centers = rng.standard_normal((max(1, size // 50), dim)).astype(np.float32)
        vecs = centers[rng.integers(0, len(centers), size)] + \
            0.6 * rng.standard_normal((size, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        nq = 50 if quick else 300
        qi = rng.integers(0, size, nq)
        queries = vecs[qi] + 0.05 * rng.standard_normal((nq, dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        tops: dict[str, list[int]] = {}
        for kind in ("flat", "hnsw"):
            index = VectorIndex(dim, hnsw_from=0 if kind == "hnsw" else 1 << 62)
            part = _Partition(dim, index._hnsw_from)  # bulk load (adds one by one are slower)
            part.vectors = dict(zip(range(size), vecs, strict=True))
            t0 = time.perf_counter()
            part.rebuild()
            build = time.perf_counter() - t0
            index._parts["p"] = part
            lat, top = [], []
            for q in queries:
                t = time.perf_counter()
                hits = index.search("p", q, 4)
                lat.append(time.perf_counter() - t)
                top.append(hits[0][0] if hits else -1)
            tops[kind] = top
            out[f"{kind}_{size}"] = {"build_s": round(build, 2), "search_p50_ms": _pct(lat, 50),
                                     "search_p99_ms": _pct(lat, 99)}
            del index, part
        out[f"hnsw_{size}"]["recall_at_1"] = float(np.mean(
            [a == b for a, b in zip(tops["flat"], tops["hnsw"], strict=True)]))
        print(f"  index {size:8}: flat {out[f'flat_{size}']}  hnsw {out[f'hnsw_{size}']}",
              flush=True)
        del vecs
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cache_cost")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--parts", default="proxy,embed,judge,index")
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--plots", type=Path, default=None)
    p.add_argument("--judge-compare", default="",
                   help="also time the judge opened with these weights (unsigned, stored)")
    a = p.parse_args(argv)
    parts = a.parts.split(",")
    sizes = [2000] if a.quick else [int(x) for x in a.sizes.split(",")]
    if (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})
    print(f"load average before: {os.getloadavg()}", flush=True)
    doc: dict[str, Any] = {}
    if "proxy" in parts:
        doc["proxy"] = asyncio.run(through_proxy(a.quick))
    if "embed" in parts:
        doc["embed"] = asyncio.run(embedder_batching(a.quick))
    if "judge" in parts:
        doc["judge"] = judge_cost(a.quick, [w for w in a.judge_compare.split(",") if w])
    if "index" in parts:
        doc["index"] = index_scaling(sizes, a.quick)
    ratios: dict[str, str] = {}
    px = doc.get("proxy", {})
    for ttft in (30, 0):
        off = px.get(f"miss_50rps_ttft{ttft}_cache_off")
        for mode in ("semantic", "semantic_nohedge"):
            if off and f"miss_50rps_ttft{ttft}_cache_{mode}" in px:
                added = px[f"miss_50rps_ttft{ttft}_cache_{mode}"]["p50_ms"] - off["p50_ms"]
                ratios[f"{mode} miss added p50 at 50 req/s, upstream TTFT {ttft} ms (ms)"] = \
                    f"{added:.2f}"
    if "exact_hit_c1" in px:
        ratios["exact hit p50 at c1 (ms)"] = f"{px['exact_hit_c1']['p50_ms']:.2f}"
        ratios["semantic hit p50 at c1 (ms)"] = f"{px['semantic_hit_c1']['p50_ms']:.2f}"
    em = doc.get("embed", {})
    if "batching_on_c32" in em:
        ratios["embeddings/s at c32, batching on/off"] = \
            f"{em['batching_on_c32']['per_s'] / em['batching_off_c32']['per_s']:.2f}x"
    jd = doc.get("judge", {})
    for size in (1, 4):
        if f"judge_batch{size}" in jd:
            ratios[f"judge p50 per candidate, batch of {size} (ms)"] = \
                f"{jd[f'judge_batch{size}']['per_candidate_p50_ms']:.2f}"
        for key in jd:
            if key.startswith("judge_") and key.endswith(f"_batch{size}") and key != \
                    f"judge_batch{size}":
                other = key[len("judge_"):-len(f"_batch{size}")]
                ratios[f"judge p50 per candidate, batch of {size}, {other} (ms)"] = \
                    f"{jd[key]['per_candidate_p50_ms']:.2f}"
    ix = doc.get("index", {})
    for size in sizes:
        if f"hnsw_{size}" in ix:
            ratios[f"search p50 flat/hnsw at {size}"] = \
                f"{ix[f'flat_{size}']['search_p50_ms'] / ix[f'hnsw_{size}']['search_p50_ms']:.1f}x"
    print("\nratios / headline numbers")
    for k, v in ratios.items():
        print(f"  {k:45} {v}")
    doc["ratios"] = ratios
    doc["loadavg_after"] = os.getloadavg()
    print(f"load average after: {os.getloadavg()}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=1))
    if a.plots:
        from bench.plots import cache_plots
        for path in cache_plots(doc, a.plots):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
