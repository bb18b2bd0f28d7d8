"""Soak run: the proxy (a real `python -m proxy serve` process) under the load tester for a while;
prints requests, status counts, the proxy's own 5xx, its RSS (start/peak/end, growth) and the
cache's entries against the configured bound. Exits 1 when a promise is broken.

    .venv/bin/python -m bench.soak --quick                       # CI: mock upstream, ~40 s
    .venv/bin/python -m bench.soak --upstream http://127.0.0.1:8100 --duration 300 \\
        --rate 10 --concurrency 100                              # against vLLM-CPU

Without --upstream it starts the loadtest mock (20 ms TTFT, 5 ms ITL) as the upstream.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.procs import PY, spawn, stop_group, tiny_model
from deploy.net import free_port, wait_http

REPO = Path(__file__).resolve().parents[1]
ADMIN = "soak-admin-key"


def statuses(metrics: str) -> dict[str, int]:
    """proxy_requests_total by status, all routes together."""
    out: dict[str, int] = {}
    for line in metrics.splitlines():
        if line.startswith("proxy_requests_total{"):
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = out.get(status, 0) + int(float(line.rsplit(" ", 1)[1]))
    return dict(sorted(out.items()))


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append(self.proc.memory_info().rss)
            except psutil.Error:
                return
            self.stop.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak")
    ap.add_argument("--quick", action="store_true", help="CI size: mock upstream, ~40 s")
    ap.add_argument("--upstream", default=None, help="vLLM URL (default: start the mock)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    ap.add_argument("--rate", type=float, default=50.0, help="offered requests/s")
    ap.add_argument("--concurrency", type=int, default=250, help="concurrent clients")
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--cache", default="exact", choices=("off", "exact", "semantic"))
    ap.add_argument("--cache-max-entries", type=int, default=300)
    ap.add_argument("--questions", type=int, default=2000, help="distinct cache questions")
    ap.add_argument("--max-rss-growth-mb", type=float, default=150.0)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.quick:
        a.duration, a.rate, a.concurrency = 25.0, 40.0, 100
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        upstream = a.upstream
        if upstream is None:
            port = free_port()
            procs.append(spawn([PY, "-m", "loadtest", "mock", "--port", str(port), "--ttft-ms",
                                "20", "--itl-ms", "5"], work / "mock.log"))
            upstream = f"http://127.0.0.1:{port}"
            wait_http(upstream + "/health", 60, procs[-1])
        pport = free_port()
        proxy_url = f"http://127.0.0.1:{pport}"
        env = {"PROXY_UPSTREAM": upstream, "PROXY_PORT": str(pport), "PROXY_CACHE": a.cache,
               "PROXY_CACHE_MAX_ENTRIES": str(a.cache_max_entries), "PROXY_ADMIN_KEY": ADMIN,
               "PROXY_TOKENIZER": str(tiny_model()), "PROXY_LOG_LEVEL": "warning",
               "PROXY_MAX_INFLIGHT": str(max(8, a.concurrency)),
               "PROXY_MAX_WAITING": str(max(8, a.concurrency))}
        proxy = spawn([PY, "-m", "proxy", "serve"], work / "proxy.log", env)
        procs.append(proxy)
        wait_http(proxy_url + "/health", 180, proxy)
        warm = httpx.post(proxy_url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "warm up"}], "max_tokens": 4})
        if warm.status_code != 200:
            raise SystemExit(f"warm-up request failed: {warm.status_code} {warm.text[:300]}")
        sampler = RssSampler(proxy.pid)
        sampler.start()
        started = time.monotonic()
        cmd = [PY, "-m", "loadtest", "run", "--target", proxy_url, "--workload", "cache",
               "--cache-questions", str(a.questions), "--duration", str(a.duration),
               "--request-rate", str(a.rate), "--max-concurrency", str(a.concurrency),
               "--output-len", str(a.output_len), "--no-progress", "--no-scrape",
               "--json", str(work / "load.json"), "--timeout", "120"]
        if a.model:
            cmd += ["--model", a.model]
        load = spawn(cmd, work / "load.log")
        load.wait(a.duration + 600)
        elapsed = time.monotonic() - started
        time.sleep(2.0)
        sampler.stop.set()
        sampler.join()
        metrics = httpx.get(proxy_url + "/metrics", timeout=30).text
        stats = httpx.get(proxy_url + "/admin/cache/stats", timeout=30,
                          headers={"authorization": f"Bearer {ADMIN}"})
        entries = stats.json().get("entries") if stats.status_code == 200 else None
        result: dict[str, Any] = {}
        if (work / "load.json").exists():
            result = json.loads((work / "load.json").read_text())
        codes = statuses(metrics)
        proxy_5xx = sum(n for s, n in codes.items() if s.startswith("5"))
        mib = [s / 2**20 for s in sampler.samples] or [0.0]
        figures = {
            "upstream": a.upstream or "loadtest mock (20 ms TTFT, 5 ms ITL)",
            "offered_rate_rps": a.rate, "concurrency": a.concurrency,
            "duration_s": round(elapsed, 1), "requests": sum(codes.values()),
            "loadtest_completed": result.get("completed"),
            "loadtest_failed": result.get("failed"),
            "status_counts": codes, "proxy_5xx": proxy_5xx,
            "rss_start_mib": round(mib[0], 1), "rss_peak_mib": round(max(mib), 1),
            "rss_end_mib": round(mib[-1], 1), "rss_growth_mib": round(mib[-1] - mib[0], 1),
            "cache_entries": entries, "cache_bound": a.cache_max_entries,
            "loadtest_exit": load.returncode,
        }
        for k, v in figures.items():
            print(f"{k:>20}: {v}")
        if a.json:
            Path(a.json).write_text(json.dumps(figures, indent=2))
        broken = []
        if proxy_5xx:
            broken.append(f"{proxy_5xx} 5xx from the proxy")
        if entries is not None and entries > a.cache_max_entries:
            broken.append(f"{entries} cache entries > bound {a.cache_max_entries}")
        if mib[-1] - mib[0] > a.max_rss_growth_mb:
            broken.append(f"RSS grew {mib[-1] - mib[0]:.0f} MiB")
        if not sum(codes.values()) or load.returncode != 0:
            broken.append(f"the load did not run (exit {load.returncode}; logs in {work})")
        for b in broken:
            print(f"SOAK FAILED: {b}", file=sys.stderr)
        return 1 if broken else 0
    except (RuntimeError, TimeoutError) as exc:  # a server that never came up
        raise SystemExit(str(exc)) from None
    finally:
        for p in reversed(procs):
            stop_group(p, 20)


if __name__ == "__main__":
    raise SystemExit(main())
