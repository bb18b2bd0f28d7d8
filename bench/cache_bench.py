"""Answer-cache latency through the proxy, in one run:

    python bench/cache_bench.py [--vllm http://127.0.0.1:8100] [--n 60]

Starts `python -m proxy serve` (semantic cache, embedded store) in front of a running vLLM and
measures, with one request at a time:
  - exact-hit latency (the same question again),
  - semantic-hit latency (a paraphrase of a stored question; only X-Cache-Tier: semantic counts),
  - a miss's added latency: the same kind of request straight to vLLM vs through the proxy
    (new questions each time, interleaved, so vLLM does the same work on both paths).
Prints p50/p99 in milliseconds, and a JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from deploy.net import free_port

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "tests" / "data" / "cache_pairs.jsonl"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(pct(ms, 0.99), 2)}


def body(text: str, max_tokens: int) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens, "temperature": 0}


def timed(client: httpx.Client, url: str, payload: dict[str, Any]) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    r = client.post(url + "/v1/chat/completions", json=payload)
    elapsed = time.perf_counter() - start
    r.raise_for_status()
    return elapsed, r


def start_proxy(vllm: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PROXY_UPSTREAM": vllm, "PROXY_PORT": str(port),
           "PROXY_CACHE": "semantic", "PROXY_LOG_LEVEL": "warning"}
    env.pop("PROXY_REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("the proxy did not start")


def run(vllm: str, n: int, max_tokens: int) -> dict[str, Any]:
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    same = [p for p in pairs if p["same"] and p["a"] != p["b"]][:n]
    proc, proxy = start_proxy(vllm)
    try:
        with httpx.Client(timeout=120) as c:
            for p in same:  # seed: each `a` is a miss and gets stored
                timed(c, proxy, body(p["a"], max_tokens))
            exact = [timed(c, proxy, body(p["a"], max_tokens))[0] for p in same]
            semantic: list[float] = []
            for p in same:
                elapsed, r = timed(c, proxy, body(p["b"], max_tokens))
                if r.headers.get("X-Cache-Tier") == "semantic":
                    semantic.append(elapsed)
            direct: list[float] = []
            missed: list[float] = []
            for i in range(n):  # fresh questions: interleaved direct / through the proxy
                tag = f"{time.time_ns()}-{i}"
                direct.append(timed(c, vllm, body(f"Bench question {tag} alpha", max_tokens))[0])
                elapsed, r = timed(c, proxy, body(f"Bench question {tag} omega", max_tokens))
                if r.headers.get("X-Cache") == "MISS":
                    missed.append(elapsed)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    d, m = summary(direct), summary(missed)
    return {"exact_hit": summary(exact), "semantic_hit": summary(semantic),
            "direct_vllm": d, "proxy_miss": m,
            "miss_added_p50_ms": round(m["p50_ms"] - d["p50_ms"], 2),
            "miss_added_p99_ms": round(m["p99_ms"] - d["p99_ms"], 2),
            "max_tokens": max_tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default=os.environ.get("PROXY_TEST_VLLM_URL",
                                                         "http://127.0.0.1:8100"))
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    report = run(args.vllm.rstrip("/"), args.n, args.max_tokens)
    for name in ("exact_hit", "semantic_hit", "direct_vllm", "proxy_miss"):
        s = report[name]
        print(f"{name:>13}: n={s['n']:<4} p50={s['p50_ms']:8.2f} ms  p99={s['p99_ms']:8.2f} ms")
    print(f"miss adds: p50 {report['miss_added_p50_ms']} ms, p99 {report['miss_added_p99_ms']} ms")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
