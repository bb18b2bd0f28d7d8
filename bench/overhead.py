"""Issue 7, items 1-2: what a proxy adds in front of a fast fake upstream.

    python -m bench.overhead [--quick] [--no-litellm] [--json PATH] [--plots DIR]

One run, same cores, same seeded workload, four targets: the mock upstream directly, a bare
Starlette+httpx pass-through (bench/bare_proxy.py), ours (`python -m proxy serve`, cache off,
every other feature on: token counting with the local tokenizer, greedy, caps, metrics, JSON
access log), and LiteLLM's proxy (one worker, its own venv under .bench/).
Proxies run on core 0; the client (this process) and the mock share core 1.
Prints added latency (target minus direct) at p50/p99 and max req/s, with ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import orjson

from bench import lean, procs
from loadtest.workload import WORDS

PROXY_CORE, CLIENT_CORE = "0", "1"


def bodies(n: int, stream: bool, max_tokens: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 80)))
        out.append(orjson.dumps({"model": "mock", "stream": stream, "max_tokens": max_tokens,
                                 "messages": [{"role": "user", "content": prompt}]}))
    return out


PHASES: dict[str, dict[str, Any]] = {
    # Non-streaming: the mock answers at once, so everything measured is HTTP + proxy work.
    "json": {"ttft_ms": 0, "itl_ms": 0, "stream": False, "max_tokens": 16,
             "runs": [("c1", 1), ("sat", 64)]},
    # Streaming: 10 ms to the first token, then 32 tokens 2 ms apart (33 SSE events).
    "stream": {"ttft_ms": 10, "itl_ms": 2, "stream": True, "max_tokens": 32,
               "runs": [("c1", 1), ("c16", 16)]},
}


def start(target: str, upstream: str, workers: int = 1) -> procs.Proc | None:
    if target == "direct":
        return None
    if target == "bare":
        return procs.bare(upstream, PROXY_CORE)
    if target == "ours":
        return procs.ours(upstream, PROXY_CORE)
    if target == "ours-2w":
        return procs.ours(upstream, "0,1", workers=2, name="ours-2w")
    if target == "litellm":
        return procs.litellm(upstream, PROXY_CORE)
    raise ValueError(target)


async def measure(url: str, phase: dict[str, Any], name: str, conc: int,
                  quick: bool) -> dict[str, Any]:
    b = bodies(256, phase["stream"], phase["max_tokens"])
    if conc == 1:
        n = 40 if quick else (2000 if not phase["stream"] else 400)
        r = await lean.run(url, b, 1, n=n, warmup=20)
    else:
        r = await lean.run(url, b, conc, duration=1.0 if quick else 8.0, warmup=2 * conc)
    return r.summary()


def run(targets: list[str], quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for pname, phase in PHASES.items():
        with procs.mock(phase["ttft_ms"], phase["itl_ms"], CLIENT_CORE, f"mock-{pname}") as m:
            for target in targets:
                if pname == "stream" and target == "ours-2w":
                    continue
                proc = start(target, m.url)
                url = (proc.url if proc else m.url) + "/v1/chat/completions"
                try:
                    for rname, conc in phase["runs"]:
                        if target == "ours-2w" and rname != "sat":
                            continue
                        s = asyncio.run(measure(url, phase, rname, conc, quick))
                        results.setdefault(target, {})[f"{pname}_{rname}"] = s
                        print(f"  {target:8} {pname}_{rname:4} {_line(s)}", flush=True)
                finally:
                    if proc is not None:
                        proc.stop()
    return results


def _line(s: dict[str, Any]) -> str:
    return (f"n={s['n']:5} err={s['errors']} rps={s['rps']:7.1f} "
            f"ttft p50/p99={s['ttft_p50_ms']:7.2f}/{s['ttft_p99_ms']:7.2f} ms "
            f"e2el p50/p99={s['e2el_p50_ms']:7.2f}/{s['e2el_p99_ms']:7.2f} ms "
            f"client cpu={s['client_cpu']:.0%} lag99={s['client_loop_lag_p99_ms']:.1f}ms")


def added(results: dict[str, Any]) -> dict[str, Any]:
    """Target minus direct, per run and percentile."""
    direct = results["direct"]
    out: dict[str, Any] = {}
    for target, runs in results.items():
        if target == "direct":
            continue
        for run_name, s in runs.items():
            d = direct[run_name]
            metric = "ttft" if run_name.startswith("stream") else "e2el"
            out.setdefault(target, {})[run_name] = {
                f"{metric}_p50_ms": s[f"{metric}_p50_ms"] - d[f"{metric}_p50_ms"],
                f"{metric}_p99_ms": s[f"{metric}_p99_ms"] - d[f"{metric}_p99_ms"],
                "rps": s["rps"]}
    return out


# (label, numerator target, denominator target, run, metric): each reported when both ran
RATIOS = (
    ("ours/bare added json c1 p50", "ours", "bare", "json_c1", "e2el_p50_ms"),
    ("ours/bare max rps", "ours", "bare", "json_sat", "rps"),
    ("ours/bare added ttft c16 p50", "ours", "bare", "stream_c16", "ttft_p50_ms"),
    ("litellm/ours added json c1 p50", "litellm", "ours", "json_c1", "e2el_p50_ms"),
    ("ours/litellm max rps", "ours", "litellm", "json_sat", "rps"),
    ("litellm/ours added ttft c16 p50", "litellm", "ours", "stream_c16", "ttft_p50_ms"),
    ("litellm/ours added ttft c16 p99", "litellm", "ours", "stream_c16", "ttft_p99_ms"),
    ("ours 2 workers / 1 worker max rps", "ours-2w", "ours", "json_sat", "rps"),
)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def report(results: dict[str, Any]) -> dict[str, Any]:
    add = added(results)
    print("\nadded latency vs direct (ms) and throughput")
    print(f"{'target':9} {'json c1 p50':>11} {'p99':>7} {'json sat p50':>12} {'p99':>7} "
          f"{'max rps':>8} {'ttft c1 p50':>11} {'ttft c16 p50':>12} {'p99':>7}")
    for t, a in add.items():
        def g(run: str, key: str, a: dict[str, Any] = a) -> float:
            return float(a.get(run, {}).get(key, float("nan")))
        print(f"{t:9} {g('json_c1', 'e2el_p50_ms'):11.2f} {g('json_c1', 'e2el_p99_ms'):7.2f} "
              f"{g('json_sat', 'e2el_p50_ms'):12.2f} {g('json_sat', 'e2el_p99_ms'):7.2f} "
              f"{g('json_sat', 'rps'):8.0f} {g('stream_c1', 'ttft_p50_ms'):11.2f} "
              f"{g('stream_c16', 'ttft_p50_ms'):12.2f} {g('stream_c16', 'ttft_p99_ms'):7.2f}")
    ratios = {label: _ratio(add[num][run][key], add[den][run][key])
              for label, num, den, run, key in RATIOS if num in add and den in add}
    print("\nratios")
    for k, v in ratios.items():
        print(f"  {k:40} {v}")
    return {"added": add, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead")
    p.add_argument("--quick", action="store_true", help="tiny run (CI: proves it works)")
    p.add_argument("--no-litellm", action="store_true")
    p.add_argument("--workers", action="store_true", help="also our proxy with 2 workers")
    p.add_argument("--targets", default=None, help="comma-separated subset")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--plots", type=Path, default=None, help="write PNGs into this folder")
    a = p.parse_args(argv)
    targets = ["direct", "bare", "ours"] + ([] if a.no_litellm else ["litellm"])
    if a.workers:
        targets.append("ours-2w")
    if a.targets:
        targets = a.targets.split(",")
    if (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(CLIENT_CORE)})
    print(f"load average before: {os.getloadavg()}", flush=True)
    results = run(targets, a.quick)
    summary = report(results)
    print(f"load average after: {os.getloadavg()}")
    doc = {"results": results, **summary, "loadavg_after": os.getloadavg()}
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=1))
    if a.plots:
        from bench.plots import overhead_plots
        for path in overhead_plots(doc, a.plots):
            print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
